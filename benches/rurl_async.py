"""What a slow judge costs a RuRL step, synchronous (`rurl.async_steps: 0`) and one step ahead (`async_steps: 1`):
`rubricrl rurl train` with the tiny preset (configs/rurl/tiny-cpu.yaml: SmolLM2-135M, LoRA, 2 prompts x 4 completions
of 48 tokens a step) graded by the canned judge (benches/canned_server.py) answering after each of --latencies s,
each with both settings. The smallest latency (0.05 s) is the instant judge, the baseline.

    python -m benches.rurl_async [--latencies 0.05 2 5] [--max_steps 8] [--rows 32] [--policy random|embedded|DIR]
                                 [--sequential]

The policy is SmolLM2-135M's architecture with random weights (--policy random, the default; drawn from the embedded
model's config): every completion runs to its 48 tokens, so every run generates the same work and only the schedule
and the judge differ (the trained model stops at random lengths, which moved a step by +-2 s between runs here).

Each run is a fresh `rubricrl rurl train` process in its own temporary folder, on a copy of the preset's 8 rows
repeated to --rows rows with distinct ids (an epoch's first step cannot overlap: nothing is read ahead across
epochs, so the run must stay in one epoch), no held-out rows and no evaluation, no dynamic sampling (its extra rounds
would add variance), no verdict cache (cached answers would hide the latency), no preflight, no checkpoints, no
wandb, the adapter not merged at the end, OMP_NUM_THREADS=1 (the judge server and the machine's other processes
share its 2 cores).

What is measured, the step: TRL's `step_time` covers `training_step` alone (generation, grading and, under
async_steps 1, the next batch's generation and the wait for this one's grades, then forward and backward), not the
optimizer step, the callbacks, the logging nor the fetch of the next batch. So the child process adds one callback
(the trainer built by `rurl.train.build_trainer` is wrapped) that notes the monotonic clock at the start of training
and at every `on_step_end`: a step's time is the wall time between two consecutive notes, the whole loop. The steady
step is the median of those after the first two steps (the first step under async_steps 1 generates two batches; the
second may still wait on a grading begun at the first); TRL's `step_time` is kept beside it in --out's JSON. Also from
the run's own outputs: the mean `async/wait_s` over the same steps (log_history.json) and the summary's
`async.hidden_seconds` (manifest.json): judge time that ran while the step did something else.

Side by side: a shared machine's speed drifts by more than the 10% the target allows (one run of fixed work, the
random policy, gave steps of 23-31 s), so by default each figure is a pair of runs at once, each pinned to a core of
its own: the instant judge's synchronous run (the baseline) beside the run compared with it, and the ratio is taken
within the pair, both under the same conditions. Pairs: the instant judge at async_steps 1, then per slower judge
async_steps 0 and async_steps 1. `--sequential` runs one at a time on both cores instead (each configuration
once; ratios across runs made minutes apart).

Target: with the slowest judge (5 s), async_steps 1's steady step is at most 1.1x the instant judge's async_steps 0
steady step (PASS/FAIL).
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benches.harness import ROOT, canned_endpoint

LIMIT = 1.1
PRESET = ROOT / "configs" / "rurl" / "tiny-cpu.yaml"
PRESET_ROWS = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"
SKIPPED = 2  # steps left out of the steady figure
STAMPED = """
import json, os, sys, time
import rurl.train
from commands.main import main

stamps = []
build = rurl.train.build_trainer


def stamped(*args, **kwargs):
    from transformers import TrainerCallback

    class Stamps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            stamps.append((state.global_step, time.monotonic()))

        def on_step_end(self, args, state, control, **kw):
            stamps.append((state.global_step, time.monotonic()))

    trainer = build(*args, **kwargs)
    trainer.add_callback(Stamps())
    return trainer


rurl.train.build_trainer = stamped
code = main(sys.argv[1:])
open(os.environ["BENCH_STAMPS"], "w").write(json.dumps(stamps))
sys.exit(code)
"""


def write_rows(path: Path, rows: int) -> None:
    """The preset's rows repeated to `rows` rows, each copy with its own id."""
    preset = [json.loads(line) for line in PRESET_ROWS.read_text().splitlines() if line.strip()]
    with path.open("w") as out:
        for i in range(rows):
            row = dict(preset[i % len(preset)])
            row["id"] = f"{row['id']}-copy{i // len(preset)}"
            out.write(json.dumps(row) + "\n")


def beside(out: Path, suffix: str) -> Path:
    """A run's file kept beside its output folder: its stamps (-stamps.json) and its stderr (.log)."""
    return out.parent / f"{out.name}{suffix}"


def start(out: Path, rows: Path, judge: str, async_steps: int, args, core: int | None) -> subprocess.Popen:
    """One `rurl train` started (pinned to `core` when given)."""
    argv = [sys.executable, "-c", STAMPED, "rurl", "train", "--config", str(PRESET), "--output_dir", str(out)]
    argv += ["--rubrics", str(rows), "--max_steps", str(args.max_steps), "--async_steps", str(async_steps)]
    argv += ["--eval_size", "0", "--eval_every", "0", "--report_to", "none", "--save_strategy", "no"]
    argv += ["--dynamic_sampling", "false", "--merge_adapter", "false", "--no-cache", "--no-preflight"]
    argv += ["--base-url", judge, "--model", "canned-judge"]
    if args.policy != "embedded":
        argv += ["--model_name_or_path", str(args.policy)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "WANDB_MODE": "disabled",
        "BENCH_STAMPS": str(beside(out, "-stamps.json")),
    }
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    with beside(out, ".log").open("w") as log:  # a file, not a pipe: two children write at once
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, preexec_fn=pin)


def finish(child: subprocess.Popen, out: Path, async_steps: int, args) -> dict:
    """A started run's step times (wall between steps, TRL's step_time) and async figures, once it ended."""
    if child.wait() != 0:
        errors = beside(out, ".log").read_text()
        raise SystemExit(f"rurl train (async_steps {async_steps}) failed:\n{errors[-3000:]}")
    clock = json.loads(beside(out, "-stamps.json").read_text())
    wall = [later[1] - earlier[1] for earlier, later in zip(clock, clock[1:])]
    history = json.loads((out / "log_history.json").read_text())
    steps = [entry for entry in history if "step_time" in entry]
    if len(wall) != args.max_steps or len(steps) != args.max_steps:
        raise SystemExit(f"expected {args.max_steps} steps, got {len(wall)} stamped and {len(steps)} logged")
    waits = [entry["async/wait_s"] for entry in steps[SKIPPED:] if "async/wait_s" in entry]
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    return {
        "async_steps": async_steps,
        "wall_steps": wall,
        "step_time": [entry["step_time"] for entry in steps],
        "steady_s": statistics.median(wall[SKIPPED:]),
        "steady_step_time_s": statistics.median(entry["step_time"] for entry in steps[SKIPPED:]),
        "mean_wait_s": statistics.fmean(waits) if waits else None,
        "async": summary.get("async"),
    }


def report(label: str, r: dict, baseline: dict | None) -> None:
    """A run's step times as they end, and its steady step over the baseline's when run beside it."""
    paired = "" if baseline is None else f"; beside the baseline ({baseline['steady_s']:.2f} s): {r['ratio']:.2f}x"
    print(
        f"{label}: steps {', '.join(f'{t:.2f}' for t in r['wall_steps'])} s (wall); steady {r['steady_s']:.2f} s"
        f"{paired}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.05, 2.0, 5.0], help="judge latencies, s")
    parser.add_argument("--max_steps", type=int, default=8)
    parser.add_argument("--rows", type=int, default=32, help="training rows: the preset's 8 repeated")
    parser.add_argument(
        "--policy", default="random", help="random (the 135M's shape, random weights), embedded, or a model folder"
    )
    parser.add_argument("--jitter", type=float, default=0.0, help="the judge's latency spread (+- this share)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the training process")
    parser.add_argument("--sequential", action="store_true", help="one run at a time, not pairs side by side")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    if args.max_steps <= SKIPPED:
        parser.error(f"--max_steps must be above {SKIPPED}: the first {SKIPPED} steps are left out")
    if 2 * (args.max_steps + 1) > args.rows:  # the preset's step: 2 prompts x 4 completions
        # one step's rows more than the run trains: its last step must generate ahead as every steady step does, or
        # one step ahead would time a step with less work in it
        parser.error(
            f"--rows {args.rows}: a run of {args.max_steps} steps (2 prompts a step) needs {2 * (args.max_steps + 1)}"
            " rows in one epoch, the last step's batch generated ahead included"
        )
    cores = sorted(os.sched_getaffinity(0))
    if not args.sequential and len(cores) < 2:
        parser.error("pairs side by side need 2 cores; run with --sequential")
    latencies = sorted(set(args.latencies))
    instant = latencies[0]
    compared = [(instant, 1)] + [(latency, a) for latency in latencies[1:] for a in (0, 1)]
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rurl-async-") as folder, contextlib.ExitStack() as judges:
        tmp = Path(folder)
        rows = tmp / "rows.jsonl"
        write_rows(rows, args.rows)
        if args.policy == "random":
            from rubricrl.serving.embedded_model import prepare_embedded_model, save_random_model

            args.policy = tmp / "random-SmolLM2-135M"
            save_random_model(prepare_embedded_model(), args.policy, {}, "float32")
        judge = {latency: judges.enter_context(canned_endpoint(latency, jitter=args.jitter)) for latency in latencies}

        def launch(latency: float, async_steps: int, core: int | None, tag: str) -> tuple:
            out = tmp / f"L{latency}-a{async_steps}-{tag}"
            child = start(out, rows, judge[latency].base_url, async_steps, args, core)
            return child, out, latency, async_steps

        def collect(started: tuple) -> dict:
            child, out, latency, async_steps = started
            return {**finish(child, out, async_steps, args), "latency": latency}

        if args.sequential:
            baseline = collect(launch(instant, 0, None, "alone"))
            report(f"judge {instant:g} s, async_steps 0 (baseline)", baseline, None)
            for latency, async_steps in compared:
                r = collect(launch(latency, async_steps, None, "alone"))
                r["baseline_s"], r["ratio"] = baseline["steady_s"], r["steady_s"] / baseline["steady_s"]
                report(f"judge {latency:g} s, async_steps {async_steps}", r, baseline)
                results.append(r)
        else:
            for latency, async_steps in compared:
                pair = launch(instant, 0, cores[0], f"base{len(results)}"), launch(latency, async_steps, cores[1], "")
                base, r = collect(pair[0]), collect(pair[1])
                r["baseline_s"], r["ratio"] = base["steady_s"], r["steady_s"] / base["steady_s"]
                r["baseline_wall_steps"] = base["wall_steps"]
                report(f"judge {latency:g} s, async_steps {async_steps}", r, base)
                results.append(r)

    how = "one at a time" if args.sequential else "each beside the baseline, a core each"
    print(f"\nsteady step: median wall time of steps {SKIPPED + 1}-{args.max_steps}; runs {how}")
    print(f"baseline: the instant judge ({instant:g} s), async_steps 0")
    print(f"{'judge s':>8} {'async':>5} {'step s':>7} {'base s':>7} {'/base':>6} {'wait s':>7} {'hidden s':>8}")
    for r in results:
        wait = "-" if r["mean_wait_s"] is None else f"{r['mean_wait_s']:.2f}"
        hidden = "-" if not r["async"] else f"{r['async']['hidden_seconds']:.1f}"
        print(
            f"{r['latency']:>8g} {r['async_steps']:>5} {r['steady_s']:>7.2f} {r['baseline_s']:>7.2f} "
            f"{r['ratio']:>6.2f} {wait:>7} {hidden:>8}"
        )
    slowest = next(r for r in results if r["latency"] == latencies[-1] and r["async_steps"] == 1)
    passed = slowest["ratio"] <= LIMIT
    print(
        f"\ntarget: judge {latencies[-1]:g} s, async_steps 1: steady step {slowest['steady_s']:.2f} s = "
        f"{slowest['ratio']:.2f}x the instant judge's async_steps 0 step ({slowest['baseline_s']:.2f} s), "
        f"limit {LIMIT}x: {'PASS' if passed else 'FAIL'}"
    )
    if args.out is not None:
        figures = {
            "latencies": latencies,
            "max_steps": args.max_steps,
            "rows": args.rows,
            "policy": str(args.policy),
            "jitter": args.jitter,
            "threads": args.threads,
            "sequential": args.sequential,
            "limit": LIMIT,
            "passed": passed,
            "runs": results,
        }
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
