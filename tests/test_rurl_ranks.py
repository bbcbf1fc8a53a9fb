"""`rubricrl rurl train` under `torchrun --nproc_per_node 2` (gloo on this CPU), as researchers launch it on GPUs:
every process must take the same decision at the same step, or a collective waits for a process that left (a hang
until the process group's timeout, no checkpoint). Each run here ends by itself: a hung one fails the test on its
deadline and is killed with every process it started.

A scripted judge makes the processes see different things: one prompt per process and step (a generation batch of
two groups, one per process, and a dataset of two prompts), one of which is flat (every criterion met) or whose
judge answers garbage."""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from grading.ledger import read_table
from tests.fault_server import FaultServer
from tests.helpers import group_gone, tiny_policy, tiny_rurl_train

pytestmark = pytest.mark.slow

DEADLINE = 600
RUBRIC = [{"criterion": f"Criterion {i + 1}.", "points": w} for i, w in enumerate((1, 2, 4, 8, 16))]


def scripted_judge(body: dict) -> str:
    """Garbage for FAIL prompts; met for FLAT prompts; otherwise met or not from a hash of the request."""
    content = body["messages"][-1]["content"]
    if "FAIL:" in content:
        return "garbage, not a verdict"
    met = "FLAT:" in content or hashlib.sha256(content.encode()).digest()[0] % 2 == 1
    return json.dumps({"explanation": "scripted", "criteria_met": met})


def launch(tmp_path: Path, judge: FaultServer, prompts: list[str], *flags: str) -> tuple[int, list[str], Path]:
    """Two processes of `rurl train` on `prompts`; returns torchrun's exit code, each rank's stderr, output_dir."""
    tiny_policy()  # built (and the embedded model converted) once here: the launch race has its own test
    data = tmp_path / "rubrics.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "prompt": [{"role": "user", "content": p}], "rubrics": RUBRIC}) + "\n"
            for i, p in enumerate(prompts)
        )
    )
    out, logs = tmp_path / "run", tmp_path / "logs"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        "--log-dir",
        str(logs),
        "--redirects",
        "3",
        "-m",
        "commands",
        *tiny_rurl_train(out, "--rubrics", str(data), judge_url=judge.base_url),
        "--eval_size",
        "0",
        "--report_to",
        "none",
        "--num_generations",
        "4",
        "--per_device_train_batch_size",
        "4",
        "--max_completion_length",
        "8",
        "--overlong_buffer",
        "0",
        "--save_steps",
        "1",
        *flags,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        output, _ = process.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and both ranks
        process.communicate()
        pytest.fail(f"two-process run did not end within {DEADLINE} s (a hang)")
    assert group_gone(process.pid), "a process of the launch outlived torchrun"
    errs = sorted(logs.rglob("stderr.log"), key=lambda p: p.parent.name)
    assert len(errs) == 2, output[-3000:]
    return process.returncode, [p.read_text() for p in errs], out


def test_processes_pool_kept_groups_when_one_process_has_only_flat_ones(tmp_path, quiet_env):
    """Every step, one process's group is flat and the other's is not. With no extra round allowed, the flat
    process trains on the other's kept group (sent over, logged as moved) instead of leaving the collective it
    used to skip; both processes finish every step."""
    with FaultServer(reply=scripted_judge) as judge:
        code, errs, out = launch(
            tmp_path,
            judge,
            ["FLAT: say hello.", "Write one sentence about the sea."],
            "--max_steps",
            "2",
            "--dynamic_sampling",
            "true",
            "--max_extra_rounds",
            "0",
            "--on_exhausted",
            "repeat",
        )
    assert code == 0, errs[0][-3000:] + errs[1][-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["summary"]["steps"] == 2 and manifest["summary"]["stopped"] is None
    steps = [entry for entry in json.loads((out / "log_history.json").read_text()) if "reward" in entry]
    assert len(steps) == 2
    for entry in steps:  # per step: 1 group of 2 kept, moved to the flat process, repeated there
        assert entry["dynamic_sampling/groups_generated"] == 2 and entry["dynamic_sampling/groups_kept"] == 1
        assert entry["dynamic_sampling/moved_groups"] == 1 and entry["dynamic_sampling/repeated_groups"] == 1
        assert entry["frac_reward_zero_std"] == 0.5 and entry["no_update"] == 0.0
    flat = json.loads((out / "checkpoint-1" / "rurl_state.json").read_text())["flat"]
    assert flat == ["q0"]
    # the criterion ledger counts both processes' groups once: 2 steps x 4 completions of each query
    ledger = read_table(out / "ledger.parquet").to_pydict()
    assert sorted(set(ledger["query_id"])) == ["q0", "q1"] and ledger["graded"] == [8] * 10
    assert {c for q, c in zip(ledger["query_id"], ledger["carries"]) if q == "q0"} == {"nothing"}


def test_one_step_ahead_every_process_follows_the_same_schedule(tmp_path, quiet_env):
    """async_steps 1 with dynamic sampling over 6 prompts (3 steps an epoch, one prompt per process and step, two of
    them flat): each step generates the next batch on both processes, collects its own batch's grades, then pools
    and exchanges kept groups, every process reaching the same collectives in the same order. The run ends by itself
    at max_steps; the batch generated ahead of the last step is not trained. With rubric dropout at 0.5, each
    process asks the judge only the criteria its groups' masks keep (2 of 5 dropped per group: the same on both
    processes, drawn from the query and the step)."""
    prompts = ["FLAT: say hello.", "Write one sentence about the sea.", "Name a river.", "FLAT: name a colour."]
    prompts += ["Describe the rain.", "Name a fruit."]
    with FaultServer(reply=scripted_judge, latency=0.1) as judge:
        code, errs, out = launch(
            tmp_path,
            judge,
            prompts,
            "--max_steps",
            "2",
            "--async_steps",
            "1",
            "--dynamic_sampling",
            "true",
            "--max_extra_rounds",
            "1",
            "--rubric_dropout",
            "0.5",
        )
        asked = [body["messages"][-1]["content"] for body in judge.requests]
    assert code == 0, errs[0][-3000:] + errs[1][-3000:]
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    assert summary["steps"] == 2 and summary["stopped"] is None
    assert summary["async"]["batches"] == 2 and summary["async"]["untrained_batches"] == 1
    logged = [
        e["rubric/dropped_judge_verdicts"] for e in json.loads((out / "log_history.json").read_text()) if "reward" in e
    ]
    assert logged and all(value > 0 for value in logged)  # the judge was asked 3 of 5 criteria a completion
    assert asked and len(asked) % 3 == 0
    steps = [entry for entry in json.loads((out / "log_history.json").read_text()) if "reward" in entry]
    # the first step trains its own batch; the second, per process, a group kept from the batch generated ahead (1)
    # or one from the extra round (0), averaged over the two processes
    assert steps[0]["async/staleness"] == 0.0 and steps[1]["async/staleness"] in (0.0, 0.5, 1.0)
    assert all(entry["dynamic_sampling/groups_generated"] >= 2 for entry in steps)
    assert "one step ahead:" in errs[0] + errs[1]
    # the ledger: a group's completions share its mask, so each criterion is graded or dropped for all 4 of them
    ledger = read_table(out / "ledger.parquet").to_pydict()
    assert sum(ledger["dropped"]) > 0 and all(d % 4 == 0 for d in ledger["dropped"])
    assert all(g + d > 0 and (g + d) % 4 == 0 for g, d in zip(ledger["graded"], ledger["dropped"]))


def test_the_failure_guard_stops_every_process_at_the_same_step(tmp_path, quiet_env):
    """The judge answers garbage for one of the two prompts: each step one process sees 100% of its completions
    unscored, the other 0%. Over both, 50% is above the 40% limit: both processes save checkpoint-1 together and
    stop with the guard's error (before, the one process crossing its own limit saved and left alone: a hang)."""
    with FaultServer(reply=scripted_judge) as judge:
        code, errs, out = launch(
            tmp_path,
            judge,
            ["FAIL: say hello.", "Write one sentence about the sea."],
            "--max_steps",
            "4",
            "--dynamic_sampling",
            "false",
            "--failure_window",
            "1",
            "--max-failure-rate",
            "0.4",
        )
    assert code != 0  # torchrun reports the ranks' exit code 2 as a failed launch
    for err in errs:
        assert "judge-failure guard" in err and "50% of the completions got no score" in err, err[-3000:]
        assert "Stopped at step 1" in err and "--resume_from_checkpoint true" in err, err[-3000:]
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()
    assert not (out / "checkpoint-2").exists() and not (out / "model.safetensors").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["summary"]["steps"] == 1
    assert manifest["summary"]["judge"]["unscored"] * 2 == manifest["summary"]["judge"]["completions"] == 8


def test_criterion_level_advantages_of_a_group_split_across_processes_are_its_own(tmp_path, quiet_env):
    """Two completions of each group of 4 on each process (per-device batch 2): each process trains on its half of
    the advantages computed from the whole group's verdicts, gathered over both: the completions table (every
    process's rows, in order) holds the advantages GDPO gives those verdicts."""
    from rurl.reward.criterion_advantage import advantages, criterion_scores, scaling

    prompts = ["Write one sentence about the sea.", "Name a river.", "Describe the rain.", "Name a fruit."]
    with FaultServer(reply=scripted_judge) as judge:
        code, errs, out = launch(
            tmp_path,
            judge,
            prompts,
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "2",
            "--steps_per_generation",
            "1",
            "--gradient_accumulation_steps",
            "1",
            "--criterion_advantage",
            "decoupled",
            "--dynamic_sampling",
            "false",  # whole groups per process
            "--log_completions",
            "true",
        )
    assert code == 0, errs[0][-3000:] + errs[1][-3000:]
    import pandas

    tables = sorted((out / "completions").glob("completions_*.parquet"))
    assert len(tables) == 2
    for path in tables:
        table = pandas.read_parquet(path)
        assert len(table) == 4  # one group, two rows on each process
        rows = [[(points, met) for _, points, met in json.loads(v)] for v in table["rubric_verdicts"]]
        scores, _ = criterion_scores(rows, 4, "decoupled")
        expected, _ = advantages(scores, 4, scaling("decoupled", "group"))
        assert table["advantage"].tolist() == pytest.approx(expected, abs=1e-5)
