"""Which graded candidates a query keeps: RubricHub's Max/Threshold selection, as a pure function.

Eligible: scored (a judge failure leaves it unscored), not flagged by the integrity check, not blank, not cut off at
max_tokens (unless `truncated_ok`: an incomplete answer is a poor SFT target), and scoring at least tau. Ranked best
first; ties go to the shorter answer (length is never rewarded by accident), then the earlier candidate. The first
`keep` are kept, each text once (a text sampled twice would weigh double in the SFT data).

>>> [c.index for c in select([Candidate(0, "long answer", 0.8), Candidate(1, "short", 0.8),
...                           Candidate(2, "best", None)], threshold=0.5, keep=1)]
[1]
"""

from collections.abc import Sequence
from dataclasses import dataclass


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
