"""The RuRL learning check: does GRPO with the rubric reward move a policy on this CPU, and does training one step
ahead learn as much as the synchronous schedule? (Rerunnable; not a timed test.)

    python -m experiments.rurl_learning_check [--steps 40] [--seeds 0 1 2] [--async-steps 0 1] [--output-dir DIR]
                                              [--plot PNG]

The tiny preset (configs/rurl/tiny-cpu.yaml: SmolLM2-135M-Instruct, LoRA) on experiments/data/rurl_rules.jsonl: 16
short questions whose rubrics are rule checks decided in code (at most 10 words: 3 points, one sentence: 1, no comma:
1), so the reward is exact with no judge. Trains once per schedule and seed (rurl.async_steps: 0, each step on its own
completions; 1, on completions the weights one update earlier generated), dropout off in both (as one step ahead
needs it), so that the schedule is the only difference. A run of the same steps, schedule and seed already finished
in the output folder is read, not trained again.

Per run: the mean reward of the first and of the last fifth of the steps. Per schedule: the mean and the spread
(sample standard deviation) of the last fifth over the seeds. The noise floor: how far apart the synchronous
schedule lands at two seeds (every pair of its seeds), to read the schedules' difference against. Writes
learning_check.json in the output folder and the curves (docs/rurl_learning_check.png); exits 1 when a schedule's
reward did not rise on average.
"""

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

from experiments.tiny_rurl import tiny_train_argv

ROOT = Path(__file__).resolve().parents[1]
NAMES = {0: "synchronous", 1: "one step ahead"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--async-steps", type=int, nargs="+", default=[0, 1], choices=[0, 1])
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "rurl-learning-check")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "rurl_learning_check.png")
    args = parser.parse_args()

    runs: dict[tuple[int, int], dict] = {}
    for seed in args.seeds:
        for async_steps in args.async_steps:
            out = args.output_dir / f"seed-{seed}" / f"async-{async_steps}"
            if not finished(out, args.steps, async_steps, seed):
                code = train(out, args.steps, async_steps, seed)
                if code:
                    return code
            runs[async_steps, seed] = run_figures(out)
            figures = runs[async_steps, seed]
            print(
                f"learning check, {NAMES[async_steps]}, seed {seed}: mean reward, first {figures['fifth']} steps "
                f"{figures['first']:.3f} -> last {figures['fifth']} {figures['last']:.3f} "
                f"({figures['last'] - figures['first']:+.3f})",
                flush=True,
            )
    study = summarise(runs, args.seeds, args.async_steps)
    study["steps"] = args.steps
    (args.output_dir / "learning_check.json").write_text(json.dumps(study, indent=2) + "\n")
    for line in report(study):
        print(line)
    write_plot(runs, max(1, args.steps // 5), args.plot)
    print(f"learning check: curves in {args.plot}, figures in {args.output_dir / 'learning_check.json'}")
    return 0 if all(s["mean_gain"] > 0 for s in study["schedules"].values()) else 1


def train(out: Path, steps: int, async_steps: int, seed: int) -> int:
    from commands.main import main as rubricrl

    return rubricrl(
        tiny_train_argv(
            ROOT / "experiments/data/rurl_rules.jsonl",
            out,
            steps,
            seed,
            0,
            ["--max_completion_length", "32", "--learning_rate", "2e-4", "--async_steps", str(async_steps)],
        )
    )


def finished(out: Path, steps: int, async_steps: int, seed: int) -> bool:
    """Whether `out` holds a finished run of these settings (one of others is trained again, into the same folder)."""
    try:
        config = json.loads((out / "manifest.json").read_text())["config"]
    except (OSError, ValueError, KeyError):
        return False
    return (config.get("max_steps"), config.get("seed"), config.get("rurl", {}).get("async_steps")) == (
        steps,
        seed,
        async_steps,
    )


def run_figures(out: Path) -> dict:
    """One run's per-step rewards and clip ratios, and the mean reward of its first and last fifth of steps."""
    history = json.loads((out / "log_history.json").read_text())
    steps = [(entry["step"], entry["reward"]) for entry in history if entry.get("reward") is not None]
    clipped = [entry.get("clip_ratio/region_mean", 0.0) for entry in history if entry.get("reward") is not None]
    rewards = [reward for _, reward in steps]
    fifth = max(1, len(rewards) // 5)
    return {
        "steps": steps,
        "fifth": fifth,
        "first": statistics.fmean(rewards[:fifth]),
        "last": statistics.fmean(rewards[-fifth:]),
        "max_clip_ratio": max(clipped, default=0.0),
    }


def summarise(runs: dict[tuple[int, int], dict], seeds: list[int], schedules: list[int]) -> dict:
    """Per schedule, the last fifth's mean and spread over the seeds; the noise floor from the synchronous seeds."""
    out: dict = {"seeds": seeds, "runs": [], "schedules": {}}
    for (async_steps, seed), figures in sorted(runs.items()):
        out["runs"].append(
            {
                "schedule": NAMES[async_steps],
                "seed": seed,
                "first_fifth": round(figures["first"], 3),
                "last_fifth": round(figures["last"], 3),
                "max_clip_ratio": figures["max_clip_ratio"],
            }
        )
    for async_steps in schedules:
        last = [runs[async_steps, seed]["last"] for seed in seeds]
        gains = [runs[async_steps, seed]["last"] - runs[async_steps, seed]["first"] for seed in seeds]
        out["schedules"][NAMES[async_steps]] = {
            "mean_last_fifth": round(statistics.fmean(last), 3),
            "sd_last_fifth": round(statistics.stdev(last), 3) if len(last) > 1 else None,
            "mean_gain": round(statistics.fmean(gains), 3),
        }
    if 0 in schedules and len(seeds) > 1:
        pairs = [abs(runs[0, a]["last"] - runs[0, b]["last"]) for a, b in itertools.combinations(seeds, 2)]
        out["noise_floor"] = {
            "what": "|last fifth, synchronous seed a - seed b| over every pair of seeds",
            "mean": round(statistics.fmean(pairs), 3),
            "max": round(max(pairs), 3),
        }
    if set(schedules) == {0, 1}:
        ahead, synchronous = (out["schedules"][NAMES[a]]["mean_last_fifth"] for a in (1, 0))
        out["difference_last_fifth"] = round(ahead - synchronous, 3)
    return out


def report(study: dict) -> list[str]:
    lines = [f"learning check over seeds {study['seeds']}: last fifth of the steps, mean (sd) over the seeds"]
    for name, figures in study["schedules"].items():
        lines.append(
            f"  {name}: {figures['mean_last_fifth']:.3f} ({figures['sd_last_fifth']}), "
            f"mean gain {figures['mean_gain']:+.3f}"
        )
    if "noise_floor" in study:
        floor = study["noise_floor"]
        lines.append(f"  noise floor, synchronous seed against seed: mean {floor['mean']:.3f}, max {floor['max']:.3f}")
    if "difference_last_fifth" in study:
        lines.append(f"  one step ahead minus synchronous: {study['difference_last_fifth']:+.3f}")
    return lines


def write_plot(runs: dict[tuple[int, int], dict], window: int, path: Path) -> None:
    """Per schedule (a colour) and seed (a line), the running mean of the reward over `window` steps."""
    from rubricrl import charts

    figure, axis = charts.figure(6.5, 3.8)
    styles = ["-", "--", ":", "-."]
    for (async_steps, seed), figures in sorted(runs.items()):
        rewards = [reward for _, reward in figures["steps"]]
        smooth = [statistics.fmean(rewards[max(0, i - window + 1) : i + 1]) for i in range(len(rewards))]
        charts.curves(
            axis,
            {f"{NAMES[async_steps]}, seed {seed}": [(x, y) for (x, _), y in zip(figures["steps"], smooth)]},
            marker=None,
            color=f"C{async_steps}",
            linestyle=styles[seed % len(styles)],
        )
    axis.set(xlabel="GRPO step", ylabel=f"rubric reward, running mean over {window} steps")
    axis.set_title("RuRL learning check: SmolLM2-135M-Instruct, LoRA, CPU")
    axis.legend(fontsize="x-small", ncol=2)
    charts.save_png(figure, path)


if __name__ == "__main__":
    sys.exit(main())
