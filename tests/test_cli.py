"""The command line as a newcomer meets it: help that teaches, interruptions that say how to go on, bad values
refused in one line before any model call (issue 10)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rubricrl.cli import _commands, build_parser, main
from tests.fault_server import FaultServer, schema_reply

ROOT = Path(__file__).resolve().parents[1]


def test_every_flag_has_help_and_every_command_an_example():
    for name, command in _commands(build_parser()):
        if command._subparsers is not None and not any(a.option_strings for a in command._actions[1:]):
            continue  # a group of commands (`ruft`, `model`): its commands carry the flags
        for action in command._actions:
            if action.option_strings and action.dest not in ("help", "version"):
                flag = f"`rubricrl {name}` {action.option_strings[0]}"
                assert action.help and action.help.strip(), f"{flag}: no help"
                if action.nargs != 0 and not action.required:  # a flag that takes a value says what it is unset
                    assert "default" in action.help or "required" in action.help, f"{flag}: the help does not state the default"
        if name not in ("model prepare", "model path", "cache info", "cache clear"):
            assert "examples:\n  rubricrl " + name in command.format_help(), f"`rubricrl {name} --help`: no example"


def test_synth_help_says_what_runs_without_a_config_and_lists_the_presets(capsys):
    with pytest.raises(SystemExit):
        main(["synth", "--help"])
    text = capsys.readouterr().out
    assert "Without --config: method coarse_to_fine, roles reference, rubric_writer" in text
    for preset in (ROOT / "configs" / "synthesis").glob("*.yaml"):
        assert f"configs/synthesis/{preset.name}: " in text
    assert "--limit LIMIT Only the first N valid queries. (default: None) (at least 0)" in " ".join(text.split())


RUN = """
import sys
from rubricrl.cli import main
sys.exit(main(["synth", "--input", sys.argv[1], "--output-dir", sys.argv[2], "--base-url", sys.argv[3],
               "--model", "fake"]))
"""


@pytest.mark.parametrize("signum, named", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_an_interrupted_run_says_so_and_how_to_resume_without_a_traceback(tmp_path, signum, named):
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Question {i}?"}) + "\n" for i in range(20)))
    with FaultServer(reply=schema_reply, latency=30) as server:  # calls hang: the signal comes mid-flight
        env = {**os.environ, "RUBRICRL_HOME": str(tmp_path / "home")}
        process = subprocess.Popen([sys.executable, "-c", RUN, str(queries), str(tmp_path / "out"), server.base_url],
                                   cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while server.count < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.count >= 2, "no call went out"
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert f"rubricrl: interrupted ({named}); finished queries are kept; rerun the same command to resume" in stderr
    assert "Traceback" not in stderr and "Unclosed" not in stderr, stderr
