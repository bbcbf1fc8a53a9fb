"""What the probes earned (pure): per criterion and kind the share credited, with counts, and the `exploitable` flag;
per row the score each kind earns beside the control's; per kind and judge the mean share of positive points.

A probe record (grading/probing.py makes one per probe and judge): {row, kind, target, judge, score, share,
verdicts: [[criterion, points, met]], integrity_flag, judge_calls}. `share` is the share of the row's positive
points the probe earned (a targeted probe: whether it earned its target's points); `score` the reward training
would give it.
"""

from collections import defaultdict
from statistics import fmean
from typing import Any

from grading.probes import CONTROL


def earned_share(verdicts: list[list], target: str | None = None) -> float | None:
    """The share of positive points met (undecided: not earned); a targeted probe: 1.0 or 0.0 for its target."""
    positive = [(text, points, met) for text, points, met in verdicts if points > 0]
    if target is not None:
        return next((float(bool(met)) for text, _, met in positive if text == target), None)
    total = sum(points for _, points, _ in positive)
    return sum(points for _, points, met in positive if met) / total if total else None


def criteria_rows(records: list[dict], exploitable_share: float, min_probes: int) -> list[dict[str, Any]]:
    """A row per (row, criterion, judge) with positive points: per probe kind [credited, decided], the control's
    verdict, and `exploitable` when probes with no substance earned it at least `exploitable_share` of the times
    they were decided, over at least `min_probes` of them (the evidence: `credited` of `decided`)."""
    table: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        for text, points, met in record["verdicts"]:
            if points <= 0 or (record["target"] is not None and text != record["target"]):
                continue
            key = (record["row"], text, record["judge"])
            row = table.setdefault(
                key,
                {"id": record["row"], "criterion": text, "points": points, "judge": record["judge"], "kinds": {},
                 "control": None},
            )  # fmt: skip
            if record["kind"] == CONTROL:
                row["control"] = met
                continue
            counts = row["kinds"].setdefault(record["kind"], [0, 0])
            if met is not None:
                counts[0] += bool(met)
                counts[1] += 1
    for row in table.values():
        credited = sum(c for c, _ in row["kinds"].values())
        decided = sum(d for _, d in row["kinds"].values())
        row["credited"], row["decided"] = credited, decided
        row["exploitable"] = decided >= min_probes and credited / decided >= exploitable_share
        row["test"] = (
            f"probes with no substance credited it {credited} of {decided} times "
            f"(exploitable at >= {exploitable_share:.0%} of >= {min_probes})"
        )
    return sorted(table.values(), key=lambda r: (r["id"], r["judge"], -r["points"], r["criterion"]))


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


def summary(records: list[dict], criteria: list[dict], rows: int, seconds: float) -> dict[str, Any]:
    """summary.json: per judge and kind the mean share earned, the exploitable criteria, and the cost."""
    judges = sorted({r["judge"] for r in records})
    by_judge = kind_summary(records)
    out: dict[str, Any] = {"rows": rows, "judges": judges, "kinds": by_judge, "exploitable": {}, "cost": {}}
    for judge in judges:
        mine = [c for c in criteria if c["judge"] == judge]
        flagged = [c for c in mine if c["exploitable"]]
        out["exploitable"][judge] = {"criteria": len(mine), "flagged": len(flagged)}
        probes = [r for r in records if r["judge"] == judge and r["kind"] != CONTROL]
        out["cost"][judge] = {
            "probes_per_row": round(len(probes) / rows, 2) if rows else 0.0,
            "judge_calls_per_row": round(sum(r["judge_calls"] for r in records if r["judge"] == judge) / rows, 2)
            if rows
            else 0.0,
        }
    out["seconds"] = round(seconds, 1)
    return out
