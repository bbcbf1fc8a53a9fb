"""The per-query loop of synthesis and RuFT builds: an exception in one item (the judge's server gone down) ends
the run with that one error, starts no further item and cancels those in flight."""

import asyncio
from dataclasses import dataclass

import pytest

from rubricrl.runs.streaming import for_each
from tests.helpers import run

pytestmark = pytest.mark.pure


@dataclass
class Item:
    id: str


def test_an_exception_stops_the_loop_with_that_one_error_and_cancels_the_rest(recwarn):
    started, cancelled = [], []

    async def work(item):
        started.append(item.id)
        if item.id == "q3":
            raise RuntimeError("server down")
        try:
            await asyncio.sleep(0.2 if item.id < "q3" else 30)
        except asyncio.CancelledError:
            cancelled.append(item.id)
            raise

    items = [Item(f"q{i}") for i in range(1000)]
    with pytest.raises(RuntimeError, match="server down"):
        run(for_each(items, work, done=set(), in_flight=8, total=len(items), desc="test"))
    assert len(started) <= 8 + 1  # nothing started after the failure but what was already in its slot
    assert set(cancelled) == set(started) - {"q3"}  # in-flight items were cancelled, not left running
    assert not [w for w in recwarn if "never retrieved" in str(w.message)]


def test_done_items_are_skipped_and_all_others_run():
    ran = []

    async def work(item):
        ran.append(item.id)

    skipped = run(
        for_each([Item(f"q{i}") for i in range(50)], work, done={"q1", "q7"}, in_flight=4, total=50, desc="test")
    )
    assert skipped == 2 and sorted(ran) == sorted(f"q{i}" for i in range(50) if i not in (1, 7))
