"""A completion's reasoning and its answer, apart: only the answer is ever judged.

Open models reason before they answer, between delimiters (`<think>…</think>` by default). What reaches a judge,
a rule check or a rubric writer is the answer alone; a completion whose reasoning never closed (cut off while
thinking) has no answer at all, which is not the same as an empty one: it is scored as such without a judge call.

The split follows the chat templates of current models (as vLLM's reasoning parsers and TRL's response templates
read them):
- `<think>reasoning</think>answer`: the model opened and closed its reasoning;
- `reasoning</think>answer`: the template opened it in the prompt (DeepSeek-R1 distills, Qwen3 thinking 2507), so
  the completion holds only the closing delimiter;
- no delimiter: all answer, unless `starts_open` (the template opened the reasoning, and it never closed);
- `<think>reasoning` with no close: never closed, no answer.
Endpoints with a reasoning parser return the reasoning apart (`reasoning`/`reasoning_content`, rubricrl/llm); for
a policy, `as_written` puts it back between the delimiters, so that one split decides for every kind of endpoint
and RuFT can keep the whole completion.
"""

from dataclasses import dataclass

DEFAULT_DELIMITERS = ("<think>", "</think>")


@dataclass(frozen=True)
class Split:
    reasoning: str
    """The reasoning text, without delimiters ("" when there was none)."""
    answer: str | None
    """What follows the reasoning (leading whitespace dropped, so `<think>…</think>\n\nFour.` and `Four.` are
    one text to a judge and its cache); None when the reasoning never closed."""

    @property
    def unclosed(self) -> bool:
        return self.answer is None


class ReasoningNeverClosed(ValueError):
    """A completion was cut off while reasoning: it holds no answer."""


def split_reasoning(
    text: str, delimiters: tuple[str, str] | list[str] | None = DEFAULT_DELIMITERS, *, starts_open: bool = False
) -> Split:
    """The reasoning and the answer of `text`; no delimiters (None or empty): all answer.

    >>> split_reasoning("<think>2+2 is 4</think>\\n\\nFour.")
    Split(reasoning='2+2 is 4', answer='Four.')
    >>> split_reasoning("<think>2+2 is").unclosed
    True
    """
    if not delimiters:
        return Split("", text)
    open_, close = delimiters
    body = text.lstrip()
    opened = body.startswith(open_)
    if opened:
        body = body[len(open_) :]
    end = body.find(close)
    if end >= 0 and (opened or starts_open or open_ not in body[:end]):
        return Split(body[:end].strip(), body[end + len(close) :].lstrip())
    if opened or starts_open:
        return Split(body.strip(), None)
    return Split("", text)


def as_written(
    content: str | None, reasoning: str | None, delimiters: tuple[str, str] | list[str] | None = DEFAULT_DELIMITERS
) -> str:
    """A policy's completion as it wrote it, from an endpoint (or TRL's response parsing) that returned its
    reasoning apart: the reasoning between the delimiters, then the answer. Reasoning without an answer never
    closed (vLLM's parsers return no content when the closing delimiter never came, however the reply ended).
    Without reasoning (or delimiters): the content.

    >>> as_written(None, "Let me think")
    '<think>Let me think'
    """
    if not reasoning or not delimiters:
        return content or ""
    if not content:
        return f"{delimiters[0]}{reasoning}"
    return f"{delimiters[0]}{reasoning}{delimiters[1]}\n\n{content}"


def answer_of(
    text: str,
    delimiters: tuple[str, str] | list[str] | None = DEFAULT_DELIMITERS,
    *,
    starts_open: bool = False,
    what: str = "the completion",
) -> str:
    """The answer of `text`; ReasoningNeverClosed when it has none (for callers that need a text, e.g. a rubric
    writer's contrast responses)."""
    split = split_reasoning(text, delimiters, starts_open=starts_open)
    if split.answer is None:
        raise ReasoningNeverClosed(
            f"{what} was cut off while reasoning ({len(split.reasoning)} characters, no "
            f"{delimiters[1]!r}): raise its max_tokens or lower its reasoning effort"
        )
    return split.answer
