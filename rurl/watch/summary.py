"""What a `rurl train` run leaves about itself besides the model: the summary in manifest.json and on stderr, and the
criteria's pass rates on wandb."""

import math
from pathlib import Path
from typing import Any


def log_criteria(wandb_run, criteria: list[dict[str, Any]], shown: int = 10) -> None:
    """The hardest and easiest criteria of the run as a wandb table (all of them are in criteria.json)."""
    import wandb

    ends = criteria if len(criteria) <= 2 * shown else criteria[:shown] + criteria[-shown:]
    columns = ["criterion", "pass_rate", "met", "decided"]
    wandb_run.log(
        {"criteria_pass_rates": wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in ends])}
    )


MOVED_MIN_DECIDED = 30
"""Decided verdicts a criterion needs in each window before its move is tested."""
MOVED_FDR = 0.05
"""The false discovery rate of the criteria named as moved (Benjamini-Hochberg over those tested)."""


def window_moves(
    windows: list[tuple[float, int, float, int]], min_decided: int = MOVED_MIN_DECIDED
) -> tuple[list[float | None], float]:
    """The one test behind a move between a run's first and latest windows (a criterion's in criteria.json and the
    ledger, a tag's): per (met, decided) in the first window and in the latest, the two-sided two-proportion z-test's
    p-value where each holds at least `min_decided` decided verdicts (else None), and the Benjamini-Hochberg
    threshold at MOVED_FDR over those tested."""
    from checks.evidence import bh_threshold, two_proportions

    p_values = [
        two_proportions(round(first_met), first, round(last_met), last) if min(first, last) >= min_decided else None
        for first_met, first, last_met, last in windows
    ]
    return p_values, bh_threshold([p for p in p_values if p is not None], MOVED_FDR)


def moved_most(
    criteria: list[dict[str, Any]], shown: int = 10, min_decided: int = MOVED_MIN_DECIDED
) -> list[dict[str, Any]]:
    """The criteria whose pass rate moved most between the run's first and latest windows, among those decided at
    least `min_decided` times in each whose move is significant (`window_moves`). Each row gains its `p` and
    `threshold`. The two windows hold different queries: a move is a change in what the policy's answers earn, not in
    one answer."""
    candidates = [row for row in criteria if row.get("moved") is not None]
    p_values, threshold = window_moves([(*_counts(r, "first"), *_counts(r, "last")) for r in candidates], min_decided)
    tested = [{**row, "p": p} for row, p in zip(candidates, p_values) if p is not None]
    moved = [{**row, "threshold": threshold} for row in tested if row["moved"] and row["p"] <= threshold]
    return sorted(moved, key=lambda row: (-abs(row["moved"]), row["criterion"]))[:shown]


def _counts(row: dict[str, Any], window: str) -> tuple[int, int]:
    """(met, decided) in a window (rows written before `first_met` existed: from the pass rate)."""
    decided = row[f"{window}_decided"]
    met = row.get(f"{window}_met")
    return (round(row[f"{window}_pass_rate"] * decided) if met is None else met), decided


def run_summary(
    trainer,
    monitor,
    evaluation,
    first_step: int,
    seconds: float,
    stopped: str | None,
    criteria: list[dict[str, Any]],
    alarms: list[dict[str, Any]] = (),
) -> dict[str, Any]:
    history = [entry for entry in trainer.state.log_history if "reward" in entry]
    rewards = [entry["reward"] for entry in history if entry["reward"] is not None]
    dynamic = {
        key.split("/")[-1]: sum(entry.get(key) or 0 for entry in history)
        for key in (
            "dynamic_sampling/groups_generated",
            "dynamic_sampling/groups_kept",
            "dynamic_sampling/extra_rounds",
            "dynamic_sampling/repeated_groups",
        )
        if any(key in entry for entry in history)
    }
    steps = trainer.state.global_step
    return {
        "steps": steps,
        "steps_this_run": steps - first_step,
        "seconds": round(seconds, 1),
        "reward_first": rewards[0] if rewards else None,
        "reward_last": rewards[-1] if rewards else None,
        "judge": dict(monitor.totals, seconds=round(monitor.seconds, 1)),
        "dynamic_sampling_logged": dynamic or None,
        "eval": _headline((evaluation.last or {}).get("metrics", {})) if evaluation else None,
        "monitor": _monitor(evaluation),
        "gold_best": evaluation.gold_best.summary() if evaluation and evaluation.gold_best else None,
        "alarms": list(alarms),
        "hardest_criteria": criteria[:3],
        "easiest_criteria": criteria[-3:][::-1],
        "moved_most": moved_most(criteria, shown=3),
        "no_update_steps": trainer.no_update_steps,
        "async": None if getattr(trainer, "ahead", None) is None else trainer.ahead.summary(),
        "stopped": stopped,
    }


def summary_text(summary: dict[str, Any], output_dir: Path) -> str:
    """The summary as `rurl train` ends with it, after the command's name: steps, reward, judge, criteria, eval."""
    judge = summary["judge"]
    rate = judge["unscored"] / judge["completions"] if judge["completions"] else 0.0
    first, last = summary["reward_first"], summary["reward_last"]
    lines = [
        f"{summary['steps']} steps ({summary['steps_this_run']} this run) in {summary['seconds']} s",
        f"  reward (mean per logged step): first {_num(first)}, last {_num(last)}",
        f"  judge: {judge['judge_calls']} calls in {judge['seconds']} s of reward time, {judge['completions']} "
        f"completions graded, {rate:.1%} unscored ({judge['timed_out']} past the deadline), "
        f"{judge['failed_verdicts']} of {judge['verdicts']} verdicts failed",
    ]
    if summary.get("ledger"):  # first: which criteria carried the signal, and what the flat ones cost
        from grading.ledger import headline_lines

        lines[1:1] = ["  " + line for line in headline_lines(summary["ledger"])]
    if summary["hardest_criteria"]:
        lines.append("  hardest criteria: " + "; ".join(_criterion(row) for row in summary["hardest_criteria"]))
        lines.append("  easiest criteria: " + "; ".join(_criterion(row) for row in summary["easiest_criteria"]))
    if summary.get("moved_most"):
        lines.append(
            f"  moved most (first -> latest batches; two-proportion z-test, FDR {MOVED_FDR:g}): "
            + "; ".join(
                f"{row['first_pass_rate']:.0%} of {row['first_decided']} -> {row['last_pass_rate']:.0%} of "
                f"{row['last_decided']} {_short(row['criterion'])!r} (p = {row['p']:.2g})"
                for row in summary["moved_most"]
            )
        )
    ahead = summary.get("async")
    if ahead:
        lines.append(
            f"  one step ahead: {ahead['hidden_seconds']} s of {ahead['grading_seconds']} s of grading hidden behind "
            f"generation and updates, {ahead['waited_seconds']} s waited for grades"
        )
        if ahead["untrained_batches"]:
            cancelled = ", their grading cancelled" if ahead["cancelled_completions"] else ""
            lines.append(
                f"  {ahead['untrained_batches']} batch generated ahead not trained "
                f"({ahead['untrained_completions']} completions{cancelled})"
            )
    if summary["no_update_steps"]:
        lines.append(f"  {summary['no_update_steps']} step(s) without any learning signal left the weights unchanged")
    if summary["dynamic_sampling_logged"]:
        lines.append(f"  dynamic sampling (logged steps): {summary['dynamic_sampling_logged']}")
    if summary["eval"]:
        lines.append("  eval (last): " + ", ".join(f"{k} {v:.3f}" for k, v in summary["eval"].items() if v is not None))
    monitor = summary.get("monitor")
    if monitor:
        calls = (summary.get("usage_main_process") or {}).get("monitor", {}).get("requests", 0)
        lines.append(
            f"  monitor (last eval): overall {_num(monitor.get('overall_score'))}, gap {_num(monitor.get('gap'))}, "
            f"overclaim {_pct(monitor.get('overclaim'))}, underclaim {_pct(monitor.get('underclaim'))}; "
            f"{calls} calls, {monitor['failed']:g} evaluation(s) it failed to grade"
        )
        gold = summary.get("gold_best")
        if gold:
            from rurl.watch.gold_best import line

            lines.append(f"  {line(gold)}")
        if monitor.get("most_overclaimed"):
            lines.append("  most overclaimed: " + "; ".join(repr(_short(c)) for c in monitor["most_overclaimed"]))
    if summary.get("seconds_by_phase"):
        lines.append("  time: " + ", ".join(f"{name} {s:.1f} s" for name, s in summary["seconds_by_phase"].items()))
    for alarm in summary.get("alarms") or ():
        lines.append(f"  ALARM: {alarm['line']}")
    lines.append(
        f"  output: {output_dir} (config.yaml, manifest.json, reward.png, ledger.parquet"
        f"{'' if summary['stopped'] else ', the model'})"
    )
    return "\n".join(lines)


def _monitor(evaluation) -> dict[str, Any] | None:
    """The monitor's last overall score, its gap to the training judge's, and the evaluations it failed."""
    if evaluation is None or evaluation.monitor is None:
        return None
    last = (evaluation.last or {}).get("monitor") or {}
    disagreement = (evaluation.last or {}).get("overclaim") or {}
    return {
        "overall_score": last.get("monitor/overall_score"),
        "gap": last.get("monitor/gap"),
        "overclaim": disagreement.get("overclaim"),
        "underclaim": disagreement.get("underclaim"),
        "most_overclaimed": [row["criterion"] for row in disagreement.get("top", [])[:3]],
        "failed": evaluation.monitor_failures,
    }


def _headline(metrics: dict[str, float]) -> dict[str, float]:
    """The overall score and the per-axis scores of an eval report (not their n_samples and bootstrap_std)."""
    return {
        name: value
        for name, value in metrics.items()
        if name == "overall_score" or (name.startswith("axis:") and name.count(":") == 1)
    }


def _criterion(row: dict[str, Any]) -> str:
    return f"{row['pass_rate']:.0%} of {row['decided']} {_short(row['criterion'])!r}"


def _short(text: str) -> str:
    return text if len(text) <= 50 else text[:49] + "…"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.3f}"
