"""The report's tables as rows of text, printed by html.py and markdown.py alike, so that both files hold the same
numbers in the same format (scores and stds to 3 decimals, as grading.report.format_report prints them)."""

from collections.abc import Iterable, Sequence
from typing import Any

from grading.report import SCORE_ALIAS
from reports.folder import Folder

GROUPS = ("overall", "axes", "themes", "other tags")
TRAINING_KEYS = (
    "reward",
    "reward_std",
    "eval/overall_score",
    "monitor/overall_score",
    "monitor/gap",
    "rubric/criteria_pass_rate",
    "rubric/judge_failure_rate",
    "rubric/unscored_rate",
    "rubric/integrity_flag_rate",
    "rubric/no_answer_rate",
    "rubric/integrity_note_rate",
    "rubric/saturated_criteria",
    "rubric/dead_criteria",
    "rubric/completion_length",
    "rubric/reasoning_length",
    "rubric/answer_length",
    "rubric/length_reward_corr",
    "completions/mean_length",
    "completions/clipped_ratio",
    "frac_reward_zero_std",
    "entropy",
    "loss",
    "grad_norm",
    "learning_rate",
    "mean_token_accuracy",
)
"""The log-history series the training summary lists, where a run logged them."""


def group_of(name: str) -> str:
    if name == "overall_score":
        return "overall"
    if name.startswith("axis:"):
        return "axes"
    if name.startswith("theme:"):
        return "themes"
    return "other tags"


def metric_names(reports: Iterable[dict[str, Any]]) -> list[str]:
    """Every metric of the reports (not its :n_samples / :bootstrap_std): overall first, then axes, themes, the rest."""
    names = {
        n
        for r in reports
        for n in (r.get("metrics") or {})
        if not n.endswith((":n_samples", ":bootstrap_std")) and n != SCORE_ALIAS  # simple-evals' copy of overall
    }
    return sorted(names, key=lambda n: (GROUPS.index(group_of(n)), n))


def metric(report: dict[str, Any] | None, name: str) -> tuple[float, float | None, int | None] | None:
    """(value, bootstrap std, n) of a metric, or None where the report does not have it."""
    metrics = (report or {}).get("metrics") or {}
    if metrics.get(name) is None:
        return None
    return metrics[name], metrics.get(f"{name}:bootstrap_std"), metrics.get(f"{name}:n_samples")


def num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def cell(report: dict[str, Any] | None, name: str) -> str:
    """One metric in one cell: `0.850 ± 0.103 (n 2)`, or `–` where it is not defined."""
    found = metric(report, name)
    if found is None:
        return "–"
    value, std, n = found
    return f"{num(value)} ± {num(std)} (n {n})" if std is not None else num(value)


def metric_table(reports: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One report: metric, score, ± bootstrap std, n. Several (all vs kept, first vs last eval): a column each."""
    names = metric_names(reports.values())
    if len(reports) == 1:
        (report,) = reports.values()
        rows = []
        for name in names:
            value, std, n = metric(report, name) or (None, None, None)
            rows.append([name, num(value), num(std), "" if n is None else str(n)])
        return ["metric", "score", "± bootstrap std", "n"], rows
    return ["metric", *reports], [[name, *(cell(r, name) for r in reports.values())] for name in names]


def report_line(report: dict[str, Any]) -> str:
    """The counts under a metrics table, as grading.report.format_report says them."""
    parts = [f"{report.get('examples')} examples", f"{report.get('unscored_examples')} unscored"]
    if report.get("judge_failure_rate") is not None:
        parts.append(f"judge failure rate {report['judge_failure_rate']:.1%}")
    if report.get("integrity_flagged"):
        parts.append(f"{report['integrity_flagged']} flagged by the integrity check")
    return ", ".join(parts)


def comparison_table(folders: Sequence[Folder]) -> tuple[list[str], list[list[str]]]:
    """One column per folder: what it is, then every metric of its headline report, then its counts."""
    headline = [f.reports.get(f.headline) if f.headline else None for f in folders]
    rows = [
        ["kind", *(f.kind_name for f in folders)],
        ["model", *(f.facts.get("policy") or f.facts.get("model") or "–" for f in folders)],
        ["judge", *(f.facts.get("judge", "–") for f in folders)],
        ["report", *(f.headline or "none" for f in folders)],
    ]
    rows += [[name, *(cell(r, name) for r in headline)] for name in metric_names(r for r in headline if r)]
    rows.append(["examples", *("–" if r is None else str(r.get("examples")) for r in headline)])
    for key in ("reward", "loss"):  # training runs: where the curve started and ended
        if any(f.series(key) for f in folders):
            rows.append([f"{key} (first → last step)", *(_first_last(f.series(key)) for f in folders)])
    rows.append(
        [
            "judge failure rate",
            *(
                "–" if r is None or r.get("judge_failure_rate") is None else f"{r['judge_failure_rate']:.1%}"
                for r in headline
            ),
        ]
    )
    return ["", *(f.label for f in folders)], rows


def training_table(folder: Folder) -> tuple[list[str], list[list[str]]]:
    """The main log-history series: first, last, min and max over the logged steps."""
    rows = []
    for key in TRAINING_KEYS:
        points = folder.series(key)
        if points:
            values = [v for _, v in points]
            rows.append([key, f"{len(points)}", _g(values[0]), _g(values[-1]), _g(min(values)), _g(max(values))])
    return ["series", "steps", "first", "last", "min", "max"], rows


def eval_table(folder: Folder) -> tuple[list[str], list[list[str]]]:
    """A RuRL run's in-training evals, one row per step: the eval curve as numbers."""
    rows = []
    for report in folder.evals:
        value, std, _ = metric(report, "overall_score") or (None, None, None)
        failures = report.get("judge_failure_rate")
        rows.append(
            [
                str(report.get("step")),
                num(value),
                num(std),
                str(report.get("examples")),
                str(report.get("unscored_examples")),
                "n/a" if failures is None else f"{failures:.1%}",
            ]
        )
    return ["step", "overall_score", "± bootstrap std", "examples", "unscored", "judge failure rate"], rows


MOVED = "Criteria whose pass rate moved most (first → latest batches)"
EVOLVED = "Evolved criteria (rurl.evolve)"
LEDGER = "Criterion ledger (ledger.parquet)"
MAX_EVOLVED = 50


def evolved_table(folder: Folder) -> tuple[list[str], list[list[str]]]:
    """The criteria a RuRL run evolved, newest first: where they came from and whether they still grade."""
    rows = sorted(folder.evolved, key=lambda e: (-e["step"], e["query"]))[:MAX_EVOLVED]
    return ["query", "criterion", "points", "step", "met", "status"], [
        [
            e["query"],
            e["criterion"],
            f"{e['points']:+d}",
            str(e["step"]),
            f"{e['met']} of {e['decided']}",
            e["retired"] or "active",
        ]
        for e in rows
    ]


def moved_table(folder: Folder) -> tuple[list[str], list[list[str]]]:
    """A RuRL run's criteria whose pass rate moved most between its first and latest batches: where a policy
    pleasing its judge shows first."""
    return ["criterion", "first", "last", "moved", "decided", "p (two-proportion z-test)"], [
        [
            row["criterion"],
            f"{row['first_pass_rate']:.0%} of {row['first_decided']}",
            f"{row['last_pass_rate']:.0%} of {row['last_decided']}",
            f"{row['moved']:+.0%}",
            str(row["decided"]),
            f"{row['p']:.2g} (BH threshold {row['threshold']:.2g})",
        ]
        for row in folder.moved
    ]


def retention_table(folder: Folder) -> tuple[list[str], list[list[str]]]:
    r = folder.retention or {}
    finished = r.get("finished", 0)
    share = lambda n: f"{n / finished:.1%}" if finished else "n/a"  # noqa: E731
    return ["queries", "count", "share"], [
        ["finished", str(finished), share(finished)],
        ["kept (an answer >= tau)", str(r.get("kept", 0)), share(r.get("kept", 0))],
        ["below tau", str(r.get("below threshold", 0)), share(r.get("below threshold", 0))],
    ]


def _first_last(points: list[tuple[float, float]]) -> str:
    return f"{_g(points[0][1])} → {_g(points[-1][1])} (step {points[-1][0]:g})" if points else "–"


def _g(value: float) -> str:
    """A logged value: 3 decimals for rates and scores, 4 significant digits for large or tiny ones."""
    return f"{value:.3f}" if 0.001 <= abs(value) < 1000 or value == 0 else f"{value:.4g}"
