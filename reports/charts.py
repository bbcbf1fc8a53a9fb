"""The report's figures, drawn with rubricrl/charts.py and returned as `data:image/png;base64,...` URIs, so that the
page opens offline, anywhere, as one file.

matplotlib comes with the `train` extra; without it the page has its tables and examples and says why no charts
(`available`)."""

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checks.audit_summary import FIGURES, figures
from grading.ledger import draw as draw_ledger
from reports.folder import BuildPoints, Folder
from reports.tables import group_of, metric, metric_names
from rubricrl import charts
from rubricrl.charts import available  # noqa: F401  (html.py asks reports.charts; tests replace it here)

LEDGER_FIGURE = "criterion ledger: each criterion's share of its rubric's signal against its pass rate"
MAX_BARS = 40
"""Metric groups with more entries than this (HealthBench's dozens of clusters) are left to the table."""
RATES = (
    "rubric/criteria_pass_rate",
    "rubric/judge_failure_rate",
    "rubric/unscored_rate",
    "rubric/integrity_flag_rate",
    "rubric/no_answer_rate",
    "rubric/integrity_note_rate",
    "rubric/saturated_criteria",
    "rubric/dead_criteria",
    "completions/clipped_ratio",
    "frac_reward_zero_std",
)


@dataclass(frozen=True)
class Chart:
    title: str
    """The figure's caption: it goes in the page, as text, not in the picture: said once, and legible at any scale."""
    png: bytes

    @property
    def uri(self) -> str:
        """data:image/png;base64,..."""
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


# --- what each kind of folder shows ---------------------------------------------------------------------------------


def folder_charts(folder: Folder) -> list[Chart]:
    charts: list[Chart | None] = []
    if folder.retention:
        charts.append(retention_bars(folder.retention))
    if folder.build and folder.build.scores:
        charts.append(build_histogram(folder.build))
        charts.append(length_scatter(folder.build))
    if folder.ledger_table:
        charts.append(ledger_plot(folder.ledger_table))
    if folder.history:
        charts += training_curves(folder)
    if folder.audit:
        charts += [Chart(FIGURES[name], png) for name, png in figures(folder.audit).items()]
    for group in ("axes", "themes", "other tags"):
        names = [n for n in metric_names(folder.reports.values()) if group_of(n) == group]
        if 0 < len(names) <= MAX_BARS:
            charts.append(metric_bars(folder.reports, names, f"{group}: score ± bootstrap std"))
    if folder.scores and not folder.build:
        charts.append(
            histogram({folder.scores_label: folder.scores}, f"{folder.scores_label} (n {len(folder.scores)})", "score")
        )
    return [c for c in charts if c is not None]


def ledger_plot(table) -> Chart | None:
    """The criterion ledger's figure (grading/ledger.py's `draw`) from its pyarrow table."""
    drawn = draw_ledger(table)
    return None if drawn is None else Chart(LEDGER_FIGURE, charts.png(drawn))


def training_curves(folder: Folder) -> list[Chart | None]:
    reward = {key: folder.series(key) for key in ("reward", "eval/overall_score", "monitor/overall_score")}
    errors = {
        "reward": [v for _, v in folder.series("reward_std")],
        "eval/overall_score": [v for _, v in folder.series("eval/overall_score:bootstrap_std")],
        "monitor/overall_score": [v for _, v in folder.series("monitor/overall_score:bootstrap_std")],
    }
    evals = [k for k in folder.history_keys("eval/axis:") if not k.endswith((":n_samples", ":bootstrap_std"))]
    tags = folder.history_keys("rubric/tag/") + folder.history_keys("rubric/category/")
    return [
        curves(
            reward,
            "reward (± std over the batch)"
            + (" and eval overall score (± bootstrap std)" if reward["eval/overall_score"] else "")
            + (", the monitor judge's beside it" if reward["monitor/overall_score"] else ""),
            "score",
            errors,
        ),
        curves({k: folder.series(k) for k in evals}, "eval score per axis", "score"),
        curves(
            {k: folder.series(k) for k in ("monitor/overclaim", "monitor/underclaim")},
            "the training judge against the monitor: criteria it credits that the monitor rejects (overclaim), "
            "and the reverse",
            "share",
        ),
        curves({k: folder.series(k) for k in RATES}, "rubric rates per step", "rate"),
        curves({k: folder.series(k) for k in tags}, "criteria pass rate per tag / category", "pass rate"),
        curves(
            {
                k: folder.series(k)
                for k in (
                    "rubric/completion_length",
                    "completions/mean_length",
                    "rubric/reasoning_length",
                    "rubric/answer_length",
                )
            },
            "mean completion length (tokens)",
            "tokens",
        ),
        curves(
            {"rubric/length_reward_corr": folder.series("rubric/length_reward_corr")},
            "correlation of reward with completion length",
            "Pearson r",
        ),
        curves({k: folder.series(k) for k in ("loss", "entropy", "mean_token_accuracy")}, "loss", "value"),
        curves({k: folder.series(k) for k in ("learning_rate",)}, "learning rate", "learning rate"),
    ]


def comparison_charts(folders: Sequence[Folder]) -> list[Chart]:
    reports = {f.label: f.reports[f.headline] for f in folders if f.headline}
    charts: list[Chart | None] = []
    for group in ("overall", "axes", "themes"):
        names = [n for n in metric_names(reports.values()) if group_of(n) == group]
        if len(reports) > 1 and 0 < len(names) <= MAX_BARS:
            charts.append(metric_bars(reports, names, f"{group}: score ± bootstrap std, one bar per folder"))
    runs = [f for f in folders if f.history]
    if len(runs) > 1:
        for key, title in (("reward", "train reward"), ("eval/overall_score", "eval overall score"), ("loss", "loss")):
            charts.append(curves({f.label: f.series(key) for f in runs}, f"{title}, one line per run", key))
    return [c for c in charts if c is not None]


# --- the figures ----------------------------------------------------------------------------------------------------


def metric_bars(reports: dict[str, dict[str, Any]], names: list[str], title: str) -> Chart | None:
    """Horizontal bars, one group per metric and one bar per report, with bootstrap-std error bars."""
    if not names or not reports:
        return None
    reports = {label: r for label, r in reports.items() if any(metric(r, n) for n in names)}
    if not reports:
        return None
    figure, axis = charts.figure(6.4, 1.0 + 0.28 * len(names) * max(1, len(reports)) ** 0.8)
    charts.bars(axis, names, {label: [metric(report, n) for n in names] for label, report in reports.items()})
    axis.set_xlim(0, 1.05)
    axis.set_xlabel("score (clipped mean)")
    if len(reports) > 1:
        charts.legend_above(axis, list(reports))
    return Chart(title, charts.png(figure))


def histogram(
    values: dict[str, Sequence[float]], title: str, xlabel: str, threshold: float | None = None
) -> Chart | None:
    values = {label: v for label, v in values.items() if v}
    if not values:
        return None
    low = min(0.0, math.floor(min(min(v) for v in values.values()) * 20) / 20)
    high = max(1.0, math.ceil(max(max(v) for v in values.values()) * 20) / 20)
    bins = [low + i * 0.05 for i in range(round((high - low) / 0.05) + 1)]
    figure, axis = charts.figure(6.4, 3.6)
    charts.histogram(axis, {f"{label} (n {len(v)})": v for label, v in values.items()}, bins, threshold)
    axis.set_xlabel(xlabel)
    if len(values) > 1 or threshold is not None:
        axis.legend(fontsize=8)
    return Chart(title, charts.png(figure))


def build_histogram(build: BuildPoints) -> Chart | None:
    kept = [s for s, k in zip(build.scores, build.kept) if k]
    return histogram(
        {"all candidates": build.scores, "kept": kept}, "candidate scores: all vs kept", "rubric score", build.threshold
    )


def length_scatter(build: BuildPoints) -> Chart | None:
    figure, axis = charts.figure(6.4, 3.6)
    charts.scatter(axis, build.lengths, build.scores, "all candidates", s=10, alpha=0.5)
    kept = [i for i, k in enumerate(build.kept) if k]
    charts.scatter(axis, [build.lengths[i] for i in kept], [build.scores[i] for i in kept], "kept", s=16)
    if build.threshold is not None:
        axis.axhline(build.threshold, color="black", linestyle="--", linewidth=1, label=f"tau = {build.threshold:g}")
    axis.set(xlabel="answer length (characters)", ylabel="rubric score")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return Chart("score vs length (a verbosity bias shows as a rising cloud)", charts.png(figure))


def retention_bars(retention: dict[str, int]) -> Chart | None:
    if not retention.get("finished"):
        return None
    figure, axis = charts.figure(6.4, 1.8)
    labels = ["kept", "below threshold"]
    counts = [retention.get(label, 0) for label in labels]
    left = 0
    for label, count, color in zip(labels, counts, ("tab:green", "tab:red")):
        axis.barh([0], [count], left=left, color=color, alpha=0.8, label=f"{label}: {count}")
        left += count
    axis.set_yticks([])
    axis.set_xlim(0, max(1, retention["finished"]))
    axis.set_xlabel("queries")
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=2)
    return Chart(f"retention: {counts[0]} of {retention['finished']} queries kept", charts.png(figure))


def curves(
    lines: dict[str, list[tuple[float, float]]], title: str, ylabel: str, errors: dict[str, list[float]] | None = None
) -> Chart | None:
    """One line per series over steps; a band of ± error where `errors` has one value per point."""
    lines = {label: points for label, points in lines.items() if points}
    if not lines:
        return None
    figure, axis = charts.figure(6.4, 3.6)
    charts.curves(axis, lines, errors)
    axis.set(xlabel="step", ylabel=ylabel)
    charts.legend_above(axis, [charts.short(label) for label in lines])
    return Chart(title, charts.png(figure))
