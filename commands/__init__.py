"""The front door: `rubricrl <command>` (`main.py`, the parser every folder's commands attach to) and what each
command's help says beyond its flags (`help.py`). It stands above every folder: only it knows them all."""
