"""Every command starts without the training stack: `rubricrl --help` and each command's `--help` list their flags
with none of torch, transformers, peft, TRL, vLLM, accelerate or datasets imported (one `rurl.train` imported by the
parser once cost every command 7 s and 400 MiB). The run of `synth` itself is held to the same rule in
tests/test_synthesis_model.py; the seconds are measured in benches/startup.py, not here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
TRAINING_STACK = ("torch", "transformers", "peft", "trl", "vllm", "accelerate", "datasets")
"""What no command may import before it runs (a training command imports them when it does)."""

# One process runs every command's --help in turn and says after each what it had imported: what is in
# `sys.modules` only grows, so the first command that brings a module in is the one named.
HELP_OF_EVERY_COMMAND = """
import contextlib, io, json, sys
from commands.main import build_parser, main
from commands.help import all_commands

stack = json.loads(sys.argv[1])
names = [""] + [name for name, _ in all_commands(build_parser())]
seen = []
for name in names:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*name.split(), "--help"])
    seen.append({"command": name, "help": out.getvalue(), "loaded": [m for m in stack if m in sys.modules]})
print(json.dumps(seen))
"""


def help_of_every_command() -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", HELP_OF_EVERY_COMMAND, json.dumps(TRAINING_STACK)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_no_help_imports_the_training_stack_and_every_help_lists_its_flags():
    from commands.help import all_commands
    from commands.main import build_parser

    seen = help_of_every_command()
    parsers = {"": build_parser(), **dict(all_commands(build_parser()))}
    assert [entry["command"] for entry in seen] == list(parsers)  # every command, nested ones included
    first_to_load = next((entry for entry in seen if entry["loaded"]), None)
    assert first_to_load is None, (
        f"`{' '.join(['rubricrl', *first_to_load['command'].split(), '--help'])}` imported {first_to_load['loaded']}: import the work "
        "when the command runs (rubricrl/lazy.py)"
    )
    for entry in seen:
        flags = [
            option
            for action in parsers[entry["command"]]._actions
            for option in action.option_strings
            if option.startswith("--")
        ]
        missing = [flag for flag in flags if flag not in entry["help"]]
        assert entry["help"].startswith("usage: rubricrl") and not missing, (entry["command"], missing)


def test_the_check_names_a_command_that_imports_the_stack(monkeypatch):
    """The check can fail: a module the parser does import (the `merge` command's) is seen from the first command."""
    monkeypatch.setattr(sys.modules[__name__], "TRAINING_STACK", ("rubricrl.runs.merge",))
    seen = help_of_every_command()
    assert seen[0] == {**seen[0], "command": "", "loaded": ["rubricrl.runs.merge"]}
