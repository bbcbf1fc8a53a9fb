"""The child processes of benches/gpu_smoke.py, each writing its figures as JSON to the file named second.

python benches/gpu_smoke_child.py command RESULT.json rurl train ...   # a `rubricrl` command, its steps timed
python benches/gpu_smoke_child.py trl RESULT.json --config FILE        # `trl grpo` (trl/scripts/grpo.py), the same
python benches/gpu_smoke_child.py generate RESULT.json MODEL_DIR      # transformers' generate alone

Measured: each optimizer step's wall time (generation included for GRPO; the Trainer's checkpoint and log writes
after a step are not) and, per step, the host seconds of each block TRL profiles (`trl.extras.profiling`: its
generation, reward functions, `_prepare_inputs`, `compute_loss`...; the trainer's class name dropped, so that both
sides name them alike), the command's exit code and peak GPU memory; for `generate`, tokens/s. Also the two rewards
`trl grpo` gets in the head-to-head (by dotted path): `instant_reward`, and `slow_reward`, which answers after
SLOW_REWARD_S as the slow-judge comparison's canned judge does.
"""

import asyncio
import json
import random
import sys
import time

import torch
import transformers


class StepClock(transformers.TrainerCallback):
    """Each optimizer step's wall time, the GPU's queue drained at both ends (GRPO's steps include generation), and
    the seconds of each block TRL profiled during it (`phases`, one dict a step)."""

    seconds: list[float] = []
    phases: list[dict[str, float]] = []
    current: dict[str, float] = {}
    started = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        time_trl_blocks()  # here, not at the command's start: a command that trains nothing imports no TRL

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize()
        StepClock.current = {}
        StepClock.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize()
        StepClock.seconds.append(time.perf_counter() - StepClock.started)
        StepClock.phases.append({name: round(s, 3) for name, s in StepClock.current.items()})


def time_trl_blocks() -> None:
    """Every block TRL times (ProfilingContext, which logs only to wandb, mlflow or trackio) also adds its seconds to
    the current step's phases. Host time: what the block waited for on the GPU is in it, what it queued is not."""
    from trl.extras.profiling import ProfilingContext

    log = ProfilingContext._log_metrics
    if getattr(log, "step_clock", False):  # once per process
        return

    def _log_metrics(self, duration: float) -> None:
        owner, _, block = self.name.partition(".")
        name = block if owner.endswith("Trainer") else self.name
        StepClock.current[name] = StepClock.current.get(name, 0.0) + duration
        log(self, duration)

    _log_metrics.step_clock = True
    ProfilingContext._log_metrics = _log_metrics


def command(argv: list[str]) -> dict:
    from commands.main import main

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


SLOW_REWARD_S = 2.0
"""slow_reward's answer time: benches/gpu_head_to_head.py's SLOW_JUDGE_S, the slow canned judge's latency."""


async def slow_reward(completions, **kwargs) -> list[float]:
    """The slow-judge comparison's reward for `trl grpo`: random, after SLOW_REWARD_S. An `async def`: TRL awaits it
    on its own event loop (with any other async reward functions concurrently), once per generation batch, and the
    step waits for it, as a synchronous step waits for a judge."""
    await asyncio.sleep(SLOW_REWARD_S)
    return [random.random() for _ in completions]


def measured(code: int) -> dict:
    """The exit code, each step's seconds and phases, peak GPU memory."""
    cuda = torch.cuda.is_available()
    return {
        "exit": code,
        "step_seconds": StepClock.seconds,
        "step_phases": StepClock.phases,
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
