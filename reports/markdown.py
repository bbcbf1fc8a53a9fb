"""The markdown summary written beside the page (report.md): the same tables, from reports/tables.py, without the
charts and examples, for a pull request, a wiki or a terminal."""

from collections.abc import Sequence

from reports.folder import Folder
from reports.tables import comparison_table, eval_table, metric_table, report_line, retention_table, training_table


def render_markdown(folders: Sequence[Folder], title: str, subtitle: str, page_name: str) -> str:
    lines = [f"# {title}", "", subtitle, "", f"Charts and examples: {page_name}", ""]
    if len(folders) > 1:
        lines += [
            "## Comparison",
            "",
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
    lines += [f"- **{key}**: {_cell(value)}" for key, value in folder.facts.items()]
    lines += [f"- note: {_cell(note)}" for note in folder.notes]
    lines.append("")
    if folder.reports:
        lines += ["### Metrics", "", *md_table(*metric_table(folder.reports)), ""]
        lines += [f"{name}: {report_line(report)}  " for name, report in folder.reports.items()]
        lines.append("")
    if folder.evals:
        lines += ["### Evals", "", *md_table(*eval_table(folder)), ""]
    if folder.retention:
        lines += ["### Retention", "", *md_table(*retention_table(folder)), ""]
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


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    numeric = ["---:" if i else "---" for i in range(len(header))]
    return [
        "| " + " | ".join(_cell(h) for h in header) + " |",
        "| " + " | ".join(numeric) + " |",
        *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows),
    ]


def _cell(text: str) -> str:
    """A table cell or list item on one line: pipes escaped, line breaks as spaces."""
    return " ".join(str(text).split()).replace("|", "\\|")
