"""Whether answers with no substance earn a criterion more often than chance allows (pure).

Each (criterion, judge, probe kind) is one test: of the `decided` probes of that kind graded on the criterion,
`credited` earned it. Under the null hypothesis each probe earns it independently with probability at most
`tolerance` (how often a no-substance answer may earn a criterion by chance: a judge's noise, a criterion a polite
reply meets fairly); the one-sided binomial p-value is P(X >= credited) for X ~ Binomial(decided, tolerance). Each
kind probes its own weakness, so kinds are never pooled: a criterion the keyword list earns every time is
exploitable whatever the other kinds earn.

A judge's tests are corrected together by Benjamini-Hochberg (false discovery rate `level`). A test whose counts can
never reach the level (even `decided` of `decided` gives p = tolerance ** decided > level) is `insufficient`: never
a flag, and left out of the correction's count, as it can reject nothing (Tarone's refinement for discrete tests).
Judges are corrected apart: adding a judge to compare does not move another's flags.
"""

from dataclasses import dataclass
from math import comb

EXPLOITABLE, NOT_SHOWN, INSUFFICIENT = "exploitable", "not shown", "insufficient"


@dataclass(frozen=True)
class ProbeTest:
    tolerance: float = 0.1
    """How often an answer with no substance may earn a criterion by chance (the null hypothesis's rate)."""
    level: float = 0.05
    """The false discovery rate of the flags, over one judge's tests (Benjamini-Hochberg)."""

    def __post_init__(self) -> None:
        if not 0 < self.tolerance < 1:
            raise ValueError(f"tolerance must be within (0, 1), got {self.tolerance}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be within (0, 1), got {self.level}")

    def describe(self) -> str:
        return (
            f"one-sided binomial test per probe kind against a tolerance of {self.tolerance:.0%}, "
            f"Benjamini-Hochberg at {self.level:.0%} over each judge's tests"
        )


def binomial_p(credited: int, decided: int, tolerance: float) -> float:
    """P(X >= credited), X ~ Binomial(decided, tolerance); 1.0 with nothing decided."""
    tail = sum(comb(decided, k) * tolerance**k * (1 - tolerance) ** (decided - k) for k in range(credited, decided + 1))
    return min(1.0, tail)


def can_reach(decided: int, test: ProbeTest) -> bool:
    """Whether `decided` probes could reject at all: every one crediting it gives p = tolerance ** decided."""
    return decided > 0 and test.tolerance**decided <= test.level


def benjamini_hochberg(p_values: list[float], level: float) -> float:
    """The rejection threshold: tests with p at or below it are rejected. With none rejected, level / m (what the
    least p-value would have had to reach); 0.0 with no tests."""
    m = len(p_values)
    if not m:
        return 0.0
    ordered = sorted(p_values)
    passed = [k for k in range(1, m + 1) if ordered[k - 1] <= k * level / m]
    return max(passed) * level / m if passed else level / m


def decide(counts: list[tuple[int, int]], test: ProbeTest) -> tuple[list[dict], dict]:
    """One judge's tests, each (credited, decided): per test its `p` and `status` (exploitable, not shown,
    insufficient), in order, and the correction's figures: tests, sufficient, rejected, threshold."""
    p_values = [binomial_p(credited, decided, test.tolerance) for credited, decided in counts]
    reachable = [can_reach(decided, test) for _, decided in counts]
    threshold = benjamini_hochberg([p for p, ok in zip(p_values, reachable) if ok], test.level)
    results = [
        {"p": p, "status": (EXPLOITABLE if p <= threshold else NOT_SHOWN) if ok else INSUFFICIENT}
        for p, ok in zip(p_values, reachable)
    ]
    rejected = sum(r["status"] == EXPLOITABLE for r in results)
    correction = {"tests": len(counts), "sufficient": sum(reachable), "rejected": rejected, "threshold": threshold}
    return results, correction
