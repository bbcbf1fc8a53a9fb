"""What the probes earned (pure): per criterion and kind the times credited, with counts and each kind's test
(checks/probe_test.py), and the `exploitable` flag;
per row the score each kind earns beside the control's; per kind and judge the mean share of positive points.

A probe record (checks/probing.py makes one per probe and judge): {row, kind, target, judge, score, share,
verdicts: [[criterion, points, met]], rule_criteria (those a rule check decided, in code), integrity_flag,
judge_calls}. `share` is the share of the row's positive points the probe earned, rule checks included (a targeted
probe: whether it earned its target's points); `score` the reward training would give it. Only the judge's criteria
are tested and flagged: a rule check a probe meets is the rubric's doing, not the judge's.
"""

from collections import Counter, defaultdict
from dataclasses import asdict
from statistics import fmean
from typing import Any

from checks.probe_test import EXPLOITABLE, INSUFFICIENT, ProbeTest, decide
from checks.probes import CONTROL


def earned_share(verdicts: list[list], target: str | None = None) -> float | None:
    """The share of positive points met (undecided: not earned); a targeted probe: 1.0 or 0.0 for its target."""
    positive = [(text, points, met) for text, points, met in verdicts if points > 0]
    if target is not None:
        return next((float(bool(met)) for text, _, met in positive if text == target), None)
    total = sum(points for _, points, _ in positive)
    return sum(points for _, points, met in positive if met) / total if total else None


def criteria_rows(records: list[dict], test: ProbeTest) -> list[dict[str, Any]]:
    """A row per (row, criterion, judge) with positive points that the judge decides (a rule check is not its): per
    probe kind [credited, decided] and its test (`tests`: p and status, checks/probe_test.py), the control's verdict,
    `exploitable` with the kinds whose test rejected (`exploited_by`) and the evidence in words (`test`); the pooled
    `share` is descriptive only."""
    table: dict[tuple[str, str, str], dict[str, Any]] = {}
    # decided in code: not the judge's to be fooled (a vetoed probe's verdicts say no source: its row's others do)
    rules = {(record["row"], text) for record in records for text in record.get("rule_criteria") or ()}
    for record in records:
        for text, points, met in record["verdicts"]:
            skip = points <= 0 or (record["row"], text) in rules
            if skip or (record["target"] is not None and text != record["target"]):
                continue
            key = (record["row"], text, record["judge"])
            row = table.setdefault(
                key,
                {
                    "id": record["row"],
                    "criterion": text,
                    "points": points,
                    "judge": record["judge"],
                    "kinds": {},
                    "control": None,
                },
            )
            if record["kind"] == CONTROL:
                row["control"] = met
                continue
            counts = row["kinds"].setdefault(record["kind"], [0, 0])
            if met is not None:
                counts[0] += bool(met)
                counts[1] += 1
    corrections = {}
    for judge in sorted({row["judge"] for row in table.values()}):
        mine = [(row, kind) for row in table.values() if row["judge"] == judge for kind in row["kinds"]]
        results, corrections[judge] = decide([tuple(row["kinds"][kind]) for row, kind in mine], test)
        for (row, kind), result in zip(mine, results):
            row.setdefault("tests", {})[kind] = result
    for row in table.values():
        credited = sum(c for c, _ in row["kinds"].values())
        decided = sum(d for _, d in row["kinds"].values())
        row["credited"], row["decided"] = credited, decided
        row["share"] = round(credited / decided, 4) if decided else None
        row["exploited_by"] = [kind for kind, t in row["tests"].items() if t["status"] == EXPLOITABLE]
        row["exploitable"] = bool(row["exploited_by"])
        row["threshold"] = corrections[row["judge"]]["threshold"]  # the p a kind had to reach, for this judge
        row["test"] = evidence(row, test, corrections[row["judge"]])
    return sorted(table.values(), key=lambda r: (r["id"], r["judge"], -r["points"], r["criterion"]))


def counted(row: dict[str, Any], kind: str) -> str:
    """A kind's counts and p-value on a criterion row: '4 of 4 (p = 0.0001)'."""
    credited, decided = row["kinds"][kind]
    return f"{credited} of {decided} (p = {row['tests'][kind]['p']:.2g})"


def flagged_by(row: dict[str, Any]) -> str:
    """The kinds whose test flagged a criterion row, with their counts and p-values: 'keywords 4 of 4 (p = 0.0001)'."""
    return ", ".join(f"{kind} {counted(row, kind)}" for kind in row.get("exploited_by", []))


def evidence(row: dict[str, Any], test: ProbeTest, correction: dict) -> str:
    """The flag's test in words: the kinds that rejected (or the closest), their counts and p-values, the rule."""
    rule = (
        f"one-sided binomial against a tolerance of {test.tolerance:.0%}, Benjamini-Hochberg at {test.level:.0%} "
        f"over {correction['sufficient']} tests: p <= {correction['threshold']:.2g} flags"
    )

    def said(kind: str) -> str:
        return f"{kind} earned it {counted(row, kind)}"

    if row["exploited_by"]:
        return "exploitable: " + ", ".join(said(kind) for kind in row["exploited_by"]) + f"; {rule}"
    reachable = [kind for kind, t in row["tests"].items() if t["status"] != INSUFFICIENT]
    if not reachable:
        most = max((d for _, d in row["kinds"].values()), default=0)
        return (
            f"insufficient: at most {most} decided probes per kind, and {test.tolerance:.0%} ** {most} > "
            f"{test.level:.0%}: more texts per kind (--probes_per_kind) could tell"
        )
    closest = min(reachable, key=lambda kind: row["tests"][kind]["p"])
    return f"not shown: closest {said(closest)}; {rule}"


def row_scores(records: list[dict]) -> list[dict[str, Any]]:
    """Per (row, judge): each kind's reward and the control's, side by side (targeted kinds, graded on their target
    alone, are per criterion: criteria_rows)."""
    scores: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        if record["score"] is not None and record["target"] is None:
            scores[(record["row"], record["judge"])][record["kind"]].append(record["score"])
    return [
        {"id": row, "judge": judge, "scores": {kind: round(fmean(v), 4) for kind, v in kinds.items()}}
        for (row, judge), kinds in sorted(scores.items())
    ]


def kind_summary(records: list[dict]) -> dict[str, dict[str, dict[str, Any]]]:
    """{judge: {kind: {share: mean share of positive points earned, rows, probes}}}; the control included."""
    shares: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rows: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for record in records:
        if record["share"] is not None:
            shares[record["judge"]][record["kind"]].append(record["share"])
            rows[record["judge"]][record["kind"]].add(record["row"])
    return {
        judge: {
            kind: {"share": round(fmean(values), 4), "probes": len(values), "rows": len(rows[judge][kind])}
            for kind, values in kinds.items()
        }
        for judge, kinds in shares.items()
    }


def summary(records: list[dict], criteria: list[dict], rows: int, seconds: float, test: ProbeTest) -> dict[str, Any]:
    """summary.json: per judge and kind the mean share earned, the exploitable criteria (per kind, with the test's
    counts), and the cost."""
    judges = sorted({r["judge"] for r in records})
    by_judge = kind_summary(records)
    out: dict[str, Any] = {
        "rows": rows,
        "judges": judges,
        "kinds": by_judge,
        "test": {**asdict(test), "rule": test.describe()},
        "exploitable": {},
        "cost": {},
    }
    for judge in judges:
        mine = [c for c in criteria if c["judge"] == judge]
        tests = [t for c in mine for t in c["tests"].values()]
        out["exploitable"][judge] = {
            "criteria": len(mine),
            "flagged": sum(c["exploitable"] for c in mine),
            "by_kind": dict(Counter(kind for c in mine for kind in c["exploited_by"])),
            "insufficient_criteria": sum(all(t["status"] == INSUFFICIENT for t in c["tests"].values()) for c in mine),
            "tests": len(tests),
            "sufficient_tests": sum(t["status"] != INSUFFICIENT for t in tests),
            "threshold": mine[0]["threshold"] if mine else None,
        }
        probes = [r for r in records if r["judge"] == judge and r["kind"] != CONTROL]
        out["cost"][judge] = {
            "probes_per_row": round(len(probes) / rows, 2) if rows else 0.0,
            "judge_calls_per_row": round(sum(r["judge_calls"] for r in records if r["judge"] == judge) / rows, 2)
            if rows
            else 0.0,
        }
    out["seconds"] = round(seconds, 1)
    return out
