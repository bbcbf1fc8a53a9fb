"""The markdown summary written beside the page (report.md): the same tables, from reports/tables.py, without the
charts and examples, for a pull request, a wiki or a terminal."""

from collections.abc import Sequence

from checks.audit_summary import audit_tables
from checks.probe_summary import probe_tables
from grading.ledger import headline_lines
from reports.folder import Folder, comparison_findings_of
from reports.tables import (
    EVOLVED,
    LEDGER,
    MOVED,
    comparison_table,
    eval_table,
    evolved_table,
    metric_table,
    moved_table,
    report_line,
    retention_table,
    training_table,
)
from rubricrl.markdown import md_cell, md_table


def render_markdown(folders: Sequence[Folder], title: str, subtitle: str, page_name: str) -> str:
    lines = [f"# {title}", "", subtitle, "", f"Charts and examples: {page_name}", ""]
    if len(folders) > 1:
        lines += [
            "## Comparison",
            "",
            *[line for finding in comparison_findings_of(folders) for line in (f"**{md_cell(finding)}**", "")],
            "Each column is one folder's headline report: score ± bootstrap std (n examples).",
            "",
            *md_table(*comparison_table(folders)),
            "",
        ]
    for folder in folders:
        lines += folder_summary(folder)
    return "\n".join(lines).rstrip() + "\n"


def folder_summary(folder: Folder) -> list[str]:
    lines = [f"## {folder.label}: {folder.kind_name} (`{folder.command}`)", "", f"`{folder.path}`", ""]
    lines += [f"- **{key}**: {md_cell(value)}" for key, value in folder.facts.items()]
    lines += [f"- note: {md_cell(note)}" for note in folder.notes]
    lines.append("")
    if folder.ledger:
        lines += [f"### {LEDGER}", "", "```", *headline_lines(folder.ledger), "```", ""]
    if folder.reports:
        lines += ["### Metrics", "", *md_table(*metric_table(folder.reports)), ""]
        lines += [f"{name}: {report_line(report)}  " for name, report in folder.reports.items()]
        lines.append("")
    if folder.evals:
        lines += ["### Evals", "", *md_table(*eval_table(folder)), ""]
    if folder.retention:
        lines += ["### Retention", "", *md_table(*retention_table(folder)), ""]
    if folder.moved:
        lines += [f"### {MOVED}", "", *md_table(*moved_table(folder)), ""]
    if folder.evolved:
        lines += [f"### {EVOLVED}", "", *md_table(*evolved_table(folder)), ""]
    for title, (header, rows) in audit_tables(folder.audit).items() if folder.audit else ():
        lines += [f"### {title}", "", *md_table(header, rows), ""]
    for title, (header, rows) in probe_tables(folder.probe, folder.probe["flagged"]).items() if folder.probe else ():
        lines += [f"### {title}", "", *md_table(header, rows), ""]
    header, rows = training_table(folder)
    if rows:
        lines += [f"### Training ({folder.history_source})", "", *md_table(header, rows), ""]
    if folder.examples:
        lines += [
            f"{len(folder.examples)} of {folder.examples_total} examples are listed on the page "
            f"(from {folder.examples_source}).",
            "",
        ]
    return lines
