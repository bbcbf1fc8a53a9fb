"""How often a comparison of two evals calls them apart when nothing is there (reports/distinguish.py).

    python benches/comparison_ties.py [--trials 400] [--sizes 8 30 100]

Two models with no difference: each held-out example has a pass probability (uniform), and each model's score on it
is the share of 4 criteria it passes at that probability, drawn apart for the two. The paired 95% studentized bootstrap
interval should leave out 0 (the comparison's "better" or "worse") about 5% of the time. Printed per number of
examples: how often it did, against that nominal 5%. The demo compares 8 examples.
"""

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reports.distinguish import is_tie, paired_difference  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 30, 100])
    args = parser.parse_args()
    rng = random.Random(1)
    for n in args.sizes:
        apart = 0
        for trial in range(args.trials):
            chance = [rng.random() for _ in range(n)]
            found = paired_difference(scored(chance, rng), scored(chance, rng), seed=trial)
            apart += found is not None and not is_tie(found)
        print(
            f"{n} examples: apart in {apart} of {args.trials} comparisons with no difference "
            f"({apart / args.trials:.1%}; nominal 5%, ratio {apart / args.trials / 0.05:.2f})"
        )


def scored(chance: list[float], rng: random.Random) -> list[dict]:
    """One model's graded records: per example, the share of 4 criteria passed at that example's chance."""
    return [{"id": str(i), "score": sum(rng.random() < p for _ in range(4)) / 4} for i, p in enumerate(chance)]


if __name__ == "__main__":
    main()
