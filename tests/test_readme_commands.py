"""The README's commands and the commands' `--help` examples, as a newcomer types them: each parses with the real
parser, and a training command's other flags are fields of the TRL configs it hands them to (TRL is imported: not the
pure tier)."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[list[str]]:
    """Every `rubricrl ...` command in the README's code blocks, continuation lines joined, comments dropped."""
    import shlex

    commands = []
    for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["rubricrl"]:
                commands.append(words[1:])
    return commands


def help_examples() -> list[list[str]]:
    """Every example the commands' `--help` prints (commands/help.py), continuation lines joined."""
    import shlex

    from commands.help import EXAMPLES

    lines = [line for examples in EXAMPLES.values() for line in "\n".join(examples).replace("\\\n", " ").splitlines()]
    return [shlex.split(line, comments=True)[1:] for line in lines if line.startswith("rubricrl ")]


def test_every_readme_and_help_example_parses_as_written():
    """The real parser takes each command the README shows (flag names, choices, types), a training command's
    other flags being fields of the TRL configs it hands them to; nothing runs."""
    import dataclasses
    import importlib

    from commands.main import build_parser

    commands = readme_commands()
    assert any(argv[:2] == ["rurl", "train"] for argv in commands) and any(argv[0] == "synth" for argv in commands)
    examples = help_examples()
    assert any(argv[0] == "publish" for argv in examples)
    for argv in commands + examples:
        try:
            args, rest = build_parser().parse_known_args(argv)
        except SystemExit as error:
            raise AssertionError(f"README: `rubricrl {' '.join(argv)}` does not parse") from error
        fields = set()
        for name in getattr(args, "trl_types", None) or ():
            module, cls = name.rsplit(".", 1)
            fields |= {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), cls))}
        unknown = [flag for flag in rest if flag.startswith("--") and flag[2:].replace("-", "_") not in fields]
        assert not unknown, f"README: `rubricrl {' '.join(argv)}`: unknown flags {unknown}"
