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

Each method (METHODS below) is one `rubricrl rurl train` run on the same seeded split of --rubrics (split as rurl
splits off its eval rows), config, seed and --max-steps, with plain GRPO as in the paper (rurl's dynamic sampling, overlong shaping and own eval off; --train-args
can turn them back on). Every trained policy and the base one are evaluated alike: greedy answers to the held-out rows
(transformers' generate on one device: keep --heldout small on GPUs), graded with the explicit rubric by the
per-criterion judge (`rubricrl eval --responses`: HealthBench-style scores with bootstrap std).

Output folder: train*.jsonl, heldout.jsonl, split.json, eval_config.yaml; runs/<method>/ (rurl train's output_dir);
eval/<method>/ (responses.jsonl, graded.jsonl, report.json, run.json: timings and exit codes); results.json,
results.md, results.png. Rerunning skips what is done (--redo METHODS, --force: all); a run stopped by rurl's
judge-failure guard is evaluated at its last checkpoint. wandb (when the config reports to it): one run per method in
the group --experiment, and a `<experiment>-table` run with the table and chart.
"""

import argparse
import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from unittest import mock

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from reports.comparison import collect_rows, log_to_wandb, read_reports, results_table, seconds, write_chart  # noqa: E402
from rubricrl.cli import main as rubricrl  # noqa: E402


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
    from rubricrl.jsonl import write_jsonl
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


# --- settings, judge, the runs ---------------------------------------------------------------------------------------


def resolved_settings(flags: list[str]) -> dict[str, Any]:
    """`rurl train FLAGS --dry_run`: the settings every run resolves to (policy, max_completion_length, judge)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = rubricrl(["rurl", "train", *flags, "--dry_run"])
    if code:
        raise SystemExit(f"the settings do not resolve (rurl train --dry_run: exit {code})")
    return yaml.safe_load(printed.getvalue())


def eval_config(settings: dict[str, Any]) -> dict[str, Any]:
    """The config of every `rubricrl eval`: the runs' judge (llm section), grading per criterion on the explicit
    rubric; the training grading's judge, samples and coverage rules kept, its mode-specific prompt not."""
    return {"llm": settings["llm"], "grading": {**settings["grading"], "mode": "per_criterion", "judge_prompt": None}}


@contextlib.contextmanager
def judge_server(settings: dict[str, Any], needed: bool):
    """Yields (flags, judge name). A local judge gets one vLLM server of this comparison's own, up for all its
    commands (else each would start and stop one, ~30 s each on a CPU), every command pinned to it by the flags. A
    running server is not reused (so not rubricrl.serve.local_endpoint, which would): one started by someone else
    can stop in the middle of a run (seen here: a run on a shared machine lost every verdict of a step). A remote
    judge, or nothing left to grade: no flags."""
    from rubricrl.embedded_model import EMBEDDED_MODEL_NAME
    from rubricrl.llm import LLMSettings
    from rubricrl.llm.roles import resolve_roles
    from rubricrl.serve import LocalServer

    llm, name = LLMSettings(**settings["llm"]), settings["grading"]["judge_role"]
    role = resolve_roles([name], llm.role_defaults(), {name: llm.roles.get(name)}, source="compare_rewards")[name]
    if not role.is_local or not needed:
        yield [], (role.model or EMBEDDED_MODEL_NAME) if role.is_local else f"{role.model} at {role.base_url}"
        return
    server = LocalServer(role.model)  # a free port; not advertised: the flags name it
    print(f"compare_rewards: starting a judge server (log {server.log_path})", file=sys.stderr)
    with server as endpoint:
        yield ["--roles", f"{name}.base_url={endpoint.base_url}", f"{name}.model={endpoint.model}"], endpoint.model


def run_rubricrl(argv: list[str], launcher: str | None = None, env: dict[str, str] | None = None) -> int:
    """`rubricrl ARGV` in this process, or as its own under `launcher` (e.g. `accelerate launch ...`)."""
    if launcher:
        command = [*shlex.split(launcher), "-m", "rubricrl.cli", *argv]
        return subprocess.run(command, cwd=ROOT, env={**os.environ, **(env or {})}).returncode
    try:
        with mock.patch.dict(os.environ, env or {}):
            return rubricrl(argv)
    finally:  # what the run left on the device, before the next one loads its model
        import gc

        gc.collect()
        with contextlib.suppress(ImportError):
            import torch

            torch.cuda.empty_cache()  # nothing to do where CUDA was never used


def attempt(record: dict[str, Any], key: str, action: Callable[[], int]) -> None:
    """record[key]: the action's exit code; a crash is exit 1 with its traceback in record["error"], and leaves the
    other methods to run (the table says what happened)."""
    try:
        record[key] = action()
    except Exception:
        record[key], record["error"] = 1, traceback.format_exc(limit=3)
        print(record["error"], file=sys.stderr)


def trained_policy(run_dir: Path) -> Path | None:
    """What a run left to evaluate: the saved model, else the latest checkpoint (a run a guard stopped saves one and
    no model; complete ones only: a kill while saving leaves a half-written folder)."""
    from rubricrl.training import latest_checkpoint

    return run_dir if (run_dir / "config.json").is_file() else latest_checkpoint(run_dir)


@dataclass
class Comparison:
    args: argparse.Namespace
    out: Path
    files: dict[str, Path]
    heldout: list[dict]
    policy: str
    max_new_tokens: int
    llm_args: list[str]
    group: str

    def run(self, name: str) -> None:
        """Train the method (the base policy: nothing), evaluate what it left, write eval/<name>/run.json."""
        started, record = time.monotonic(), {"method": name, "train_wall_s": None}
        model = self.train(name, record) if name in METHODS else Path(self.policy)
        if name in METHODS:
            record["train_wall_s"] = round(time.monotonic() - started, 1)
        out = self.out / "eval" / name
        out.mkdir(parents=True, exist_ok=True)
        if model is not None:
            attempt(record, "eval_code", lambda: self.evaluate(model, out, record))
        record["wall_s"] = round(time.monotonic() - started, 1)
        (out / "run.json").write_text(json.dumps(record, indent=1))

    def train(self, name: str, record: dict[str, Any]) -> Path | None:
        method, run_dir = METHODS[name], self.out / "runs" / name
        record |= {"mode": method.mode, "rubrics": method.rubrics, "train_code": 0}
        if trained_policy(run_dir) == run_dir:
            print(f"\n=== {name}: trained earlier ({run_dir})", file=sys.stderr)
            return run_dir
        shutil.rmtree(run_dir, ignore_errors=True)  # no saved model: train (again)
        flags = [*common_flags(self.args), "--rubrics", str(self.files[method.rubrics]), "--output_dir", str(run_dir)]
        flags += ["--mode", method.mode, "--run_name", f"{self.group}-{name}", *self.llm_args, *self.args.train_args]
        print(f"\n=== {name}: rurl train ({method.description}) -> {run_dir}", file=sys.stderr, flush=True)
        env = {"WANDB_RUN_GROUP": self.group}
        attempt(record, "train_code", lambda: run_rubricrl(["rurl", "train", *flags], self.args.launcher, env))
        return trained_policy(run_dir)

    def evaluate(self, model: Path, out: Path, record: dict[str, Any]) -> int:
        """Greedy answers to the held-out rows, then `rubricrl eval --responses` with the common yardstick."""
        from rubricrl.jsonl import write_jsonl
        from rurl.evaluate import answer_with

        print(f"=== {out.name}: evaluating {model} on {len(self.heldout)} held-out rows", file=sys.stderr)
        started = time.monotonic()
        answers = answer_with(model, [r["prompt"] for r in self.heldout], self.max_new_tokens, self.policy)
        write_jsonl(out / "responses.jsonl", [{"id": r["id"], "response": a} for r, a in zip(self.heldout, answers)])
        record["generate_s"], started = round(time.monotonic() - started, 1), time.monotonic()
        flags = ["--rubrics", str(self.files["heldout"]), "--responses", str(out / "responses.jsonl"), "--config"]
        flags += [str(self.out / "eval_config.yaml"), "--output-dir", str(out), "--mode", "per_criterion"]
        code = run_rubricrl(["eval", *flags, *self.llm_args])
        record["grade_s"], record["evaluated"] = round(time.monotonic() - started, 1), str(model)
        return code


def common_flags(args: argparse.Namespace) -> list[str]:
    """What every run shares: the config, the seed, the budget, plain GRPO, no rurl eval."""
    flags = ["--config", str(args.config), "--seed", str(args.seed), "--eval_size", "0"]
    flags += ["--dynamic_sampling", "false", "--overlong_buffer", "0"]
    return flags + (["--max_steps", str(args.max_steps), "--save_steps", str(args.max_steps)] if args.max_steps else [])


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
        from rubricrl.embedded_model import prepare_embedded_model

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
    with judge_server(settings, needed=len(done) < len(names)) as (judge_flags, judge):
        llm_args, tokens = [*args.llm_args, *judge_flags], int(settings["max_completion_length"])
        comparison = Comparison(args, out, data["files"], data["heldout"], policy, tokens, llm_args, group)
        for name in names:
            if name in done:
                print(f"\n=== {name}: done earlier (--force redoes it)", file=sys.stderr)
            else:
                comparison.run(name)
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
