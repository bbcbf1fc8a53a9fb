"""Requests counted, and bounded, for one question asked of a model (`counting_calls`), and tallied for one batch of
questions (`tallying_requests`).

For a question: every chat completion the client posts while a `counting_calls` block is open in the current task
(and the tasks it starts) counts, whichever loop asked for it (an invalid body asked for again, an empty or
off-schema answer resampled, the caller's own re-asks in further blocks). An answer from the cache, or from an
identical request already in flight, is no call. With a limit, the call past it is not made: CallBudgetSpent, an
LLMError, says so.

For a batch (a training step's grading): every request posted while the block is open in the current task and the
tasks it starts, answered or failed, with its seconds. Two batches graded at once on one client each get their own
figures, where the client's usage counters hold the sum of both."""

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from rubricrl.llm.replies import LLMError


@dataclass
class CallCount:
    limit: int | None = None
    used: int = 0


class CallBudgetSpent(LLMError):
    """The question's calls reached their limit before it had an answer."""


_OPEN: ContextVar[CallCount | None] = ContextVar("rubricrl_call_count", default=None)


@contextmanager
def counting_calls(limit: int | None = None) -> Iterator[CallCount]:
    count = CallCount(limit)
    token = _OPEN.set(count)
    try:
        yield count
    finally:
        _OPEN.reset(token)


def spend_call(what: str) -> None:
    """Before a request is posted: counted in the open block, or refused when its limit is spent."""
    count = _OPEN.get()
    if count is None:
        return
    if count.limit is not None and count.used >= count.limit:
        raise CallBudgetSpent(f"{what}: {count.used} calls spent on this question, its limit (max_judge_calls)")
    count.used += 1


@dataclass
class RequestTally:
    """The requests of one batch: `answered` (chat completions received), `failed` (posts that raised or came back
    invalid) and the seconds they took in all."""

    answered: int = 0
    failed: int = 0
    seconds: float = 0.0

    @property
    def mean_seconds(self) -> float:
        posted = self.answered + self.failed
        return self.seconds / posted if posted else 0.0


_TALLY: ContextVar[RequestTally | None] = ContextVar("rubricrl_request_tally", default=None)


@contextmanager
def tallying_requests() -> Iterator[RequestTally]:
    tally = RequestTally()
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


@contextmanager
def tallied_request() -> Iterator[None]:
    """Around one request: its seconds (from asking the endpoint pool, so waiting behind the client's concurrency
    and the transport's own resends included) added to the open batch's tally, if any, as answered or, when the
    block raises (a transport error, an invalid body), as failed; a cancelled one is left out."""
    tally, began, answered, cancelled = _TALLY.get(), time.monotonic(), False, False
    try:
        yield
        answered = True
    except asyncio.CancelledError:  # given up by the caller (a deadline, an untrained batch): no failure of the judge
        cancelled = True
        raise
    finally:
        if tally is not None and not cancelled:
            tally.seconds += time.monotonic() - began
            tally.answered += answered
            tally.failed += not answered
