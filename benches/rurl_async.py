"""What a slow judge costs a RuRL step, synchronous (`rurl.async_steps: 0`) and one step ahead (`async_steps: 1`):
`rubricrl rurl train` with the tiny preset (configs/rurl/tiny-cpu.yaml: SmolLM2-135M, LoRA, 2 prompts x 4 completions
of 48 tokens a step) graded by the canned judge (benches/canned_server.py) answering after each of --latencies s,
each with both settings. The smallest latency (0.05 s) is the instant judge, the baseline.

    python benches/rurl_async.py [--latencies 0.05 2 5] [--max_steps 6] [--rows 32] [--policy random|embedded|DIR]

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
second may still wait on a grading begun at the first). TRL's `step_time` median is reported beside it. Also from
the run's own outputs: the mean `async/wait_s` over the same steps (log_history.json) and the summary's
`async.hidden_seconds` (manifest.json): judge time that ran while the step did something else.

Target: with the slowest judge (5 s), async_steps 1's steady step is at most 1.1x the instant judge's async_steps 0
steady step (PASS/FAIL). Runs move with the machine's load: compare runs made together.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, canned_endpoint  # noqa: E402

LIMIT = 1.1
PRESET = ROOT / "configs" / "rurl" / "tiny-cpu.yaml"
PRESET_ROWS = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"
SKIPPED = 2  # steps left out of the steady figure
STAMPED = """
import json, os, sys, time
import rurl.train
from rubricrl.cli import main

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


def run(out: Path, rows: Path, judge: str, async_steps: int, args) -> dict:
    """One `rurl train`: its step times (wall between steps, TRL's step_time), async figures, judge calls."""
    argv = [sys.executable, "-c", STAMPED, "rurl", "train", "--config", str(PRESET), "--output_dir", str(out)]
    argv += ["--rubrics", str(rows), "--max_steps", str(args.max_steps), "--async_steps", str(async_steps)]
    argv += ["--eval_size", "0", "--eval_every", "0", "--report_to", "none", "--save_strategy", "no"]
    argv += ["--dynamic_sampling", "false", "--merge_adapter", "false", "--no-cache", "--no-preflight"]
    argv += ["--base-url", judge, "--model", "canned-judge"]
    if args.policy != "embedded":
        argv += ["--model_name_or_path", str(args.policy)]
    stamps = out.parent / f"{out.name}-stamps.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "WANDB_MODE": "disabled",
        "BENCH_STAMPS": str(stamps),
    }
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rurl train (async_steps {async_steps}) failed:\n{done.stderr[-3000:]}")
    clock = json.loads(stamps.read_text())
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.05, 2.0, 5.0], help="judge latencies, s")
    parser.add_argument("--max_steps", type=int, default=6)
    parser.add_argument("--rows", type=int, default=32, help="training rows: the preset's 8 repeated")
    parser.add_argument(
        "--policy", default="random", help="random (the 135M's shape, random weights), embedded, or a model folder"
    )
    parser.add_argument("--jitter", type=float, default=0.0, help="the judge's latency spread (+- this share)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the training process")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    if args.max_steps <= SKIPPED:
        parser.error(f"--max_steps must be above {SKIPPED}: the first {SKIPPED} steps are left out")
    if 2 * args.max_steps > args.rows:  # the preset's step: 2 prompts x 4 completions
        parser.error(f"--rows {args.rows} is under one epoch of {args.max_steps} steps (2 prompts a step)")
    latencies = sorted(set(args.latencies))
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rurl-async-") as folder:
        tmp = Path(folder)
        rows = tmp / "rows.jsonl"
        write_rows(rows, args.rows)
        if args.policy == "random":
            from rubricrl.serving.embedded_model import prepare_embedded_model, save_random_model

            args.policy = tmp / "random-SmolLM2-135M"
            save_random_model(prepare_embedded_model(), args.policy, {}, "float32")
        for latency in latencies:
            with canned_endpoint(latency, jitter=args.jitter) as judge:
                for async_steps in (0, 1):
                    judge.reset()
                    result = run(tmp / f"L{latency}-a{async_steps}", rows, judge.base_url, async_steps, args)
                    result.update(latency=latency, judge_calls=judge.stats()["requests"])
                    results.append(result)
                    print(
                        f"judge {latency:g} s, async_steps {async_steps}: steps "
                        f"{', '.join(f'{t:.2f}' for t in result['wall_steps'])} s (wall); step_time "
                        f"{', '.join(f'{t:.2f}' for t in result['step_time'])} s",
                        flush=True,
                    )

    instant = {r["async_steps"]: r["steady_s"] for r in results if r["latency"] == latencies[0]}
    for r in results:
        r["ratio_same_async"] = r["steady_s"] / instant[r["async_steps"]]
        r["ratio_instant_sync"] = r["steady_s"] / instant[0]
    print(f"\nsteady step: median wall time of steps {SKIPPED + 1}-{args.max_steps}; instant judge {latencies[0]:g} s")
    print(
        f"{'judge s':>8} {'async':>5} {'step s':>7} {'step_time':>9} {'/inst same':>10} {'/inst sync':>10} "
        f"{'wait s':>7} {'hidden s':>8} {'calls':>6}"
    )
    for r in results:
        wait = "-" if r["mean_wait_s"] is None else f"{r['mean_wait_s']:.2f}"
        hidden = "-" if not r["async"] else f"{r['async']['hidden_seconds']:.1f}"
        print(
            f"{r['latency']:>8g} {r['async_steps']:>5} {r['steady_s']:>7.2f} {r['steady_step_time_s']:>9.2f} "
            f"{r['ratio_same_async']:>10.2f} {r['ratio_instant_sync']:>10.2f} {wait:>7} {hidden:>8} "
            f"{r['judge_calls']:>6}"
        )
    slowest = next(r for r in results if r["latency"] == latencies[-1] and r["async_steps"] == 1)
    passed = slowest["ratio_instant_sync"] <= LIMIT
    print(
        f"\ntarget: judge {latencies[-1]:g} s, async_steps 1: steady step {slowest['steady_s']:.2f} s = "
        f"{slowest['ratio_instant_sync']:.2f}x the instant judge's async_steps 0 step ({instant[0]:.2f} s), "
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
            "limit": LIMIT,
            "passed": passed,
            "runs": results,
        }
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
