"""The command line as a newcomer meets it: help that teaches, interruptions that say how to go on, bad values
refused in one line before any model call."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commands.help import all_commands
from commands.main import build_parser, main
from tests.fault_server import FaultServer, schema_reply
from tests.helpers import hub_offline

ROOT = Path(__file__).resolve().parents[1]


def test_every_flag_has_help_and_every_command_an_example():
    for name, command in all_commands(build_parser()):
        if command._subparsers is not None and not any(a.option_strings for a in command._actions[1:]):
            continue  # a group of commands (`ruft`, `model`): its commands carry the flags
        for action in command._actions:
            if action.option_strings and action.dest not in ("help", "version"):
                flag = f"`rubricrl {name}` {action.option_strings[0]}"
                assert action.help and action.help.strip(), f"{flag}: no help"
                if action.nargs != 0 and not action.required:  # a flag that takes a value says what it is unset
                    assert "default" in action.help or "required" in action.help, (
                        f"{flag}: the help does not state the default"
                    )
                said = re.sub(r"\((default|at least|at most|required)[^)]*\)", "", action.help)
                assert len(said.strip(" .")) > 10, f"{flag}: the help says nothing but its default ({action.help!r})"
        assert "examples:\n  " in command.format_help() and f"rubricrl {name}" in command.epilog, (
            f"`rubricrl {name} --help`: no example"
        )


def test_synth_help_says_what_runs_without_a_config_and_lists_the_presets(capsys):
    with pytest.raises(SystemExit):
        main(["synth", "--help"])
    text = capsys.readouterr().out
    assert "Without --config: method coarse_to_fine, roles reference, rubric_writer" in text
    for preset in (ROOT / "configs" / "synthesis").glob("*.yaml"):
        assert f"configs/synthesis/{preset.name}:\n    " in text
    assert (
        "--limit LIMIT Only the first N valid queries (with --shard: this shard's ids among the first N of the "
        "input). (default: None) (at least 0)"
    ) in " ".join(text.split())


RUN = """
import sys
from commands.main import main
sys.exit(main(["synth", "--input", sys.argv[1], "--output-dir", sys.argv[2], "--base-url", sys.argv[3],
               "--model", "fake"]))
"""


@pytest.mark.parametrize("signum, named", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_an_interrupted_run_says_so_and_how_to_resume_without_a_traceback(tmp_path, signum, named):
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Question {i}?"}) + "\n" for i in range(20)))
    with FaultServer(reply=schema_reply, latency=30) as server:  # calls hang: the signal comes mid-flight
        env = {**os.environ, "RUBRICRL_HOME": str(tmp_path / "home")}
        # A test run started in the background without job control (`make test &` in a script) ignores SIGINT, and
        # its children inherit that: the run under test gets Ctrl-C's default disposition, as in a terminal.
        process = subprocess.Popen(
            [sys.executable, "-c", RUN, str(queries), str(tmp_path / "out"), server.base_url],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 60
        while server.count < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.count >= 2, "no call went out"
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert f"rubricrl: interrupted ({named}); finished queries are kept; rerun the same command to resume" in stderr
    assert "Traceback" not in stderr and "Unclosed" not in stderr, stderr


@pytest.fixture
def newcomer(tmp_path, monkeypatch):
    """A working folder with a few files a newcomer would have."""
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    Path("q.jsonl").write_text(
        '{"id": "a", "prompt": "What is a fever?"}\n{"id": "b", "question": "Name a vitamin."}\n'
    )
    Path("rubrics.jsonl").write_text(
        json.dumps(
            {"id": "a", "prompt": "What is a fever?", "rubrics": [{"criterion": "Gives a temperature.", "points": 5}]}
        )
        + "\n"
    )
    Path("answers.jsonl").write_text(json.dumps({"id": "a", "response": "Above 38 C."}) + "\n")
    Path("open.json").write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
                "additionalProperties": False,
            }
        )
    )
    Path("gradng.yaml").write_text("gradng:\n  mode: batched\n")
    Path("defaults.yaml").write_text("llm:\n  defaults:\n    temprature: 0.5\n")
    Path("a-file").write_text("")
    Path("folder").mkdir()
    return tmp_path


DEAD = "http://127.0.0.1:9/v1"  # nothing listens on port 9
BAD_VALUES = [
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--concurrency", "0"], "--concurrency"),
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--concurrency", "-3"], "--concurrency"),
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--timeout", "0"], "--timeout"),
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--limit", "-1"], "--limit: expected at least 0, got -1"),
    (["synth", "--input", "q.jsonl", "--output-dir", "a-file"], "--output-dir a-file: exists and is a file"),
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--id-column", "nope"], "missing id column 'nope'"),
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--shard", "4/4"], "--shard 4/4: expected i/n"),
    (
        ["synth", "--input", "openai/healthbench", "--output-dir", "o"],
        "openai/healthbench: cannot reach the Hugging Face Hub",
    ),  # offline in this test: the Hub id is named
    (
        ["synth", "--input", "q.jsonl", "--output-dir", "o", "--config", "gradng.yaml"],
        "(did you mean 'grading'?); it takes ['allow_changed_settings', 'id_column', 'input', 'limit', 'output_dir', "
        "'query_column', 'shard', 'skip_bad_rows'] and the sections ['llm', 'synthesis', 'grading', 'ruft', 'rurl']",
    ),
    (
        ["synth", "--input", "q.jsonl", "--output-dir", "o", "--max-criteria", "60"],
        "need 1 <= min_criteria <= max_criteria <= 50",
    ),
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--config", "defaults.yaml"], "llm.defaults"),
    (["synth", "--input", "q.jsonl", "--output-dir", "o", "--base-url", DEAD, "--model", "m"], "127.0.0.1:9"),
    (
        ["grade", "--rubrics", "folder", "--responses", "answers.jsonl", "--output", "g.jsonl"],
        "folder: not a saved Hugging Face dataset",
    ),
    (
        [
            "grade",
            "--rubrics",
            "rubrics.jsonl",
            "--responses",
            "answers.jsonl",
            "--output",
            "g.jsonl",
            "--max-failure-rate",
            "2",
        ],
        "--max-failure-rate must be within [0, 1], got 2.0",
    ),
    (["grade", "--rubrics", "rubrics.jsonl", "--responses", "answers.jsonl", "--output", "folder"], "is a folder"),
    (
        [
            "grade",
            "--rubrics",
            "rubrics.jsonl",
            "--responses",
            "answers.jsonl",
            "--output",
            "g.jsonl",
            "--mode",
            "reference_likert",
        ],
        "needs a reference answer",
    ),
    (["eval", "--output-dir", "e"], "--rubrics"),
    (["chat", "hi", "--schema", "open.json"], "a string needs 'maxLength'"),
    (["chat", "hi", "--base-url", DEAD], "127.0.0.1:9"),
    (
        ["ruft", "build", "--rubrics", "rubrics.jsonl", "--output-dir", "r", "--threshold", "1.5"],
        "--threshold must be within the score range [0, 1], got 1.5",
    ),
    (["publish", "folder", "--repo-id", "me/x", "--dry-run", "a-file/out"], "--dry-run a-file/out: a-file is a file"),
    (["merge", "folder", "--output-dir", "m"], "not a finished"),
]


@pytest.mark.parametrize("argv, named", BAD_VALUES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD_VALUES])
def test_bad_values_are_one_line_before_any_call(newcomer, capsys, monkeypatch, argv, named):
    hub_offline(monkeypatch)  # a Hub id fails at once, not after retries on a machine without network
    before = files_here()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rubricrl: error: ") and named in err[0], err
    assert files_here() == before  # nothing written (o, r, e, m, g.jsonl, ...)


def files_here() -> set[str]:
    """What the working folder holds, the response cache (RUBRICRL_HOME) left out."""
    return {str(p) for p in Path().rglob("*") if p.parts[0] != "home"}


BAD_FLAGS = [
    (
        ["synth", "--input", "q.jsonl", "--output-dir", "o", "--limit", "abc"],
        "rubricrl synth: error: argument --limit: invalid int value: 'abc' (see `rubricrl synth --help`)",
    ),
    (["chat", "-n", "0", "hi"], "rubricrl chat: error: argument -n: expected at least 1, got 0"),
    (
        ["chat", "hi", "--temperature", "-1"],
        "rubricrl chat: error: argument --temperature: expected at least 0, got -1",
    ),
    (["grade", "--mode", "nope"], "rubricrl grade: error: argument --mode: invalid choice: 'nope'"),
    (["ruft", "build", "--temprature", "1"], "rubricrl ruft build: error: unrecognized arguments: --temprature 1"),
]


@pytest.mark.parametrize("argv, said", BAD_FLAGS, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD_FLAGS])
def test_a_malformed_flag_is_one_line_naming_the_command_not_the_usage_block(newcomer, capsys, argv, said):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and err[0].startswith(said), err


@pytest.mark.model
@pytest.mark.slow
def test_a_newcomers_first_half_hour_has_no_traceback_and_no_false_statement(newcomer, local_server, capsys):
    """Help, a small synthesis on the embedded model, a rerun, a changed rerun, a publish dry run, grading and an
    eval of the grades: every step says what is true, none prints a traceback."""
    tiny = str(ROOT / "configs" / "synthesis" / "tiny-cpu.yaml")
    Path("one.jsonl").write_text('{"id": "a", "prompt": "What is a fever?"}\n')

    def step(*argv, code=0):
        capsys.readouterr()
        assert main(list(argv)) == code, argv
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        return out + err

    with pytest.raises(SystemExit):
        main(["synth", "--help"])
    text = step("synth", "--input", "one.jsonl", "--output-dir", "rubrics", "--config", tiny)
    assert "1 done now, 0 done before, 0 failed" in text and "output: rubrics" in text
    text = step("synth", "--input", "one.jsonl", "--output-dir", "rubrics", "--config", tiny)  # the rerun
    assert "0 done now, 1 done before" in text and "model usage over the 2 runs" in text
    text = step(
        "synth", "--input", "one.jsonl", "--output-dir", "rubrics", "--config", tiny, "--max-criteria", "3", code=2
    )
    assert "made with other settings" in text and "max_criteria 6 -> 3" in text
    step("publish", "rubrics", "--repo-id", "me/first", "--dry-run", "hub")
    assert "| queries | 1 |" in Path("hub/README.md").read_text()
    Path("answer.jsonl").write_text(json.dumps({"id": "a", "response": "A temperature above 38 C."}) + "\n")
    text = step(
        "grade",
        "--rubrics",
        "rubrics/final.parquet",
        "--responses",
        "answer.jsonl",
        "--output",
        "g.jsonl",
        "--max-failure-rate",
        "1",
    )
    assert "wrote 1 graded records to g.jsonl" in text
    step(
        "grade",
        "--rubrics",
        "rubrics/final.parquet",
        "--responses",
        "answer.jsonl",
        "--output",
        "g2.jsonl",
        "--mode",
        "reference_likert",
        "--max-failure-rate",
        "1",
    )  # synthesis carried its reference answer
    step("eval", "--output-dir", "report", "--graded", "g.jsonl")
    assert json.loads(Path("report/report.json").read_text())["examples"] == 1
    # a RuFT build's K = 4 graded candidates, then the audit of its rubric on them (no judge call)
    ruft = str(ROOT / "configs" / "ruft" / "tiny-cpu.yaml")
    step(
        "ruft",
        "build",
        "--config",
        ruft,
        "--rubrics",
        "rubrics/final.parquet",
        "--output-dir",
        "build",
        "--roles",
        "policy.max_tokens=48",
    )
    text = step("audit", "build", "--output-dir", "audit")
    summary = json.loads(Path("audit/summary.json").read_text())
    criteria = len(pq.read_table("rubrics/final.parquet")["rubrics"][0])
    assert (
        summary["graded_answers"] == 4
        and summary["criteria"] == criteria
        and summary["criteria_flagged_on"] == criteria
    )
    assert f"audited {criteria} criteria of 1 queries from 4 answers" in text
    for row in map(json.loads, Path("audit/criteria.jsonl").read_text().splitlines()):  # the judge's own verdicts
        assert row["met"] + row["not_met"] + row["undecided"] == 4
        # 4 answers: no count can reach the level, so nothing is flagged and the tests say why
        assert row["flags"] == [] and ("saturated" in row["insufficient"]) == (row["met"] + row["not_met"] > 0)
