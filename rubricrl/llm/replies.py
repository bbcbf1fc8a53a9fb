"""What a chat completion reply must hold for `LLMClient` to return it, and the errors a call ends with: a body
that is no chat completion (asked for again), a reply without content (`EmptyAnswer`, with what to change), an
endpoint that is down; every message with the API key cut out."""

from typing import Any

from rubricrl.errors import UserError
from rubricrl.llm.roles import Role


class LLMError(UserError, RuntimeError):
    """A call failed for good (after its retries). The message names the role, model and endpoint."""


class EndpointUnreachable(LLMError):
    """A role's endpoints have not accepted a connection for several calls in a row: the server is down. Every
    later call to them fails at once the same way (one attempt each) until one connects again, so a command may
    stop its run on the first of these instead of recording one failure per item."""


class EmptyAnswer(LLMError):
    """A reply without content (empty, null or blank): typically a reasoning model cut off at max_tokens while
    thinking, its reasoning in `reasoning`. The message says what to change. A caller for whom "no answer" is a
    result (a policy being scored) may catch it, or ask with `allow_empty=True`."""

    def __init__(self, message: str, *, finish_reason: str | None, reasoning: str | None):
        super().__init__(message)
        self.finish_reason = finish_reason
        self.reasoning = reasoning


def redacted(message: str, spec: Role) -> str:
    key = spec.api_key()
    return (message.replace(key, "***") if len(key) >= 8 else message)[:2000]


class InvalidAnswer(ValueError):
    """A 200 whose body is not a chat completion with the choices asked for."""


def reasoning_of(message: dict[str, Any]) -> str | None:
    """The reasoning a server's reasoning parser put beside the answer: `reasoning` (vLLM >= 0.11, OpenRouter) or
    `reasoning_content` (vLLM <= 0.10, DeepSeek); some versions send both, with the same text."""
    for name in ("reasoning", "reasoning_content"):
        if isinstance(message.get(name), str) and message[name]:
            return message[name]
    return None


def empty_answer(role: str, spec: Role, body: dict[str, Any], sample: dict, index: int, n: int) -> EmptyAnswer:
    """The one-line error for a reply without content: who answered, how it ended, and what to change."""
    body = {**body, **(body.get("extra_body") or {})}
    finish, reasoning = sample["finish_reason"], sample.get("reasoning")
    which = f"sample {index + 1} of {n}: " if n > 1 else ""
    tries = f" ({sample['attempts']} tries)" if sample.get("attempts") else ""
    max_tokens = body.get("max_tokens", "not set")
    effort = body.get("reasoning_effort", "not set")
    if reasoning and finish == "length":
        why = (
            f"the model spent its tokens reasoning ({len(reasoning)} characters) and was cut off before answering: "
            f"raise the role's max_tokens (now {max_tokens}) or lower its reasoning effort (reasoning_effort, now "
            f"{effort})"
        )
    elif reasoning:
        why = (
            f"the whole reply is reasoning ({len(reasoning)} characters): the model stopped before answering, or "
            "the server's reasoning parser found no end to the reasoning (check that vLLM's --reasoning-parser "
            f"fits the model); raise the role's max_tokens (now {max_tokens}) or lower its reasoning effort "
            f"(reasoning_effort, now {effort})"
        )
    elif finish == "length":
        why = f"cut off before any text: raise the role's max_tokens (now {max_tokens})"
    else:
        why = "the model answered nothing"
    message = (
        f"role '{role}' ({spec.model} at {spec.base_url}): {which}no answer (empty content, finish_reason "
        f"{finish!r}){tries}: {why}"
    )
    return EmptyAnswer(redacted(message, spec), finish_reason=finish, reasoning=reasoning)


def checked_choices(response: Any, n: int) -> list[dict[str, Any]]:
    """The n choices of a chat completion body, in index order; anything else (a list, no `choices`, fewer of
    them than asked for, a choice without a text message) is an invalid answer, to be asked for again."""
    if not isinstance(response, dict) or not isinstance(response.get("choices"), list):
        raise InvalidAnswer(f"not a chat completion: {str(response)[:200]}")
    choices = response["choices"]
    if len(choices) != n or not all(
        isinstance(c, dict)
        and isinstance(c.get("message"), dict)
        and isinstance(c["message"].get("content"), str | None)
        for c in choices
    ):
        raise InvalidAnswer(f"expected {n} choice(s) with a message, got {str(choices)[:200]}")
    return sorted(choices, key=lambda c: c.get("index") or 0)
