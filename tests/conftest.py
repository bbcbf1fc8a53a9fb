import pytest

from rubricrl.llm import ResponseCache
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

