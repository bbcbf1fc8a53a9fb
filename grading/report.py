"""HealthBench-style reports from graded records alone (no judge call): overall, per axis, per theme, with
n_samples and bootstrap std, under simple-evals' metric names (`overall_score`, `axis:accuracy`,
`overall_score:n_samples`, `overall_score:bootstrap_std`, ...)."""

from collections.abc import Sequence
from typing import Any

from grading.judge import FAILED, credit
from grading.rubric import Criterion, Rubric
from grading.scores import DEFAULT_MIN_COVERAGE, UndecidedCriterion, UndecidedPenalty, aggregate, tag_scores

PROVENANCE_KEYS = ("rubrics", "responses", "policy_model", "graded_at")
"""A graded record's `provenance` block (grading/cli.py writes it): rubric file, responses file (or null where
the policy answered), policy model (or null where responses were given), and when it was graded (UTC, ISO 8601)."""


def example_metrics(
    record: dict[str, Any],
    *,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    undecided_penalty: UndecidedPenalty = "unscored",
    undecided_criterion: UndecidedCriterion = "drop",
) -> dict[str, float]:
    """Per-example metrics of one graded record, recomputed from its verdicts (not its stored score, which may
    follow other settings). A flagged record, or one without an answer (its reasoning never closed): floor_metrics."""
    example_tags = tuple(record.get("example_tags") or ())
    if record.get("integrity_flag") or record.get("no_answer"):
        return floor_metrics(record, example_tags)
    if record.get("rating") is not None or not record.get("verdicts"):  # rating modes: the normalized rating
        score = record.get("score")
        return {} if score is None else {"overall_score": score, **{tag: score for tag in example_tags}}
    verdicts = record["verdicts"]
    rubric = Rubric(
        tuple(Criterion(v["criterion"], v["points"], tuple(v.get("tags") or ())) for v in verdicts), example_tags
    )
    return tag_scores(
        rubric,
        [credit(v["met"], v.get("probability")) for v in verdicts],
        min_coverage=min_coverage,
        undecided_penalty=undecided_penalty,
        undecided_criterion=undecided_criterion,
    )


def floor_metrics(record: dict[str, Any], example_tags: tuple[str, ...]) -> dict[str, float]:
    """A vetoed record, or one without an answer, scores the lowest its rubric allows (nothing earned, every penalty
    met), overall and on its example tags, and on every criterion tag (axis, cluster) that tag's lowest: reports
    keep per-example scores unclipped (as simple-evals), and a stored 0 would let a veto outscore an honest answer
    whose penalties outweigh its points. simple-evals judges every criterion of every response, so each axis counts
    every example the overall score counts; so do ours. A record without its verdicts keeps its stored score."""
    verdicts = record.get("verdicts") or ()
    if not verdicts:
        score = record.get("score") or 0.0
        return {"overall_score": score, **{tag: score for tag in example_tags}}
    rubric = Rubric(tuple(Criterion(v["criterion"], v["points"], tuple(v.get("tags") or ())) for v in verdicts))
    lowest = tag_scores(rubric, [v["points"] < 0 for v in verdicts], min_coverage=0.0)
    score = lowest.get("overall_score", 0.0)  # none without positive points: 0, as tag_scores leaves it undefined
    return {**lowest, "overall_score": score, **{tag: score for tag in example_tags}}


LENGTH_CENTER = 2000
LENGTH_PENALTY_PER_500 = 0.0147
"""simple-evals' length-adjusted HealthBench score (PR 108, 2026-04), as two independent reproductions state it:
score - 0.0147 * (answer characters - 2000) / 500 per example, unclipped, the mean clipped as every metric's."""


def length_adjusted(score: float, characters: int) -> float:
    """
    >>> round(length_adjusted(1.0, 913), 7)  # nanocodex PR 150's recorded figure for a 913-character answer
    1.0319578
    """
    return score - LENGTH_PENALTY_PER_500 * (characters - LENGTH_CENTER) / 500


def build_report(
    records: Sequence[dict[str, Any]],
    *,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    undecided_penalty: UndecidedPenalty = "unscored",
    undecided_criterion: UndecidedCriterion = "drop",
    seed: int = 0,
    answer_lengths: Sequence[int] | None = None,
) -> dict:
    """The report of `records`; with `answer_lengths` (characters of each record's answer) it also holds
    `overall_score_length_adjusted`."""
    rule = {
        "min_coverage": min_coverage,
        "undecided_penalty": undecided_penalty,
        "undecided_criterion": undecided_criterion,
    }
    per_example = [example_metrics(r, **rule) for r in records]
    for metrics, characters in zip(per_example, answer_lengths or ()):
        if "overall_score" in metrics:
            metrics["overall_score_length_adjusted"] = length_adjusted(metrics["overall_score"], characters)
    metrics = {}
    for name, stats in aggregate(per_example, seed=seed).items():
        metrics[name] = stats["value"]
        metrics[f"{name}:n_samples"] = stats["n_samples"]
        metrics[f"{name}:bootstrap_std"] = stats["bootstrap_std"]
    decisions = [judge_decisions(r) for r in records]
    asked, failed = sum(a for a, _ in decisions), sum(f for _, f in decisions)
    per_verdict = [v["calls"] for r in records for v in r.get("verdicts") or () if "calls" in v]
    return {
        "metrics": metrics,
        "examples": len(records),
        "unscored_examples": sum("overall_score" not in m for m in per_example),
        "judge_failure_rate": failed / asked if asked else 0.0,
        "reasked_verdicts": sum(r.get("reasked") or 0 for r in records),
        "judge_calls": sum(r.get("judge_calls") or 0 for r in records),
        "most_judge_calls_per_verdict": max(per_verdict, default=0),
        "policy_failures": sum(bool(r.get("policy_error")) for r in records),
        "integrity_flagged": sum(bool(r.get("integrity_flag")) for r in records),
        "integrity_noted": sum(bool(r.get("integrity_note")) and not r.get("integrity_flag") for r in records),
        "no_answer": sum(bool(r.get("no_answer")) for r in records),
        **rule,
    }


SCORE_ALIAS = "score"
"""simple-evals writes the overall score a second time as `score` (with `score:n_samples`, `score:bootstrap_std`):
`rubricrl eval` writes it into report.json too, so that tools reading its output read ours; tables leave it out."""


def with_score_alias(report: dict) -> dict:
    """The report with simple-evals' `score` keys, copies of `overall_score`'s, where there is an overall score."""
    metrics = report["metrics"]
    if "overall_score" in metrics:
        for suffix in ("", ":n_samples", ":bootstrap_std"):
            metrics[SCORE_ALIAS + suffix] = metrics["overall_score" + suffix]
    return report


def judge_graded(verdict: dict[str, Any]) -> bool:
    """Whether a graded record's verdict is the judge's: not a rule check (`source` rule, decided in code) nor a
    criterion left ungraded (`source` none); a verdict that names no source is the judge's. It may still be
    undecided (`met` None: a failed call or a tied vote)."""
    return verdict.get("source") not in ("rule", "none")


def judged_positive(verdict: dict[str, Any]) -> bool:
    """Whether a verdict is the judge's (judge_graded) on a positive criterion (points above 0): what a judge's
    credit and its disagreement with another judge are counted over (checks/overclaim.py,
    reports/distinguish.py), once decided (`met` not None)."""
    return judge_graded(verdict) and (verdict.get("points") or 0) > 0


def both_decided(judged: list[dict[str, Any]], monitored: list[dict[str, Any]]):
    """Two judges' graded records of the same answers, in the same order (verdicts in rubric order, as both graded
    the same rubrics): per positive criterion the first judged itself and both decided, (its record, its position,
    the first judge's verdict, the other's). Records that are not the same answer are an error."""
    for record, other in zip(judged, monitored):
        if record.get("id") != other.get("id"):
            raise ValueError(f"records {record.get('id')!r} and {other.get('id')!r} are not the same answer")
        for k, (verdict, peer) in enumerate(zip(record.get("verdicts") or [], other.get("verdicts") or [])):
            if verdict["criterion"] == peer["criterion"] and judged_positive(verdict):
                if verdict.get("met") is not None and peer.get("met") is not None:
                    yield record, k, verdict, peer


def judge_decisions(record: dict[str, Any]) -> tuple[int, int]:
    """(decisions asked of the judge, those it did not give) in one graded record: one per criterion the judge
    graded (judge_graded: rule checks are not the judge's), or one rating in the rating modes; none for a response
    flagged by the integrity check, one without an answer or a failed policy call. Not given: a failed call or a
    tied vote."""
    verdicts = record.get("verdicts") or []
    if verdicts:
        judged = [v for v in verdicts if judge_graded(v)]
        return len(judged), sum(v["met"] is None for v in judged)
    if record.get("integrity_flag") or record.get("no_answer") or record.get("policy_error") or "rating" not in record:
        return 0, 0
    return 1, int(record["rating"] is None)


def first_judge_error(records: Sequence[dict[str, Any]]) -> str | None:
    """The first recorded judge failure (`judge failed: ...`), the likeliest clue to what went wrong."""
    for record in records:
        for text in [v.get("explanation") for v in record.get("verdicts") or ()] + [record.get("explanation")]:
            if isinstance(text, str) and text.startswith(FAILED):
                return text
    return None


def provenance(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the graded records say produced them: the judge model and mode (each record's `judge`), the rubric
    and responses files or the policy model, and when they were graded (each record's `provenance`). A value the
    records agree on is given as such, several as a sorted list, none (records written before provenance was
    recorded, or a hand-made file) as null. Read from the records alone, so a report recomputed with
    `eval --graded` states the same provenance as the run that graded them."""

    def values(block: str, key: str) -> Any:
        found = sorted(
            {str(r[block][key]) for r in records if isinstance(r.get(block), dict) and r[block].get(key) is not None}
        )
        return None if not found else found[0] if len(found) == 1 else found

    return {
        "judge_model": values("judge", "judge_model"),
        "mode": values("judge", "mode"),
        **{key: values("provenance", key) for key in PROVENANCE_KEYS},
    }


def format_report(report: dict) -> str:
    """A table: overall first, then axes, themes and other tags, each with n and bootstrap std. Names are never
    cut: two long tags that share a prefix must stay apart."""
    metrics = report["metrics"]
    names = [n for n in metrics if ":n_samples" not in n and ":bootstrap_std" not in n and n != SCORE_ALIAS]
    order = sorted(names, key=lambda n: (n != "overall_score", not n.startswith("axis:"), n))
    width = max([42, *map(len, names)]) + 2
    lines = [f"{'metric':{width}}{'score':>8}{'n':>6}{'± std':>9}"]
    for name in order:
        lines.append(
            f"{name:{width}}{metrics[name]:8.3f}{metrics[name + ':n_samples']:6d}"
            f"{metrics[name + ':bootstrap_std']:9.3f}"
        )
    policy = f" ({report['policy_failures']} policy calls failed)" if report.get("policy_failures") else ""
    lines.append(
        f"{report['examples']} examples, {report['unscored_examples']} unscored{policy}, judge failure rate "
        f"{report['judge_failure_rate']:.1%}"
        + (f" after {report['reasked_verdicts']} re-asked" if report.get("reasked_verdicts") else "")
        + (
            f" ({report['judge_calls']} judge calls, at most {report['most_judge_calls_per_verdict']} for a verdict)"
            if report.get("judge_calls")
            else ""
        )
        + f", {report['integrity_flagged']} flagged by the integrity check"
        + (f" ({report['integrity_noted']} more noted)" if report.get("integrity_noted") else "")
        + (f", {report['no_answer']} without an answer (reasoning never closed)" if report.get("no_answer") else "")
    )
    return "\n".join(lines)
