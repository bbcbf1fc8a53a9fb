"""Judge agreement: how far two judges agree on the same rubric items, or a judge and physicians' labels.

    python -m experiments.judge_agreement --rubrics FILE [--responses FILE] --output-dir DIR \\
        [--judge-a CONFIG] [--a-model M --a-base-url URL --a-mode MODE --a-temperature T --a-samples K --a-prompt F] \\
        [--judge-b CONFIG] [--b-model ... (the same overrides for judge B)] [--limit N]
    python -m experiments.judge_agreement --metaeval FILE --output-dir DIR [--judge-a CONFIG] [--a-...] [--limit N]

A judge is a `rubricrl grade --config` file (its `llm:` and `grading:` sections; the role `grading.judge_role` names
judges), --a-* / --b-* flags winning. A, under study, defaults to the embedded model, per_criterion, temperature 0; B,
the reference, must be given, except with --metaeval (the physicians' majority label). Precision and recall are A's
against B. Both grade the same items (checks/study.py) on --responses ({id, response} rows), else on the rubric rows'
ideal completions (HealthBench's physician-written ones).

Prints agreement per criterion (overall and per axis tag: raw, Cohen's kappa with bootstrap std, macro F1) and per
example (Spearman, mean absolute score difference). Writes to --output-dir results.json (both judges, agreement,
usage, wall time), per_criterion.jsonl (both verdicts and explanations), per_example.jsonl (both scores),
confusion.png and config.yaml (rerun with --config). Logs to wandb (project rubricrl, group judge-agreement; offline
without WANDB_API_KEY; --no-wandb skips it).

On this CPU, the embedded model as both judges (a local server is reused or started; keep it small, 2 cores):

    OMP_NUM_THREADS=1 python -m experiments.judge_agreement \\
        --rubrics tests/data/healthbench_sample/healthbench_oss_eval_30.jsonl --limit 3 \\
        --a-mode per_criterion --b-mode batched --output-dir runs/agreement-modes
    # or temperature 0 against 1: --b-mode per_criterion --b-temperature 1.0

On a GPU box or an API: the embedded judge, then a served model, against gpt-4.1-mini (OPENAI_API_KEY); gpt-4.1-mini
against the physicians (simple-evals' 2025-05-07-06-14-12_oss_meta_eval.jsonl):

    python -m experiments.judge_agreement --rubrics tests/data/healthbench_sample/healthbench_oss_eval_30.jsonl \\
        --b-base-url https://api.openai.com/v1 --b-model gpt-4.1-mini --output-dir runs/agreement-gpt41mini
    python -m experiments.judge_agreement --rubrics ... --a-base-url http://gpu:8000/v1 \\
        --b-base-url https://api.openai.com/v1 --b-model gpt-4.1-mini --output-dir runs/agreement-qwen
    python -m experiments.judge_agreement --metaeval oss_meta_eval.jsonl --a-base-url https://api.openai.com/v1 \\
        --a-model gpt-4.1-mini --output-dir runs/metaeval-gpt41mini
"""

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks.agreement import criterion_agreement, crosstab
from checks.agreement_table import format_table, healthbench_lines
from checks.healthbench_metrics import categories_of, healthbench_report
from checks.metaeval import load_metaeval, pairwise_pairs, unit_rows
from checks.study import (
    compare_sides,
    cpu_budgets,
    grade_with_judges,
    human_side,
    judge_side,
    judge_spec,
    metaeval_examples,
    rubric_examples,
    session_settings,
    summary_metrics,
)
from grading.grader import Mode
from rubricrl import charts
from rubricrl.config import add_config_arguments, parse_settings, resolved, write_resolved
from rubricrl.errors import UserError
from rubricrl.llm import open_llm
from rubricrl.runs.jsonl import write_jsonl, write_whole

JUDGE_FLAGS = ("base_url", "model", "mode", "temperature", "samples", "prompt")


@dataclass
class StudyArgs:
    output_dir: Path
    """Where results.json, per_criterion.jsonl, per_example.jsonl, confusion.png and config.yaml go."""
    rubrics: Path | None = None
    """Rubric dataset (HealthBench, a synthesis output, RaR rows): the examples both judges grade."""
    responses: Path | None = None
    """{id, response} rows to grade (ids as in --rubrics); default: the rubric rows' ideal completions."""
    metaeval: Path | None = None
    """HealthBench meta-eval rows (prompt, completion, rubric, binary_labels): judge A against the physicians'
    majority labels, and HealthBench's pairwise F1 against each label."""
    judge_a: Path | None = None
    """Judge A's config (llm: and grading: sections, as `rubricrl grade --config` takes); default: the embedded
    model, per_criterion, temperature 0."""
    a_base_url: str | None = None
    """Judge A's endpoint (key from OPENAI_API_KEY or the role's api_key_env); default: the embedded model."""
    a_model: str | None = None
    """Judge A's model (with a base_url and no model: the one model the endpoint serves)."""
    a_mode: Mode | None = None
    """Judge A's grading mode."""
    a_temperature: float | None = None
    a_samples: int | None = None
    """Judge A's samples per verdict (majority vote)."""
    a_prompt: str | None = None
    """A judge prompt file replacing the mode's default (grading.judge_prompt)."""
    judge_b: Path | None = None
    """Judge B's config (the reference judge); not with --metaeval."""
    b_base_url: str | None = None
    b_model: str | None = None
    b_mode: Mode | None = None
    b_temperature: float | None = None
    b_samples: int | None = None
    b_prompt: str | None = None
    limit: int | None = None
    """Grade only the first N examples (meta-eval: the first N completions)."""
    points: int = 1
    """Meta-eval: the points each criterion gets (the rows carry none; positive, so a score is the share met)."""
    concurrency: int | None = None
    """Requests in flight over both judges; default: the judges' configs' (16)."""
    cache: bool = True
    """Use the response cache (--no-cache: every call sent)."""
    bootstrap: int = 1000
    """Bootstrap resamples for the std of kappa, agreement, macro F1 and Spearman."""
    seed: int = 0
    wandb: bool = True
    """Log to wandb (offline without WANDB_API_KEY)."""

    def __post_init__(self) -> None:
        if (self.rubrics is None) == (self.metaeval is None):
            raise ValueError("give either --rubrics (two judges) or --metaeval (a judge against physicians)")
        given_b = self.judge_b is not None or any(self.judge("b").values())
        if self.metaeval is not None and (given_b or self.responses is not None):
            raise ValueError("--metaeval compares judge A with the physicians' labels: no judge B, no --responses")
        if self.rubrics is not None and not given_b:
            raise ValueError(
                "give judge B: --judge-b CONFIG or --b-* flags (e.g. --b-mode batched, or --b-base-url "
                "https://api.openai.com/v1 --b-model gpt-4.1-mini)"
            )
        if (self.limit is not None and self.limit < 1) or self.bootstrap < 0 or self.points < 1:
            raise ValueError("limit and points must be at least 1, bootstrap at least 0")

    def judge(self, name: str) -> dict[str, Any]:
        return {
            key: getattr(self, f"{name}_{key}") for key in JUDGE_FLAGS if getattr(self, f"{name}_{key}") is not None
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(parser, [StudyArgs])
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (UserError, FileNotFoundError) as error:
        print(f"judge_agreement: error: {error}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    (study,) = settings = parse_settings(args, command="judge_agreement")
    judges = [judge_spec("a", study.judge_a, **study.judge("a"))]
    if study.metaeval is None:
        judges.append(judge_spec("b", study.judge_b, **study.judge("b")))
        examples = rubric_examples(study.rubrics, study.responses, study.limit)
    else:
        units = load_metaeval(study.metaeval, study.limit)
        examples = metaeval_examples(units, study.points)
    names = ("judge A", "judge B") if study.metaeval is None else ("judge", "physicians")
    for judge, name in zip(judges, names):
        print(f"{name}: {judge.describe()}", file=sys.stderr)
    out = study.output_dir
    out.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    llm = session_settings(judges, concurrency=study.concurrency, cache=study.cache)
    with open_llm(
        llm, [j.role_name for j in judges], source="judge_agreement", cpu_budgets=cpu_budgets(judges)
    ) as session:
        graded = asyncio.run(grade_with_judges(session, judges, [e.item for e in examples]))
        roles = {j.name: session.roles[j.role_name].public() for j in judges}
    seconds = time.monotonic() - started

    side_a = [judge_side(g, judges[0]) for g in graded["graded"]["a"]]
    if study.metaeval is None:
        side_b = [judge_side(g, judges[1]) for g in graded["graded"]["b"]]
    else:
        side_b = [human_side(u, study.points, judges[0].grading.min_coverage) for u in units]
    comparison = compare_sides(examples, side_a, side_b, samples=study.bootstrap, seed=study.seed)
    result = comparison.agreement
    pairwise = healthbench = None
    if study.metaeval is not None and judges[0].explicit:  # HealthBench's own numbers: the judge against each label
        healthbench = healthbench_report(**unit_rows(units, [s.met for s in side_a]))
        pairs = pairwise_pairs(units, [s.met for s in side_a])
        pairwise = criterion_agreement(
            [p.a for p in pairs],
            [p.b for p in pairs],
            groups=[p.group for p in pairs],
            samples=study.bootstrap,
            seed=study.seed,
        ).to_dict()

    config = resolved(settings, judges={j.name: j.to_dict() for j in judges})
    results = {
        "judges": {
            j.name: {
                **j.to_dict(),
                "role": roles[j.name],
                "grader": graded["metadata"][j.name],
                "usage": graded["usage"][j.name],
            }
            for j in judges
        },
        "reference": "physicians (majority of binary_labels; ties undecided)" if study.metaeval else "judge b",
        "examples": len(examples),
        "rule_decided": comparison.rule_decided,
        "wall_seconds": seconds,
        "agreement": result.to_dict(),
        "healthbench": healthbench,
        "healthbench_pairwise": pairwise,
        "crosstab": crosstab([r["a"] for r in comparison.criteria], [r["b"] for r in comparison.criteria])
        if comparison.criteria is not None
        else None,
    }
    write_whole(out / "results.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    write_jsonl(out / "per_criterion.jsonl", comparison.criteria or [])
    write_jsonl(out / "per_example.jsonl", comparison.examples)
    write_resolved(out / "config.yaml", resolved(settings))
    plot = plot_confusion(results["crosstab"], result, names, out / "confusion.png") if results["crosstab"] else None
    if healthbench is not None:
        plot_healthbench(healthbench, out / "healthbench.png")

    print(format_table(result, names))
    if healthbench is not None:
        print("\n".join(healthbench_lines(healthbench)))
    if pairwise is not None:
        print(
            f"the same pairs, ours: macro F1 {_f(pairwise['macro_f1'])} ± {_f(pairwise['bootstrap_std']['macro_f1'])} "
            f"(bootstrap over completions) over {pairwise['decided']} pairs"
        )
    usage = ", ".join(
        f"{j.name}: {u['requests']} calls, {u['cache_hits']} cached" for j, u in zip(judges, graded["usage"].values())
    )
    print(f"{len(examples)} examples in {seconds:.1f} s ({usage}); outputs in {out}")
    if session.budget_note():
        print(session.budget_note(), file=sys.stderr)
    if study.wandb:
        extra = {"wall_seconds": seconds, "healthbench/pairwise_macro_f1": pairwise["macro_f1"] if pairwise else None}
        log_wandb(out, config, result, extra, comparison.criteria, plot)
    return 0


def plot_healthbench(report: dict[str, Any], path: Path) -> Path | None:
    """HealthBench's chart: per category (and overall) the judge's pairwise balanced F1, beside the range of the
    physicians' own (min to max over physicians, the mean marked)."""
    if not charts.available():
        return None
    names = ["overall", *categories_of(report)]
    keys = ["pairwise_model_f1_balanced", *(f"{c}: pairwise_model_f1_balanced" for c in names[1:])]
    figure, axis = charts.figure(7.2, 0.5 + 0.45 * len(names))
    for y, key in enumerate(keys):
        spread = report["physician_spread"].get(key.replace("model", "physician"))
        if spread is not None:
            axis.plot([spread["min"], spread["max"]], [y, y], color="0.7", linewidth=6, solid_capstyle="butt")
            axis.plot([spread["mean"]], [y], "|", color="0.3", markersize=12)
        judge = (report["model"].get(key) or {}).get("value")
        if judge is not None:
            axis.plot([judge], [y], "o", color="C0")
    axis.set_yticks(range(len(names)), [n.removeprefix("cluster:")[:40] for n in names])
    axis.invert_yaxis()
    axis.set(xlim=(0, 1), xlabel="pairwise balanced F1 (dot: judge; bar: physicians, min-max, mean marked)")
    path.write_bytes(charts.png(figure))
    return path


def plot_confusion(table: dict[str, dict[str, int]], result, names: tuple[str, str], path: Path) -> Path | None:
    """A's verdict (rows) against B's (columns), undecided included, counts in the cells."""
    if not charts.available():  # the `train` extra brings matplotlib; without it the counts stay in results.json
        return None
    labels = ["met", "not_met", "undecided"]
    counts = [[table[x][y] for y in labels] for x in labels]
    figure, axis = charts.figure(5, 4.4)
    image = axis.imshow(counts, cmap="Blues")
    for i in range(3):
        for j in range(3):
            dark = counts[i][j] > max(map(max, counts)) / 2
            axis.text(j, i, str(counts[i][j]), ha="center", va="center", color="white" if dark else "black")
    ticks = ["met", "not met", "undecided"]
    axis.set_xticks(range(3), ticks)
    axis.set_yticks(range(3), ticks)
    c = result.criteria
    kappa = "-" if c.kappa is None else f"{c.kappa:.3f}"
    agreement = "-" if c.agreement is None else f"{c.agreement:.3f}"
    axis.set(
        xlabel=f"{names[1]}",
        ylabel=f"{names[0]}",
        title=f"criteria: agreement {agreement}, kappa {kappa}\n{c.decided} decided, {c.undecided} undecided",
    )
    figure.colorbar(image, ax=axis, fraction=0.046)
    return charts.save_png(figure, path)


def log_wandb(
    out: Path, config: dict, result, extra: dict[str, float], criteria: list[dict] | None, plot: Path | None
) -> None:
    import wandb

    from rubricrl.runs.training import wandb_init

    run = wandb_init("judge_agreement", out, group="judge-agreement", config=config, job_type="judge-agreement")
    numbers = {**summary_metrics(result), **{k: v for k, v in extra.items() if v is not None}}
    logged: dict[str, Any] = dict(numbers)
    if plot is not None:
        logged["confusion"] = wandb.Image(str(plot))
    if criteria:
        columns = ["id", "criterion", "points", "a", "b", "agree", "a_explanation", "b_explanation"]
        logged["per_criterion"] = wandb.Table(
            columns=columns,
            data=[[str(r[k]) if k in ("a", "b", "agree") else r[k] for k in columns] for r in criteria[:10000]],
        )
    run.log(logged)
    run.summary.update(numbers)
    run.finish()


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
