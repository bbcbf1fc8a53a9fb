"""`rubricrl report DIR [DIR ...]`: one self-contained HTML page and a markdown summary beside it.

    rubricrl report runs/eval                              # runs/eval/report.html and report.md
    rubricrl report runs/rurl --output rurl.html           # a RuRL run: curves, evals, completions
    rubricrl report runs/eval-base runs/eval-rl --labels base rl --output compare.html

Each DIR is an eval folder, a RuRL run, a RuFT build or an SFT run folder (told by its files: reports/collect.py);
nothing is written into it but the default report.html / report.md, and no model or judge is called."""

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rubricrl.config import ConfigError, add_config_arguments, parse_settings


@dataclass
class ReportArgs:
    output: Path | None = None
    """The HTML page to write (default: DIR/report.html for one DIR, else ./report.html); the markdown summary goes
    beside it, with the suffix .md."""
    max_examples: int = 200
    """Examples listed per folder (a RuFT build: queries, each with its candidates); the metrics and charts always
    count them all."""
    labels: list[str] | None = None
    """A name for each DIR, in order (default: the folder names, with their parent where two are alike)."""
    title: str | None = None
    """The page's title (default: rubricrl report: the labels)."""

    def __post_init__(self) -> None:
        if self.max_examples < 0:
            raise ValueError(f"max_examples must be at least 0, got {self.max_examples}")


def add_commands(commands) -> None:
    report = commands.add_parser(
        "report",
        help="an HTML page (and markdown summary) for eval, RuRL, RuFT or SFT "
        "output folders, or a comparison of several",
    )
    report.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="an eval folder, a RuRL run, a RuFT "
        "build or an SFT run folder; several: a comparison (put --labels after them)",
    )
    add_config_arguments(report, [ReportArgs])
    report.set_defaults(run=run_report)


def run_report(args: argparse.Namespace) -> int:
    from reports.collect import collect
    from reports.html import render_page
    from reports.markdown import render_markdown
    from reports.tables import cell
    from rubricrl import __version__
    from rubricrl.runs.jsonl import write_whole

    (settings,) = parse_settings(args, command="report")
    dirs: list[Path] = args.dirs
    labels = settings.labels or default_labels(dirs)
    if len(labels) != len(dirs):
        raise ConfigError(f"--labels: {len(labels)} label(s) for {len(dirs)} folder(s); give one per DIR")
    folders = [collect(path, label, settings.max_examples) for path, label in zip(dirs, labels)]
    output = settings.output or (dirs[0] / "report.html" if len(dirs) == 1 else Path("report.html"))
    summary = output.with_suffix(".md")
    title = settings.title or f"rubricrl report: {' vs '.join(labels)}"
    subtitle = (
        f"{datetime.now():%Y-%m-%d %H:%M} · rubricrl {__version__} · rubricrl report {' '.join(str(d) for d in dirs)}"
    )
    write_whole(output, render_page(folders, title, subtitle))
    write_whole(summary, render_markdown(folders, title, subtitle, output.name))
    for folder in folders:
        report = folder.reports.get(folder.headline) if folder.headline else None
        score = f"{folder.headline}: overall_score {cell(report, 'overall_score')}" if report else "no eval report"
        print(f"{folder.label} ({folder.kind_name}, {folder.path}): {score}")
    print(f"wrote {output} ({output.stat().st_size / 1e3:.0f} kB) and {summary}", file=sys.stderr)
    return 0


def default_labels(dirs: list[Path]) -> list[str]:
    """Each folder's name; where two names are alike, as many of their last path parts as tell them apart."""
    parts = [d.resolve().parts for d in dirs]
    labels = []
    for mine in parts:
        depth = 1
        while depth < len(mine) and sum(p[-depth:] == mine[-depth:] for p in parts) > 1:
            depth += 1
        labels.append("/".join(mine[-depth:]) or str(mine))
    return labels
