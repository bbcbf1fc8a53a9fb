"""A probe run's summary as a person reads it: probe.md, its chart, and the tables `rubricrl report` shows."""

from pathlib import Path
from typing import Any

from checks.probe_analysis import flagged_by
from checks.probes import ATTACKER, CONTROL, KINDS
from rubricrl import charts
from rubricrl.markdown import md_table, pct

MEANING = {
    "parrot": "the positive criteria restated as claims, no answer",
    "keywords": "the criteria's content words as a bare list",
    "hedge": "every option asserted and denied",
    "polite_nonanswer": "a fluent, cautious reply that says nothing",
    "other_question": "a good answer to another row's question",
    "half": "the first part of a compound criterion: how often its target was earned",
    ATTACKER: "the attacker role's answer for one criterion: how often its target was earned",
    CONTROL: "the row's reference answer: it should earn credit",
}
MAX_FLAGGED = 30


def ordered_kinds(summary: dict[str, Any]) -> list[str]:
    present = {kind for kinds in summary["kinds"].values() for kind in kinds}
    return [k for k in (*KINDS, ATTACKER, CONTROL) if k in present]


def kind_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per kind, per judge: the mean share of positive points earned (probes)."""
    judges = summary["judges"]
    rows = []
    for kind in ordered_kinds(summary):
        cells = []
        for judge in judges:
            found = summary["kinds"].get(judge, {}).get(kind)
            cells.append(f"{pct(found['share'])} ({found['probes']})" if found else "n/a")
        rows.append([kind, *cells, MEANING[kind]])
    return ["probe", *judges, "what it is"], rows


def exploitable_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    rows = [
        [
            judge,
            str(e["flagged"]),
            str(e["criteria"]),
            pct(e["flagged"] / e["criteria"] if e["criteria"] else None),
            ", ".join(f"{kind} {n}" for kind, n in e.get("by_kind", {}).items()) or "none",
            str(e.get("insufficient_criteria", "n/a")),
            f"{e['sufficient_tests']} of {e['tests']}, p <= {e['threshold']:.2g}" if e.get("tests") else "n/a",
        ]
        for judge, e in summary["exploitable"].items()
    ]
    header = [
        "judge",
        "exploitable criteria",
        "positive criteria",
        "share",
        "flagged by",
        "insufficient",
        "tests (able to flag), flagging at",
    ]
    return header, rows


def flagged_table(criteria: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The exploitable criteria, strongest evidence first, with the kinds that showed it and their counts."""
    flagged = sorted(
        (c for c in criteria if c["exploitable"]),
        key=lambda c: (min((c["tests"][k]["p"] for k in c.get("exploited_by", [])), default=1.0), c["id"]),
    )
    rows = [
        [
            c["id"],
            c["criterion"][:90],
            str(c["points"]),
            c["judge"],
            flagged_by(c),
            f"{c['credited']} of {c['decided']}",
            {True: "met", False: "not met", None: "n/a"}[c["control"]],
        ]
        for c in flagged[:MAX_FLAGGED]
    ]
    return ["row", "criterion", "points", "judge", "flagged by", "all kinds pooled", "control"], rows


def probe_tables(summary: dict[str, Any], criteria: list[dict[str, Any]] | None = None) -> dict[str, tuple]:
    tables = {
        "Probes: share of positive points earned": kind_table(summary),
        "Exploitable criteria, per judge": exploitable_table(summary),
    }
    if criteria is not None:
        tables["Exploitable criteria (strongest evidence first)"] = flagged_table(criteria)
    return {title: table for title, table in tables.items() if table[1]}


def markdown(summary: dict[str, Any], criteria: list[dict[str, Any]], rubrics: Path, settings) -> str:
    cost = "; ".join(
        f"{judge}: {c['probes_per_row']} probes and {c['judge_calls_per_row']} judge calls per row"
        for judge, c in summary["cost"].items()
    )
    lines = [
        "# Reward probe",
        "",
        f"- rubric dataset: {rubrics}, {summary['rows']} rows probed",
        f"- judges: {', '.join(summary['judges'])}, each graded as training grades (its mode, verdict format, rules, "
        "integrity check and undecided rules)",
        f"- a criterion is `exploitable` when one probe kind earns it more often than chance allows: "
        f"{summary['test']['rule']}, on up to {settings.probes_per_kind} texts per kind and row. `insufficient`: too few "
        "decided probes for any count to flag, never a flag (criteria.jsonl: `kinds`, `tests`, `exploited_by`, "
        "`test`). A criterion that asks for tone or caution may be met by the polite non-answer fairly: read the "
        "`flagged by` column",
        f"- cost: {cost}; {summary['seconds']:.0f} s",
    ]
    if summary.get("attacker_failed"):
        lines.append(f"- the attacker gave no answer {summary['attacker_failed']} time(s) (named on stderr)")
    for title, (header, rows) in probe_tables(summary, criteria).items():
        lines += ["", f"## {title}", "", *md_table(header, rows)]
    return "\n".join(lines) + "\n"


def draw(summary: dict[str, Any], out: Path) -> list[Path]:
    """probe.png: per kind, each judge's mean share of positive points earned (the control beside the probes)."""
    if not charts.available():
        return []
    kinds, judges = ordered_kinds(summary), summary["judges"]
    drawn, axis = charts.figure(7.2, 3.2)
    width = 0.8 / max(1, len(judges))
    for j, judge in enumerate(judges):
        values = [100 * (summary["kinds"].get(judge, {}).get(kind) or {}).get("share", 0.0) for kind in kinds]
        axis.bar([i + j * width for i in range(len(kinds))], values, width, label=judge)
    axis.set_xticks([i + width * (len(judges) - 1) / 2 for i in range(len(kinds))], kinds, rotation=30, ha="right")
    axis.set_ylabel("% of positive points earned")
    if len(judges) > 1:
        axis.legend(fontsize=7)
    (out / "probe.png").write_bytes(charts.png(drawn))
    return [out / "probe.png"]
