import os
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
    if controller and "not model" not in (config.option.markexpr or ""):  # xdist's controller collects nothing
        _launch()


LONGEST_FILES_FIRST = (
    "test_rurl_train_real_judge.py",
    "test_rurl_vllm.py",
    "test_rurl_train.py",
    "test_serve.py",
    "test_gpu_smoke.py",
    "test_rurl_ranks.py",
    "test_launch_race.py",
    "test_reward_trl.py",
    "test_embedded_model.py",
    "test_rurl_multiprocess_eval.py",
)
"""The files of 40 s or more (CI's --durations, fresh clone, three workers), longest first. xdist hands out whole
files in collection order (`--dist loadfile --no-loadscope-reorder`): a two-minute file handed out last is the
suite's tail (it was: 70 s of idle workers), one handed out first overlaps the rest. The real-judge test goes first of
all: it waits on the server's start and then on its answers more than it computes, and handed out fourth it still
ended the suite alone (110-190 s). An outdated list costs speed only."""


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist installed has no such hook
def pytest_xdist_make_scheduler(config, log):
    """xdist's file scheduler, handing a worker its next file only when it starts its current file's last test.
    xdist's own does so one test earlier (a heuristic: at most 2 pending tests), which is a whole file earlier for
    the files of one or two long tests: a worker starting the 2-min real-judge test was handed the next long file at
    once, and ran both while another worker sat idle (~60 s of a core in a fresh-clone run). The one method replaced
    is xdist's private `_reschedule`: tests/test_suite_order.py checks it is still there and still the heuristic."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class JustInTimeFiles(LoadFileScheduling):
        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:  # its last test waits for a next one: now
                self._assign_work_unit(node)

    return JustInTimeFiles(config, log)


def pytest_collection_modifyitems(items):
    """The longest files first (above), while the server starts (~60-90 s on a fresh home); then the tests that need
    the model, while the longest files keep the cores busy (they wait on the server's answers, and run last they
    left a core idle for a minute); then the rest, many short files that fill the end evenly."""

    def order(item):
        name, needs_model = item.path.name, item.get_closest_marker("model") is not None
        if name in LONGEST_FILES_FIRST:
            return LONGEST_FILES_FIRST.index(name), needs_model
        return len(LONGEST_FILES_FIRST) + (0 if needs_model else 1), False

    items.sort(key=order)  # stable: file order otherwise


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


def pytest_sessionfinish(session):
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
