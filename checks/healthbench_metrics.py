"""HealthBench's meta-evaluation figures as simple-evals reports them (`healthbench_meta_eval.py`,
openai/simple-evals ee3b031), under its names: the judge against each physician's label, and each physician against
the other physicians on the same rows, overall and per category (pure).

For a rater (the judge, or one physician) and each of its verdicts against each other label of the row:
- `pairwise_{rater}_precision_{pos|neg}`: agreement over the pairs where the rater said pos (neg): TP / (TP + FP);
- `pairwise_{rater}_recall_{pos|neg}`: agreement over the pairs where the other label is pos (neg): TP / (TP + FN);
- `pairwise_{rater}_f1_{pos|neg}` from those two, and `..._balanced`: the mean of the pos and neg figures (its `n`
  counts both sides, as simple-evals' does). `pairwise_model_f1_balanced` is the figure HealthBench reports.
Each key also per category, as `"{category}: {key}"`. Every figure is {n, value}; value None where n is 0.

Two things differ from simple-evals, by design: a judge verdict left undecided (simple-evals asks again until the
judge says true or false) takes no part and is counted apart; and the rows are those given (simple-evals draws a
seeded sample of rows with `num_examples`; `--limit` here takes the first completions).
"""

from collections import defaultdict
from collections.abc import Sequence
from statistics import fmean
from typing import Any

Met = bool | None
Figure = dict[str, float | None]


def rater_metrics(
    own: Sequence[bool], others: Sequence[Sequence[bool]], categories: Sequence[str | None], rater: str
) -> dict[str, Figure]:
    """simple-evals' `compute_metrics_for_rater_by_class`: `own[i]` against each of `others[i]` (row i's other
    labels), overall and per category (a row without one only overall)."""
    agreed: dict[str, list[bool]] = defaultdict(list)
    for mine, theirs, category in zip(own, others, categories, strict=True):
        for other in theirs:
            for metric, side in (("precision", mine), ("recall", other)):
                key = f"pairwise_{rater}_{metric}_{'pos' if side else 'neg'}"
                agreed[key].append(mine == other)
                if category is not None:
                    agreed[f"{category}: {key}"].append(mine == other)
    metrics: dict[str, Figure] = {key: {"n": len(v), "value": sum(v) / len(v)} for key, v in agreed.items()}
    for key in [k for k in metrics if "precision" in k]:
        recall = key.replace("precision", "recall")
        if recall in metrics:
            metrics[key.replace("precision", "f1")] = _f1(metrics[key], metrics[recall])
    for key in [k for k in metrics if k.endswith("_pos")]:
        negative = key[: -len("pos")] + "neg"
        if negative in metrics:
            pos, neg = metrics[key], metrics[negative]
            both = None if pos["value"] is None or neg["value"] is None else (pos["value"] + neg["value"]) / 2
            metrics[key[: -len("pos")] + "balanced"] = {"n": pos["n"] + neg["n"], "value": both}
    return metrics


def _f1(precision: Figure, recall: Figure) -> Figure:
    """simple-evals' `compute_f1_metric`: n counts TP + FP + FN."""
    p, r = precision["value"], recall["value"]
    if p is None or r is None:
        return {"n": precision["n"] + recall["n"], "value": None}
    true_positives = p * precision["n"]
    n = precision["n"] + recall["n"] - true_positives
    return {"n": n, "value": 0.0 if p == 0 and r == 0 else 2 * p * r / (p + r)}


def judge_metrics(labels: Sequence[Sequence[bool]], verdicts: Sequence[Met], categories: Sequence[str | None]) -> dict:
    """The judge against every physician label of its decided rows; undecided verdicts counted apart."""
    decided = [i for i, v in enumerate(verdicts) if v is not None]
    metrics = rater_metrics(
        [verdicts[i] for i in decided], [labels[i] for i in decided], [categories[i] for i in decided], "model"
    )
    return {"metrics": metrics, "rows": len(decided), "undecided": len(verdicts) - len(decided)}


def physician_metrics(
    labels: Sequence[Sequence[bool]], physicians: Sequence[Sequence[str] | None], categories: Sequence[str | None]
) -> dict:
    """Each physician against the other physicians on the rows they labelled (simple-evals'
    `physician_agreement_metric_lists`), and per figure the spread over physicians: {mean, min, max, physicians}.
    Rows without physician ids take no part."""
    by_physician: dict[str, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    for row_labels, ids, category in zip(labels, physicians, categories, strict=True):
        for i, physician in enumerate(ids or ()):
            own, others, their_categories = by_physician[physician]
            own.append(row_labels[i])
            others.append([*row_labels[:i], *row_labels[i + 1 :]])
            their_categories.append(category)
    each = {physician: rater_metrics(*lists, "physician") for physician, lists in sorted(by_physician.items())}
    spread: dict[str, dict[str, Any]] = {}
    for key in sorted({k for metrics in each.values() for k in metrics}):
        values = [m[key]["value"] for m in each.values() if key in m and m[key]["value"] is not None]
        if values:
            spread[key] = {"mean": fmean(values), "min": min(values), "max": max(values), "physicians": len(values)}
    return {"physicians": each, "spread": spread}


def row_averages(labels: Sequence[Sequence[bool]], verdicts: Sequence[Met], categories: Sequence[str | None]) -> dict:
    """simple-evals' per-row means: physician labels per row, their share positive, and the judge's share of rows
    predicted positive (its decided rows); overall and per category."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, category in enumerate(categories):
        groups[""].append(i)
        if category is not None:
            groups[f"{category}: "].append(i)
    out: dict[str, float] = {}
    for prefix, rows in groups.items():
        out[f"{prefix}num_physician_labels"] = fmean(len(labels[i]) for i in rows)
        out[f"{prefix}percent_physician_pos"] = fmean(sum(labels[i]) / len(labels[i]) for i in rows)
        decided = [verdicts[i] for i in rows if verdicts[i] is not None]
        if decided:
            out[f"{prefix}model_predicted_positive"] = fmean(decided)
    return out


def healthbench_report(
    labels: Sequence[Sequence[bool]],
    verdicts: Sequence[Met],
    categories: Sequence[str | None],
    physicians: Sequence[Sequence[str] | None],
) -> dict[str, Any]:
    """All of it, for one judge's verdicts on meta-eval rows, with what could not be computed said."""
    judge = judge_metrics(labels, verdicts, categories)
    found = physician_metrics(labels, physicians, categories)
    missing = []
    if all(c is None for c in categories):
        missing.append("no row has a category: no per-category figures")
    if all(not p for p in physicians):
        missing.append("no row has anonymized_physician_ids: no physician baseline")
    return {
        "source": "simple-evals healthbench_meta_eval.py (ee3b031) formulas",
        "rows": len(verdicts),
        "judge_undecided": judge["undecided"],
        "model": judge["metrics"],
        "per_row": row_averages(labels, verdicts, categories),
        "physician_spread": found["spread"],
        "physicians": found["physicians"],
        "missing": missing,
    }


def categories_of(report: dict[str, Any]) -> list[str]:
    """The categories the report has a judge figure for, sorted."""
    suffix = ": pairwise_model_f1_balanced"
    return sorted(key[: -len(suffix)] for key in report["model"] if key.endswith(suffix))
