import os
import sys
import threading
import time

import pytest

from rubricrl.llm import ResponseCache
from rubricrl.serving.discovery import LOCAL_SERVER_ENV, find_running
from rubricrl.serving.server import LocalServer
from tests.fault_server import FaultServer
from tests.helpers import SECRET

_launched: LocalServer | None = None
"""The suite's server, launched by this process: the one process of a plain run (once collection shows a test that
needs it), or the controller of a `pytest -n N` run (xdist), whose workers inherit its address."""


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        # An xdist worker, beside another: torch's default of an OpenMP thread per core in each process puts 4
        # spin-waiting threads on 2 cores (an in-process training step took 6x as long). Set before torch is imported.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    controller = config.getoption("numprocesses", None) and not hasattr(config, "workerinput")
    markexpr = config.option.markexpr or ""
    if controller and (not markexpr or ("model" in markexpr and "not model" not in markexpr)):
        _launch()  # xdist's controller collects nothing: launched now, in case the workers' tests need it


FIRST = (
    "test_embedded_model.py",
    "test_gpu_smoke.py",
    "test_rurl_train_real_judge.py",
    "test_rurl_ranks.py",
    "test_serve.py",
    "test_synthesis_model.py",
    "test_rurl_vllm.py",
    "test_cli.py",
    "test_rurl_async.py",
    "test_rurl_train.py",
    "test_reward_trl.py",
    "test_grading_model.py",
)
"""The longest files, in the order that keeps both cores busy (measured with `make test`'s slowest tests and a
timeline of each worker's files). The first converts a model of its own and needs nothing prepared: it computes
while the suite's model is converted (~45 s on a fresh home, one core), which the next two wait for (the GPU smoke's
model files; the real-judge test, the longest, waits for the server too and so goes out early, not to end last).
After them, files that need the one model server (one core: its engine computes every judge call) alternate with
files that compute in processes of their own: three server-bound files at once had left a core idle for a minute."""


def pytest_collection_modifyitems(items):
    """The files go out to xdist's workers (`--dist loadfile --no-loadscope-reorder`) in this order: FIRST, then the
    other slow files (those that need the model server after those that need none), then the other model tests,
    then the many short files, which fill the end evenly."""

    def rank(item) -> int:
        if item.path.name in FIRST:
            return FIRST.index(item.path.name)
        model, slow = item.get_closest_marker("model") is not None, item.get_closest_marker("slow") is not None
        return len(FIRST) + (0 if slow and not model else 1 if slow else 2 if model else 3)

    files: dict = {}
    for item in items:
        files[item.path] = min(files.get(item.path, len(FIRST) + 3), rank(item))
    items.sort(key=lambda item: files[item.path])  # stable: the order within a file, and between files of a rank


def pytest_collection_finish(session):
    worker = hasattr(session.config, "workerinput")
    if not worker and any(item.get_closest_marker("model") for item in session.items):
        _launch()


def _launch() -> None:
    """Launch the suite's server now, in the background, and name it in RUBRICRL_LOCAL_SERVER before it is ready
    (`local_server` waits): commands under test run with a RUBRICRL_HOME of their own, where nothing advertises it,
    and would otherwise each start a server of their own (~40 s apiece). A running `rubricrl serve` is reused."""
    global _launched
    if _launched is not None or find_running() is not None:
        return
    _launched = LocalServer()
    os.environ[LOCAL_SERVER_ENV] = _launched.endpoint.base_url  # its port is chosen already
    _keeper.start()


_launch_failed: list[BaseException] = []
_stopping = threading.Event()


def _keep_launched() -> None:
    """Prepare the model (a conversion on a fresh home, ~27 s) and start vLLM off the main thread, so that tests go on
    meanwhile; then stay alive until the session ends, and stop it: the server dies with the thread that started it
    (PR_SET_PDEATHSIG). One owner: a session ending while the model is still being prepared stops what follows too."""
    try:
        _launched.launch()
    except BaseException as error:  # said by `local_server`, to the tests that need the server
        _launch_failed.append(error)
        return
    _stopping.wait()
    _launched.stop()


_keeper = threading.Thread(target=_keep_launched, name="suite-server", daemon=True)


HEAVY = ("vllm", "trl")
"""What the pure tier (`make test-fast`: `-m pure`) must never import: it tests the domain alone."""


def pytest_sessionfinish(session):
    if session.config.getoption("markexpr", "") == "pure":
        loaded = [name for name in HEAVY if name in sys.modules]
        if loaded:  # a pure test reached for a model library: the tier would slow down unseen
            print(f"\nthe pure tier imported {', '.join(loaded)}: mark the test that did otherwise", file=sys.stderr)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _launched is not None:
        _stopping.set()
        _keeper.join(timeout=660)  # a conversion still running (~27 s), then vLLM's stop (20 s grace, then SIGKILL)
        os.environ.pop(LOCAL_SERVER_ENV, None)


@pytest.fixture(scope="session")
def local_server():
    """The real vLLM server on the embedded model, started once per run (a running `rubricrl serve` is reused)."""
    if not os.environ.get(LOCAL_SERVER_ENV) and find_running() is None:
        _launch()  # asked for though collection showed no test marked `model`
    deadline = time.monotonic() + 600
    while (running := find_running()) is None:  # launched, still starting
        if _launch_failed:
            pytest.fail(f"the suite's vLLM server could not start: {_launch_failed[0]}")
        if _launched is not None and _launched.process is not None and not _launched.alive():
            pytest.fail(
                f"the suite's vLLM server exited during start-up; log {_launched.log_path}:\n{_launched.log_tail()}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"the suite's vLLM server at {os.environ[LOCAL_SERVER_ENV]} did not answer within 600 s")
        time.sleep(0.5)
    return running


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
