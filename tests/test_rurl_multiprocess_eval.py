"""The in-training evaluation on two processes (torchrun, gloo, the tiny preset on the embedded model, one step, a
scripted judge): the held-out rows are split between the processes, each generates answers for its share only, and
the main process writes the report and every row's graded answer once; `rubricrl report` shows them. Also the
pieces that run without a second process: the split, and the greedy settings handed to TRL's vLLM engine (the vLLM
path itself runs in tests/test_rurl_vllm.py, on one process)."""

import inspect
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from commands.main import main
from tests.fault_server import FaultServer
from tests.helpers import tiny_rurl_train

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tests" / "rurl_eval_runner.py"
HELD_OUT = 3
DEADLINE = 600
"""Seconds the two-process run may take (measured: 38-91 s on the 2 shared cores); past it the launch is killed."""


def verdict(body: dict) -> str:
    """Met for every judged criterion: the eval's scores then come from the rule checks and this, never undecided."""
    return json.dumps({"explanation": "scripted", "criteria_met": True})


def run_launch(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """A torchrun launch in its own process group: past `timeout` the whole group (torchrun and its workers) is
    killed and the test fails, so a hang in a collective ends the test instead of the suite."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"the 2-process run did not end within {timeout} s (a collective hung?):\n{err[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@pytest.mark.slow
def test_two_processes_split_the_held_out_rows_and_write_each_answer_once(tmp_path, quiet_env):
    out = tmp_path / "run"
    record = tmp_path / "answered"
    record.mkdir()
    with FaultServer(reply=verdict) as judge:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(RUNNER),
            str(record),
            *tiny_rurl_train(out, judge_url=judge.base_url),
            "--eval_size",
            str(HELD_OUT),
            "--eval_every",
            "0",
            "--max_steps",
            "1",
            "--max_completion_length",
            "8",
            "--per_device_train_batch_size",
            "4",
            "--dynamic_sampling",
            "false",
            "--overlong_buffer",
            "0",
            "--save_strategy",
            "no",
            "--merge_adapter",
            "false",
            "--report_to",
            "none",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        result = run_launch(command, env, DEADLINE)
    assert result.returncode == 0, result.stderr[-4000:]
    held_out = (out / "eval_ids.txt").read_text().split()
    assert len(held_out) == HELD_OUT

    # each process generated for its share only: 2 rows and 1 row (+ 1 padding row, so both run one batch)
    batches = {
        rank: [json.loads(line) for line in (record / f"answered-{rank}.jsonl").read_text().splitlines()]
        for rank in (0, 1)
    }
    assert [len(b) for b in batches[0]] == [len(b) for b in batches[1]] == [2]

    # the main process wrote one report and one graded answer per held-out row, in the held-out order
    reports = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [(r["step"], r["examples"]) for r in reports] == [(1, HELD_OUT)]
    answers = [json.loads(line) for line in (out / "eval_answers.jsonl").read_text().splitlines()]
    assert [a["id"] for a in answers] == held_out and {a["step"] for a in answers} == {1}
    assert all(isinstance(a["response"], str) and a["verdicts"] and a["score"] is not None for a in answers)
    prompts = {
        json.loads(line)["id"]: json.loads(line)["prompt"][-1]["content"]
        for line in (ROOT / "experiments" / "data" / "rurl_tiny.jsonl").read_text().splitlines()
    }
    assert batches[0][0] + batches[1][0][:1] == [prompts[i] for i in held_out]
    assert batches[1][0][1] == prompts[held_out[0]]  # the padding: its answer is dropped
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["summary"]["eval"]["overall_score"] == reports[0]["metrics"]["overall_score"]
    history = json.loads((out / "log_history.json").read_text())
    assert [e["eval/overall_score"] for e in history if "eval/overall_score" in e] == [
        reports[0]["metrics"]["overall_score"]
    ]

    # `rubricrl report` on the run shows the eval: its table and each held-out row's graded answer
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "eval, step 1" in page and "eval_answers.jsonl" in page
    for row_id in held_out:
        assert f"<code>{row_id}</code>" in page
    summary = (out / "report.md").read_text()
    assert "### Evals" in summary and f"| 1 | {reports[0]['metrics']['overall_score']:.3f}" in summary


@pytest.mark.parametrize("rows, processes", [(3, 2), (1, 2), (5, 8), (8, 8), (9, 4), (4, 1)])
def test_the_split_gives_every_row_to_one_process_and_every_process_the_same_count(rows, processes):
    from rurl.watch.evaluate import share  # here, not at collection: it imports torch

    shares = [share(rows, processes, index) for index in range(processes)]
    assert len({len(mine) for mine, _ in shares}) == 1  # the same generation calls everywhere
    owned = [i for mine, own in shares for i in mine[:own]]
    assert owned == list(range(rows))  # each row once, in order
    assert all(0 <= i < rows for mine, _ in shares for i in mine)


class RecordingGeneration:
    """The sampling attributes of TRL's VLLMGeneration, with a generate that records what it would send to vLLM."""

    def __init__(self):
        self.temperature, self.top_p, self.top_k, self.min_p, self.repetition_penalty = 1.0, 0.9, 20, 0.05, 1.1
        self.max_completion_length = 512
        self.generation_kwargs = {"temperature": 0.7, "seed": 3, "stop": ["###"]}
        self.seen = None

    def generate(self, prompts, images, num_generations):
        from rurl.watch.evaluate import GREEDY

        self.seen = {name: getattr(self, name) for name in (*GREEDY, "max_completion_length", "generation_kwargs")}
        return prompts, [[1]] * len(prompts), None, None


def test_vllm_answers_are_greedy_and_the_training_sampling_comes_back():
    from rurl.watch.evaluate import GREEDY, greedy_sampling

    generation = RecordingGeneration()
    before = dict(vars(generation))
    with greedy_sampling(generation, max_tokens=64):
        generation.generate(prompts=[[1, 2]], images=None, num_generations=1)
    assert generation.seen == {**GREEDY, "max_completion_length": 64, "generation_kwargs": {"stop": ["###"]}}
    del generation.seen, before["seen"]
    assert vars(generation) == before


def test_the_vllm_seam_matches_trl():
    """What vllm_greedy_answers uses of TRL's engine: the sampling attributes and generate's arguments."""
    from trl.generation.vllm_generation import VLLMGeneration

    from rurl.watch.evaluate import GREEDY

    init = inspect.signature(VLLMGeneration.__init__).parameters
    assert set(GREEDY) | {"max_completion_length", "generation_kwargs"} <= set(init)
    assert list(inspect.signature(VLLMGeneration.generate).parameters)[1:4] == ["prompts", "images", "num_generations"]
    assert "_last_loaded_step" in inspect.getsource(__import__("trl").GRPOTrainer._generate_single_turn)
