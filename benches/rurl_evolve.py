"""What evolving rubrics cost a RuRL step: the tiny preset's GRPO steps with and without `rurl.evolve`, the judge on
one canned endpoint (benches/canned_server.py, 0.05 s) and the evolver on another that answers after 2 s. Evolution
asks about every group every step (`evolve_groups: all`), so each step starts calls that outlast it: they run on
the reward's event loop while training goes on and join the rubric at a later step's end.

    python benches/rurl_evolve.py [--steps 6] [--evolve-latency 2]

Prints each run's mean step time (TRL's `step_time`, the first, warm-up step left out), their ratio against the
limit 1.1, and the evolution's counts (calls asked and criteria added)."""

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


def run(out: Path, judge: str, steps: int, evolver: str | None) -> tuple[list[float], dict]:
    argv = [sys.executable, "-m", "rubricrl.cli", "rurl", "train", "--config", "configs/rurl/tiny-cpu.yaml"]
    argv += ["--output_dir", str(out), "--max_steps", str(steps), "--eval_size", "0", "--save_strategy", "no"]
    argv += ["--base-url", judge, "--model", "canned", "--no-cache", "--no-preflight", "--report_to", "none"]
    argv += ["--dynamic_sampling", "false", "--merge_adapter", "false"]
    if evolver is not None:
        argv += ["--evolve", "true", "--evolve_groups", "all", "--roles", f"evolver.base_url={evolver}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    history = json.loads((out / "log_history.json").read_text())
    times = [entry["step_time"] for entry in history if "step_time" in entry]
    return times, json.loads((out / "manifest.json").read_text())["summary"].get("evolve") or {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--evolve-latency", type=float, default=2.0)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        canned_endpoint(0.05) as judge,
        canned_endpoint(args.evolve_latency, jitter=0.0) as evolver,
    ):
        tmp = Path(tmp)
        without, _ = run(tmp / "without", judge.base_url, args.steps, None)
        with_evolution, counts = run(tmp / "with", judge.base_url, args.steps, evolver.base_url)
    plain, evolving = statistics.mean(without[1:]), statistics.mean(with_evolution[1:])
    print(f"step time without evolution: {plain:.2f} s (steps {', '.join(f'{t:.2f}' for t in without)})")
    print(f"step time with evolution:    {evolving:.2f} s (steps {', '.join(f'{t:.2f}' for t in with_evolution)})")
    print(f"ratio {evolving / plain:.3f} (limit {LIMIT}): {'PASS' if evolving / plain <= LIMIT else 'FAIL'}")
    print(f"evolution: {json.dumps(counts)}")


if __name__ == "__main__":
    main()
