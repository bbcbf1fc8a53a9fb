"""Queries streaming through a per-query pipeline: every stage of synthesis and RuFT builds works this way."""

import asyncio
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tqdm import tqdm


async def for_each(
    items: Iterable[Any],
    work: Callable[[Any], Awaitable[None]],
    *,
    done: set[str],
    in_flight: int,
    total: int | None,
    desc: str,
) -> int:
    """`work(item)` for each item whose `id` is not in `done`, at most `in_flight` at once, each on its own (no
    barrier between items), with a progress bar; the items are read only as slots free up, so memory holds those in
    flight. Returns how many were skipped as done. `work` handles its own failures: an exception stops the run."""
    slots = asyncio.Semaphore(in_flight)
    tasks: set[asyncio.Task] = set()
    failed: list[BaseException] = []  # the first exception of a `work`: no new item starts after it
    skipped = 0

    def finished(task: asyncio.Task) -> None:
        tasks.discard(task)
        slots.release()
        progress.update()
        if not task.cancelled() and task.exception() is not None and not failed:
            failed.append(task.exception())

    with tqdm(total=total, desc=desc, unit="query", file=sys.stderr) as progress:
        try:
            for item in items:
                if failed:
                    break
                if item.id in done:
                    skipped += 1
                    progress.update()
                    continue
                await slots.acquire()
                if failed:
                    break
                task = asyncio.create_task(work(item))
                tasks.add(task)
                task.add_done_callback(finished)
            if not failed:
                await asyncio.gather(*tasks)
        finally:
            for task in list(tasks):  # an exception (or a cancellation) ends the run: the items in flight stop
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    if failed:
        raise failed[0]
    return skipped
