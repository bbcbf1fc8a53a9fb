"""A `rubricrl rurl train` step against a `trl grpo` step on this CPU: the GPU smoke's head-to-head
(benches/gpu_head_to_head.py) at the 135M shape, so that the comparison does not wait for a GPU.

    python -m benches.rurl_vs_trl [--runs 2] [--steps 8] [--async] [--rurl-flags "--eval_size 0 ..."] [--out JSON]

Both sides train SmolLM2-135M's architecture with random weights (drawn from the embedded model's config: every
completion runs to its 48 tokens, so both generate the same work) with the tiny preset's resolved settings (LoRA,
2 prompts x 4 completions a step, float32), on the preset's rows repeated so that a run stays in one epoch (--rows):
`rurl train` against the canned judge (benches/canned_server.py) answering in --judge-latency s (0.05 +- 20%, the
GPU smoke's), `trl grpo` (TRL's own script) with the same GRPOConfig and ModelConfig keys, an instant random reward
and `eval_strategy: no`. Neither saves a checkpoint. Each run is a fresh process (benches/gpu_smoke_child.py), the
sides alternating (rubricrl, trl grpo, rubricrl, ...) so that a machine's drift falls on both; with --async, a
`rurl train --async_steps 1` run follows each pair.

Per run: each optimizer step's wall seconds and the host seconds of each block TRL profiles in it (generation,
rewards, `_prepare_inputs`, `compute_loss`...); for rubricrl, dynamic sampling's extra generation rounds per step
(more generation than trl grpo does). Per side: steps 2-3 (the mean of the two) and the steady step (the median of
steps 4 to the last), each run's and their mean. Ratios, rubricrl / trl grpo: of the sides' means, with the lowest
and highest over every pairing of a rubricrl run with a trl grpo run (the spread); with --async, one step ahead over
synchronous the same way. Limits (PASS/FAIL): rubricrl's steps 2-3 at most 1.15x trl grpo's and its steady step at
most 1.05x; one step ahead's steady step at most 1.05x the synchronous one (what it adds with nothing to hide).

Run it on an idle machine: both sides use both cores, and another process's work lands on whichever side is running.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benches.gpu_head_to_head import NO_CHECKPOINTS, PRESET, ROWS, breakdown, rurl_argv, trl_config
from benches.gpu_smoke import Run
from benches.gpu_smoke_prepare import StepFailed
from benches.harness import canned_endpoint

ROOT = Path(__file__).resolve().parents[1]
PERIODS = ("steps 2-3", "steady")
LIMITS = {"rubricrl / trl grpo: steps 2-3": 1.15, "rubricrl / trl grpo: steady": 1.05}
ASYNC_LIMIT = {"one step ahead / synchronous: steady": 1.05}  # what it adds when there is nothing to hide
HELD_OUT, PROMPTS_A_STEP = 2, 2  # the preset's eval_size, and its 8 completions a step in groups of 4
NO_DEADLINE = 24 * 3600.0  # a benchmark run ends when its commands do
SIDES = {"rubricrl": "rurl train", "trl": "trl grpo", "async": "rurl train --async_steps 1"}


def write_rows(work: Path, count: int) -> tuple[Path, Path]:
    """The preset's rows repeated to `count` (each copy its own id): a rubric file for `rurl train` (its 2 held-out
    rows among them) and the same prompts as a dataset folder for `trl grpo` (`load_dataset(folder)`)."""
    preset = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    rows = [{**preset[i % len(preset)], "id": f"row-{i}"} for i in range(count)]
    rubrics, prompts = work / "rows.jsonl", work / "prompts" / "train.jsonl"
    prompts.parent.mkdir()
    rubrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    prompts.write_text("".join(json.dumps({"prompt": row["prompt"]}) + "\n" for row in rows))
    return rubrics, prompts.parent


def figures(ran: dict, steps: int) -> dict:
    """A run's step seconds, steps 2-3 (mean) and the steady step (median of steps 4 on), each with TRL's blocks."""
    seconds, phases = ran["step_seconds"], ran["step_phases"]
    if len(seconds) != steps:
        raise SystemExit(f"{len(seconds)} steps timed, {steps} asked")

    def blocks(chosen: list[dict], summary) -> dict:
        names = sorted({name for step in chosen for name in step})
        return {name: round(summary([step.get(name, 0.0) for step in chosen]), 3) for name in names}

    return {
        "step_s": [round(s, 3) for s in seconds],
        "steps 2-3": statistics.fmean(seconds[1:3]),
        "steady": statistics.median(seconds[3:]),
        "blocks steps 2-3": blocks(phases[1:3], statistics.fmean),
        "blocks steady": blocks(phases[3:], statistics.median),
        "command_s": round(ran["seconds"], 1),
    }


def versions() -> dict:
    import torch
    import transformers
    import trl

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "commit": commit.stdout.strip() or None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "cores": len(os.sched_getaffinity(0)),
    }


def ratio(ours: list[dict], theirs: list[dict], key: str) -> dict:
    """Mean over mean, and the lowest and highest ratio over every pairing of one run of each side."""
    pairs = [a[key] / b[key] for a in ours for b in theirs]
    mean = statistics.fmean(a[key] for a in ours) / statistics.fmean(b[key] for b in theirs)
    return {"ratio": round(mean, 3), "low": round(min(pairs), 3), "high": round(max(pairs), 3)}


def blocks_line(label: str, runs: list[dict], key: str) -> str:
    """The largest of TRL's profiled blocks, each side's mean over its runs."""
    names = sorted({name for run in runs for name in run[key]}, key=lambda n: -runs[0][key].get(n, 0.0))
    shown = [f"{name} {statistics.fmean(run[key].get(name, 0.0) for run in runs):.2f}" for name in names[:5]]
    return f"    {label}: {', '.join(shown)}"


def report(result: dict) -> list[str]:
    lines = []
    for side, runs in result["runs"].items():
        for i, run in enumerate(runs):
            steps = ", ".join(f"{s:.2f}" for s in run["step_s"])
            extra = f"; extra generation rounds {run['extra_rounds']}" if "extra_rounds" in run else ""
            lines.append(f"{SIDES[side]} run {i + 1}: steps {steps} s; command {run['command_s']:.0f} s{extra}")
    for key in PERIODS:
        lines.append(f"{key}, seconds a step (each run):")
        for side, runs in result["runs"].items():
            lines.append(f"  {SIDES[side]}: {', '.join(f'{run[key]:.2f}' for run in runs)}")
            lines.append(blocks_line("blocks (s)", runs, f"blocks {key}"))
    for name, r in result["ratios"].items():
        limit = {**LIMITS, **ASYNC_LIMIT}.get(name)
        verdict = "" if limit is None else f" (limit {limit}x: {'PASS' if r['ratio'] <= limit else 'FAIL'})"
        lines.append(f"{name}: {r['ratio']:.3f}x, over pairs of runs {r['low']:.3f}-{r['high']:.3f}x{verdict}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="runs a side (default 2)")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps a run (default 8; at least 5)")
    parser.add_argument("--async", dest="one_ahead", action="store_true", help="also `rurl train --async_steps 1`")
    parser.add_argument("--rurl-flags", default="", help="more `rurl train` flags, for both rubricrl sides")
    parser.add_argument(
        "--rows",
        type=int,
        help="training rows, the preset's 8 repeated (default: one epoch, a step's rows beyond the last included, "
        "as one step ahead reads them; 8: the preset's own, an epoch of 3 steps)",
    )
    parser.add_argument("--judge-latency", type=float, default=0.05, help="the canned judge's seconds (+- 20%%)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    if args.steps < 5:
        parser.error("--steps must be at least 5: steps 2-3, then a steady step or more")
    from rubricrl.serving.embedded_model import prepare_embedded_model, save_random_model

    sides = ["rubricrl", "trl"] + (["async"] if args.one_ahead else [])
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="rurl-vs-trl-") as folder, canned_endpoint(args.judge_latency) as judge:
        work = Path(folder)
        model = work / "random-SmolLM2-135M"
        save_random_model(prepare_embedded_model(), model, {}, "float32")
        rubrics, prompts = write_rows(work, args.rows or HELD_OUT + PROMPTS_A_STEP * (args.steps + 1))
        extra = ["--rubrics", str(rubrics), *shlex.split(args.rurl_flags)]
        flags = {"rubricrl": extra, "async": [*extra, "--async_steps", "1"]}
        trl_file = work / "trl.yaml"
        config = trl_config(
            rurl_argv(model, work / "trl", judge.base_url, args.steps, extra),
            prompts,
            work / "trl",
        )
        trl_file.write_text(yaml.safe_dump(config, sort_keys=False))
        runner = Run(work, deadline=NO_DEADLINE, dry_run=False)  # the GPU smoke's child processes, on this CPU
        for i in range(args.runs):
            for side in sides:
                name = f"{side}-{i + 1}"
                runner.env["RUBRICRL_HOME"] = str(work / f"home-{name}")  # its own cache: each run asks the judge
                try:
                    if side == "trl":
                        ran = runner.command(name, ["--config", str(trl_file)], kind="trl")
                    else:
                        argv = rurl_argv(model, work / name, judge.base_url, args.steps, flags[side])
                        ran = runner.command(name, argv)
                except StepFailed as failed:
                    raise SystemExit(f"{name}: {failed}\n{failed.log}") from None
                runs[side].append(figures(ran, args.steps))
                if side != "trl":  # dynamic sampling's extra rounds generate more than trl grpo does
                    runs[side][-1]["extra_rounds"] = breakdown(work / name)["extra_rounds"]
                print(f"{SIDES[side]} run {i + 1}: steps {runs[side][-1]['step_s']} s", flush=True)
    ratios = {f"rubricrl / trl grpo: {key}": ratio(runs["rubricrl"], runs["trl"], key) for key in PERIODS}
    if args.one_ahead:
        ratios |= {f"one step ahead / synchronous: {k}": ratio(runs["async"], runs["rubricrl"], k) for k in PERIODS}
    result = {
        "versions": versions(),
        "preset": PRESET,
        "steps": args.steps,
        "rurl_flags": extra,
        "no_checkpoints": list(NO_CHECKPOINTS),
        "runs": runs,
        "ratios": ratios,
    }
    print("\n".join(report(result)))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
