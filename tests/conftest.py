import os
import time

import pytest

from rubricrl.llm import ResponseCache
from rubricrl.serve import LocalServer
from rubricrl.server_discovery import LOCAL_SERVER_ENV, find_running
from tests.fault_server import FaultServer
from tests.helpers import SECRET

_launched: LocalServer | None = None
"""The suite's server, launched once collection shows a test that needs it; `local_server` waits for it."""


def pytest_collection_modifyitems(items):
    """The tests that need the model run last, so that the server's start-up (~60 s on 2 cores) overlaps the others."""
    items.sort(key=lambda item: item.get_closest_marker("model") is not None)  # stable: file order otherwise


def pytest_collection_finish(session):
    global _launched
    if any(item.get_closest_marker("model") for item in session.items) and find_running() is None:
        _launched = LocalServer()
        _launched.launch()  # from the main thread: the server dies with the process that launched it


def pytest_sessionfinish(session):
    if _launched is not None:  # no test asked for it (all skipped, or the run stopped first)
        _launched.stop()


@pytest.fixture(scope="session")
def local_server():
    """The real vLLM server on the embedded model, started once per session (a running `rubricrl serve` is reused)."""
    running = find_running()
    if running is not None:
        yield running
        return
    server = _launched or LocalServer()
    if server.process is None:
        server.launch()
    try:
        endpoint = server.wait_ready(time.monotonic() + 600, 600)
        # Commands under test run with a RUBRICRL_HOME of their own, where nothing advertises this server (it is on a
        # free port): without this each would start a server of its own, ~40 s apiece.
        os.environ[LOCAL_SERVER_ENV] = endpoint.base_url
        yield endpoint
    finally:
        os.environ.pop(LOCAL_SERVER_ENV, None)
        server.stop()


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
