"""How far two judges agree, pure and in one place: per criterion (verdicts) and per example (scores).

Judge A is under study, judge B the reference (a stronger judge, or HealthBench's physicians): precision and recall
are A's against B, as HealthBench's meta-evaluation reports its grader against each physician label; agreement,
kappa and Spearman are symmetric. A pair with a None verdict (grading/scores.py) on either side is *undecided*,
counted apart (A only, B only, both) and never as a disagreement: a judge failure is not an opinion.

Over decided pairs: raw agreement, Cohen's kappa (None when p_e = 1: both judges gave one class throughout, so
chance explains all agreement), F1 per class with B as reference and macro F1, their mean (HealthBench's
`f1_balanced`); a precision or recall over nothing is None, and so is every F1 built on it. Per example, over the
examples both scored: Spearman, Pearson, mean absolute difference, each side's mean. Bootstrap std is seeded and
over the resamples where the statistic is defined (as scores.bootstrap_std); criterion pairs are resampled by group
(their example) when groups are given, as one response's criteria are not independent.
"""

import math
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from grading.scores import pearson

Met = bool | None

DEFAULT_SAMPLES = 1000


@dataclass(frozen=True)
class Pair:
    """Two verdicts on one criterion of one example."""

    a: Met
    b: Met
    tags: tuple[str, ...] = ()
    """Where the pair is also counted: the criterion's tags (axis:*, cluster:*) and the example's (theme:*)."""
    group: str | None = None
    """The example it belongs to: the bootstrap resamples whole groups."""


@dataclass(frozen=True)
class Confusion:
    """Counts of decided pairs, A's verdict first."""

    both_met: int = 0
    a_only: int = 0
    """A met, B not met: a false positive of A against B."""
    b_only: int = 0
    """A not met, B met: a false negative of A against B."""
    neither: int = 0

    @classmethod
    def of(cls, pairs: Sequence[tuple[Met, Met]]) -> "Confusion":
        counts = [0, 0, 0, 0]
        for a, b in pairs:
            if a is not None and b is not None:
                counts[_cell(a, b)] += 1
        return cls(*counts)

    @property
    def decided(self) -> int:
        return self.both_met + self.a_only + self.b_only + self.neither

    @property
    def agreement(self) -> float | None:
        return _ratio(self.both_met + self.neither, self.decided)

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa in integers: (n * agreed - chance) / (n^2 - chance), chance = n^2 p_e."""
        n = self.decided
        a_met, b_met = self.both_met + self.a_only, self.both_met + self.b_only
        chance = a_met * b_met + (n - a_met) * (n - b_met)
        if n == 0 or chance == n * n:
            return None
        return (n * (self.both_met + self.neither) - chance) / (n * n - chance)

    def per_class(self) -> dict[str, dict[str, float | None]]:
        """precision, recall and F1 of A against B, for `met` and `not_met`."""
        met = _f1(self.both_met, self.both_met + self.a_only, self.both_met + self.b_only)
        not_met = _f1(self.neither, self.neither + self.b_only, self.neither + self.a_only)
        return {"met": met, "not_met": not_met}

    @property
    def macro_f1(self) -> float | None:
        classes = self.per_class()
        f1s = [classes["met"]["f1"], classes["not_met"]["f1"]]
        return None if None in f1s else (f1s[0] + f1s[1]) / 2

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class CriterionAgreement:
    pairs: int
    """All pairs, decided or not."""
    undecided_a: int
    """Pairs where only A gave no verdict."""
    undecided_b: int
    undecided_both: int
    confusion: Confusion
    agreement: float | None
    kappa: float | None
    macro_f1: float | None
    per_class: dict[str, dict[str, float | None]]
    bootstrap: dict[str, float | None] = field(default_factory=dict)
    """Bootstrap std of agreement, kappa and macro_f1 (None where fewer than 2 resamples define it)."""

    @property
    def decided(self) -> int:
        return self.confusion.decided

    @property
    def undecided(self) -> int:
        return self.undecided_a + self.undecided_b + self.undecided_both

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "decided": self.decided,
            "undecided": self.undecided,
            "undecided_a": self.undecided_a,
            "undecided_b": self.undecided_b,
            "undecided_both": self.undecided_both,
            "confusion": self.confusion.to_dict(),
            "agreement": self.agreement,
            "kappa": self.kappa,
            "macro_f1": self.macro_f1,
            "per_class": self.per_class,
            "bootstrap_std": dict(self.bootstrap),
        }


@dataclass
class ScoreAgreement:
    examples: int
    paired: int
    """Examples both sides scored: the statistics below are over these."""
    unscored_a: int
    """Examples A left unscored (None), whether B scored them or not."""
    unscored_b: int
    spearman: float | None
    pearson: float | None
    mean_abs_diff: float | None
    mean_a: float | None
    mean_b: float | None
    bootstrap: dict[str, float | None] = field(default_factory=dict)
    """Bootstrap std of spearman."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["bootstrap_std"] = out.pop("bootstrap")
        return out


@dataclass
class AgreementResult:
    criteria: CriterionAgreement | None
    """None when a side gave no verdicts per criterion (a rating mode: implicit, likert)."""
    by_tag: dict[str, CriterionAgreement]
    scores: ScoreAgreement
    samples: int = DEFAULT_SAMPLES
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "criteria": self.criteria.to_dict() if self.criteria else None,
            "by_tag": {tag: a.to_dict() for tag, a in self.by_tag.items()},
            "scores": self.scores.to_dict(),
            "bootstrap": {"samples": self.samples, "seed": self.seed},
        }


# --- per criterion --------------------------------------------------------------------------------------------------


def criterion_agreement(
    a: Sequence[Met],
    b: Sequence[Met],
    *,
    groups: Sequence[Any] | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> CriterionAgreement:
    """Agreement of two equally long verdict lists (see the module doc); `groups[i]` names the example of pair i."""
    if len(a) != len(b) or (groups is not None and len(groups) != len(a)):
        raise ValueError(
            f"verdict lists of different lengths: {len(a)}, {len(b)}"
            + (f", groups {len(groups)}" if groups is not None else "")
        )
    confusion = Confusion.of(list(zip(a, b)))
    undecided = [0, 0, 0]  # A only, B only, both
    for x, y in zip(a, b):
        if x is None or y is None:
            undecided[2 if x is None and y is None else 0 if x is None else 1] += 1
    counts: dict[Any, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for i, (x, y) in enumerate(zip(a, b)):
        if x is not None and y is not None:
            counts[groups[i] if groups is not None else i][_cell(x, y)] += 1
    return CriterionAgreement(
        pairs=len(a),
        undecided_a=undecided[0],
        undecided_b=undecided[1],
        undecided_both=undecided[2],
        confusion=confusion,
        agreement=confusion.agreement,
        kappa=confusion.kappa,
        macro_f1=confusion.macro_f1,
        per_class=confusion.per_class(),
        bootstrap=_bootstrap_confusion(list(counts.values()), samples, seed),
    )


def _bootstrap_confusion(cells: list[list[int]], samples: int, seed: int) -> dict[str, float | None]:
    """Std of agreement, kappa and macro F1 over `samples` resamples (with replacement) of the groups' counts."""
    rng = random.Random(seed)
    values: dict[str, list[float]] = {"agreement": [], "kappa": [], "macro_f1": []}
    if cells:
        for _ in range(samples):
            picked = rng.choices(cells, k=len(cells))
            confusion = Confusion(*(sum(column) for column in zip(*picked)))
            for name in values:
                value = getattr(confusion, name)
                if value is not None:
                    values[name].append(value)
    return {name: _std(vs) for name, vs in values.items()}


def crosstab(a: Sequence[Met], b: Sequence[Met]) -> dict[str, dict[str, int]]:
    """Counts of every (A, B) combination, undecided included: {"met": {"met": n, "not_met": n, "undecided": n},
    ...}, A's verdict first (what a confusion-matrix plot shows)."""
    names = {True: "met", False: "not_met", None: "undecided"}
    table = {x: {y: 0 for y in names.values()} for x in names.values()}
    for x, y in zip(a, b, strict=True):
        table[names[x]][names[y]] += 1
    return table


def _cell(a: bool, b: bool) -> int:
    """Index into Confusion's fields: both met, A only, B only, neither."""
    return (0 if b else 1) if a else (2 if b else 3)


def _f1(agreed: int, predicted: int, actual: int) -> dict[str, float | None]:
    precision, recall = _ratio(agreed, predicted), _ratio(agreed, actual)
    if precision is None or recall is None:
        f1 = None
    elif precision + recall == 0:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {"precision": precision, "recall": recall, "f1": f1, "support": actual}


# --- per example ----------------------------------------------------------------------------------------------------


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties taking the mean of the ranks they span: [10, 20, 20, 30] -> [1, 2.5, 2.5, 4]."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's r of the average ranks (scipy.stats.spearmanr's definition with ties)."""
    if len(x) != len(y):
        raise ValueError(f"lists of different lengths: {len(x)}, {len(y)}")
    return pearson(average_ranks(x), average_ranks(y))


def score_agreement(
    a: Sequence[float | None],
    b: Sequence[float | None],
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> ScoreAgreement:
    """Per-example agreement of two equally long score lists, over the examples both scored."""
    if len(a) != len(b):
        raise ValueError(f"score lists of different lengths: {len(a)}, {len(b)}")
    paired = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    xs, ys = [x for x, _ in paired], [y for _, y in paired]
    rng = random.Random(seed)
    rhos = []
    if len(paired) >= 2:
        for _ in range(samples):
            picked = rng.choices(paired, k=len(paired))
            rho = spearman([x for x, _ in picked], [y for _, y in picked])
            if rho is not None:
                rhos.append(rho)
    return ScoreAgreement(
        examples=len(a),
        paired=len(paired),
        unscored_a=sum(x is None for x in a),
        unscored_b=sum(y is None for y in b),
        spearman=spearman(xs, ys),
        pearson=pearson(xs, ys),
        mean_abs_diff=math.fsum(abs(x - y) for x, y in paired) / len(paired) if paired else None,
        mean_a=math.fsum(xs) / len(xs) if xs else None,
        mean_b=math.fsum(ys) / len(ys) if ys else None,
        bootstrap={"spearman": _std(rhos)},
    )


# --- both -----------------------------------------------------------------------------------------------------------


def compare(
    pairs: Sequence[Pair] | None,
    scores: Sequence[tuple[float | None, float | None]],
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> AgreementResult:
    """Everything at once: per criterion overall and per tag (None without per-criterion verdicts), per example."""
    criteria, by_tag = None, {}
    if pairs is not None:
        options = {"samples": samples, "seed": seed}
        criteria = _of_pairs(pairs, **options)
        tagged: dict[str, list[Pair]] = defaultdict(list)
        for pair in pairs:
            for tag in dict.fromkeys(pair.tags):
                tagged[tag].append(pair)
        by_tag = {tag: _of_pairs(tagged[tag], **options) for tag in sorted(tagged)}
    score = score_agreement([x for x, _ in scores], [y for _, y in scores], samples=samples, seed=seed)
    return AgreementResult(criteria, by_tag, score, samples, seed)


def _of_pairs(pairs: Sequence[Pair], **options) -> CriterionAgreement:
    grouped = all(p.group is not None for p in pairs)
    return criterion_agreement(
        [p.a for p in pairs], [p.b for p in pairs], groups=[p.group for p in pairs] if grouped else None, **options
    )


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _std(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    centre = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / len(values))
