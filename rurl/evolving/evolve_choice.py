"""What an evolution round asks about and what each call sees (pure; rurl/evolving/evolution.py runs the calls).

- The situation of a group decides the prompt (synthesis/prompts/evolve_*.txt): `saturated`, a flat group that
  earned something (stricter criteria, RubricHub's difficulty evolution); `failed`, a flat group whose answers all
  earned nothing (criteria that credit partial progress toward the rubric, or no call: `evolve_on_failed`); `mixed`,
  a group the rubric already split (discriminating positive and negative criteria, DR Tulu's prompt).
- The evolver sees the answers as the judge sees them: reasoning removed, each cut to a token budget, and at most
  `evolve_answers` of them, spread over the group's rewards with the best and the worst included.
- Agreement: how alike the original criteria alone and the whole evolved rubric order a group's answers.
"""

import hashlib
from collections.abc import Callable
from itertools import combinations
from typing import Any

from grading.scores import explicit_score
from rubricrl.llm.reasoning import split_reasoning

SITUATIONS = ("saturated", "failed", "mixed")


def situation(flat: bool, earned: bool) -> str:
    """`earned`: some answer of the group met a positive criterion (its verdicts say so, whatever penalties or the
    overlong shaping did to its reward)."""
    if not flat:
        return "mixed"
    return "saturated" if earned else "failed"


def spread_sample(scored: list[tuple[str, float]], size: int) -> list[tuple[str, float]]:
    """At most `size` distinct answers, best first: all of a smaller group, else ranks spread evenly from the best
    to the worst (both included)."""
    distinct: dict[str, float] = {}
    for text, reward in scored:
        distinct.setdefault(text, reward)
    ranked = sorted(distinct.items(), key=lambda pair: -pair[1])  # stable: equal rewards keep the group's order
    if len(ranked) <= size:
        return ranked
    if size == 1:
        return ranked[:1]
    picks = sorted({round(i * (len(ranked) - 1) / (size - 1)) for i in range(size)})
    return [ranked[i] for i in picks]


def token_cut(tokenizer: Any, budget: int) -> Callable[[str], str]:
    """Text cut to `budget` tokens of the policy's tokenizer (its `tokenizer` when it is a processor)."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)

    def cut(text: str) -> str:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= budget:
            return text
        return tokenizer.decode(ids[:budget]) + f" [... cut at {budget} tokens of {len(ids)}]"

    return cut


def as_judged(text: str, delimiters: list[str], starts_open: bool, cut: Callable[[str], str]) -> str | None:
    """The answer the judge grades (reasoning removed), cut to the budget; None when the reasoning never closed."""
    answer = split_reasoning(text, delimiters, starts_open=starts_open).answer
    return None if answer is None else cut(answer)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def scores_with_and_without(
    verdicts: dict[str, bool], original: dict[str, int], evolved: dict[str, int], rule: dict[str, Any]
) -> tuple[float | None, float | None]:
    """One answer's score over its decided verdicts: under the original criteria alone, and under the whole rubric."""

    def score(points: dict[str, int]) -> float | None:
        decided = [(points[text], met) for text, met in verdicts.items() if text in points]
        if not decided:
            return None
        return explicit_score([p for p, _ in decided], [m for _, m in decided], **rule).score

    return score(original), score({**original, **evolved})


def concordance(pairs: list[tuple[float, float]]) -> tuple[int, int]:
    """(pairs of answers that the two scores order alike, pairs): a tie counts alike only when both scores tie."""
    alike = total = 0
    for (a1, b1), (a2, b2) in combinations(pairs, 2):
        total += 1
        alike += (a1 > a2) - (a1 < a2) == (b1 > b2) - (b1 < b2)
    return alike, total
