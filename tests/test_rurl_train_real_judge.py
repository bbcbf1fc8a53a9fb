"""The tiny RuRL preset end to end against the real judge (the embedded model on the suite's vLLM server), SIGKILLed
after its first checkpoint and resumed. A file of its own: the longest test, it runs beside test_rurl_train.py's
scripted-judge tests on another xdist worker."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SECRET, kill_after_checkpoint, tiny_rurl_train

pytestmark = pytest.mark.slow


@pytest.mark.model
def test_tiny_preset_trains_with_the_real_judge_and_resumes_after_a_kill(tmp_path, quiet_env, local_server):
    """`rubricrl rurl train --config configs/rurl/tiny-cpu.yaml`, killed (SIGKILL) once a checkpoint is written,
    then resumed: the run ends at max_steps with the model, eval, wandb offline files holding the rubric metrics and
    the completions table with each completion's verdicts. Without dynamic sampling, for the suite's shared cores: its
    extra rounds tripled a step whenever the 135M judge found every group flat (test_rurl_train.py tests them with
    a scripted judge). The preset's 48-token completions stay: at 24 each one is cut at the limit, and the
    length-reward correlation has no spread to measure."""
    out = tmp_path / "run"
    steps = ["--max_steps", "2", "--save_steps", "1", "--eval_every", "0"]
    steps += ["--dynamic_sampling", "false"]
    command = [str(Path(sys.executable).with_name("rubricrl")), *tiny_rurl_train(out, *steps)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    kill_after_checkpoint(command, env, out / "checkpoint-1", within=600)
    assert not (out / "manifest.json").exists()

    second = subprocess.run(
        command + ["--resume_from_checkpoint", "true"], env=env, capture_output=True, text=True, timeout=900
    )
    assert second.returncode == 0, second.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    summary = manifest["summary"]
    assert summary["steps"] == 2 and summary["steps_this_run"] == 1 and summary["stopped"] is None
    assert summary["eval"]["overall_score"] is not None  # the held-out rows, graded at the end
    assert (out / "model.safetensors").is_file() and (out / "reward.png").is_file()
    criteria = json.loads((out / "criteria.json").read_text())  # the resumed run's criteria, the hardest first
    assert criteria and [c["pass_rate"] for c in criteria] == sorted(c["pass_rate"] for c in criteria)
    assert summary["hardest_criteria"] == criteria[:3] and all(c["decided"] >= 1 for c in criteria)
    # the first window is the killed run's first step (kept in checkpoint-1), the latest this run's
    assert sum(c["first_decided"] for c in criteria) > 0 and sum(c["last_decided"] for c in criteria) > 0
    assert all(c["moved"] == c["last_pass_rate"] - c["first_pass_rate"] for c in criteria if c["moved"] is not None)
    assert manifest["config"]["llm"]["roles"]["judge"] == {"temperature": 0.0}
    # the criterion ledger: the killed run's first step (kept in checkpoint-1) and the resumed run's second, by the
    # rubric dataset's ids and positions, every graded completion counted once
    from grading.ledger import read_table

    ledger = read_table(out / "ledger.parquet").to_pydict()
    first = read_table(out / "checkpoint-1" / "ledger.parquet").to_pydict()
    assert sum(ledger["graded"]) > sum(first["graded"]) > 0
    assert sum(ledger["first_decided"]) == sum(first["decided"]) and sum(ledger["last_decided"]) > 0
    assert all(
        g == d + u + f for g, d, u, f in zip(ledger["graded"], ledger["decided"], ledger["undecided"], ledger["failed"])
    )
    assert summary["ledger"]["criteria"] == len(ledger["query_id"]) and "criterion ledger:" in second.stderr
    assert (out / "ledger.png").is_file()
    history = json.loads((out / "log_history.json").read_text())
    steps = [entry for entry in history if "reward" in entry]
    assert {
        "rubric/judge_failure_rate",
        "rubric/criteria_pass_rate",
        "rubric/tag/axis:accuracy",
        "rubric/length_reward_corr",
        "rubric/saturated_criteria",
        "rubric/dead_criteria",
    } <= set(steps[-1])
    assert all(0 <= step["rubric/saturated_criteria"] + step["rubric/dead_criteria"] <= 1 for step in steps)
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2  # the killed run and the resumed one, both offline
    log = next(runs[-1].glob("run-*.wandb")).read_bytes()
    assert b"rubric/criteria_pass_rate" in log and b"rubric/judge_latency_s" in log
    assert b"ledger/flat_verdict_share" in log and list(
        runs[-1].glob("files/media/table/criterion_ledger_*.table.json")
    )
    tables = list(runs[-1].glob("files/media/table/completions_*.table.json"))
    assert tables and "rubric_verdicts" in json.loads(tables[-1].read_text())["columns"]
    for file in [*out.rglob("*"), *(tmp_path / "wandb").rglob("*")]:  # the API key in the environment stays there
        if file.is_file() and file.stat().st_size < 50_000_000:
            assert SECRET.encode() not in file.read_bytes(), file
