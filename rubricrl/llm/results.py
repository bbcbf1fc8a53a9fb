"""What LLMClient gives back: a ChatResult per call, and per role a Usage of the calls and tokens spent."""

from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass
class Usage:
    """Calls and tokens of one role. Cache hits cost nothing and are counted apart."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    retries: int = 0
    """Answers that did not parse (invalid body, off-schema JSON, no content) and were asked for again."""
    reasoning_tokens: int = 0
    """Of completion_tokens, those spent reasoning, as the server reports them
    (`usage.completion_tokens_details.reasoning_tokens`: OpenAI, vLLM with a reasoning parser); 0 when it does not."""

    def count(self, response: dict[str, Any]) -> None:
        """One more request answered, with the tokens its body's `usage` reports (when it reports them)."""
        self.requests += 1
        tokens = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        self.prompt_tokens += tokens.get("prompt_tokens") or 0
        self.completion_tokens += tokens.get("completion_tokens") or 0
        details = tokens.get("completion_tokens_details")
        self.reasoning_tokens += (details.get("reasoning_tokens") or 0) if isinstance(details, dict) else 0


@dataclass
class ChatResult:
    texts: list[str]
    """One answer per sample (n of them): the message's `content`, never its reasoning; never empty (unless asked
    with `allow_empty`)."""
    finish_reasons: list[str | None]
    messages: list[Message]
    """Exactly the messages that were sent: the first thing to read when an answer looks wrong."""
    role: str
    model: str
    cached: int = 0
    """How many of the samples came from the cache."""
    parsed: list[Any] = field(default_factory=list)
    """With `schema=`: one validated JSON value per sample."""
    seconds: float = 0.0
    reasonings: list[str | None] = field(default_factory=list)
    """One per sample: the reasoning a reasoning parser returned beside the answer (`reasoning` or
    `reasoning_content`); None when there was none (a plain model, or `<think>` text left inside the answer)."""
    top_logprobs: list[list[dict[str, float]] | None] = field(default_factory=list)
    """One per sample, when the call asked for `logprobs`: {token: logprob} per generated position (client.py:
    top_logprobs); None when the endpoint sent none."""

    @property
    def text(self) -> str:
        return self.texts[0]

    @property
    def reasoning(self) -> str | None:
        return self.reasonings[0]

    @property
    def value(self) -> Any:
        return self.parsed[0]
