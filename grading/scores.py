"""Score math, pure and in one place (HealthBench's formulas, as in simple-evals' healthbench_eval.py).

Per example: s = Σ_{met} p_i / Σ_{p_i > 0} p_i, unclipped (penalties can take it below 0); a dataset metric is
clip(mean, 0, 1) with a seeded bootstrap std. Check: points [7, 5, 10, -6], met [T, F, T, T] -> 11/22 = 0.5.
Verdicts not obtained are None, never False. Scores use decided criteria only (marked partial) and are None below
`min_coverage` (share decided; real verdicts only) or with no positive points decided (0 would be silently wrong).
None scores are left out of every mean and counted apart.

Leaving out an undecided penalty could only raise the score, so a judge failure would pay: `undecided_penalty`
"unscored" (default) makes the example None, "met" counts it met (a lower bound), "unmet" not met (simple-evals'
`calculate_score` counts a missing verdict as not met, whatever its sign: a judge failure on a penalty pays).
Dropping an undecided positive criterion (default) is unbiased only if the judge fails independently of the answer;
if it fails more on some (long ones, odd formats), dropping pays them and RL learns to write them.
`undecided_criterion="unmet"` is a lower bound that pays a judge failure nothing ([10, 5, 3, 2, 1], all met but the
5 undecided: 16/16 = 1.0 dropped, 16/21 = 0.76).
"""

import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from grading.rubric import Rubric

DEFAULT_MIN_COVERAGE = 0.8
UndecidedPenalty = Literal["unscored", "met", "unmet"]
UNDECIDED_PENALTY: tuple[str, ...] = UndecidedPenalty.__args__
UndecidedCriterion = Literal["drop", "unmet"]
UNDECIDED_CRITERION: tuple[str, ...] = UndecidedCriterion.__args__


@dataclass(frozen=True)
class ExampleScore:
    score: float | None
    """Σ met points / Σ positive points over decided criteria; None when undefined (see module doc)."""
    decided: int
    total: int

    @property
    def coverage(self) -> float:
        return self.decided / self.total if self.total else 0.0

    @property
    def partial(self) -> bool:
        return self.decided < self.total


def explicit_score(
    points: Sequence[int],
    met: Sequence[bool | float | None],
    *,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    undecided_penalty: UndecidedPenalty = "unscored",
    undecided_criterion: UndecidedCriterion = "drop",
) -> ExampleScore:
    """HealthBench's per-example score over the decided verdicts (undecided ones: see the module doc). A verdict
    may be a probability of being met (the judge's probability format), which counts that share of its points.

    >>> explicit_score([7, 5, 10, -6], [True, False, True, True]).score
    0.5
    >>> explicit_score([10, 5, 3, 2, 1], [True, None, True, True, True], undecided_criterion="unmet").score
    0.7619047619047619
    """
    if len(points) != len(met):
        raise ValueError(f"{len(points)} criteria but {len(met)} verdicts")
    if undecided_penalty not in UNDECIDED_PENALTY:
        raise ValueError(f"undecided_penalty {undecided_penalty!r} is not one of {list(UNDECIDED_PENALTY)}")
    if undecided_criterion not in UNDECIDED_CRITERION:
        raise ValueError(f"undecided_criterion {undecided_criterion!r} is not one of {list(UNDECIDED_CRITERION)}")
    decided = sum(m is not None for m in met)
    open_penalty = any(p < 0 and m is None for p, m in zip(points, met))
    if open_penalty and undecided_penalty != "unscored":
        met = [(undecided_penalty == "met") if p < 0 and m is None else m for p, m in zip(points, met)]
    if undecided_criterion == "unmet":
        met = [False if p > 0 and m is None else m for p, m in zip(points, met)]
    counted = [(p, m) for p, m in zip(points, met) if m is not None]
    possible = sum(p for p, _ in counted if p > 0)
    if (
        not points
        or decided / len(points) < min_coverage
        or possible == 0
        or (open_penalty and undecided_penalty == "unscored")
    ):
        return ExampleScore(None, decided, len(points))
    return ExampleScore(sum(p * m for p, m in counted) / possible, decided, len(points))


def tag_scores(
    rubric: Rubric,
    met: Sequence[bool | float | None],
    *,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    undecided_penalty: UndecidedPenalty = "unscored",
    undecided_criterion: UndecidedCriterion = "drop",
) -> dict[str, float]:
    """HealthBench's per-example metrics: `overall_score`, each example tag (theme:*) at the overall score, and
    each criterion tag (axis:*, cluster:*, ...) scored over that tag's criteria alone, only where it is defined."""
    rule = {
        "min_coverage": min_coverage,
        "undecided_penalty": undecided_penalty,
        "undecided_criterion": undecided_criterion,
    }
    overall = explicit_score([c.points for c in rubric.criteria], met, **rule).score
    if overall is None:
        return {}
    metrics = {"overall_score": overall, **{tag: overall for tag in rubric.example_tags}}
    by_tag: dict[str, list[tuple[int, bool | None]]] = defaultdict(list)
    for criterion, verdict in zip(rubric.criteria, met):
        for tag in criterion.tags:
            by_tag[tag].append((criterion.points, verdict))
    for tag, pairs in by_tag.items():
        score = explicit_score([p for p, _ in pairs], [m for _, m in pairs], **rule).score
        if score is not None:
            metrics[tag] = score
    return metrics


def clipped_mean(values: Sequence[float]) -> float:
    return min(1.0, max(0.0, sum(values) / len(values)))


def bootstrap_std(values: Sequence[float], *, samples: int = 1000, seed: int = 0) -> float:
    """Std of the clipped mean over `samples` resamples with replacement (seeded: reports reproduce)."""
    rng = random.Random(seed)
    means = [clipped_mean(rng.choices(values, k=len(values))) for _ in range(samples)]
    centre = sum(means) / len(means)
    return (sum((m - centre) ** 2 for m in means) / len(means)) ** 0.5


def aggregate(per_example: Sequence[dict[str, float]], *, samples: int = 1000, seed: int = 0) -> dict[str, dict]:
    """Dataset metrics from per-example metric dicts: {name: {value, n_samples, bootstrap_std}}, each over the
    examples where that metric is defined (simple-evals' clipped mean and bootstrap std)."""
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in per_example:
        for name, value in metrics.items():
            values[name].append(value)
    return {
        name: {
            "value": clipped_mean(vs),
            "n_samples": len(vs),
            "bootstrap_std": bootstrap_std(vs, samples=samples, seed=seed),
        }
        for name, vs in sorted(values.items())
    }


def training_reward(score: float | None, *, clip: bool = True) -> float | None:
    """The reward for RL: the explicit score clipped to [0, 1] (or raw); None stays None (TRL: excluded)."""
    if score is None:
        return None
    return min(1.0, max(0.0, score)) if clip else score


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r (statistics.correlation); None where it is undefined: fewer than 2 pairs, or a constant side."""
    if len(x) != len(y):
        raise ValueError(f"lists of different lengths: {len(x)}, {len(y)}")
    try:
        return max(-1.0, min(1.0, statistics.correlation(x, y)))
    except statistics.StatisticsError:
        return None
