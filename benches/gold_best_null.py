"""How often the gold-best checkpoint's test calls its peak above the last evaluation when nothing changed
(rurl/watch/gold_best.py peak_test).

    python -m benches.gold_best_null [--trials 400] [--sizes 8 30 100] [--looks 5 9]

A policy that does not change: each held-out example has a pass chance (uniform), and each evaluation's score on it
is the share of 4 criteria it passes at that chance, drawn anew per evaluation. The peak is the evaluation with the
highest mean (the earliest of equals), as the run picks it; when it is not the last, its test against the last gives
a p-value. Printed per number of examples and evaluations: how often p < 0.05, the peak's own p-value alone and
corrected for the choice among the evaluations (as the summary reports it), against the nominal 5%.
"""

import argparse
import random
import statistics

from rurl.watch.gold_best import peak_test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 30, 100])
    parser.add_argument("--looks", type=int, nargs="+", default=[5, 9], help="evaluations in a run, the last included")
    args = parser.parse_args()
    rng = random.Random(1)
    for n in args.sizes:
        for evaluations in args.looks:
            raw = corrected = 0
            for trial in range(args.trials):
                chance = [rng.random() for _ in range(n)]
                runs = [[sum(rng.random() < c for _ in range(4)) / 4 for c in chance] for _ in range(evaluations)]
                peak = max(range(evaluations), key=lambda k: (statistics.fmean(runs[k]), -k))
                if peak == evaluations - 1:
                    continue  # the last is the peak: nothing to test
                paired = [{i: [None, score] for i, score in enumerate(run)} for run in (runs[peak], runs[-1])]
                raw += peak_test(*paired, looks=1, seed=trial)["p"] < 0.05  # the peak's own p-value
                corrected += peak_test(*paired, looks=evaluations - 1, seed=trial)["p"] < 0.05
            print(
                f"{n} examples, {evaluations} evaluations: peak above last at p < 0.05 in {raw / args.trials:.1%} "
                f"of {args.trials} runs with no change by its own p-value, {corrected / args.trials:.1%} corrected "
                f"as reported (nominal 5%, ratio {corrected / args.trials / 0.05:.2f})"
            )


if __name__ == "__main__":
    main()
