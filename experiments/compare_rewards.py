"""Reward-method comparison, as in Rubrics as Rewards (RaR, arXiv 2507.17746): the same data, policy, budget and
evaluation, trained once per reward method, then every trained policy graded on one yardstick.

    # this CPU (tiny preset: SmolLM2-135M-Instruct as LoRA policy and as judge, on the local vLLM server): 7 methods
    # x 3 GRPO steps on experiments/data/rurl_tiny.jsonl (6 rows train, 2 held out), plus the evals; ~15-25 min
    OMP_NUM_THREADS=1 python experiments/compare_rewards.py --output-dir runs/compare-rewards
    # a smoke run of the machinery: two methods, one step each
    python experiments/compare_rewards.py --output-dir runs/compare-smoke --methods per_criterion,likert --max-steps 1

    # GPUs (the rar-grpo preset: Qwen2.5-7B, 16 rollouts, judge gpt-4o-mini through OPENAI_API_KEY) on RaR rows:
    python experiments/compare_rewards.py --config configs/rurl/rar-grpo.yaml --rubrics <RaR-Medicine rows> \
        --output-dir runs/compare-rar --heldout 128 --max-steps 0 \
        --launcher "accelerate launch --config_file configs/accelerate/zero3.yaml --num_processes 8 --gpu_ids all"
    # (--max-steps 0: the preset's own budget, one epoch; --launcher runs each training as its own process)

Methods (`--methods`, comma-separated; all by default), each one `rubricrl rurl train` run:
- per_criterion: the explicit rubric, one judge call per criterion (RaR-Explicit);
- batched: the explicit rubric, all criteria in one judge call (ours; not in the paper);
- implicit: one 1-10 rating against the rubric (RaR-Implicit);
- likert: one 1-10 rating without a rubric (the paper's Direct-Likert, "Simple-Likert");
- reference_likert: one 1-10 rating against the row's reference_answer (Reference-Likert);
- predefined: the same generic rubric for every query (GENERIC_RUBRIC below), judged per criterion;
- uniform: the explicit rubric with every positive criterion worth 1 and every penalty -1, judged per criterion.

What every run shares: the rows of train.jsonl (one seeded split of --rubrics, written to the output folder with
heldout.jsonl beside it; the predefined and uniform variants as train_predefined.jsonl and train_uniform.jsonl),
the config, the seed, --max-steps, and plain GRPO as in the paper (rurl's dynamic sampling and overlong shaping off,
its own eval off; `--train-args` can turn them back on for every run). The evaluation is the same for every method
and for the base policy: greedy answers to the held-out rows, graded with the explicit rubric by the per-criterion
judge (`rubricrl eval --responses`, HealthBench-style report with bootstrap std). rurl's own in-training eval uses
the run's training grader, so it cannot serve as the common yardstick.

Output folder: train*.jsonl, heldout.jsonl, split.json, eval_config.yaml; runs/<method>/ (rurl train's output_dir:
the model, manifest.json, wandb/); eval/<method>/ (responses.jsonl, graded.jsonl, report.json, and run.json with
timings and exit codes); results.json, results.md, results.png. Rerunning the same command skips what is done
(--redo METHODS redoes those, --force everything); a run stopped by rurl's judge-failure guard is evaluated at its
last checkpoint and marked so. A local judge (the tiny preset's) gets one vLLM server of the comparison's own,
started once and named to every command. wandb (when the config reports to it; offline without WANDB_API_KEY): one
run per method, grouped by WANDB_RUN_GROUP = --experiment, plus a `<experiment>-table` run with the table and chart.

The held-out answers are generated here with transformers' generate (greedy, the config's max_completion_length),
one process, one device: on GPUs with long answers keep --heldout small (or serve the trained models with vLLM and
use `rubricrl eval --policy`).
"""

import argparse
import contextlib
import io
import json
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Method:
    name: str
    mode: str
    """grading.mode of the training reward."""
    rubrics: str
    """The training rubrics: explicit (train.jsonl as split), predefined or uniform (its transformed copies)."""
    description: str
    paper: str | None = None
    """The paper's name for the method, where it has one."""
    paper_healthbench: float | None = None
    paper_gpqa: float | None = None


# RaR (arXiv 2507.17746), Qwen2.5-7B trained with GRPO under each reward, HealthBench / GPQA-Diamond (0-100). The
# paper reports uniform weights about as good as categorical ones, without a number we carry here.
METHODS = {
    m.name: m
    for m in (
        Method(
            "per_criterion",
            "per_criterion",
            "explicit",
            "explicit rubric, per-criterion judge",
            "RaR-Explicit",
            29.7,
            36.9,
        ),
        Method("batched", "batched", "explicit", "explicit rubric, all criteria per judge call"),
        Method("implicit", "implicit", "explicit", "one 1-10 rating against the rubric", "RaR-Implicit", 31.2, 37.6),
        Method("likert", "likert", "explicit", "one 1-10 rating, no rubric", "Direct-Likert", 25.5, 34.8),
        Method(
            "reference_likert",
            "reference_likert",
            "explicit",
            "one 1-10 rating against the reference answer",
            "Reference-Likert",
            28.9,
            36.5,
        ),
        Method(
            "predefined",
            "per_criterion",
            "predefined",
            "the same generic rubric for every query, per criterion",
            "Predefined rubrics",
            12.5,
            31.7,
        ),
        Method("uniform", "per_criterion", "uniform", "explicit rubric, points +1 / -1, per criterion"),
    )
}
BASE = "base"
"""The reference row: the policy before training, evaluated the same way."""

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


def split_rows(rows: list[dict], heldout: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held out), in input order: `heldout` is a share (0 < x < 1) or a count (>= 1); the choice seeded."""
    count = round(len(rows) * heldout) if heldout < 1 else int(heldout)
    count = max(1, count)
    if count >= len(rows):
        raise SystemExit(f"--heldout {heldout}: holds out {count} of {len(rows)} rows, leaving none to train on")
    chosen = set(random.Random(seed).sample(range(len(rows)), count))
    return ([r for i, r in enumerate(rows) if i not in chosen], [r for i, r in enumerate(rows) if i in chosen])


def uniform_weights(row: dict) -> dict:
    """The row with every positive criterion worth 1 and every penalty -1 (rules, tags, categories kept)."""
    return {**row, "rubrics": [{**c, "points": 1 if c["points"] > 0 else -1} for c in row["rubrics"]]}


def predefined_rubric(row: dict, rubric: list[dict] = GENERIC_RUBRIC) -> dict:
    """The row with its own rubric replaced by the generic one (prompt, reference, tags kept)."""
    return {**row, "rubrics": [dict(c, tags=list(c.get("tags", ()))) for c in rubric]}


def prepare_data(
    source: Path,
    output_dir: Path,
    heldout: float,
    seed: int,
    limit: int | None,
    rar_pitfalls: str,
    methods: list[Method],
) -> dict[str, Any]:
    """Read --rubrics with the core reader (any format it reads: synthesis output, HealthBench, RaR rows), split it,
    and write train.jsonl, heldout.jsonl and the variants the chosen methods need, as rurl's trainer rows."""
    from grading.dataset import iter_rubric_rows
    from rubricrl.jsonl import write_jsonl
    from rurl.data import trainer_row

    rows = [trainer_row(row) for row in iter_rubric_rows(source, rar_pitfalls)]
    if limit:
        rows = rows[:limit]
    train, held = split_rows(rows, heldout, seed)
    split = {
        "source": str(source),
        "rows": len(rows),
        "heldout": heldout,
        "seed": seed,
        "limit": limit,
        "train_ids": [r["id"] for r in train],
        "heldout_ids": [r["id"] for r in held],
    }
    previous = output_dir / "split.json"
    if previous.is_file() and json.loads(previous.read_text()) != split:
        raise SystemExit(f"{output_dir} holds runs on another split ({previous}); use another --output-dir or --force")
    if any(m.mode == "reference_likert" for m in methods):
        missing = [r["id"] for r in train if not r.get("reference_answer")]
        if missing:
            raise SystemExit(
                f"reference_likert needs a reference_answer on every training row; {len(missing)} lack "
                f"one (e.g. {missing[:3]}): leave the method out with --methods"
            )
    files = {
        "explicit": output_dir / "train.jsonl",
        "predefined": output_dir / "train_predefined.jsonl",
        "uniform": output_dir / "train_uniform.jsonl",
        "heldout": output_dir / "heldout.jsonl",
    }
    write_jsonl(files["explicit"], train)
    write_jsonl(files["heldout"], held)
    if any(m.rubrics == "predefined" for m in methods):
        write_jsonl(files["predefined"], [predefined_rubric(r) for r in train])
    if any(m.rubrics == "uniform" for m in methods):
        write_jsonl(files["uniform"], [uniform_weights(r) for r in train])
    previous.write_text(json.dumps(split, indent=1))
    return {"files": files, "train": train, "heldout": held, "split": split}


# --- settings, judge server ------------------------------------------------------------------------------------------


def resolved_settings(flags: list[str]) -> dict[str, Any]:
    """`rurl train FLAGS --dry_run`: the settings every run resolves to (the policy, max_completion_length, the
    grading and llm sections the eval takes over)."""
    from rubricrl.cli import main as rubricrl

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = rubricrl(["rurl", "train", *flags, "--dry_run"])
    if code:
        raise SystemExit(f"the settings do not resolve (rurl train --dry_run: exit {code})")
    return yaml.safe_load(printed.getvalue())


def eval_config(settings: dict[str, Any]) -> dict[str, Any]:
    """The config of every `rubricrl eval`: the runs' judge (llm section), grading per criterion on the explicit
    rubric; the training grading's judge, samples and coverage rules kept, its mode-specific prompt not."""
    grading = {**settings["grading"], "mode": "per_criterion", "judge_prompt": None}
    return {"llm": settings["llm"], "grading": grading}


def judge_of(settings: dict[str, Any]):
    """The judge role every run resolves to (rubricrl.llm.roles.Role)."""
    from rubricrl.llm import LLMSettings
    from rubricrl.llm.roles import resolve_roles

    llm, name = LLMSettings(**settings["llm"]), settings["grading"]["judge_role"]
    return resolve_roles([name], llm.role_defaults(), {name: llm.roles.get(name)}, source="compare_rewards")[name]


@contextlib.contextmanager
def judge_server(settings: dict[str, Any]):
    """Yields (flags, judge name). A local judge gets one vLLM server of this comparison's own, up for all its
    commands (else each would start and stop one, ~30 s each on a CPU), every command pinned to it by the flags
    (`--roles judge.base_url=... judge.model=...`; CPU budgets still apply to the embedded model). A running server
    is not reused: one started by someone else can stop in the middle of a run (seen here: a run on a shared
    machine lost every verdict of a step). A remote judge: no flags."""
    from rubricrl.serve import LocalServer

    role = judge_of(settings)
    if not role.is_local:
        yield [], f"{role.model or 'the model it serves'} at {role.base_url}"
        return
    server = LocalServer(role.model)  # a free port; not advertised: the flags name it
    print(f"compare_rewards: starting a judge server for the comparison (log {server.log_path})", file=sys.stderr)
    endpoint = server.start()
    name = settings["grading"]["judge_role"]
    try:
        yield ["--roles", f"{name}.base_url={endpoint.base_url}", f"{name}.model={endpoint.model}"], endpoint.model
    finally:
        server.stop()
        print("compare_rewards: stopped its judge server", file=sys.stderr)


# --- training, generation, evaluation --------------------------------------------------------------------------------


def run_rubricrl(argv: list[str], launcher: str | None, env: dict[str, str]) -> int:
    """`rubricrl ARGV`: in this process (rubricrl.cli.main), or as its own process under `launcher` (e.g.
    `accelerate launch ...` for several GPUs). `env` is set for the call."""
    if launcher:
        command = [*shlex.split(launcher), "-m", "rubricrl.cli", *argv]
        return subprocess.run(command, cwd=ROOT, env={**os.environ, **env}).returncode
    from rubricrl.cli import main as rubricrl

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return rubricrl(argv)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _free_memory()


def _free_memory() -> None:
    import gc

    gc.collect()
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def trained_policy(run_dir: Path) -> tuple[Path | None, int | None]:
    """What a run left to evaluate: the saved model (step from its manifest), else the latest checkpoint (a run a
    guard stopped saves one and no model)."""
    manifest = _read_json(run_dir / "manifest.json")
    steps = (manifest or {}).get("summary", {}).get("steps")
    if (run_dir / "config.json").is_file():
        return run_dir, steps
    from rubricrl.training import latest_checkpoint

    latest = latest_checkpoint(run_dir)  # complete ones only: a kill while saving leaves a half-written folder
    if latest is not None:
        return latest, int(latest.name.split("-")[-1])
    return None, steps


def evaluate_policy(name: str, model_path: Path, ctx: "Context") -> dict[str, Any]:
    """Greedy answers to the held-out rows, then `rubricrl eval --responses` with the common yardstick."""
    from rubricrl.jsonl import write_jsonl
    from rurl.evaluate import answer_with

    out = ctx.output_dir / "eval" / name
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    answers = answer_with(model_path, [r["prompt"] for r in ctx.heldout], ctx.max_new_tokens, ctx.base_model)
    _free_memory()
    write_jsonl(out / "responses.jsonl", [{"id": r["id"], "response": a} for r, a in zip(ctx.heldout, answers)])
    generated = time.monotonic()
    code = run_rubricrl(
        [
            "eval",
            "--config",
            str(ctx.eval_config),
            "--rubrics",
            str(ctx.files["heldout"]),
            "--responses",
            str(out / "responses.jsonl"),
            "--output-dir",
            str(out),
            "--mode",
            "per_criterion",
            *ctx.llm_args,
        ],
        None,
        {},
    )
    return {
        "eval_code": code,
        "generate_s": round(generated - started, 1),
        "grade_s": round(time.monotonic() - generated, 1),
        "evaluated": str(model_path),
    }


@dataclass
class Context:
    output_dir: Path
    files: dict[str, Path]
    heldout: list[dict]
    eval_config: Path
    base_model: str
    max_new_tokens: int
    llm_args: list[str]


def run_method(method: Method, ctx: Context, args: argparse.Namespace, group: str) -> dict[str, Any]:
    run_dir, record_path = ctx.output_dir / "runs" / method.name, ctx.output_dir / "eval" / method.name / "run.json"
    record = {"method": method.name, "mode": method.mode, "rubrics": method.rubrics}
    started = time.monotonic()
    model_path, _ = trained_policy(run_dir)
    if model_path is None or model_path.parent == run_dir or args.force:  # no saved model: train (again)
        if run_dir.exists():
            shutil.rmtree(run_dir)
        flags = [
            *common_flags(args),
            "--rubrics",
            str(ctx.files[method.rubrics]),
            "--output_dir",
            str(run_dir),
            "--mode",
            method.mode,
            "--run_name",
            f"{group}-{method.name}",
            *ctx.llm_args,
            *args.train_args,
        ]
        print(f"\n=== {method.name}: rurl train ({method.description}) -> {run_dir}", file=sys.stderr, flush=True)
        try:
            record["train_code"] = run_rubricrl(["rurl", "train", *flags], args.launcher, {"WANDB_RUN_GROUP": group})
        except Exception:  # a crash in one method leaves the others to run; the table says what happened
            record["train_code"], record["error"] = 1, traceback.format_exc(limit=3)
            print(record["error"], file=sys.stderr)
        model_path, _ = trained_policy(run_dir)
    else:
        record["train_code"] = 0
        print(f"\n=== {method.name}: trained earlier ({run_dir})", file=sys.stderr)
    record["train_wall_s"] = round(time.monotonic() - started, 1)
    if model_path is not None:
        print(f"=== {method.name}: evaluating {model_path} on {len(ctx.heldout)} held-out rows", file=sys.stderr)
        try:
            record.update(evaluate_policy(method.name, model_path, ctx))
        except Exception:
            record["eval_code"], record["error"] = 1, traceback.format_exc(limit=3)
            print(record["error"], file=sys.stderr)
    record["wall_s"] = round(time.monotonic() - started, 1)
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1))
    return record


def common_flags(args: argparse.Namespace) -> list[str]:
    """What every run shares: the config, the seed, the budget, plain GRPO, no rurl eval."""
    flags = [
        "--config",
        str(args.config),
        "--seed",
        str(args.seed),
        "--eval_size",
        "0",
        "--dynamic_sampling",
        "false",
        "--overlong_buffer",
        "0",
    ]
    if args.max_steps:
        flags += ["--max_steps", str(args.max_steps), "--save_steps", str(args.max_steps)]
    return flags


def done(name: str, output_dir: Path) -> bool:
    folder = output_dir / "eval" / name
    return (folder / "report.json").is_file() and (folder / "run.json").is_file()


# --- results ---------------------------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def collect_results(output_dir: Path, names: list[str]) -> list[dict[str, Any]]:
    """One row per method (and `base`) from what the runs left: eval/<name>/report.json (the common yardstick),
    eval/<name>/run.json (timings, exit codes) and runs/<name>/manifest.json (training reward, judge calls)."""
    rows = []
    for name in names:
        report = _read_json(output_dir / "eval" / name / "report.json") or {}
        run = _read_json(output_dir / "eval" / name / "run.json") or {}
        summary = (_read_json(output_dir / "runs" / name / "manifest.json") or {}).get("summary") or {}
        metrics = report.get("metrics") or {}
        method = METHODS.get(name)
        axes = {
            key: {
                "value": metrics[key],
                "std": metrics.get(f"{key}:bootstrap_std"),
                "n": metrics.get(f"{key}:n_samples"),
            }
            for key in sorted(metrics)
            if key.startswith("axis:") and key.count(":") == 1
        }
        if name == BASE:
            status = "ok" if report else "not evaluated"
        elif summary.get("stopped"):
            status = f"stopped at step {summary.get('steps')}: {summary['stopped'].split(':')[0]}"
        elif run.get("train_code"):
            status = f"training failed (exit {run['train_code']})"
        elif not report:
            status = "not evaluated" if not run else f"eval failed (exit {run.get('eval_code')})"
        else:
            status = "ok"
        rows.append(
            {
                "method": name,
                "description": method.description if method else "the policy before training",
                "mode": method.mode if method else None,
                "rubrics": method.rubrics if method else None,
                "status": status,
                "overall": metrics.get("overall_score"),
                "overall_std": metrics.get("overall_score:bootstrap_std"),
                "n": metrics.get("overall_score:n_samples"),
                "examples": report.get("examples"),
                "unscored": report.get("unscored_examples"),
                "eval_judge_failure_rate": report.get("judge_failure_rate"),
                "axes": axes,
                "steps": summary.get("steps"),
                "reward_first": summary.get("reward_first"),
                "reward_last": summary.get("reward_last"),
                "judge_calls": (summary.get("judge") or {}).get("judge_calls"),
                "train_s": run.get("train_wall_s"),
                "eval_s": _sum(run.get("generate_s"), run.get("grade_s")),
                "wall_s": run.get("wall_s"),
                "paper": {
                    "name": method.paper,
                    "healthbench": method.paper_healthbench,
                    "gpqa_diamond": method.paper_gpqa,
                }
                if method and method.paper
                else None,
            }
        )
    return rows


def _sum(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present), 1) if present else None


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} s"


def results_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    axes = sorted({axis for row in rows for axis in row["axes"]})
    header = [
        "method",
        "training reward",
        "overall ± std",
        *axes,
        "reward first→last",
        "judge calls (train)",
        "wall: train + eval",
        "status",
        "RaR paper HB / GPQA-D",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        overall = "—" if row["overall"] is None else f"{row['overall']:.3f} ± {_num(row['overall_std'])}"
        axis_cells = [
            f"{row['axes'][a]['value']:.3f} ± {_num(row['axes'][a]['std'], 2)}" if a in row["axes"] else "—"
            for a in axes
        ]
        reward = "—" if row["method"] == BASE else f"{_num(row['reward_first'])} → {_num(row['reward_last'])}"
        paper = row["paper"]
        paper_cell = f"{paper['name']}: {paper['healthbench']} / {paper['gpqa_diamond']}" if paper else "—"
        wall = (
            f"eval {_seconds(row['eval_s'])}"
            if row["method"] == BASE
            else f"{_seconds(row['train_s'])} + {_seconds(row['eval_s'])}"
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    f"**{row['method']}**",
                    row["description"],
                    overall,
                    *axis_cells,
                    reward,
                    "—" if row["judge_calls"] is None else str(row["judge_calls"]),
                    wall,
                    row["status"],
                    paper_cell,
                ]
            )
            + " |"
        )
    head = [
        "# Reward-method comparison (Rubrics as Rewards, arXiv 2507.17746)",
        "",
        f"Policy `{meta['policy']}`, {meta['train_rows']} training rows and {meta['heldout_rows']} held-out rows of "
        f"`{meta['source']}` (seed {meta['seed']}), {meta['budget']} per method, judge `{meta['judge']}`. Every "
        "method and the base policy are evaluated the same way: greedy answers to the held-out rows, graded with "
        "the explicit rubric by the per-criterion judge (HealthBench-style score, 0-1, ± bootstrap std). "
        "Training reward: the mean reward of the first and the last logged step, on each method's own scale.",
        "",
        f"**Caveat.** {CAVEAT}",
        "",
    ]
    foot = [
        "",
        "The generic rubric of `predefined` (ours, not the paper's list): "
        + "; ".join(f'"{c["criterion"]}" ({c["points"]:+d})' for c in GENERIC_RUBRIC)
        + ".",
        f"Chart: `results.png`. Wall time: {_seconds(_sum(*(row['wall_s'] for row in rows)))} for the rows "
        f"above (train + eval, summed over the invocations that made them), {_seconds(meta.get('wall_s'))} "
        "for the last invocation.",
    ]
    return "\n".join(head + lines + foot) + "\n"


def results_text(rows: list[dict[str, Any]]) -> str:
    """The table for the terminal: the headline columns."""
    lines = [
        f"{'method':18}{'overall':>9}{'± std':>8}{'reward first→last':>20}{'judge calls':>13}{'train s':>9}"
        f"{'eval s':>8}  {'paper HB':>8}  status"
    ]
    for row in rows:
        reward = "" if row["method"] == BASE else f"{_num(row['reward_first'])} → {_num(row['reward_last'])}"
        paper = row["paper"]["healthbench"] if row["paper"] else None
        lines.append(
            f"{row['method']:18}{_num(row['overall']):>9}{_num(row['overall_std']):>8}{reward:>20}"
            f"{'—' if row['judge_calls'] is None else row['judge_calls']:>13}"
            f"{_num(row['train_s'], 0):>9}{_num(row['eval_s'], 0):>8}  {_num(paper, 1):>8}  {row['status']}"
        )
    return "\n".join(lines)


def write_chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Grouped bars: one group per metric (overall, then each axis), one bar per method, bootstrap std as error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["overall"] + sorted({axis for row in rows for axis in row["axes"]})
    width = 0.8 / max(1, len(rows))
    fig, ax = plt.subplots(figsize=(min(14.0, max(6.0, 2 + 0.25 * len(metrics) * len(rows))), 4.5))
    for i, row in enumerate(rows):
        values, errors = [], []
        for metric in metrics:
            overall = {"value": row["overall"], "std": row["overall_std"]}
            cell = overall if metric == "overall" else row["axes"].get(metric)
            values.append(cell["value"] if cell and cell["value"] is not None else math.nan)
            errors.append(cell["std"] if cell and cell.get("std") is not None else 0.0)
        x = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(metrics))]
        ax.bar(
            x,
            values,
            width,
            yerr=errors,
            capsize=2,
            label=row["method"],
            hatch="//" if row["method"] == BASE else None,
            alpha=0.85,
        )
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels([m.replace("axis:", "") for m in metrics])
    ax.set_ylabel("held-out score (explicit rubric, per criterion)")
    ax.set_ylim(0, 1.05)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def log_table_to_wandb(rows: list[dict[str, Any]], chart: Path, group: str, output_dir: Path) -> None:
    """A `<group>-table` run beside the training runs: the table and the chart (offline without WANDB_API_KEY)."""
    import wandb

    from rubricrl.training import wandb_init

    run = wandb_init("compare_rewards", output_dir, name=f"{group}-table", group=group, job_type="comparison")
    try:
        columns = [
            "method",
            "overall",
            "overall_std",
            "reward_first",
            "reward_last",
            "judge_calls",
            "train_s",
            "eval_s",
            "status",
            "paper_healthbench",
        ]
        table = wandb.Table(
            columns=columns,
            data=[
                [
                    r["method"],
                    r["overall"],
                    r["overall_std"],
                    r["reward_first"],
                    r["reward_last"],
                    r["judge_calls"],
                    r["train_s"],
                    r["eval_s"],
                    r["status"],
                    r["paper"]["healthbench"] if r["paper"] else None,
                ]
                for r in rows
            ],
        )
        logged: dict[str, Any] = {"comparison": table}
        if chart.is_file():
            logged["chart"] = wandb.Image(str(chart))
        run.log(logged)
    finally:
        run.finish()


# --- main ------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=ROOT / "configs/rurl/tiny-cpu.yaml",
        help="rurl train config shared by every run (default: the tiny CPU preset)",
    )
    parser.add_argument(
        "--rubrics",
        type=Path,
        default=ROOT / "experiments/data/rurl_tiny.jsonl",
        help="rubric dataset, split once into train.jsonl and heldout.jsonl",
    )
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "compare-rewards")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, from {','.join(METHODS)}")
    parser.add_argument(
        "--max-steps", type=int, default=3, help="GRPO steps per method (the same budget for all); 0: the config's own"
    )
    parser.add_argument(
        "--heldout", type=float, default=0.25, help="held-out rows: a share (0 < x < 1) or a count (>= 1)"
    )
    parser.add_argument("--limit", type=int, help="use only the first N rows of --rubrics")
    parser.add_argument("--seed", type=int, default=0, help="the split's seed, and every run's")
    parser.add_argument("--rar-pitfalls", default="auto", choices=["auto", "mistake", "avoidance"])
    parser.add_argument("--skip-base", action="store_true", help="do not evaluate the base policy")
    parser.add_argument("--experiment", help="wandb group and run-name prefix (default: compare-rewards-<folder>)")
    parser.add_argument(
        "--llm-args",
        type=shlex.split,
        default=[],
        help='flags for every train and eval run\'s judge, e.g. "--base-url URL --model NAME"',
    )
    parser.add_argument(
        "--train-args",
        type=shlex.split,
        default=[],
        help="more flags for every `rurl train` (they come last, so they win)",
    )
    parser.add_argument(
        "--launcher",
        help="run each training as its own process under this launcher, e.g. "
        '"accelerate launch --config_file ... --num_processes 8"',
    )
    parser.add_argument("--redo", default="", help="comma-separated methods (or base) to train and evaluate again")
    parser.add_argument("--force", action="store_true", help="redo every run and eval, even those done")
    args = parser.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    args.redo = [m.strip() for m in args.redo.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in METHODS] + [m for m in args.redo if m not in (*METHODS, BASE)]
    if unknown or not args.methods:
        parser.error(f"--methods / --redo: unknown {unknown}; choose from {','.join(METHODS)} (and {BASE} for --redo)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    output_dir = args.output_dir.resolve()
    if args.force and output_dir.exists():
        for name in ("runs", "eval", "split.json"):
            target = output_dir / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    for name in args.redo:
        for target in (output_dir / "runs" / name, output_dir / "eval" / name):
            shutil.rmtree(target, ignore_errors=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    group = args.experiment or f"compare-rewards-{output_dir.name}"
    methods = [METHODS[name] for name in args.methods]
    data = prepare_data(args.rubrics, output_dir, args.heldout, args.seed, args.limit, args.rar_pitfalls, methods)
    files = data["files"]
    settings = resolved_settings(
        [
            *common_flags(args),
            "--rubrics",
            str(files["explicit"]),
            "--output_dir",
            str(output_dir / "runs" / "dry-run"),
            *args.llm_args,
            *args.train_args,
        ]
    )
    eval_path = output_dir / "eval_config.yaml"
    eval_path.write_text(yaml.safe_dump(eval_config(settings), sort_keys=False))
    from rubricrl.embedded_model import EMBEDDED_MODEL_NAME

    base_model = settings.get("model_name_or_path")
    if base_model is None:
        from rubricrl.embedded_model import prepare_embedded_model

        base_model = str(prepare_embedded_model(log=lambda m: print(m, file=sys.stderr)))
    print(
        f"compare_rewards: {len(methods)} methods x {args.max_steps or 'the config'} steps on {len(data['train'])} "
        f"rows of {args.rubrics}, eval on {len(data['heldout'])} held-out rows; policy {base_model}; group "
        f"{group} -> {output_dir}",
        file=sys.stderr,
    )
    names = ([] if args.skip_base else [BASE]) + [m.name for m in methods]
    pending = [name for name in names if not done(name, output_dir)]
    role = judge_of(settings)
    named = (role.model or EMBEDDED_MODEL_NAME) if role.is_local else f"{role.model} at {role.base_url}"
    server = judge_server(settings) if pending else contextlib.nullcontext(([], named))  # all done: no judge needed
    with server as (judge_flags, judge):
        ctx = Context(
            output_dir,
            files,
            data["heldout"],
            eval_path,
            base_model,
            int(settings["max_completion_length"]),
            [*args.llm_args, *judge_flags],
        )
        if BASE in pending:
            print(f"\n=== base: evaluating {base_model} before training", file=sys.stderr)
            record = {"method": BASE, "train_wall_s": None}
            record.update(evaluate_policy(BASE, Path(base_model), ctx))
            record["wall_s"] = _sum(record["generate_s"], record["grade_s"])
            (output_dir / "eval" / BASE / "run.json").write_text(json.dumps(record, indent=1))
        for method in methods:
            if done(method.name, output_dir):
                print(f"\n=== {method.name}: done earlier (--force redoes it)", file=sys.stderr)
                continue
            run_method(method, ctx, args, group)
    rows = collect_results(output_dir, names)
    meta = {
        "policy": base_model,
        "source": str(args.rubrics),
        "seed": args.seed,
        "train_rows": len(data["train"]),
        "heldout_rows": len(data["heldout"]),
        "budget": f"{args.max_steps} GRPO step{'s' * (args.max_steps != 1)}"
        if args.max_steps
        else "the config's training budget",
        "judge": judge,
        "config": str(args.config),
        "methods": args.methods,
        "experiment": group,
        "wall_s": round(time.monotonic() - started, 1),
        "caveat": CAVEAT,
        "generic_rubric": GENERIC_RUBRIC,
    }
    (output_dir / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (output_dir / "results.md").write_text(results_markdown(rows, meta))
    chart = output_dir / "results.png"
    write_chart(rows, chart, f"{Path(base_model).name}: held-out score per training reward ({meta['budget']})")
    if "wandb" in (settings.get("report_to") or []):
        log_table_to_wandb(rows, chart, group, output_dir)
    print("\n" + results_text(rows))
    print(f"\n{CAVEAT}\nwall time {meta['wall_s']:.0f} s; table: {output_dir / 'results.md'}, chart: {chart}")
    return 0 if all(row["status"] == "ok" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
