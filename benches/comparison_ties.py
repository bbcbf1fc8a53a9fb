"""How often a comparison of two evals calls them apart when nothing is there, and when something is
(reports/distinguish.py).

    python -m benches.comparison_ties [--trials 400] [--sizes 8 30 100] [--shifts 0.1 0.3]

Two models with no difference: each held-out example has a pass probability (uniform), and each model's score on it
is the share of 4 criteria it passes at that probability, drawn apart for the two. The paired sign-flip test should
call them apart (the comparison's "better" or "worse") at most 5% of the time. Then two models that differ by each
of `--shifts`: the pass probability uniform in [0, 1 - shift], the second model's `shift` higher, so its expected
score is `shift` higher; how often the test calls that apart is its power. Printed per number of examples: the
rates, and how often a verdict disagreed with its interval (apart exactly when the 95% interval leaves out 0: never,
by construction). The demo compares 8 examples.
"""

import argparse
import random

from reports.distinguish import is_tie, paired_difference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 30, 100])
    parser.add_argument("--shifts", type=float, nargs="+", default=[0.1, 0.3], help="real differences to detect")
    args = parser.parse_args()
    rng = random.Random(1)
    for n in args.sizes:
        found = {shift: apart_rate(n, args.trials, shift, rng) for shift in [0.0, *args.shifts]}
        power = ", ".join(
            f"{found[shift]['apart']} ({found[shift]['apart'] / args.trials:.1%}) with a difference of {shift}"
            for shift in args.shifts
        )
        print(
            f"{n} examples: apart in {found[0.0]['apart']} of {args.trials} comparisons with no difference "
            f"({found[0.0]['apart'] / args.trials:.1%}; level 5%), in {power}; verdict and interval disagreed "
            f"{sum(f['disagreed'] for f in found.values())} times"
        )


def apart_rate(n: int, trials: int, shift: float, rng: random.Random) -> dict[str, int]:
    """Over `trials` comparisons of `n` examples where the second model's pass probability is `shift` higher: how
    many were called apart, and in how many the verdict and the interval disagreed."""
    apart = disagreed = 0
    for trial in range(trials):
        chance = [rng.random() * (1 - shift) for _ in range(n)]
        found = paired_difference(scored(chance, rng), scored([p + shift for p in chance], rng), seed=trial)
        if found is None:
            continue
        apart += not is_tie(found)
        disagreed += is_tie(found) != (found["low"] <= 0 <= found["high"])
    return {"apart": apart, "disagreed": disagreed}


def scored(chance: list[float], rng: random.Random) -> list[dict]:
    """One model's graded records: per example, the share of 4 criteria passed at that example's chance."""
    return [{"id": str(i), "score": sum(rng.random() < p for _ in range(4)) / 4} for i, p in enumerate(chance)]


if __name__ == "__main__":
    main()
