"""An audit's summary as a person reads it: audit.md, its charts, and the tables `rubricrl report` shows."""

from pathlib import Path
from typing import Any

from checks.audit import FLAGS, AuditSettings
from rubricrl import charts
from rubricrl.markdown import md_table, pct

MEANING = {
    "saturated": "met by nearly every answer of its query",
    "dead": "a positive criterion met by nearly no answer of its query",
    "duplicate": "the same verdict on every answer as an earlier criterion of its query",
    "unreliable": "undecided, or its votes disputed, too often",
    "suspect_sign": "its verdicts run against the rest of its rubric",
}
MAX_TAGS = 20


def flag_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per flag: the criteria flagged, their share, how many were tested and how many had too little evidence, the
    Benjamini-Hochberg threshold the p-values were held to, what it means (the test: test_table)."""
    rows = []
    for flag in FLAGS:
        test = summary["tests"][flag]
        threshold = f"p <= {test['threshold']:.3g}" if test["flagged"] else "none within"
        rows.append(
            [
                flag,
                str(summary["flag_counts"][flag]),
                pct(summary["flag_shares"][flag]),
                str(test["tested"]),
                str(test["insufficient"]),
                f"{threshold} (FDR {test['fdr']:g})",
                MEANING[flag],
            ]
        )
    return ["flag", "criteria", "share", "tested", "insufficient", "BH threshold", "meaning"], rows


def test_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    return ["flag", "test"], [[flag, summary["tests"][flag]["test"]] for flag in FLAGS]


def discriminating_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    counts = {int(k): v for k, v in summary["discriminating_per_query"].items()}
    total = sum(counts.values())
    return ["criteria that separate answers", "queries", "share"], [
        [str(k), str(v), pct(v / total)] for k, v in sorted(counts.items())
    ]


def tag_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    tags = sorted(summary["by_tag"].items(), key=lambda item: -item[1]["criteria"])[:MAX_TAGS]
    return ["tag", "criteria", *FLAGS], [[tag, str(t["criteria"]), *(pct(t[f]) for f in FLAGS)] for tag, t in tags]


def markdown(summary: dict[str, Any], config: AuditSettings, files: list[Path], rubrics, pruned) -> str:
    lines = [
        "# Rubric audit",
        "",
        f"- graded answers: {', '.join(str(f) for f in files)}",
        f"- rubric dataset: {rubrics or 'not given (only criteria with verdicts are counted)'}",
        f"- {summary['queries']} queries, {summary['criteria']} criteria, {summary['graded_answers']} answers, "
        f"{summary['verdicts']} verdicts",
        f"- tested: the {summary['criteria_flagged_on']} criteria of queries with at least {config.min_answers} "
        f"graded answers; {summary['queries_with_too_few_answers']} queries had fewer and are not tested; "
        f"{summary['ungraded_answers']} answers had no graded verdict (vetoed or empty) and do not count",
        f"- a flag is a test that passed: each flag's p-values are held to a false discovery rate of {config.fdr:g} "
        "over the dataset's criteria (Benjamini-Hochberg); a criterion whose counts could never reach that level is "
        "`insufficient` for that flag, never flagged (criteria.jsonl: `tests`, `insufficient`)",
        f"- {summary['never_triggered']} penalties no answer triggered: guard-rails at work, kept (`never_triggered`; "
        "`--prune never_triggered` drops them)",
    ]
    if pruned is not None:
        lines.append(f"- pruned: {pruned['criteria_dropped']} criteria dropped over {pruned['queries']} queries")
    for title, (header, rows) in audit_tables(summary).items():
        lines += ["", f"## {title}", "", *md_table(header, rows)]
    probe = summary.get("probe")
    if probe:
        lines += [
            "",
            "## Probed (rubricrl probe)",
            "",
            f"- {probe['exploitable']} criteria exploitable by answers "
            f"with no substance ({probe['folder']}); {len(probe['flagged_and_exploitable'])} of them flagged "
            "here too (below): criteria.jsonl's `probe` has the evidence for every criterion",
        ]
        if probe["flagged_and_exploitable"]:
            header = ["query", "criterion", "audit flags", "probe kinds that flagged it"]
            lines += ["", *md_table(header, probe["flagged_and_exploitable"])]
    return "\n".join(lines) + "\n"


def audit_tables(summary: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """{title: (header, rows)} of the tables with rows, for audit.md and `rubricrl report`."""
    tables = {
        "Rubric audit: flags": flag_table(summary),
        "The test behind each flag": test_table(summary),
        "Criteria that separate answers, per query": discriminating_table(summary),
        "Flags by tag": tag_table(summary),
    }
    return {title: table for title, table in tables.items() if table[1]}


FIGURES = {"flags.png": "flags: share of criteria", "discriminating.png": "criteria that separate answers, per query"}


def figures(summary: dict[str, Any]) -> dict[str, bytes]:
    """{file name: PNG} (FIGURES names them): the flag shares, and how many criteria separate answers per query."""
    if not charts.available() or not summary["criteria_flagged_on"]:
        return {}
    drawn, axis = charts.figure(6.4, 2.8)
    shares = [summary["flag_shares"][f] or 0 for f in FLAGS]
    axis.barh(list(FLAGS)[::-1], [100 * s for s in shares][::-1])
    axis.set_xlabel("% of criteria")
    out = {"flags.png": charts.png(drawn)}
    counts = {int(k): v for k, v in summary["discriminating_per_query"].items()}
    drawn, axis = charts.figure(6.4, 2.8)
    axis.bar(list(counts), list(counts.values()))
    axis.set_xlabel("criteria that separate answers")
    axis.set_ylabel("queries")
    out["discriminating.png"] = charts.png(drawn)
    return out


def draw(summary: dict[str, Any], out: Path) -> list[Path]:
    written = []
    for name, png in figures(summary).items():
        (out / name).write_bytes(png)
        written.append(out / name)
    return written
