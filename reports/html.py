"""The report page: templates/report.html (rendered strictly, as the prompts are: rubricrl/prompts.py) filled with a
comparison (several folders) and a section per folder: its facts, metrics tables, charts (data: URIs) and a browsable
list of examples, one <details> each. Every text from a folder passes through `esc` (html.escape), so a response
holding markup shows as text and never becomes part of the page."""

import html
from collections.abc import Sequence
from pathlib import Path

from checks.audit_summary import audit_tables
from checks.probe_summary import probe_tables
from grading.ledger import headline_lines
from reports import charts
from reports.folder import Example, Folder, Verdict, comparison_findings_of
from reports.tables import (
    EVOLVED,
    LEDGER,
    MOVED,
    comparison_table,
    eval_table,
    evolved_table,
    group_of,
    metric_table,
    moved_table,
    report_line,
    retention_table,
    training_table,
)
from rubricrl.prompts import load_prompt

TEMPLATE = load_prompt(Path(__file__).parent / "templates" / "report.html")
SNIPPET = 140
"""Characters of the prompt shown in an example's one-line summary."""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def render_page(folders: Sequence[Folder], title: str, subtitle: str) -> str:
    draw = charts.available()
    contents, body = [], []
    if len(folders) > 1:
        contents.append('<li><a href="#comparison">comparison</a></li>')
        body.append(comparison_section(folders, draw))
    for i, folder in enumerate(folders):
        anchor = f"dir-{i + 1}"
        contents.append(
            f'<li><a href="#{anchor}">{esc(folder.label)}</a> <span class="meta">{esc(folder.kind_name)}</span></li>'
        )
        body.append(folder_section(folder, anchor, draw))
    if not draw:
        subtitle += " · no charts: matplotlib is not installed (pip install 'rubricrl[train]')"
    return TEMPLATE.render(
        title=esc(title), subtitle=esc(subtitle), contents=f"<ul>{''.join(contents)}</ul>", body="\n".join(body)
    )


# --- sections -------------------------------------------------------------------------------------------------------


def comparison_section(folders: Sequence[Folder], draw: bool) -> str:
    header, rows = comparison_table(folders)
    parts = [
        '<section id="comparison">',
        f"<h2>Comparison of {len(folders)} folders</h2>",
        '<p class="line">Each column is one folder\'s headline report (an eval folder: its report; a RuRL run: '
        "its last eval; a RuFT build: all its candidates): score ± bootstrap std (n examples).</p>",
        *(f'<p class="line"><strong>{esc(finding)}</strong></p>' for finding in comparison_findings_of(folders)),
        table(header, rows, numeric_from=1),
    ]
    if draw:
        parts.append(figures(charts.comparison_charts(folders)))
    parts.append("</section>")
    return "\n".join(parts)


def folder_section(folder: Folder, anchor: str, draw: bool) -> str:
    parts = [
        f'<section class="folder" id="{anchor}">',
        f'<h2>{esc(folder.label)}<span class="kind">{esc(folder.kind_name)} · {esc(folder.command)}</span></h2>',
        f'<p class="path"><code>{esc(folder.path)}</code></p>',
        table(["", ""], [[k, v] for k, v in folder.facts.items()], show_header=False, css="facts"),
    ]
    if folder.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in folder.notes) + "</ul>")
    if folder.ledger:
        lines = "\n".join(esc(line) for line in headline_lines(folder.ledger))
        parts += [f"<h3>{LEDGER}</h3>", f'<pre class="ledger">{lines}</pre>']
    if folder.reports:
        header, rows = metric_table(folder.reports)
        parts += ["<h3>Metrics</h3>", table(header, rows, numeric_from=1, grouped=True)]
        parts += [f'<p class="line">{esc(name)}: {esc(report_line(r))}</p>' for name, r in folder.reports.items()]
    if folder.evals:
        parts += [
            '<h3>Evals <span class="meta">(one row per in-training eval)</span></h3>',
            table(*eval_table(folder), numeric_from=1),
        ]
    if folder.retention:
        parts += ["<h3>Retention</h3>", table(*retention_table(folder), numeric_from=1)]
    if folder.moved:
        parts += [f"<h3>{MOVED}</h3>", table(*moved_table(folder), numeric_from=1)]
    if folder.evolved:
        parts += [f"<h3>{EVOLVED}</h3>", table(*evolved_table(folder), numeric_from=2)]
    for title, (header, rows) in audit_tables(folder.audit).items() if folder.audit else ():
        parts += [f"<h3>{esc(title)}</h3>", table(header, rows, numeric_from=1)]
    for title, (header, rows) in probe_tables(folder.probe, folder.probe["flagged"]).items() if folder.probe else ():
        parts += [f"<h3>{esc(title)}</h3>", table(header, rows, numeric_from=1)]
    if folder.history:
        header, rows = training_table(folder)
        if rows:
            parts += [
                f'<h3>Training <span class="meta">({esc(folder.history_source)})</span></h3>',
                table(header, rows, numeric_from=1),
            ]
    if draw:
        parts.append(figures(charts.folder_charts(folder)))
    parts.append(examples_section(folder, anchor))
    parts.append("</section>")
    return "\n".join(parts)


def figures(found: list[charts.Chart]) -> str:
    if not found:
        return ""
    items = "".join(
        f'<figure><figcaption>{esc(c.title)}</figcaption><img src="{c.uri}" alt="{esc(c.title)}"></figure>'
        for c in found
    )
    return f'<h3>Charts</h3>\n<div class="charts">{items}</div>'


def examples_section(folder: Folder, anchor: str) -> str:
    if not folder.examples:
        return ""
    shown, total = len(folder.examples), folder.examples_total
    what = "queries" if folder.kind == "ruft_build" else "examples"
    count = f"{shown} of {total} {what}" if total > shown else f"{shown} {what}"
    target = f"{anchor}-examples"
    more = "; --max_examples shows more" if total > shown else ""
    return "\n".join(
        [
            f'<h3>Examples <span class="meta">({esc(count)}, from {esc(folder.examples_source)}{more})</span></h3>',
            # hidden until the page's script shows it: without JavaScript these controls would do nothing
            f'<div class="tools" data-target="{target}" hidden><input type="search" placeholder="filter: any text">'
            '<select><option value="file">as in the file</option><option value="low">lowest score first</option>'
            '<option value="high">highest score first</option></select>'
            '<button type="button" value="open">open all</button>'
            '<button type="button" value="close">close all</button><span class="shown" aria-live="polite"></span></div>',
            '<p class="legend">Verdicts: met / not met / undecided (no verdict: a judge failure or a tie, never counted as '
            "not met). For a criterion with negative points, met means the fault is present: green marks the good "
            "outcome, red the bad one.</p>",
            f'<div id="{target}">',
            *(example_block(e) for e in folder.examples),
            "</div>",
        ]
    )


def example_block(example: Example, css: str = "example") -> str:
    score = "" if example.score is None else f"{example.score:.6g}"
    summary = [score_badge(example.score), f"<code>{esc(example.id)}</code>"]
    summary += [f'<span class="tag">{esc(n)}</span>' for n in example.notes]
    if example.prompt:
        last = next((m for m in reversed(example.prompt) if m.get("role") == "user"), example.prompt[-1])
        text = " ".join(str(last.get("content", "")).split())
        summary.append(f'<span class="snippet">{esc(text[:SNIPPET] + ("…" if len(text) > SNIPPET else ""))}</span>')
    body = []
    if example.prompt:
        body.append("<h4>Prompt</h4>")
        body += [
            f'<div class="role">{esc(m.get("role", ""))}</div><pre>{esc(m.get("content", ""))}</pre>'
            for m in example.prompt
        ]
    if example.response is not None:
        body += ["<h4>Response</h4>", f"<pre>{esc(example.response)}</pre>"]
    if example.reference:
        body += ["<h4>Reference answer</h4>", f"<pre>{esc(example.reference)}</pre>"]
    if example.explanation:
        body += ["<h4>Judge's explanation</h4>", f"<pre>{esc(example.explanation)}</pre>"]
    if example.verdicts:
        body += [f"<h4>Criteria ({len(example.verdicts)})</h4>", verdict_table(example.verdicts)]
    if example.candidates:
        body.append(f"<h4>{esc(example.candidates_title)} ({len(example.candidates)})</h4>")
        body += [example_block(c, "example candidate") for c in example.candidates]
    return (
        f'<details class="{css}" data-score="{score}"><summary>{" ".join(summary)}</summary>'
        f'<div class="body">{"".join(body)}</div></details>'
    )


def verdict_table(verdicts: list[Verdict]) -> str:
    rows = []
    for v in verdicts:
        status = "undecided" if v.met is None else "met" if v.met else "not met"
        good = None if v.met is None else (v.met == (v.points >= 0))
        css = "open" if good is None else "good" if good else "bad"
        tags = "".join(f'<span class="tag">{esc(t)}</span>' for t in v.tags)
        source = f'<span class="tag">{esc(v.source)}</span>' if v.source and v.source != "judge" else ""
        rows.append(
            f'<tr class="{css}"><td class="num">{v.points:+d}</td><td class="verdict">{status}</td>'
            f'<td class="criterion">{esc(v.criterion)} {tags}{source}</td>'
            f'<td class="why">{esc(v.explanation)}</td></tr>'
        )
    return (
        '<table class="verdicts"><thead><tr><th>points</th><th>verdict</th><th>criterion</th>'
        f"<th>judge's explanation</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def score_badge(score: float | None) -> str:
    if score is None:
        return '<span class="score none">unscored</span>'
    clipped = min(1.0, max(0.0, score))
    hue = round(120 * clipped)  # red (0) to green (1)
    return f'<span class="score" style="background: hsl({hue}, 55%, 38%)">{score:.3f}</span>'


def table(
    header: list[str],
    rows: list[list[str]],
    *,
    numeric_from: int | None = None,
    show_header: bool = True,
    css: str = "",
    grouped: bool = False,
) -> str:
    """A table of text cells (escaped here). `numeric_from`: the columns from there on are numbers (right-aligned);
    `grouped`: the first column holds metric names, with a header row where the group (axes, themes, ...) changes."""
    # in a box that scrolls sideways when the table is wider than the page (many folders, a phone): the page does not
    lines = ['<div class="wide">' + (f'<table class="{css}">' if css else "<table>")]
    if show_header:
        lines.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
    group = None
    for row in rows:
        if grouped and group_of(row[0]) != group:
            group = group_of(row[0])
            if group != "overall":
                lines.append(f'<tr class="group"><th colspan="{len(row)}">{esc(group)}</th></tr>')
        cells = []
        for i, value in enumerate(row):
            if i == 0:
                cells.append(f"<th>{esc(value)}</th>" if css == "facts" else f"<td>{esc(value)}</td>")
            else:
                numeric = numeric_from is not None and i >= numeric_from and _looks_numeric(value)
                cells.append(f'<td class="num">{esc(value)}</td>' if numeric else f"<td>{esc(value)}</td>")
        overall = ' class="overall"' if row[0] == "overall_score" else ""
        lines.append(f"<tr{overall}>{''.join(cells)}</tr>")
    lines.append("</table></div>")
    return "\n".join(lines)


def _looks_numeric(value: str) -> bool:
    return value[:1].isdigit() or value[:1] == "-" or value in ("–", "n/a", "")
