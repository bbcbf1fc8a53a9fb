"""Helpers shared by the test modules (test modules never import each other; conftest.py holds fixtures only).

Everything the tests read lives in this repository: the HealthBench sample is in tests/data/healthbench_sample/.
"""

import asyncio
import re
import urllib.request
from pathlib import Path

from rubricrl.llm import LLMClient, Role

DATA = Path(__file__).resolve().parent / "data"
HEALTHBENCH_SAMPLE = DATA / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
"""The first 30 examples of OpenAI's public HealthBench set (MIT); see tests/data/healthbench_sample/README.md."""


def run(coroutine):
    return asyncio.run(coroutine)


async def ask(roles: dict[str, Role], role: str, messages, *, cache=None, **kwargs) -> tuple:
    """One call through a fresh client; returns (result, usage of the role)."""
    options = {k: kwargs.pop(k) for k in ("timeout", "max_retries", "concurrency", "invalid_answer_retries")
               if k in kwargs}  # fmt: skip
    async with LLMClient(roles, cache=cache, **options) as client:
        result = await client.chat(role, messages, **kwargs)
        return result, client.usage[role]


def requests_served(local_server) -> float:
    """vLLM's own count of finished requests, from its Prometheus metrics."""
    metrics = urllib.request.urlopen(local_server.base_url.removesuffix("/v1") + "/metrics").read().decode()
    return sum(float(m) for m in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", metrics, re.M))
