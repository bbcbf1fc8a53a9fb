"""Best of K: answers sampled and graded against a rubric (the step RuFT runs per query, and synthesis runs to pick
its contrast pair from a pool, SynthesisConfig.contrast_pool), and which graded candidates a query keeps: RubricHub's
Max/Threshold selection, as a pure function.

Eligible: scored (a judge failure leaves it unscored), not flagged by the integrity check, not blank, not cut off at
max_tokens (unless `truncated_ok`: an incomplete answer is a poor SFT target), and scoring at least tau. Ranked best
first; ties go to the shorter answer (length is never rewarded by accident), then the earlier candidate. The first
`keep` are kept, each text once (a text sampled twice would weigh double in the SFT data).

>>> [c.index for c in select([Candidate(0, "long answer", 0.8), Candidate(1, "short", 0.8),
...                           Candidate(2, "best", None)], threshold=0.5, keep=1)]
[1]
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from grading.grader import Graded, GradeItem, Grader
from grading.rubric import Rubric
from rubricrl.llm import ChatResult, LLMClient
from rubricrl.llm.reasoning import as_written


@dataclass(frozen=True)
class Candidate:
    index: int
    text: str
    score: float | None
    flagged: bool = False
    truncated: bool = False
    """Cut off at max_tokens (finish reason "length")."""
    no_answer: bool = False
    """Its reasoning never closed: there is no answer to keep, whatever its (floor) score."""


def eligible(candidate: Candidate, threshold: float, truncated_ok: bool = False) -> bool:
    return (
        candidate.score is not None
        and not candidate.flagged
        and not candidate.no_answer
        and (truncated_ok or not candidate.truncated)
        and candidate.score >= threshold
        and bool(candidate.text.strip())
    )


def select(
    candidates: Sequence[Candidate], *, threshold: float, keep: int = 1, truncated_ok: bool = False
) -> list[Candidate]:
    ranked = sorted(
        (c for c in candidates if eligible(c, threshold, truncated_ok)), key=lambda c: (-c.score, len(c.text), c.index)
    )
    kept, texts = [], set()
    for candidate in ranked:
        if len(kept) < keep and candidate.text.strip() not in texts:
            kept.append(candidate)
            texts.add(candidate.text.strip())
    return kept


async def sample_and_grade(
    client: LLMClient,
    grader: Grader,
    roles: list[str],
    conversation: list[dict[str, str]],
    rubric: Rubric,
    reference: str | None = None,
) -> tuple[list[ChatResult], list[Graded]]:
    """One answer per entry of `roles` (repeat a role for several: requests that would be identical share one
    n-sample call), each graded against `rubric`; identical answers are graded once. Each answer's text is the
    completion as the policy wrote it (`as_written`: a reasoning parser's reasoning put back between the grading
    delimiters; the grader judges the answer alone), and a reply without content is a candidate without an
    answer, not a failed query."""
    delimiters = grader.config.reasoning_delimiters
    answers = [
        replace(a, texts=[as_written(text, reasoning, delimiters) for text, reasoning in zip(a.texts, a.reasonings)])
        for a in await client.chat_each(roles, conversation, allow_empty=True)
    ]
    graded = await grader.grade_many([GradeItem(conversation, a.text, rubric, reference) for a in answers])
    return answers, graded


def candidates(answers: list[ChatResult], graded: list[Graded]) -> list[Candidate]:
    """What selection ranks: each answer's text, score, whether the integrity check flagged it, whether it was cut
    off at max_tokens and whether it has an answer at all."""
    return [
        Candidate(
            i, a.text, g.score, g.integrity_flag is not None, a.finish_reasons[0] == "length", g.no_answer is not None
        )
        for i, (a, g) in enumerate(zip(answers, graded))
    ]
