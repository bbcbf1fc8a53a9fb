import asyncio

import pytest

from rubricrl.llm import LLMClient, ResponseCache, Role
from rubricrl.serve import LocalServer, find_running
from tests.fault_server import FaultServer


@pytest.fixture(scope="session")
def local_server():
    """The real vLLM server on the embedded model, started once per session (a running `rubricrl serve` is reused)."""
    running = find_running()
    if running is not None:
        yield running
        return
    with LocalServer() as endpoint:
        yield endpoint


@pytest.fixture
def cache(tmp_path):
    cache = ResponseCache(tmp_path / "responses")
    yield cache
    cache.close()


@pytest.fixture
def fault_server():
    with FaultServer() as server:
        yield server


def run(coroutine):
    return asyncio.run(coroutine)


async def ask(roles: dict[str, Role], role: str, messages, *, cache=None, **kwargs) -> tuple:
    """One call through a fresh client; returns (result, usage of the role)."""
    options = {k: kwargs.pop(k) for k in ("timeout", "max_retries", "concurrency", "invalid_answer_retries")
               if k in kwargs}  # fmt: skip
    async with LLMClient(roles, cache=cache, **options) as client:
        result = await client.chat(role, messages, **kwargs)
        return result, client.usage[role]
