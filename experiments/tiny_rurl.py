"""The `rurl train` command line that the CPU experiments on rule rubrics share (experiments/hacking_lab.py,
experiments/rurl_learning_check.py): the tiny preset (configs/rurl/tiny-cpu.yaml) for a fixed number of steps, with
no dynamic sampling, overlong shaping, report, logged completions or dropout."""

from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "configs/rurl/tiny-cpu.yaml"


def tiny_train_argv(rubrics: Path, out: Path, steps: int, seed: int, eval_size: int, extra: Sequence[str]) -> list[str]:
    """`rurl train` of the preset on `rubrics` into `out`: `steps` steps, saved once at the last, `eval_size` rows
    held out, at `seed`; no dynamic sampling, no overlong shaping, no report, no logged completions, dropout off;
    then the experiment's own flags (`extra`, none of them one of these)."""
    return [
        *("rurl", "train", "--config", str(PRESET), "--rubrics", str(rubrics), "--output_dir", str(out)),
        *("--eval_size", str(eval_size), "--dynamic_sampling", "false", "--overlong_buffer", "0"),
        *("--max_steps", str(steps), "--save_steps", str(steps), "--report_to", "none"),
        *("--log_completions", "false", "--disable_dropout", "true", "--seed", str(seed)),
        *extra,
    ]
