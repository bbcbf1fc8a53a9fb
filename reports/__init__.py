"""`rubricrl report DIR [DIR ...]`: one self-contained HTML page (and a markdown summary beside it) for an eval
folder, a RuRL run, a RuFT build, an SFT run, or a comparison of several.

collect.py tells each folder's kind by its files and reads it (read.py: never writing to it) into a `Folder`
(folder.py; facts.py words its config and manifest); tables.py turns its reports into rows of text, which html.py
(with charts.py's figures, embedded as data: URIs, into templates/report.html) and markdown.py both print, so the two
files hold the same numbers."""
