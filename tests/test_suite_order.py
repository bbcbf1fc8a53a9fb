"""How the suite hands its files to xdist's workers (tests/conftest.py): the longest first, each worker given its
next file only when it starts its current file's last test. This replaces a private xdist method, checked here."""

import inspect
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import LONGEST_FILES_FIRST, pytest_xdist_make_scheduler

TESTS = Path(__file__).resolve().parent


class Worker:
    """What the scheduler sees of a worker: the test indices sent to it, and whether it was told to stop."""

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True


def test_xdist_still_has_the_method_replaced_and_its_heuristic():
    from xdist.scheduler import LoadFileScheduling

    method = LoadFileScheduling._reschedule
    assert list(inspect.signature(method).parameters) == ["self", "node"]
    source = inspect.getsource(method)
    assert "self._pending_of(self.assigned_work[node]) > 2" in source and "self._assign_work_unit(node)" in source


def test_a_worker_gets_its_next_file_when_it_starts_its_last_test_not_before():
    config = SimpleNamespace(
        getvalue={"tx": ["2*popen"], "dist": "loadfile"}.get, option=SimpleNamespace(loadscopereorder=False)
    )
    scheduler = pytest_xdist_make_scheduler(config, log=None)
    collection = ["long.py::a", "long.py::b", "one.py::only", "short.py::x", "short.py::y", "z.py::z", "m.py::m"]
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    first, second = workers
    assert first.sent == [0, 1] and second.sent == [2, 3, 4]  # one.py alone cannot start: short.py joins it
    scheduler.mark_test_complete(first, 0)  # long.py's last test starts: its next file goes out now
    assert first.sent == [0, 1, 5]
    scheduler.mark_test_complete(second, 2)
    assert second.sent == [2, 3, 4]  # two tests left: nothing yet (xdist's own hands out m.py here)
    scheduler.mark_test_complete(second, 3)
    assert second.sent == [2, 3, 4, 6] and not second.shutting_down
    scheduler.mark_test_complete(first, 1)
    assert first.shutting_down and first.sent == [0, 1, 5]  # nothing left: it stops after z.py


def test_the_longest_files_named_are_test_files_here():
    assert [name for name in LONGEST_FILES_FIRST if not (TESTS / name).is_file()] == []
