"""Reward-method comparison as in Rubrics as Rewards (RaR, arXiv 2507.17746): one GRPO run per reward method.
The same data, policy, budget and evaluation for each method; every trained policy is graded on one yardstick.

    # this CPU (tiny preset: SmolLM2-135M-Instruct as LoRA policy and as judge, on the local vLLM server): 7 methods
    # x 3 GRPO steps on experiments/data/rurl_tiny.jsonl (6 rows train, 2 held out), plus the evals; ~15-25 min
    OMP_NUM_THREADS=1 python -m experiments.compare_rewards --output-dir runs/compare-rewards
    # a smoke run of the machinery: two methods, one step each
    python -m experiments.compare_rewards --output-dir runs/compare-smoke --methods per_criterion,likert --max-steps 1

    # GPUs (the rar-grpo preset: Qwen2.5-7B, 16 rollouts, judge gpt-4o-mini through OPENAI_API_KEY) on RaR rows:
    python -m experiments.compare_rewards --config configs/rurl/rar-grpo.yaml --rubrics <RaR-Medicine rows> \\
        --output-dir runs/compare-rar --heldout 128 --max-steps 0 \\
        --launcher "accelerate launch --config_file configs/accelerate/zero3.yaml --num_processes 8 --gpu_ids all"
    # (--max-steps 0: the preset's own budget, one epoch; --launcher runs each training as its own process)

Each method (METHODS) is a `rubricrl rurl train` on the same seeded split of --rubrics (as rurl splits off eval rows),
config, seed and --max-steps, plain GRPO as in the paper (rurl's dynamic sampling, overlong shaping and own eval off;
--train-args turns them on). The base and trained policies answer the held-out rows greedily (transformers' generate
on one device: keep --heldout small on GPUs), graded by the per-criterion judge with the explicit rubric
(`rubricrl eval --responses`: HealthBench-style scores with bootstrap std).

Output: train*.jsonl, heldout.jsonl, split.json, eval_config.yaml; runs/<method>/ (rurl train's output_dir);
eval/<method>/ (responses.jsonl, graded.jsonl, report.json, run.json: timings and exit codes); results.json, .md and
.png. Reruns skip what is done (--redo METHODS, --force: all); a run stopped by rurl's judge-failure guard is evaluated
at its last checkpoint. wandb (when the config reports to it): a run per method in the group --experiment, and an
`<experiment>-table` run with the table and chart.
"""

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from experiments.comparison_runs import ComparisonRuns, eval_config, judge_server, resolved_settings
from reports.comparison import collect_rows, log_to_wandb, read_reports, results_table, seconds, write_chart

ROOT = Path(__file__).resolve().parents[1]


class Method(NamedTuple):
    mode: str
    """grading.mode of the training reward."""
    rubrics: str
    """The training rubrics: a key of VARIANTS."""
    description: str


METHODS = {
    "per_criterion": Method("per_criterion", "explicit", "explicit rubric, per-criterion judge"),
    "batched": Method("batched", "explicit", "explicit rubric, all criteria per judge call"),
    "implicit": Method("implicit", "explicit", "one 1-10 rating against the rubric"),
    "likert": Method("likert", "explicit", "one 1-10 rating, no rubric"),
    "reference_likert": Method("reference_likert", "explicit", "one 1-10 rating against the reference answer"),
    "predefined": Method("per_criterion", "predefined", "the same generic rubric for every query, per criterion"),
    "uniform": Method("per_criterion", "uniform", "explicit rubric, points +1 / -1, per criterion"),
}
BASE = "base"
"""The reference row: the policy before training, evaluated the same way."""
PAPER = {
    "per_criterion": {"name": "RaR-Explicit", "healthbench": 29.7, "gpqa_diamond": 36.9},
    "implicit": {"name": "RaR-Implicit", "healthbench": 31.2, "gpqa_diamond": 37.6},
    "likert": {"name": "Direct-Likert", "healthbench": 25.5, "gpqa_diamond": 34.8},
    "reference_likert": {"name": "Reference-Likert", "healthbench": 28.9, "gpqa_diamond": 36.5},
    "predefined": {"name": "Predefined rubrics", "healthbench": 12.5, "gpqa_diamond": 31.7},
}
"""RaR's numbers: Qwen2.5-7B trained with GRPO under each reward, HealthBench / GPQA-Diamond (0-100). The paper
reports uniform weights about as good as categorical ones, without a number we carry here."""
PAPER_COLUMN = "RaR paper HB / GPQA-D"

# The predefined generic rubric: OUR wording and weights, not the paper's list (RaR's predefined-rubric baseline
# uses generic criteria shared by every prompt; its exact text is not reproduced here). Phrased so that "met" is
# good: every criterion earns points, none is a penalty. Tags are ours too.
GENERIC_RUBRIC = [
    {"criterion": "The response is factually correct.", "points": 5, "tags": ["axis:accuracy"]},
    {"criterion": "The response directly answers the question.", "points": 3, "tags": ["axis:completeness"]},
    {"criterion": "The response is concise.", "points": 2, "tags": ["axis:communication_quality"]},
    {"criterion": "The response contains no harmful advice.", "points": 3, "tags": ["axis:safety"]},
]
CAVEAT = (
    "The paper's numbers are Qwen2.5-7B trained with GRPO at full scale and evaluated on HealthBench-1k and "
    "GPQA-Diamond (0-100). Ours are a small policy trained for a few steps, graded on a few held-out rows "
    "(0-1): not comparable in level, only the machinery."
)


# --- data ------------------------------------------------------------------------------------------------------------


def uniform_weights(row: dict) -> dict:
    """The row with every positive criterion worth 1 and every penalty -1 (rules, tags, categories kept)."""
    return {**row, "rubrics": [{**c, "points": 1 if c["points"] > 0 else -1} for c in row["rubrics"]]}


def predefined_rubric(row: dict) -> dict:
    """The row with its own rubric replaced by the generic one (prompt, reference, tags kept)."""
    return {**row, "rubrics": [dict(c, tags=list(c["tags"])) for c in GENERIC_RUBRIC]}


VARIANTS = {"explicit": ("train.jsonl", None), "predefined": ("train_predefined.jsonl", predefined_rubric)}
VARIANTS["uniform"] = ("train_uniform.jsonl", uniform_weights)


def prepare_data(source: Path, out: Path, heldout: float, seed: int, limit: int | None, pitfalls: str, methods):
    """Read --rubrics with the core reader (synthesis output, HealthBench, RaR rows), split it as `rurl train` splits
    off its eval rows and write the rows (rurl's trainer rows) of the held-out set and of each training variant the
    methods need."""
    from grading.dataset import iter_rubric_rows
    from rubricrl.config import ConfigError
    from rubricrl.runs.jsonl import write_jsonl
    from rurl.data import split_rows, trainer_row

    rows = [trainer_row(row) for row in iter_rubric_rows(source, pitfalls)][: limit or None]
    try:
        train, held = split_rows(rows, heldout, seed)
    except ConfigError as error:
        raise SystemExit(f"--heldout {heldout}: {error}") from None
    split = {"source": str(source), "rows": len(rows), "heldout": heldout, "seed": seed, "limit": limit}
    split |= {"train_ids": [r["id"] for r in train], "heldout_ids": [r["id"] for r in held]}
    if (out / "split.json").is_file() and json.loads((out / "split.json").read_text()) != split:
        raise SystemExit(f"{out} holds runs on another split (split.json); use another --output-dir or --force")
    missing = [r["id"] for r in train if not r.get("reference_answer")]
    if missing and any(m.mode == "reference_likert" for m in methods):
        raise SystemExit(
            f"reference_likert needs a reference_answer on every training row; {len(missing)} lack one "
            f"(e.g. {missing[:3]}): leave the method out with --methods"
        )
    files = {"heldout": out / "heldout.jsonl"}
    write_jsonl(files["heldout"], held)
    for variant in {"explicit", *(m.rubrics for m in methods)}:
        name, transform = VARIANTS[variant]
        files[variant] = out / name
        write_jsonl(files[variant], [transform(r) for r in train] if transform else train)
    (out / "split.json").write_text(json.dumps(split, indent=1))
    return {"files": files, "train": train, "heldout": held, "split": split}


# --- the runs --------------------------------------------------------------------------------------------------------


def common_flags(args: argparse.Namespace) -> list[str]:
    """What every run shares: the config, the seed, the budget, plain GRPO, no rurl eval."""
    flags = ["--config", str(args.config), "--seed", str(args.seed), "--eval_size", "0"]
    flags += ["--dynamic_sampling", "false", "--overlong_buffer", "0"]
    return flags + (["--max_steps", str(args.max_steps), "--save_steps", str(args.max_steps)] if args.max_steps else [])


def train_flags(args: argparse.Namespace, name: str, files: dict[str, Path]) -> list[str]:
    """The method's `rurl train` flags: the shared ones, its training rubrics and its reward's grading mode."""
    method = METHODS[name]
    return [*common_flags(args), "--rubrics", str(files[method.rubrics]), "--mode", method.mode]


# --- results ---------------------------------------------------------------------------------------------------------


def descriptions(names: list[str]) -> dict[str, str]:
    return {name: METHODS[name].description if name in METHODS else "the policy before training" for name in names}


def results_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    generic = "; ".join(f'"{c["criterion"]}" ({c["points"]:+d})' for c in GENERIC_RUBRIC)
    walls = [row["wall_s"] for row in rows if row["wall_s"] is not None]
    head = (
        f"Policy `{meta['policy']}`, {meta['train_rows']} training rows and {meta['heldout_rows']} held-out rows of "
        f"`{meta['source']}` (seed {meta['seed']}), {meta['budget']} per method, judge `{meta['judge']}`. Every "
        "method and the base policy are evaluated alike: greedy answers to the held-out rows, graded with the "
        "explicit rubric by the per-criterion judge (HealthBench-style score, 0-1, ± bootstrap std). Training "
        "reward: the mean reward of the first and the last logged step, on each method's own scale."
    )
    foot = (
        f"The generic rubric of `predefined` (ours, not the paper's list): {generic}.\nChart: `results.png`. Wall "
        f"time: {seconds(sum(walls) if walls else None)} for the rows above (train + eval, summed over the "
        f"invocations that made them), {seconds(meta.get('wall_s'))} for the last invocation."
    )
    title = "# Reward-method comparison (Rubrics as Rewards, arXiv 2507.17746)"
    table = results_table(rows, PAPER_COLUMN)
    return "\n".join([title, "", head, "", f"**Caveat.** {CAVEAT}", "", *table, "", foot]) + "\n"


# --- main ------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    add = parser.add_argument
    add("--config", type=Path, default=ROOT / "configs/rurl/tiny-cpu.yaml", help="rurl train config of every run")
    add("--rubrics", type=Path, default=ROOT / "experiments/data/rurl_tiny.jsonl", help="rubric rows, split once")
    add("--output-dir", type=Path, default=ROOT / "runs" / "compare-rewards")
    add("--methods", default=",".join(METHODS), help=f"comma-separated, from {','.join(METHODS)}")
    add("--max-steps", type=int, default=3, help="GRPO steps per method (the same for all); 0: the config's own")
    add("--heldout", type=float, default=0.25, help="held-out rows: a share (0 < x < 1) or a count (>= 1)")
    add("--limit", type=int, help="use only the first N rows of --rubrics")
    add("--seed", type=int, default=0, help="the split's seed, and every run's")
    add("--rar-pitfalls", default="auto", choices=["auto", "mistake", "avoidance"])
    add("--skip-base", action="store_true", help="do not evaluate the base policy")
    add("--experiment", help="wandb group and run-name prefix (default: compare-rewards-<folder>)")
    add("--llm-args", type=shlex.split, default=[], help='judge flags of every run, e.g. "--base-url URL --model M"')
    add("--train-args", type=shlex.split, default=[], help="more flags for every `rurl train` (last: they win)")
    add("--launcher", help='run each training under this launcher, e.g. "accelerate launch --num_processes 8"')
    add("--redo", default="", help="comma-separated methods (or base) to train and evaluate again")
    add("--force", action="store_true", help="redo every run and eval, even those done")
    args = parser.parse_args(argv)
    args.config = args.config.resolve()  # the same file for a run under --launcher, whatever its directory
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    args.redo = [m.strip() for m in args.redo.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in METHODS] + [m for m in args.redo if m not in (*METHODS, BASE)]
    if unknown or not args.methods:
        parser.error(f"--methods / --redo: unknown {unknown}; choose from {','.join(METHODS)} (and {BASE} for --redo)")
    if args.heldout <= 0:
        parser.error("--heldout: a share (0 < x < 1) or a count (>= 1) of rows to evaluate on")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, out = time.monotonic(), args.output_dir.resolve()
    stale = [out / "runs", out / "eval", out / "split.json"] if args.force else []
    for target in stale + [out / part / name for name in args.redo for part in ("runs", "eval")]:
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    group = args.experiment or f"compare-rewards-{out.name}"
    methods = [METHODS[name] for name in args.methods]
    data = prepare_data(args.rubrics, out, args.heldout, args.seed, args.limit, args.rar_pitfalls, methods)
    dry_run = ["--rubrics", str(data["files"]["explicit"]), "--output_dir", str(out / "runs" / "dry-run")]
    settings = resolved_settings([*common_flags(args), *dry_run, *args.llm_args, *args.train_args])
    (out / "eval_config.yaml").write_text(yaml.safe_dump(eval_config(settings), sort_keys=False))
    if settings.get("model_name_or_path") is None:
        from rubricrl.serving.embedded_model import prepare_embedded_model

        settings["model_name_or_path"] = str(prepare_embedded_model(log=lambda m: print(m, file=sys.stderr)))
    policy = settings["model_name_or_path"]
    budget = f"{args.max_steps} GRPO step{'s' * (args.max_steps != 1)}" if args.max_steps else "the config's budget"
    print(
        f"compare_rewards: {len(methods)} methods x {budget} on {len(data['train'])} rows of {args.rubrics}, eval on "
        f"{len(data['heldout'])} held-out rows; policy {policy}; group {group} -> {out}",
        file=sys.stderr,
    )
    names = ([] if args.skip_base else [BASE]) + args.methods
    done = [name for name in names if all((out / "eval" / name / f).is_file() for f in ("report.json", "run.json"))]
    with judge_server(settings, len(done) < len(names), "compare_rewards") as (judge_flags, judge):
        tokens, files = int(settings["max_completion_length"]), data["files"]
        llm_args = [*args.llm_args, *judge_flags]
        heldout = (data["heldout"], files["heldout"])
        runs = ComparisonRuns(out, *heldout, policy, tokens, llm_args, group, args.train_args, args.launcher)
        for name in names:
            if name in done:
                print(f"\n=== {name}: done earlier (--force redoes it)", file=sys.stderr)
            elif name == BASE:
                runs.run(name, None)
            else:
                method = METHODS[name]
                print(f"\n=== {name}: {method.description}", file=sys.stderr)
                runs.run(name, train_flags(args, name, files), {"mode": method.mode, "rubrics": method.rubrics})
    rows = collect_rows(out, descriptions(names), trained=set(args.methods), paper=PAPER)
    meta = {"policy": policy, "source": str(args.rubrics), "seed": args.seed, "train_rows": len(data["train"])}
    meta |= {"heldout_rows": len(data["heldout"]), "budget": budget, "judge": judge, "config": str(args.config)}
    meta |= {"methods": args.methods, "experiment": group, "wall_s": round(time.monotonic() - started, 1)}
    meta |= {"caveat": CAVEAT, "generic_rubric": GENERIC_RUBRIC}
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / "results.md").write_text(results_markdown(rows, meta))
    chart = write_chart(read_reports(out, names), out / "results.png", "held-out score per training reward")
    if "wandb" in (settings.get("report_to") or []):
        log_to_wandb(rows, chart, group, out, command="compare_rewards")
    print("\n" + "\n".join(results_table(rows, PAPER_COLUMN)))
    print(f"\n{CAVEAT}\nwall time {meta['wall_s']:.0f} s; table: {out / 'results.md'}, chart: {chart}")
    return 0 if all(row["status"] == "ok" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
