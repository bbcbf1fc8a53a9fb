"""The criterion ledger (grading/ledger.py, rurl/watch/ledger.py) on verdicts whose roles are planted, and its cost at
RubricHub's size.

    python -m benches.ledger [--runs 200] [--reask 0.1] [--size 110000] [--out JSON]

Planted roles, one criterion each in every query's rubric, over simulated runs (16 queries a step, 8 answers a
group, 40 steps; each answer has a quality drawn uniformly):
- always / never: met by every answer, by none;
- coin: met half the time whatever the answer, and asked again it answers afresh;
- near-flat: met except for 3% of verdicts the judge flips at random (asked again, it flips afresh);
- follows: met when the answer's quality is above the middle, the judge erring 5% of the time (asked again, it errs
  afresh);
- learned: follows the answer with a bar that falls over the run (its pass rate rises from about 20% to 80%).
Printed per role: the share of its criteria the ledger says carried signal (and of those, the ones whose re-asks
could not be tested: too few with both first verdicts seen), carried nothing, or were judged at random (re-asks at
`--reask`, and without re-asks), its mean share of its rubric's signal, and how often the first/last-fifth test says
it moved. The false-signal rate: of the criteria whose verdicts do not follow the answer (coin, near-flat), the share
reported as carrying signal; without re-asks the ledger cannot tell them (the limit it states); with them, a tested
one should be near the test's level. The moved test's rate on roles that do not move is its false alarms.

Cost: a ledger filled with `--size` queries of 30 criteria (RubricHub: 110k queries, about 30 criteria each), then
steps of 64 queries x 8 answers: the seconds a step adds (counting a batch, and building its answers from graded
verdicts), a checkpoint's table and parquet, and the memory it holds. Limit: a step's share of a 10-second step (the
tiny CPU preset's; a GPU step at RubricHub's shape is longer) at most 1%.
"""

import argparse
import json
import random
import resource
import statistics
import time
from pathlib import Path

from grading.judge import Verdict
from grading.ledger import DECIDED, Ledger, LedgerAnswer, LedgerCriterion, write_table
from grading.rubric import Criterion, Rubric
from rurl.reward.rubric_reward import ledger_answer
from rurl.watch.ledger import assess

ROLES = ("always", "never", "coin", "near-flat", "follows", "learned")
NO_ANSWER_SIGNAL = ("coin", "near-flat")
STEP_SECONDS = 10.0
"""The tiny CPU preset's step (benches/rurl_vs_trl.py): a step the ledger's cost is measured against."""
LIMIT = 0.01


def verdict(role: str, quality: float, progress: float, rng: random.Random) -> bool:
    if role == "always":
        return True
    if role == "never":
        return False
    if role == "coin":
        return rng.random() < 0.5
    if role == "near-flat":
        return rng.random() >= 0.03
    bar = 0.5 if role == "follows" else 0.8 - 0.6 * progress
    return (quality > bar) != (rng.random() < 0.05)


def planted_run(seed: int, reask: float, queries: int = 16, group: int = 8, steps: int = 40) -> dict[str, list]:
    rng = random.Random(seed)
    rubric = tuple(LedgerCriterion(f"The {role} criterion.", 5) for role in ROLES)
    ledger = Ledger(planned_steps=steps)
    for step in range(steps):
        answers = []
        for q in range(queries):
            for _ in range(group):
                quality, progress = rng.random(), step / (steps - 1)
                met = [verdict(role, quality, progress, rng) for role in ROLES]
                again = tuple(
                    (k, met[k], verdict(role, quality, progress, rng))
                    for k, role in enumerate(ROLES)
                    if rng.random() < reask
                )
                answers.append(
                    LedgerAnswer(f"q{q}", rubric, tuple(map(float, met)), DECIDED * len(ROLES), reasks=again)
                )
        ledger.add(answers, step)
    return assess(ledger.arrow()).to_pydict()


def roles_table(runs: int, reask: float) -> dict[str, dict[str, float]]:
    counts = {role: {"signal": 0, "untested": 0, "nothing": 0, "noise": 0, "moved": 0, "tested": 0, "share": []}
              for role in ROLES}  # fmt: skip
    for seed in range(runs):
        table = planted_run(seed, reask)
        for i, text in enumerate(table["criterion"]):
            role = text.removeprefix("The ").removesuffix(" criterion.")
            row = counts[role]
            row[table["carries"][i] or "nothing"] += 1
            row["untested"] += table["carries"][i] == "signal" and reask > 0 and table["judge_consistent"][i] is None
            row["share"].append(table["rubric_signal_share"][i] or 0.0)
            if table["moved_significant"][i] is not None:
                row["tested"] += 1
                row["moved"] += bool(table["moved_significant"][i])
    out = {}
    for role, row in counts.items():
        total = row["signal"] + row["nothing"] + row["noise"]
        out[role] = {
            "criteria": total,
            "signal": row["signal"] / total,
            "untested": row["untested"] / total,
            "nothing": row["nothing"] / total,
            "noise": row["noise"] / total,
            "mean_share": statistics.fmean(row["share"]),
            "moved_tested": row["tested"],
            "moved": row["moved"] / row["tested"] if row["tested"] else None,
        }
    return out


def cost(size: int, criteria: int = 30, queries: int = 64, group: int = 8, timed: int = 20) -> dict[str, float]:
    rng = random.Random(0)
    points = [rng.choice([1, 2, 3, 5, 8, -2, -5]) for _ in range(criteria)]

    def rubric(q: int) -> tuple[LedgerCriterion, ...]:
        return tuple(LedgerCriterion(f"Criterion {k} of query {q}: a sentence a rubric might hold.", points[k])
                     for k in range(criteria))  # fmt: skip

    def batch(first: int) -> list[LedgerAnswer]:
        out = []
        for q in range(first, first + queries):
            whole = rubric(q)
            for _ in range(group):
                credits = tuple(float(rng.random() < 0.5) for _ in range(criteria))
                out.append(LedgerAnswer(f"query-{q}", whole, credits, DECIDED * criteria))
        return out

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ledger = Ledger(planned_steps=size // queries + timed)
    started = time.perf_counter()
    for step, first in enumerate(range(0, size, queries)):
        ledger.add(batch(first), step)
    filled = time.perf_counter() - started
    held = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    seconds = []
    for step in range(timed):  # the queries of a second epoch: every row exists
        answers = batch((step * queries) % size)
        started = time.perf_counter()
        ledger.add(answers, size // queries + step)
        seconds.append(time.perf_counter() - started)
    graded = _graded_batch(rng, criteria, queries * group)
    started = time.perf_counter()
    whole = Rubric(tuple(Criterion(f"Criterion {k}.", points[k]) for k in range(criteria)))
    for g in graded:
        ledger_answer("query", whole, g, True)
    building = time.perf_counter() - started
    started = time.perf_counter()
    table = ledger.arrow()
    write_table(table, Path("/tmp/rubricrl-bench-ledger.parquet"))
    checkpoint = time.perf_counter() - started
    step = statistics.fmean(seconds) + building
    return {
        "queries": size,
        "criteria": len(ledger),
        "fill_seconds": round(filled, 1),
        "count_seconds_per_step": statistics.fmean(seconds),
        "build_seconds_per_step": building,
        "step_share": step / STEP_SECONDS,
        "checkpoint_seconds": checkpoint,
        "parquet_mb": Path("/tmp/rubricrl-bench-ledger.parquet").stat().st_size / 1e6,
        "memory_mb": held,
    }


def _graded_batch(rng: random.Random, criteria: int, answers: int) -> list:
    from grading.grader import Graded

    return [
        Graded(0.5, 0.5, [Verdict(f"Criterion {k}.", 1, (), rng.random() < 0.5, "", "judge") for k in range(criteria)])
        for _ in range(answers)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--reask", type=float, default=0.1)
    parser.add_argument("--size", type=int, default=110_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {}
    for reask in (0.0, args.reask):
        table = roles_table(args.runs, reask)
        results[f"reask {reask:g}"] = table
        print(f"\nplanted roles, {args.runs} runs, re-asks {reask:.0%} of verdicts")
        print(f"{'role':<10} {'signal':>7} {'(untested)':>10} {'nothing':>8} {'noise':>6} {'mean share':>11} "
              f"{'moved (tested)':>15}")  # fmt: skip
        for role, row in table.items():
            moved = "-" if row["moved"] is None else f"{row['moved']:.1%} ({row['moved_tested']})"
            print(f"{role:<10} {row['signal']:>7.1%} {row['untested']:>10.1%} {row['nothing']:>8.1%} "
                  f"{row['noise']:>6.1%} {row['mean_share']:>11.3f} {moved:>15}")  # fmt: skip
        for role in NO_ANSWER_SIGNAL:
            print(f"false signal ({role} reported as carrying signal): {table[role]['signal']:.1%} "
                  f"(of the {role} criteria, {table[role]['untested']:.1%} untested by the re-asks and "
                  f"{table[role]['signal'] - table[role]['untested']:.1%} tested)")  # fmt: skip
        print(f"power (follows, learned reported as carrying signal): "
              f"{statistics.fmean(table[r]['signal'] for r in ('follows', 'learned')):.1%}")  # fmt: skip
    figures = cost(args.size)
    results["cost"] = figures
    print(f"\ncost: {figures['criteria']:,} criteria ({figures['queries']:,} queries x 30), filled in "
          f"{figures['fill_seconds']} s, {figures['memory_mb']:.0f} MB held")  # fmt: skip
    print(f"  a step of 64 queries x 8 answers: {figures['count_seconds_per_step'] * 1e3:.1f} ms counting, "
          f"{figures['build_seconds_per_step'] * 1e3:.1f} ms building its answers: "
          f"{figures['step_share']:.2%} of a {STEP_SECONDS:g}-second step (limit {LIMIT:.0%}): "
          f"{'PASS' if figures['step_share'] <= LIMIT else 'FAIL'}")  # fmt: skip
    print(f"  a checkpoint's table and parquet: {figures['checkpoint_seconds']:.1f} s, {figures['parquet_mb']:.0f} MB")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
