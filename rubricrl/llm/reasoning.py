"""A completion's reasoning and its answer, apart: a judge, rule check or rubric writer only ever sees the answer.

Reasoning sits between delimiters (`<think>…</think>` by default), split as vLLM's reasoning parsers and TRL's
response templates read current chat templates: `<think>r</think>a`; `r</think>a` when the template opened it in the
prompt (DeepSeek-R1 distills, Qwen3 thinking 2507); no delimiter is all answer, unless `starts_open` (template-opened
reasoning that never closed); an unclosed `<think>r` has no answer. No answer (cut off while thinking) is not an
empty one: it is scored as such without a judge call. Endpoints with a reasoning parser return the reasoning apart
(`reasoning`/`reasoning_content`); for a policy `as_written` puts it back between the delimiters, so one split
decides for every kind of endpoint and RuFT can keep the whole completion.
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
    """A policy's completion as written (reasoning between the delimiters, then the answer) from an endpoint or TRL's
    response parsing that returned the reasoning apart. Reasoning without an answer never closed (vLLM's parsers give no
    content then, however the reply ended); without reasoning or delimiters: the content.

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
