"""How often the divergence alarm fires when the two judges do not part ways, and which drift it catches: simulated
runs through rurl/watch/alarms.py's RewardAlarms, as `rurl train` feeds it (a step-0 evaluation, then one per eval_every).

    python -m benches.rurl_alarms [--runs 1000] [--rows 64] [--evaluations 20] [--seed 0]

Each run: per held-out example a base quality (normal, mean 0.45, sd 0.25: HealthBench-like per-example scores);
at each evaluation the policy's answer moves it (sd 0.15), and each judge reads it with its own noise (sd 0.15), so
an example's gap between the judges moves by about 0.3 between two evaluations while nothing drifts. Drift D: the
training judge's scores rise by D x t / T over the T evaluations after step 0 (the monitor's stay), the reward
hacking Rubric Dropout reports. Printed: the share of runs in which the alarm fired (null: against alarm_level), and
per D the share that fired by the last evaluation (power) with the median evaluation it fired at.
"""

import argparse
import random
import statistics
from types import SimpleNamespace

from rurl.config import RurlConfig
from rurl.watch.alarms import RewardAlarms
from rurl.watch.guards import FailureMonitor

DRIFTS = (0.0, 0.05, 0.1, 0.15, 0.2)


def simulated_run(rng: random.Random, rows: int, evaluations: int, drift: float) -> int | None:
    """The evaluation at which the divergence alarm fired, or None."""
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(is_main_process=False),
        stop_reason=None,
        state=SimpleNamespace(max_steps=evaluations),
    )
    alarms = RewardAlarms(trainer, RurlConfig(eval_every=1), FailureMonitor(5))
    base = [rng.gauss(0.45, 0.25) for _ in range(rows)]
    for t in range(evaluations + 1):
        answers = [b + rng.gauss(0, 0.15) for b in base]
        judge = [a + rng.gauss(0, 0.15) + drift * t / evaluations for a in answers]
        monitor = [a + rng.gauss(0, 0.15) for a in answers]
        paired = {f"e{i}": [j, m] for i, (j, m) in enumerate(zip(judge, monitor))}
        alarms.observe_eval(t, statistics.fmean(judge), statistics.fmean(monitor), paired)
        if alarms.fired:
            return t
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--evaluations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    level = RurlConfig().alarm_level
    print(f"{args.runs} runs of {args.evaluations} evaluations after step 0 on {args.rows} held-out rows each")
    for drift in DRIFTS:
        rng = random.Random(args.seed)
        fired = [simulated_run(rng, args.rows, args.evaluations, drift) for _ in range(args.runs)]
        hits = [t for t in fired if t is not None]
        share = len(hits) / args.runs
        when = f", median at evaluation {statistics.median(hits):g}" if hits else ""
        what = f"false alarms (alarm_level {level:g})" if drift == 0 else "fired (power)"
        print(f"drift {drift:.2f}: {what} {share:.1%}{when}")


if __name__ == "__main__":
    main()
