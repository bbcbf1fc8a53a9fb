"""Evolving rubrics within one epoch, on the embedded model: `rurl.evolve_apply` same_step against next_draw.

The 8 tiny queries (experiments/data/rurl_tiny.jsonl) with rubrics built to saturate: each query's one criterion is a
rule every answer meets (at most 1000 words), so every group is flat under its original rubric. One epoch of the tiny
preset (6 training queries, 2 drawn per step, 3 steps: each query drawn once), evolution on, the embedded model (the
local vLLM server) as judge and as evolver, `evolve_groups: flat`. Everything else is the preset's.

    python -m experiments.evolve_one_epoch [--output-dir runs/evolve-one-epoch]

Prints per mode: the share of flat groups per step (under the rubrics as they stand after the step's evolution),
the completions that evolved criteria graded, the calls asked, the criteria written, probed, refused as exploitable
(or unprobed), waiting for probe budget and added, the probing's judge calls and same_step's wait per step, and the
wall time; same_step once more with `evolve_vet: false`, for what the probing costs. Writes results.json beside the
runs.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"
SATURATED = [{"criterion": "Answers in at most 1000 words.", "points": 4, "rule": {"type": "max_words", "value": 1000}}]


def saturating_rubrics(path: Path) -> Path:
    rows = [json.loads(line) for line in TINY.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps({**row, "rubrics": SATURATED}) + "\n" for row in rows))
    return path


def run(out: Path, rubrics: Path, apply: str, vet: bool = True) -> dict:
    argv = [sys.executable, "-m", "commands", "rurl", "train", "--config", "configs/rurl/tiny-cpu.yaml"]
    argv += ["--rubrics", str(rubrics), "--output_dir", str(out), "--num_train_epochs", "1", "--max_steps", "-1"]
    argv += ["--evolve", "true", "--evolve_apply", apply, "--dynamic_sampling", "false", "--eval_size", "2"]
    argv += ["--evolve_vet", str(vet).lower()]
    argv += ["--eval_every", "0", "--save_strategy", "no", "--report_to", "none", "--merge_adapter", "false"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env={**os.environ, "WANDB_MODE": "disabled"}, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{apply}: rurl train failed:\n{done.stderr[-3000:]}")
    history = [e for e in json.loads((out / "log_history.json").read_text()) if "evolve/flat_groups" in e]
    summary = json.loads((out / "manifest.json").read_text())["summary"]["evolve"]
    lines = [json.loads(line) for line in (out / "evolve_steps.jsonl").read_text().splitlines()]
    written = sum(len(line["written"]) for line in lines if "waited_since" not in line)
    return {
        "apply": apply,
        "vet": vet,
        "written": written,
        **{name: summary.get(name, 0) for name in ("probed", "exploitable", "unprobed", "waited", "probe_calls")},
        "wait_s_per_step": round(sum(e.get("evolve/wait_s", 0.0) for e in history) / len(history), 2),
        "steps": len(history),
        "flat_groups_per_step": [e["evolve/flat_groups"] for e in history],
        "flat_groups_mean": sum(e["evolve/flat_groups"] for e in history) / len(history),
        "graded_by_evolved": int(sum(e.get("evolve/graded_completions", 0) for e in history)),
        **{name: summary[name] for name in ("asked", "added", "refused", "failed", "timed_out", "regraded")},
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "evolve-one-epoch")
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    rubrics = saturating_rubrics(args.output_dir / "saturating_rubrics.jsonl")
    results = [run(args.output_dir / apply, rubrics, apply) for apply in ("next_draw", "same_step")]
    results.append(run(args.output_dir / "same_step-unvetted", rubrics, "same_step", vet=False))
    (args.output_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(
        "| mode | flat groups per step | mean | completions graded by evolved criteria | asked | written | probed | "
        "refused exploitable | unprobed | waited | added | probe calls per step | evolve wait per step | wall |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        steps = ", ".join(f"{share:.2f}" for share in r["flat_groups_per_step"])
        mode = r["apply"] + ("" if r["vet"] else " (unvetted)")
        print(
            f"| {mode} | {steps} | {r['flat_groups_mean']:.2f} | {r['graded_by_evolved']} | {r['asked']} | "
            f"{r['written']} | {r['probed']} | {r['exploitable']} | {r['unprobed']} | {r['waited']} | {r['added']} | "
            f"{r['probe_calls'] / r['steps']:.1f} | {r['wait_s_per_step']:.1f} s | {r['wall_s']:.0f} s |"
        )


if __name__ == "__main__":
    main()
