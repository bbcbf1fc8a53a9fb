"""The RuRL learning check: does GRPO with the rubric reward move a policy on this CPU? (Rerunnable; not a timed test.)

    python experiments/rurl_learning_check.py [--steps 40] [--output-dir runs/rurl-learning-check]

The tiny preset (configs/rurl/tiny-cpu.yaml: SmolLM2-135M-Instruct, LoRA) on experiments/data/rurl_rules.jsonl: 16
short questions whose rubrics are rule checks decided in code (at most 10 words: 3 points, one sentence: 1, no comma:
1), so the reward is exact with no judge. Compares the mean reward of the first and last fifth of the steps, draws
the curve to docs/rurl_learning_check.png, and exits 1 when the reward did not rise.
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
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "rurl-learning-check")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "rurl_learning_check.png")
    args = parser.parse_args()

    from rubricrl.cli import main as rubricrl

    code = rubricrl(
        [
            "rurl",
            "train",
            "--config",
            str(ROOT / "configs/rurl/tiny-cpu.yaml"),
            "--rubrics",
            str(ROOT / "experiments/data/rurl_rules.jsonl"),
            "--output_dir",
            str(args.output_dir),
            "--eval_size",
            "0",
            "--dynamic_sampling",
            "false",
            "--overlong_buffer",
            "0",
            "--max_steps",
            str(args.steps),
            "--save_steps",
            str(args.steps),
            "--report_to",
            "none",
            "--max_completion_length",
            "32",
            "--learning_rate",
            "2e-4",
            "--log_completions",
            "false",
        ]
    )
    if code:
        return code
    history = json.loads((args.output_dir / "log_history.json").read_text())
    steps = [(entry["step"], entry["reward"]) for entry in history if entry.get("reward") is not None]
    rewards = [reward for _, reward in steps]
    fifth = max(1, len(rewards) // 5)
    first, last = statistics.fmean(rewards[:fifth]), statistics.fmean(rewards[-fifth:])
    write_plot(steps, fifth, args.plot)
    print(
        f"learning check: mean reward, first {fifth} steps {first:.3f} -> last {fifth} steps {last:.3f} "
        f"({last - first:+.3f}); curve: {args.plot}"
    )
    return 0 if last > first else 1


def write_plot(steps: list[tuple[int, float]], window: int, path: Path) -> None:
    from rubricrl import charts

    rewards = [reward for _, reward in steps]
    smooth = [statistics.fmean(rewards[max(0, i - window + 1) : i + 1]) for i in range(len(rewards))]
    figure, axis = charts.figure(6, 3.5)
    charts.curves(axis, {"mean reward per step (8 completions)": steps}, marker=".", linestyle="none", alpha=0.5)
    charts.curves(
        axis, {f"running mean over {window} steps": [(x, y) for (x, _), y in zip(steps, smooth)]}, marker=None
    )
    axis.set(xlabel="GRPO step", ylabel="rubric reward (rule checks)")
    axis.set_title("RuRL learning check: SmolLM2-135M-Instruct, LoRA, CPU")
    axis.legend()
    charts.save_png(figure, path)


if __name__ == "__main__":
    sys.exit(main())
