"""The RuRL learning check: does GRPO with the rubric reward move a policy on this CPU? (Rerunnable; not a timed test.)

    python experiments/rurl_learning_check.py [--steps 40] [--async-steps 0 1] [--seed 0] [--output-dir DIR] [--plot PNG]

The tiny preset (configs/rurl/tiny-cpu.yaml: SmolLM2-135M-Instruct, LoRA) on experiments/data/rurl_rules.jsonl: 16
short questions whose rubrics are rule checks decided in code (at most 10 words: 3 points, one sentence: 1, no comma:
1), so the reward is exact with no judge. Trains once per schedule (rurl.async_steps: 0, each step on its own
completions; 1, on completions the weights one update earlier generated), from the same seed. For each, compares the
mean reward of the first and last fifth of the steps; draws the curves on one plot (docs/rurl_learning_check.png) and
exits 1 when a schedule's reward did not rise.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--async-steps", type=int, nargs="+", default=[0, 1], choices=[0, 1])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "rurl-learning-check")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "rurl_learning_check.png")
    args = parser.parse_args()

    curves, risen = {}, True
    for async_steps in args.async_steps:
        out = args.output_dir / f"async-{async_steps}"
        code = train(out, args.steps, async_steps, args.seed)
        if code:
            return code
        history = json.loads((out / "log_history.json").read_text())
        steps = [(entry["step"], entry["reward"]) for entry in history if entry.get("reward") is not None]
        rewards = [reward for _, reward in steps]
        fifth = max(1, len(rewards) // 5)
        first, last = statistics.fmean(rewards[:fifth]), statistics.fmean(rewards[-fifth:])
        curves[async_steps] = steps
        risen &= last > first
        print(
            f"learning check, async_steps {async_steps}: mean reward, first {fifth} steps {first:.3f} -> last "
            f"{fifth} steps {last:.3f} ({last - first:+.3f})"
        )
    write_plot(curves, max(1, args.steps // 5), args.plot)
    print(f"learning check: curves in {args.plot}")
    return 0 if risen else 1


def train(out: Path, steps: int, async_steps: int, seed: int) -> int:
    from rubricrl.cli import main as rubricrl

    return rubricrl(
        [
            "rurl",
            "train",
            "--config",
            str(ROOT / "configs/rurl/tiny-cpu.yaml"),
            "--rubrics",
            str(ROOT / "experiments/data/rurl_rules.jsonl"),
            "--output_dir",
            str(out),
            "--eval_size",
            "0",
            "--dynamic_sampling",
            "false",
            "--overlong_buffer",
            "0",
            "--max_steps",
            str(steps),
            "--save_steps",
            str(steps),
            "--report_to",
            "none",
            "--max_completion_length",
            "32",
            "--learning_rate",
            "2e-4",
            "--log_completions",
            "false",
            "--async_steps",
            str(async_steps),
            "--seed",
            str(seed),
        ]
    )


def write_plot(curves: dict[int, list[tuple[int, float]]], window: int, path: Path) -> None:
    """Per schedule, the mean reward of each step (dots) and its running mean over `window` steps (a line)."""
    from rubricrl import charts

    figure, axis = charts.figure(6, 3.5)
    for async_steps, steps in curves.items():
        name = "synchronous" if async_steps == 0 else "one step ahead"
        rewards = [reward for _, reward in steps]
        smooth = [statistics.fmean(rewards[max(0, i - window + 1) : i + 1]) for i in range(len(rewards))]
        color = f"C{async_steps}"
        charts.curves(axis, {f"{name}: per step": steps}, marker=".", linestyle="none", alpha=0.4, color=color)
        charts.curves(
            axis,
            {f"{name}: running mean over {window} steps": [(x, y) for (x, _), y in zip(steps, smooth)]},
            marker=None,
            color=color,
        )
    axis.set(xlabel="GRPO step", ylabel="rubric reward (rule checks)")
    axis.set_title("RuRL learning check: SmolLM2-135M-Instruct, LoRA, CPU")
    axis.legend(fontsize="small")
    charts.save_png(figure, path)


if __name__ == "__main__":
    sys.exit(main())
