import os

import pytest

from rubricrl.llm import ResponseCache
from rubricrl.serve import LocalServer
from rubricrl.server_discovery import LOCAL_SERVER_ENV, find_running
from tests.fault_server import FaultServer
from tests.helpers import SECRET


@pytest.fixture(scope="session")
def local_server():
    """The real vLLM server on the embedded model, started once per session (a running `rubricrl serve` is reused)."""
    running = find_running()
    if running is not None:
        yield running
        return
    with LocalServer() as endpoint:
        # Commands under test run with a RUBRICRL_HOME of their own, where nothing advertises this server (it is on a
        # free port): without this each would start a server of its own, ~40 s apiece.
        os.environ[LOCAL_SERVER_ENV] = endpoint.base_url
        try:
            yield endpoint
        finally:
            del os.environ[LOCAL_SERVER_ENV]


@pytest.fixture
def cache(tmp_path):
    cache = ResponseCache(tmp_path / "responses")
    yield cache
    cache.close()


@pytest.fixture
def fault_server():
    with FaultServer() as server:
        yield server


@pytest.fixture
def quiet_env(monkeypatch, tmp_path):
    """For training runs: no telemetry or Hub calls, wandb offline in tmp_path, and a secret in the environment
    (OPENAI_API_KEY = helpers.SECRET) that must never reach an output."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
