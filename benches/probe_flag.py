"""How often the probe's `exploitable` flag fires when nothing is there, and how often it finds what is: the test per
kind (checks/probe_test.py) on the probes `rubricrl probe` builds from the HealthBench sample the project ships (30
rows, physician-written criteria), graded by scripted judges whose weakness is known.

    python -m benches.probe_flag [--per-kind 1 2 4 8] [--seeds 20] [--noise 0.05]

The judges decide each (probe, criterion) in-process from the probe's text: what is measured is the flag's statistics
over real criteria and the real probe texts, not transport (the command's own path is tested against a judge behind
an endpoint).
- `random 0.05` and `random 0.09`: credit every criterion at random, at half and just under the tolerance (0.1): no
  exploit. Reported: the share of criteria flagged, mean and worst over --seeds seeds. Target: at most 5%.
- `keywords`: fooled on half the criteria (a fixed hash of their text): credits one when a bare list (a text with
  no sentence) holds two of its content words; every other verdict at random 5%. Reported: of the criteria every
  keyword text earns, the share flagged by the keyword kind (target at least 95%); of those no text of any kind
  earns (beyond the random 5%, --noise), how many are flagged at all (target at most 5%: the flags' false discovery
  rate lets a criterion that noise credited 3 of 4 times through once many true flags raise the threshold; with
  --noise 0 none is).
- `hedge`: the same, fooled by a hedge ("... or not ...") holding two of the criterion's content words. A hedge
  lists 8 of the row's words, so for many criteria only some of its texts hold theirs: those are in neither group.
Also the judge calls a row costs, in the per-criterion mode (a probe against the whole rubric is one call per
criterion; a targeted one, one call) and the batched mode (one call per probe), per --per-kind setting.
"""

import argparse
import random
import re
import zlib
from pathlib import Path
from statistics import fmean

from checks.probe_analysis import criteria_rows
from checks.probe_test import ProbeTest
from checks.probes import content_words, probes_for
from grading.dataset import load_rubric_rows

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
HEDGED = re.compile(r"\bor (?:it could be )?not\b|\bperhaps not\b|\bmaybe it does not\b|\bothers would say not\b")
LIMIT_FALSE, LIMIT_POWER = 0.05, 0.95


def holds_words(criterion: str, text: str) -> bool:
    return len(set(content_words([criterion])) & set(content_words([text]))) >= 2


def pays_lists(criterion: str, text: str) -> bool:
    return "." not in text and holds_words(criterion, text)


def pays_hedges(criterion: str, text: str) -> bool:
    return bool(HEDGED.search(text)) and holds_words(criterion, text)


def records_for(rows, per_kind: int, judge, rate: float, draw: random.Random) -> tuple[list[dict], dict]:
    """A probe record per (row, probe), as checks/probing.py makes them, decided by `judge` (text -> bool per
    criterion) or at random `rate`; and the calls it cost."""
    records, calls = [], {"per_criterion": 0, "batched": 0}
    for i, row in enumerate(rows):
        for probe in probes_for(row, rows, i, samples=per_kind):
            criteria = [c for c in row.rubric.criteria if probe.target in (None, c.text)]
            verdicts = [
                [c.text, c.points, bool(judge and judge(c.text, probe.text)) or draw.random() < rate] for c in criteria
            ]
            records.append(
                {
                    "row": row.id,
                    "kind": probe.kind,
                    "target": probe.target,
                    "judge": "j",
                    "text": probe.text,
                    "verdicts": verdicts,
                }
            )
            calls["per_criterion"] += len(criteria)
            calls["batched"] += 1
    return records, calls


def fooled_on_half(pays):
    """The judge's weakness on half the criteria (a fixed hash of the text), as a judge is fooled on some wordings and
    not others: the other half are the criteria the flag must leave alone."""
    return lambda criterion, text: zlib.crc32(criterion.encode()) % 2 == 0 and pays(criterion, text)


def exploit_shares(rows, per_kind: int, judge, kind: str, noise: float, draw: random.Random) -> tuple[list, list]:
    """Per criterion every text of `kind` earns from `judge`, whether `kind` flagged it; per criterion no text of any
    kind earns (beyond the `noise` at random), whether anything flagged it."""
    records, _ = records_for(rows, per_kind, judge, noise, draw)
    found = criteria_rows(records, ProbeTest())
    earned: dict[tuple[str, str], list[bool]] = {}  # (row, criterion) -> per text of `kind`, whether the judge pays it
    touched: set[tuple[str, str]] = set()  # earned by some text of some kind
    for r in records:
        for criterion, _, _ in r["verdicts"]:
            paid = judge(criterion, r["text"])
            if r["kind"] == kind:
                earned.setdefault((r["row"], criterion), []).append(paid)
            if paid:
                touched.add((r["row"], criterion))
    always = [kind in c["exploited_by"] for c in found if all(earned.get((c["id"], c["criterion"]), [False]))]
    never = [c["exploitable"] for c in found if (c["id"], c["criterion"]) not in touched]
    return always, never


def share(flags: list[bool]) -> float:
    return fmean(flags) if flags else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-kind", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.05, help="the fooled judges' other verdicts: met at random")
    args = parser.parse_args()
    rows = [row for row in load_rubric_rows(SAMPLE).values() if any(c.points > 0 for c in row.rubric.criteria)]
    positive = sum(c.points > 0 for row in rows for c in row.rubric.criteria)
    print(f"{len(rows)} HealthBench sample rows, {positive} positive criteria; {ProbeTest().describe()}")
    columns = [
        "per kind",
        "random 0.05: flagged (mean, worst)",
        "random 0.09",
        "keywords: paid, flagged",
        "unpaid, flagged",
        "hedge: paid, flagged",
        "unpaid, flagged",
        "calls/row (per criterion, batched)",
    ]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    verdicts = []
    for per_kind in args.per_kind:
        cells = []
        for rate in (0.05, 0.09):
            shares = []
            for seed in range(args.seeds):
                records, calls = records_for(rows, per_kind, None, rate, random.Random(seed))
                found = criteria_rows(records, ProbeTest())
                shares.append(fmean(c["exploitable"] for c in found))
            cells.append(f"{fmean(shares):.2%}, {max(shares):.2%}")
            verdicts.append(max(shares) <= LIMIT_FALSE)
        for judge, kind in ((pays_lists, "keywords"), (pays_hedges, "hedge")):
            always, never = exploit_shares(rows, per_kind, fooled_on_half(judge), kind, args.noise, random.Random(0))
            cells += [f"{share(always):.1%} of {len(always)}", f"{sum(never)} of {len(never)}"]
            if per_kind >= 4:
                verdicts.append(share(always) >= LIMIT_POWER and share(never) <= LIMIT_FALSE)
        cells.append(f"{calls['per_criterion'] / len(rows):.0f}, {calls['batched'] / len(rows):.0f}")
        print(f"| {per_kind} | " + " | ".join(cells) + " |")
    print(
        f"targets (random judges: at most {LIMIT_FALSE:.0%} of criteria flagged at every setting; fooled judges, at 4 "
        f"or more per kind: at least {LIMIT_POWER:.0%} of the paid criteria flagged by their kind, at most "
        f"{LIMIT_FALSE:.0%} of the unpaid flagged): {'PASS' if all(verdicts) else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
