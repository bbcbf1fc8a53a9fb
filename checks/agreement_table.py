"""Two judges' agreement (checks/agreement.py's AgreementResult), and HealthBench's meta-evaluation figures beside the
physicians' (checks/healthbench_metrics.py), as the text tables experiments/judge_agreement.py prints."""

from checks.agreement import AgreementResult
from checks.healthbench_metrics import categories_of


def format_table(result: AgreementResult, names: tuple[str, str] = ("A", "B"), max_tags: int = 20) -> str:
    """Per criterion overall and per axis tag (every tag, up to `max_tags`, when none is an axis: HealthBench's
    meta-evaluation tags criteria by category), then the per-example line."""
    lines = []
    if result.criteria is not None:
        lines.append(f"{'criteria':44}{'decided':>8}{'undec.':>7}{'agree':>7}{'kappa':>8}{'± std':>7}{'macro F1':>9}")
        tags = [t for t in result.by_tag if t.startswith("axis:")] or list(result.by_tag)[:max_tags]
        for name, stats in [("overall", result.criteria), *((t, result.by_tag[t]) for t in tags)]:
            lines.append(
                f"{name[:44]:44}{stats.decided:8d}{stats.undecided:7d}{_f(stats.agreement, 7)}"
                f"{_f(stats.kappa, 8)}{_f(stats.bootstrap.get('kappa'), 7)}{_f(stats.macro_f1, 9)}"
            )
        left = len(result.by_tag) - len(tags)
        if left > 0:
            lines.append(f"({left} more tags in results.json)")
        c = result.criteria.confusion
        lines.append(
            f"confusion ({names[0]} vs {names[1]}): both met {c.both_met}, {names[0]} only {c.a_only}, "
            f"{names[1]} only {c.b_only}, neither {c.neither}; undecided: {names[0]} only "
            f"{result.criteria.undecided_a}, {names[1]} only {result.criteria.undecided_b}, both "
            f"{result.criteria.undecided_both}"
        )
    else:
        lines.append("criteria: not compared (a side gives one rating per example, no verdict per criterion)")
    s = result.scores
    lines.append(
        f"examples: {s.paired} of {s.examples} scored by both; Spearman {_f(s.spearman)} ± "
        f"{_f(s.bootstrap.get('spearman'))}, Pearson {_f(s.pearson)}, mean |{names[0]} - {names[1]}| "
        f"{_f(s.mean_abs_diff)}, mean {names[0]} {_f(s.mean_a)}, mean {names[1]} {_f(s.mean_b)}"
    )
    return "\n".join(lines)


def _f(value: float | None, width: int = 0) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.3f}"


def healthbench_lines(report: dict) -> list[str]:
    """HealthBench's figure (checks/healthbench_metrics.py), overall and per category, each beside the physicians'
    own agreement with each other on the same rows (mean and range over physicians)."""
    key = "pairwise_model_f1_balanced"
    lines = [f"{'HealthBench ' + key:58}{'pairs':>7}{'judge':>7}{'physicians mean (min-max)':>28}"]
    for category in [None, *categories_of(report)]:
        name = key if category is None else f"{category}: {key}"
        judge = report["model"].get(name) or {"n": 0, "value": None}
        spread = report["physician_spread"].get(name.replace("model", "physician"))
        physicians = (
            "-"
            if spread is None
            else (f"{spread['mean']:.3f} ({spread['min']:.3f}-{spread['max']:.3f}, {spread['physicians']})")
        )
        label = "overall" if category is None else category
        lines.append(f"{label[:58]:58}{judge['n']:7.0f}{_f(judge['value'], 7)}{physicians:>28}")
    if report["judge_undecided"]:
        lines.append(f"{report['judge_undecided']} judge verdict(s) undecided: left out (simple-evals asks again)")
    lines += [f"note: {note}" for note in report["missing"]]
    return lines
