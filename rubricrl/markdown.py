"""Markdown for the summaries written beside outputs (audit.md, probe.md, the report): tables and percentages."""


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    numeric = ["---:" if i else "---" for i in range(len(header))]
    return [
        "| " + " | ".join(md_cell(h) for h in header) + " |",
        "| " + " | ".join(numeric) + " |",
        *("| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows),
    ]


def md_cell(text: str) -> str:
    """A table cell or list item on one line: pipes escaped, line breaks as spaces."""
    return " ".join(str(text).split()).replace("|", "\\|")


def pct(value: float | None) -> str:
    """0.1234 -> '12.3%'; None -> 'n/a'."""
    return "n/a" if value is None else f"{value:.1%}"
