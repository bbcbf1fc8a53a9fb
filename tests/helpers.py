"""Helpers shared by the test modules (test modules never import each other; conftest.py holds fixtures only).

Everything the tests read lives in this repository: the HealthBench sample is in tests/data/healthbench_sample/.
"""

import asyncio
import hashlib
import json
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


def hashed_verdict(body: dict) -> str:
    """The scripted judge: met or not from a hash of its request (response and criterion), so each completion gets
    a pseudo-random, reproducible verdict per criterion; on the training tests' 5 criteria two different completions
    tie with chance 1/32 (all 4 of a group with chance 1/32**3)."""
    digest = hashlib.sha256(body["messages"][-1]["content"].encode()).digest()
    return json.dumps({"explanation": "scripted", "criteria_met": digest[0] % 2 == 1})


def tiny_rurl_train(out: Path, *flags: str, judge_url: str | None = None) -> list[str]:
    """`rurl train` of the tiny preset into `out`, then `flags`. With `judge_url` (a FaultServer's), graded by that
    scripted judge: no verdict cache, no preflight, its answers capped at 50 tokens."""
    argv = ["rurl", "train", "--config", str(TINY_RURL), "--output_dir", str(out)]
    if judge_url is not None:
        argv += ["--base-url", judge_url, "--model", "scripted-judge", "--no-cache", "--no-preflight"]
        argv += ["--roles", "judge.max_tokens=50"]
    return argv + list(flags)
