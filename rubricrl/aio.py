"""Fan-out that leaves nothing running: what `asyncio.gather` does not guarantee. When one awaitable of a gather
fails, the others go on (a judge call hung on a dead server would hold its slot until its timeout, minutes later);
here the first error cancels the rest, and so does a deadline."""

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any


async def gather_or_cancel(
    aws: Iterable[Awaitable], *, timeout: float | None = None, on_done: Callable[[], None] | None = None
) -> list[Any]:
    """The results of `aws` in order, run concurrently. The first exception cancels the others, waits for them to
    end and is raised (as gather raises it); our own cancellation cancels them too. With `timeout` (seconds), what
    has not finished by then is cancelled and comes back as None. `on_done` is called as each one ends."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    for task in tasks if on_done is not None else ():
        task.add_done_callback(lambda _: on_done())
    try:
        if tasks:
            await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()  # a no-op on those already done
        await asyncio.gather(*tasks, return_exceptions=True)
    error = next((t.exception() for t in tasks if not t.cancelled() and t.exception() is not None), None)
    if error is not None:
        raise error
    if timeout is None and any(t.cancelled() for t in tasks):  # cancelled from within, not by a deadline of ours
        raise asyncio.CancelledError()
    return [None if task.cancelled() else task.result() for task in tasks]
