"""What evolving rubrics cost a RuRL step: the tiny preset's GRPO steps without `rurl.evolve`, with `evolve_apply:
next_draw` and with `same_step`, the judge on one canned endpoint (benches/canned_server.py, 0.05 s) and the evolver
on another that answers after 2 s. Evolution asks about every group every step (`evolve_groups: all`). next_draw's
calls outlast their step: they run on the reward's event loop while training goes on and join the rubric at a later
step's end. same_step's step waits for its calls, then grades its groups again with what they wrote.

    python -m benches.rurl_evolve [--steps 6] [--evolve-latency 2]

Prints each run's mean step time (TRL's `step_time`, the first, warm-up step left out), next_draw's ratio against
the limit 1.1, same_step's ratio and where its extra time goes (the wait for the calls, the second grading), and
each run's evolution counts."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benches.harness import ROOT, canned_endpoint

LIMIT = 1.1


def run(out: Path, judge: str, steps: int, evolver: str | None, apply: str = "") -> tuple[list[float], dict, dict]:
    argv = [sys.executable, "-m", "commands", "rurl", "train", "--config", "configs/rurl/tiny-cpu.yaml"]
    argv += ["--output_dir", str(out), "--max_steps", str(steps), "--eval_size", "0", "--save_strategy", "no"]
    argv += ["--base-url", judge, "--model", "canned", "--no-cache", "--no-preflight", "--report_to", "none"]
    argv += ["--dynamic_sampling", "false", "--merge_adapter", "false"]
    if evolver is not None:
        argv += ["--evolve", "true", "--evolve_groups", "all", "--roles", f"evolver.base_url={evolver}"]
        argv += ["--evolve_apply", apply]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    history = json.loads((out / "log_history.json").read_text())
    times = [entry["step_time"] for entry in history if "step_time" in entry]
    phases = {
        name: statistics.mean(entry[name] for entry in history[1:] if name in entry)
        if any(name in e for e in history[1:])
        else 0.0
        for name in ("evolve/wait_s", "evolve/regrade_s")
    }
    return times, json.loads((out / "manifest.json").read_text())["summary"].get("evolve") or {}, phases


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
        without, _, _ = run(tmp / "without", judge.base_url, args.steps, None)
        later, later_counts, _ = run(tmp / "next_draw", judge.base_url, args.steps, evolver.base_url, "next_draw")
        now, now_counts, phases = run(tmp / "same_step", judge.base_url, args.steps, evolver.base_url, "same_step")
    plain, deferred, waited = (statistics.mean(times[1:]) for times in (without, later, now))
    for name, times in (("without evolution", without), ("next_draw", later), ("same_step", now)):
        print(
            f"step time {name + ':':19} {statistics.mean(times[1:]):.2f} s (steps {', '.join(f'{t:.2f}' for t in times)})"
        )
    print(f"next_draw ratio {deferred / plain:.3f} (limit {LIMIT}): {'PASS' if deferred / plain <= LIMIT else 'FAIL'}")
    print(
        f"same_step ratio {waited / plain:.3f}: per step {phases['evolve/wait_s']:.2f} s waiting for the evolve calls, "
        f"{phases['evolve/regrade_s']:.2f} s grading the changed groups again"
    )
    print(f"next_draw evolution: {json.dumps(later_counts)}")
    print(f"same_step evolution: {json.dumps(now_counts)}")


if __name__ == "__main__":
    main()
