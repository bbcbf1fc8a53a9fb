"""Helpers shared by the test modules (test modules never import each other; conftest.py holds fixtures only).

Everything the tests read lives in this repository: the HealthBench sample is in tests/data/healthbench_sample/.
"""

import asyncio
import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rubricrl.llm import LLMClient, Role
from rubricrl.queries import Query, Rejected, iter_queries

DATA = Path(__file__).resolve().parent / "data"
SECRET = "sk-test-do-not-write-me-anywhere"
"""An API key in the environment of training tests (conftest.quiet_env): no output may hold it."""
HEALTHBENCH_SAMPLE = DATA / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
"""The first 30 examples of OpenAI's public HealthBench set (MIT); see tests/data/healthbench_sample/README.md."""
TINY_RURL = DATA.parents[1] / "configs" / "rurl" / "tiny-cpu.yaml"
"""The tiny RuRL preset: the embedded model as LoRA policy (and as judge, unless a test names another)."""


@dataclass(frozen=True)
class QueryFile:
    queries: list[Query]
    rejected: list[Rejected]


def read_queries(path, *, query_column=None, id_column=None, skip_bad_rows: bool = False) -> QueryFile:
    """All queries of a file at once (the harness streams them with iter_queries); with `skip_bad_rows`, bad rows
    are collected in `rejected` instead of raising."""
    rejected: list[Rejected] = []
    queries = list(
        iter_queries(
            path, query_column=query_column, id_column=id_column, on_reject=rejected.append if skip_bad_rows else None
        )
    )
    return QueryFile(queries, rejected)


def run(coroutine):
    return asyncio.run(coroutine)


async def ask(roles: dict[str, Role], role: str, messages, *, cache=None, **kwargs) -> tuple:
    """One call through a fresh client; returns (result, usage of the role)."""
    options = {
        k: kwargs.pop(k) for k in ("timeout", "max_retries", "concurrency", "invalid_answer_retries") if k in kwargs
    }
    async with LLMClient(roles, cache=cache, **options) as client:
        result = await client.chat(role, messages, **kwargs)
        return result, client.usage[role]


def count_posts(monkeypatch) -> list[str]:
    """Every request this process posts to a model endpoint, from now on (its path): what "no model call" means
    here. The suite's server is shared by the other xdist workers, so its own count moves under their calls."""
    from rubricrl.llm.transport import Transport

    posted: list[str] = []
    post = Transport.post_json

    async def counted(self, pool, path, *args, **kwargs):
        posted.append(path)
        return await post(self, pool, path, *args, **kwargs)

    monkeypatch.setattr(Transport, "post_json", counted)
    return posted


def hub_offline(monkeypatch) -> None:
    """HF_HUB_OFFLINE for a call in this process. huggingface_hub and datasets read it once, at import: where a test
    before imported them, their copies are set too (unset, a Hub id went to the network first: 22 s of retries)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for module in ("huggingface_hub.constants", "datasets.config"):
        if module in sys.modules:
            monkeypatch.setattr(sys.modules[module], "HF_HUB_OFFLINE", True)


def hashed_verdict(body: dict) -> str:
    """The scripted judge: met or not from a hash of its request (response and criterion), so each completion gets
    a pseudo-random, reproducible verdict per criterion; on the training tests' 5 criteria two different completions
    tie with chance 1/32 (all 4 of a group with chance 1/32**3)."""
    digest = hashlib.sha256(body["messages"][-1]["content"].encode()).digest()
    return json.dumps({"explanation": "scripted", "criteria_met": digest[0] % 2 == 1})


TINY_POLICY_SHAPE = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
"""The tiny policy's changes to SmolLM2-135M's config (30 layers of width 576): heads of 64 as there."""


def tiny_policy() -> Path:
    """SmolLM2-135M-Instruct's architecture, tokenizer and chat template at TINY_POLICY_SHAPE with random weights
    (seed 0, float32), built once beside the embedded model: the policy of the tests that check training machinery
    against a scripted judge, where what it writes does not matter (TRL's own tests train such models). A step costs
    a fraction of the 135M's; the tests of what a user runs (the tiny preset against the real judge, the newcomer's
    path) and those where trained weights matter (the weight sync into vLLM, the SFT loss mask) keep the embedded
    model."""
    from rubricrl.serving.embedded_model import prepare_embedded_model, save_random_model

    source = prepare_embedded_model()
    final = source.parent / "tiny-random-SmolLM2"
    if (final / "config.json").is_file():
        return final
    with open(source.parent / ".tiny-policy.lock", "w") as lock:  # one xdist worker builds it, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "config.json").is_file():
            return final
        work = Path(tempfile.mkdtemp(prefix=".tiny-policy-", dir=source.parent))
        save_random_model(source, work, TINY_POLICY_SHAPE, "float32")
        work.rename(final)  # complete or absent: a killed build leaves only a hidden folder
    return final


def tiny_rurl_train(out: Path, *flags: str, judge_url: str | None = None) -> list[str]:
    """`rurl train` of the tiny preset into `out`, then `flags`. With `judge_url` (a FaultServer's), graded by that
    scripted judge (no verdict cache, no preflight, its answers capped at 50 tokens), and the policy is
    tiny_policy(): those runs test the machinery, not what the model writes."""
    argv = ["rurl", "train", "--config", str(TINY_RURL), "--output_dir", str(out)]
    if judge_url is not None:
        argv += ["--base-url", judge_url, "--model", "scripted-judge", "--no-cache", "--no-preflight"]
        argv += ["--roles", "judge.max_tokens=50", "--model_name_or_path", str(tiny_policy())]
    return argv + list(flags)


def kill_after_checkpoint(command: list[str], env: dict, checkpoint: Path, within: float) -> None:
    """Run `command` until `checkpoint` is complete (its trainer_state.json written), then SIGKILL it: a training run
    killed mid-run, to be resumed. Fails the test when the run ends first or writes no such checkpoint within
    `within` seconds."""
    run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + within
    while not (checkpoint / "trainer_state.json").is_file():
        assert run.poll() is None, run.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, f"no {checkpoint.name} within {within:g} s"
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)
    run.wait()


def graded_parts(body: dict) -> tuple[str, str]:
    """A per-criterion judge request's (response, criterion), as the judge prompt lays them out; ("", "") for
    another request."""
    content = body["messages"][-1]["content"]
    if "]]\n" not in content or "points):\n" not in content:
        return "", ""
    response = content.split("]]\n", 1)[1].rsplit("\n[[end of response", 1)[0]
    criterion = content.rsplit("points):\n", 1)[1].split("\n", 1)[0]
    return response, criterion


def is_probe(response: str) -> bool:
    """Whether `response` is one of the texts checks/probes.py builds (a claim about the answer, a hedge, a polite
    non-answer, a bare keyword list): what a scripted judge that pays substance never credits."""
    from checks.probes import HEDGES, OPENERS, POLITE_NONANSWERS

    text = response.strip()
    polite = {sentence for reply in POLITE_NONANSWERS for sentence in re.split(r"(?<=[.!?]) ", reply)}
    return (
        any(text.startswith(f"{opener} ") for opener in OPENERS)
        or any(text.startswith(opening) for opening, _, _ in HEDGES)
        or any(text.startswith(sentence) for sentence in polite)
        or re.fullmatch(r"(- )?[a-z][a-z'-]{3,}((, |; | / |\n- )[a-z][a-z'-]{3,})*", text) is not None
    )


def group_gone(group: int, within: float = 30.0) -> bool:
    """Whether every process of the launch's process group has exited (torchrun waits for its workers, so this is
    true at once unless one was left behind)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
