"""Requests counted, and bounded, for one question asked of a model: every chat completion the client posts while a
`counting_calls` block is open in the current task (and the tasks it starts) counts, whichever loop asked for it (an
invalid body asked for again, an empty or off-schema answer resampled, the caller's own re-asks in further blocks).
An answer from the cache, or from an identical request already in flight, is no call. With a limit, the call past
it is not made: CallBudgetSpent, an LLMError, says so."""

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
