"""How often the audit's flags fire when nothing is there, and how often they find what is: `audit_query` and the
dataset's Benjamini-Hochberg step (as `rubricrl audit` runs them) on simulated queries, per number of answers.

    python -m benches.audit_power [--queries 400] [--answers 4 8 16 32] [--seed 1]

Null: per query four positive criteria, each an independent coin with a pass rate drawn from
0.2-0.8, and one penalty no answer triggers; no criterion carries any effect, so every flag is false (the penalty's
only honest outcome is never_triggered). Printed per size: each flag's false rate over the criteria it applies to,
against the false discovery rate it is held to (0.05), and the share of tests that were insufficient.
Planted (the same queries, one criterion each changed): saturated, met by 95% of answers; suspect_sign, met by the
answers the rest of the rubric scores lowest (met with probability 1 - their rest score); duplicate, a copy of an
earlier criterion's verdicts. Printed: the share found (power) and the share insufficient.
tests/test_audit.py holds the null rate at 4 and 8 answers on fixed seeds.
"""

import argparse
import random

from checks.audit import FLAGS, AuditSettings, Criterion, QueryAnswers, audit_query, decide, reachable, thresholds

POSITIVE = 4
PLANTS = ("saturated", "suspect_sign", "duplicate")


def simulated_query(rng: random.Random, answers: int, plant: str | None = None) -> QueryAnswers:
    """Four independent positive criteria and an untriggered penalty; `plant` changes the last positive one."""
    rates = [rng.uniform(0.2, 0.8) for _ in range(POSITIVE)]
    points = [rng.choice((2, 3, 5, 7, 10)) for _ in range(POSITIVE)]
    query = QueryAnswers()
    for c in range(POSITIVE):
        query.criteria[f"c{c}"] = Criterion(f"criterion {c}", points[c])
    query.criteria["penalty"] = Criterion("a fault no answer commits", -5)
    for a in range(answers):
        met = [rng.random() < rate for rate in rates]
        if plant == "saturated":
            met[-1] = rng.random() < 0.95
        elif plant == "suspect_sign":
            rest = sum(p for p, m in zip(points[:-1], met[:-1]) if m) / sum(points[:-1])
            met[-1] = rng.random() < 1 - rest
        elif plant == "duplicate":
            met[-1] = met[0]
        query.answers[f"a{a}"] = {f"c{c}": [m] for c, m in enumerate(met)} | {"penalty": [False]}
    return query


def audit_simulated(queries: list[QueryAnswers], settings: AuditSettings) -> list[dict]:
    """Every query's rows, decided at the dataset's Benjamini-Hochberg thresholds, as `rubricrl audit` does."""
    rows = [row for i, q in enumerate(queries) for row in audit_query(f"q{i}", q, settings)[1]]
    p_values = {
        flag: [t["p"] for r in rows if (t := r["tests"].get(flag)) and reachable(t, settings)] for flag in FLAGS
    }
    held_to = thresholds(p_values, settings)
    return [decide(row, held_to, settings) for row in rows]


def null_rates(answers: int, queries: int, seed: int, settings: AuditSettings | None = None) -> dict[str, dict]:
    """Per flag: (false flags, criteria it applies to, insufficient) on the null; and the penalty's outcomes."""
    settings = settings or AuditSettings()
    rng = random.Random(seed)
    rows = audit_simulated([simulated_query(rng, answers) for _ in range(queries)], settings)
    rates = {}
    for flag in FLAGS:
        applies = [r for r in rows if flag in r["tests"]]
        rates[flag] = {
            "false": sum(flag in r["flags"] for r in rows),
            "criteria": len(applies),
            "insufficient": sum(flag in r["insufficient"] for r in rows),
        }
    penalties = [r for r in rows if r["points"] < 0]
    rates["penalty"] = {
        "dead": sum("dead" in r["flags"] for r in penalties),
        "never_triggered": sum(r["never_triggered"] for r in penalties),
        "criteria": len(penalties),
    }
    return rates


def power(plant: str, answers: int, queries: int, seed: int, settings: AuditSettings) -> tuple[float, float]:
    """(share of planted criteria flagged as planted, share whose test was insufficient)."""
    rng = random.Random(seed)
    rows = audit_simulated([simulated_query(rng, answers, plant) for _ in range(queries)], settings)
    planted = [r for r in rows if r["criterion"] == f"criterion {POSITIVE - 1}"]
    return (
        sum(plant in r["flags"] for r in planted) / len(planted),
        sum(plant in r["insufficient"] for r in planted) / len(planted),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--answers", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--saturation", type=float, default=AuditSettings().saturation)
    args = parser.parse_args()
    settings = AuditSettings(saturation=args.saturation)
    level = settings.fdr
    print(
        f"null: {args.queries} queries x ({POSITIVE} coins + 1 untriggered penalty), seed {args.seed}; level {level}; "
        f"saturation {settings.saturation:g}"
    )
    print("answers | " + " | ".join(f"{flag} false (insufficient)" for flag in FLAGS) + " | penalty dead / never")
    for n in args.answers:
        rates = null_rates(n, args.queries, args.seed, settings)
        cells = []
        for flag in FLAGS:
            r = rates[flag]
            share = r["false"] / r["criteria"] if r["criteria"] else 0.0
            cells.append(f"{share:.2%} = {share / level:.2f} x level ({r['insufficient'] / max(1, r['criteria']):.0%})")
        pen = rates["penalty"]
        print(f"{n:7d} | " + " | ".join(cells) + f" | {pen['dead']}/{pen['criteria']} / {pen['never_triggered']}")
    print("power on planted effects (share found, share insufficient):")
    for n in args.answers:
        found = [power(plant, n, args.queries, args.seed + 1, settings) for plant in PLANTS]
        print(f"{n:7d} | " + " | ".join(f"{p}: {f:.0%} ({i:.0%})" for p, (f, i) in zip(PLANTS, found)))


if __name__ == "__main__":
    main()
