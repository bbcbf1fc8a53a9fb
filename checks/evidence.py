"""The tests behind the audit's flags and the training alarms, exact where the counts allow: at the sizes audits run
on (4 to 32 answers a query) and the evaluations alarms compare (tens of held-out rows), a rate or a difference read
off the counts is mostly chance, so a flag or an alarm is a test that passed.

Each test returns a p-value and the smallest p-value its counts could ever give (`floor`): where even that is above
the level, the data cannot show the effect whatever it says, and the outcome is `insufficient`, not a flag. Across a
dataset, `bh_threshold` controls the false discovery rate per flag (Benjamini-Hochberg, over the criteria whose floor
is within the level: a test that could never reach the level is left out of the count, in the spirit of Tarone's
and Gilbert's (2005) screening for discrete tests, which is stricter; ours stays valid, and conservative where tied
scores keep a permutation test's true floor above the one stated).
"""

import functools
import hashlib
import itertools
import math
from collections.abc import Sequence

EXACT_SUBSETS = 20_000
"""Up to this many ways to choose which answers met a criterion, the permutation test enumerates them all; beyond,
it draws MONTE_CARLO of them (seeded by the criterion: the same input gives the same p-value)."""
MONTE_CARLO = 2_000


def binomial_at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): exact."""
    if k <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def at_least_share(k: int, n: int, share: float) -> tuple[float, float]:
    """(p, floor) of H0 "met by fewer than `share` of answers" against k met of n: one-sided exact binomial, as the
    Clopper-Pearson bound is (the p-value is below the level exactly when the bound is at or above `share`)."""
    return binomial_at_least(k, n, share), share**n


def sign_permutation(
    met: Sequence[bool], rest: Sequence[float], low_is_suspect: bool, seed: str
) -> tuple[float, float]:
    """(p, floor): are the answers that met a criterion the ones the rest of its rubric scores lowest (a positive
    criterion, `low_is_suspect`) or highest (a penalty)? A permutation test of the sum of the rest-of-rubric scores
    over the met answers, the met count fixed (the same ranking as a correlation with fixed margins), one-sided;
    ties count against the flag."""
    import numpy as np  # pyarrow's own dependency

    n, k = len(met), sum(met)
    subsets = math.comb(n, k)
    if k == 0 or k == n:
        return 1.0, 1.0
    signed = np.asarray(rest, dtype=float) * (1.0 if low_is_suspect else -1.0)
    limit = signed[np.asarray(met, dtype=bool)].sum() + 1e-9
    if subsets <= EXACT_SUBSETS:
        hits = int((signed[_subsets(n, k)].sum(axis=1) <= limit).sum())
        return hits / subsets, 1 / subsets
    draw = np.random.default_rng(int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "big"))
    chosen = np.argpartition(draw.random((MONTE_CARLO, n)), k, axis=1)[:, :k]
    hits = int((signed[chosen].sum(axis=1) <= limit).sum())
    return (hits + 1) / (MONTE_CARLO + 1), 1 / (MONTE_CARLO + 1)


@functools.lru_cache(maxsize=64)
def _subsets(n: int, k: int):
    """Every k-subset of range(n) as an index array: built once per size, shared by every criterion of that size."""
    import numpy as np

    return np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), k)), dtype=np.int16).reshape(
        -1, k
    )


def same_verdicts(decided: int, met: int, earlier_alike: int) -> float:
    """The p-value of a verdict vector equal to an earlier criterion's: with the met count fixed, another criterion's
    met answers are any `met` of the `decided` equally likely, so one earlier criterion matches by chance with
    probability 1 / C(decided, met); over the `earlier_alike` earlier criteria with the same count, at most that many
    times it (a union bound). No match is p = 1, so this is also the test's floor."""
    return min(1.0, earlier_alike / math.comb(decided, met))


def two_proportions(met_a: int, n_a: int, met_b: int, n_b: int) -> float:
    """Two-sided p-value of the pooled two-proportion z-test: did the pass rate change between two samples? (1.0
    when either is empty.)"""
    if not n_a or not n_b:
        return 1.0
    pooled = (met_a + met_b) / (n_a + n_b)
    spread = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if spread == 0:
        return 1.0
    z = abs(met_a / n_a - met_b / n_b) / spread
    return math.erfc(z / math.sqrt(2))


def bh_threshold(p_values: Sequence[float], level: float) -> float:
    """The largest p-value Benjamini-Hochberg rejects at false discovery rate `level` (0.0: it rejects none):
    p_(i) <= i / m x level for the largest such i."""
    import numpy as np  # pyarrow's own dependency: millions of p-values sort in a blink

    ordered = np.sort(np.asarray(p_values, dtype=float))
    within = np.nonzero(ordered <= np.arange(1, len(ordered) + 1) / max(1, len(ordered)) * level)[0]
    return float(ordered[within[-1]]) if len(within) else 0.0


def paired_bootstrap(differences: Sequence[float], seed: int, draws: int = 4_000) -> float:
    """One-sided p-value that the mean of paired `differences` (one per example) is above 0, by the studentized
    (bootstrap-t) paired bootstrap: examples resampled with replacement (seeded), each resample's t = (its mean - the
    mean) / its standard error against the observed mean / standard error; the add-one correction. The plain
    percentile bootstrap runs light in the tails at tens of examples (simulated: 7.5% false alarms over 20 looks at
    a 5% budget, benches/rurl_alarms.py); the studentized one keeps the level."""
    if len(differences) < 2:
        return 1.0
    mean, error, t = _studentized(differences, seed, draws)
    if error == 0:  # every example moved alike: certain in the direction it moved
        return 1 / (draws + 1) if mean > 0 else 1.0
    return (int((t >= mean / error).sum()) + 1) / (draws + 1)


def _studentized(differences: Sequence[float], seed: int, draws: int):
    """The mean, its standard error, and `draws` resamples' t = (resample mean - mean) / resample's error."""
    import numpy as np

    values = np.asarray(differences, dtype=float)
    n = len(values)
    mean, error = values.mean(), values.std(ddof=1) / math.sqrt(n)
    if error == 0:
        return mean, 0.0, None
    samples = values[np.random.default_rng(seed).integers(0, n, size=(draws, n))]
    errors = samples.std(axis=1, ddof=1) / math.sqrt(n)
    # a resample of one repeated value has no spread of its own: it is measured on the observed scale (t = 0 would
    # pull every such resample to the centre: at 2 examples every t was 0 and any difference looked certain)
    errors = np.where(errors > 0, errors, error)
    return mean, error, (samples.mean(axis=1) - mean) / errors


SIGN_FLIP_EXACT = 16
"""Up to this many paired examples, the sign-flip test enumerates every assignment of signs (2^16 = 65,536); beyond,
it draws SIGN_FLIP_DRAWS of them (seeded: the same input gives the same answer)."""
SIGN_FLIP_DRAWS = 10_000


def sign_flip(differences: Sequence[float], seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(p, low, high) of the paired sign-flip (permutation) test that the mean of paired `differences` (one per
    example) is 0, two-sided: with no difference each example's sign is as likely flipped as not, so p is the share
    of sign assignments whose |mean| is at least the observed one (ties count against a difference; an example that
    did not move counts for nothing). Exact over every assignment up to SIGN_FLIP_EXACT examples, so it keeps its
    level at any size where a bootstrap runs hot; beyond, SIGN_FLIP_DRAWS seeded assignments with the add-one
    correction. The test rejects at p <= 1 - `level`.

    [low, high] inverts the same test: the shifts d for which the differences minus d are not rejected, found by
    bisection (an assignment counts as extreme on an interval of shifts around the mean, so p falls as d moves away
    from the mean either way, and the shifts kept are an interval). It holds 0 exactly when the test keeps 0. Where
    no data could be rejected (5 examples or fewer at 95%: the smallest p is 2 / 2^n) it is unbounded."""
    import numpy as np

    values = np.asarray(differences, dtype=float)
    n = len(values)
    if n == 0:
        return 1.0, -math.inf, math.inf
    exact = n <= SIGN_FLIP_EXACT
    # an assignment is kept as its signed sum of the differences and its sum of signs: the signed sum of the
    # differences minus any shift d is then sums - d * counts
    if exact:  # every assignment, built one example at a time; the first is the observed one
        sums, counts = np.zeros(1), np.zeros(1)
        for value in values:
            sums, counts = np.concatenate([sums + value, sums - value]), np.concatenate([counts + 1, counts - 1])
    else:  # seeded random bits (1: flipped), in chunks, so that memory does not grow with the examples
        rng, flipped, flips = np.random.default_rng(seed), [], []
        rows = max(1, 2_000_000 // n)
        for start in range(0, SIGN_FLIP_DRAWS, rows):
            size = min(rows, SIGN_FLIP_DRAWS - start) * n
            bits = np.unpackbits(np.frombuffer(rng.bytes(-(-size // 8)), dtype=np.uint8))[:size].reshape(-1, n)
            flipped.append(bits.astype(float) @ values)
            flips.append(bits.sum(axis=1, dtype=np.int64))
        sums, counts = values.sum() - 2 * np.concatenate(flipped), n - 2 * np.concatenate(flips)
    total, alpha = values.sum(), round(1 - level, 12)

    def p_at(shift: float) -> float:
        """The test's p-value for the differences minus `shift`: an assignment's signed sum of them is
        sums - shift * counts."""
        observed = abs(total - shift * n) - 1e-10 * np.abs(values - shift).sum()  # rounding is not a difference
        hits = int(np.count_nonzero(np.abs(sums - shift * counts) >= observed))
        return hits / len(sums) if exact else (hits + 1) / (SIGN_FLIP_DRAWS + 1)

    p, mean = p_at(0.0), total / n
    below, above = values.min() - 1, values.max() + 1  # every difference minus these has one sign: p is its floor
    if p_at(below) > alpha:
        return p, -math.inf, math.inf
    # each bound is bisected between a shift the test keeps and one it rejects; 0 is one of them where it lies
    # between, so that the interval holds 0 exactly when the test keeps it
    low_kept, low_rejected, high_kept, high_rejected = mean, below, mean, above
    if 0 < mean:
        low_kept, low_rejected = (0.0, below) if p > alpha else (mean, 0.0)
    elif 0 > mean:
        high_kept, high_rejected = (0.0, above) if p > alpha else (mean, 0.0)

    def bound(kept: float, rejected: float) -> float:
        precision = 1e-10 * (above - below)  # far below what a report shows
        while abs(rejected - kept) > precision:
            middle = (kept + rejected) / 2
            kept, rejected = (middle, rejected) if p_at(middle) > alpha else (kept, middle)
        return float(kept)

    return p, bound(low_kept, low_rejected), bound(high_kept, high_rejected)
