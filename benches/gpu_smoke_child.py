"""The child processes of benches/gpu_smoke.py, each writing its figures as JSON to the file named second.

python benches/gpu_smoke_child.py command RESULT.json rurl train ...   # a `rubricrl` command, its steps timed
python benches/gpu_smoke_child.py trl RESULT.json --config FILE        # `trl grpo` (trl/scripts/grpo.py), the same
python benches/gpu_smoke_child.py generate RESULT.json MODEL_DIR      # transformers' generate alone
"""

import json
import random
import sys
import time

import torch
import transformers


class StepClock(transformers.TrainerCallback):
    """Each optimizer step's wall time, the GPU's queue drained at both ends (GRPO's steps include generation)."""

    seconds: list[float] = []
    started = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize()
        StepClock.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize()
        StepClock.seconds.append(time.perf_counter() - StepClock.started)


def command(argv: list[str]) -> dict:
    from rubricrl.cli import main

    transformers.trainer.DEFAULT_CALLBACKS.append(StepClock)  # every Trainer the command builds gets one
    return measured(main(argv))


def trl_grpo(argv: list[str]) -> dict:
    """TRL's own GRPO script, run as `trl grpo ARGV` runs it (its parser, then its main)."""
    from trl.scripts.grpo import main, make_parser

    transformers.trainer.DEFAULT_CALLBACKS.append(StepClock)
    main(*make_parser().parse_args_and_config(args=argv, fail_with_unknown_args=False))
    return measured(0)


def instant_reward(completions, **kwargs) -> list[float]:
    """The head-to-head's reward for `trl grpo`: random, at once (groups are never flat, nothing is waited for)."""
    return [random.random() for _ in completions]


def measured(code: int) -> dict:
    """The exit code, each step's seconds, peak GPU memory."""
    cuda = torch.cuda.is_available()
    return {
        "exit": code,
        "step_seconds": StepClock.seconds,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
    }


def generate(model_dir: str) -> list[dict]:
    """Every sequence held to its length (a random model rarely stops): the tiny preset's generation batch (8 x 48)
    and 64 x 256 on CUDA; 2 x 4 on a CPU (a dry run checks the code, not the speed). The first call warms up."""
    cuda = torch.cuda.is_available()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16 if cuda else torch.float32
    ).to("cuda" if cuda else "cpu")
    figures = []
    for batch, tokens in ((8, 48), (64, 256)) if cuda else ((2, 4),):
        prompt = torch.randint(100, 40000, (batch, 64), device=model.device)
        for _warm_up_then_timed in range(2):
            synchronize()
            started = time.perf_counter()
            model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=True,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                pad_token_id=model.config.pad_token_id,
            )
            synchronize()
        seconds = time.perf_counter() - started
        figures.append(
            {"batch": batch, "new_tokens": tokens, "seconds": seconds, "tokens_per_s": batch * tokens / seconds}
        )
    return figures


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


if __name__ == "__main__":
    kind, result_path, *rest = sys.argv[1:]
    result = {"command": command, "trl": trl_grpo, "generate": lambda rest: generate(*rest)}[kind](rest)
    with open(result_path, "w") as f:
        json.dump(result, f)
    sys.exit(result["exit"] if kind != "generate" else 0)
