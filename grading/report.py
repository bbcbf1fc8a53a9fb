"""HealthBench-style reports from graded records alone (no judge call): overall, per axis, per theme, with
n_samples and bootstrap std, under simple-evals' metric names (`overall_score`, `axis:accuracy`,
`overall_score:n_samples`, `overall_score:bootstrap_std`, ...)."""

from collections.abc import Sequence
from typing import Any

from grading.rubric import Criterion, Rubric
from grading.scores import DEFAULT_MIN_COVERAGE, UndecidedPenalty, aggregate, tag_scores


def example_metrics(
    record: dict[str, Any], *, min_coverage: float = DEFAULT_MIN_COVERAGE,
    undecided_penalty: UndecidedPenalty = "unscored",
) -> dict[str, float]:  # fmt: skip
    """Per-example metrics of one graded record, recomputed from its verdicts (not its stored score, which may
    follow other settings). A flagged record keeps the score it was given (0, or the lowest the rubric allows)
    overall and on its example tags."""
    example_tags = tuple(record.get("example_tags") or ())
    if record.get("integrity_flag"):
        score = record.get("score") or 0.0
        return {"overall_score": score, **{tag: score for tag in example_tags}}
    if record.get("rating") is not None or not record.get("verdicts"):  # rating modes: the normalized rating
        score = record.get("score")
        return {} if score is None else {"overall_score": score, **{tag: score for tag in example_tags}}
    verdicts = record["verdicts"]
    rubric = Rubric(tuple(Criterion(v["criterion"], v["points"], tuple(v.get("tags") or ())) for v in verdicts),
                    example_tags)  # fmt: skip
    return tag_scores(rubric, [v["met"] for v in verdicts], min_coverage=min_coverage,
                      undecided_penalty=undecided_penalty)  # fmt: skip


def build_report(
    records: Sequence[dict[str, Any]], *, min_coverage: float = DEFAULT_MIN_COVERAGE,
    undecided_penalty: UndecidedPenalty = "unscored", seed: int = 0,
) -> dict:  # fmt: skip
    per_example = [example_metrics(r, min_coverage=min_coverage, undecided_penalty=undecided_penalty) for r in records]
    metrics = {}
    for name, stats in aggregate(per_example, seed=seed).items():
        metrics[name] = stats["value"]
        metrics[f"{name}:n_samples"] = stats["n_samples"]
        metrics[f"{name}:bootstrap_std"] = stats["bootstrap_std"]
    verdicts = [v for r in records for v in r.get("verdicts") or () if v.get("source") != "none"]
    return {
        "metrics": metrics,
        "examples": len(records),
        "unscored_examples": sum("overall_score" not in m for m in per_example),
        "judge_failure_rate": sum(v["met"] is None for v in verdicts) / len(verdicts) if verdicts else 0.0,
        "integrity_flagged": sum(bool(r.get("integrity_flag")) for r in records),
        "min_coverage": min_coverage,
        "undecided_penalty": undecided_penalty,
    }


def format_report(report: dict) -> str:
    """A table: overall first, then axes, themes and other tags, each with n and bootstrap std."""
    metrics = report["metrics"]
    names = [n for n in metrics if ":n_samples" not in n and ":bootstrap_std" not in n]
    order = sorted(names, key=lambda n: (n != "overall_score", not n.startswith("axis:"), n))
    lines = [f"{'metric':44}{'score':>8}{'n':>6}{'± std':>9}"]
    for name in order:
        lines.append(f"{name[:44]:44}{metrics[name]:8.3f}{metrics[name + ':n_samples']:6d}"
                     f"{metrics[name + ':bootstrap_std']:9.3f}")  # fmt: skip
    lines.append(f"{report['examples']} examples, {report['unscored_examples']} unscored, judge failure rate "
                 f"{report['judge_failure_rate']:.1%}, {report['integrity_flagged']} flagged by the integrity check")  # fmt: skip
    return "\n".join(lines)
