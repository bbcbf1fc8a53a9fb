"""benches/gpu_smoke.py's head-to-head: `rubricrl rurl train` against `trl grpo` (TRL's own trl/scripts/grpo.py), what
a user would run instead, on the same random-weight policy with the same resolved GRPOConfig and ModelConfig keys.

For each shape, `rurl train` runs the tiny preset (its canned judge answering in 50 ms) and prints its resolved
settings with --dry_run; TRL's keys among them, less ours, go to `trl grpo --config` with `eval_strategy: no` (the
script would otherwise want an eval split), the same prompts and an instant random reward. Random weights run every
completion to its length on both sides, so their generation work is equal. Neither side saves a checkpoint
(`--save_strategy no`: a step's clock stops before the Trainer would save, and nothing reads one; the preset's
`save_steps: 2` with optimizer state filled a 64 GB disk at the 1.7B shape); each still saves its final model.
Figures per side: each step's seconds (the first two apart; the median of the rest, "steady"), the whole command's
seconds (a fresh process each, imports included) and peak GPU memory; per shape the ratio of the steady medians,
rubricrl / trl.

With a slow judge (`slow_judge`, the 135M shape only): a judge answering in 2 s, against which `rurl train` runs at
`--async_steps 0` (each step waits for its grades) and `--async_steps 1` (the next batch is generated while this one
is graded), and `trl grpo` with `benches.gpu_smoke_child.slow_reward`, an `async def` that answers after 2 s (TRL
awaits it once per generation batch, the step waiting). Each side's steady median over trl grpo's steady median with
the instant reward says what the judge costs a step, and how much of it `--async_steps 1` hides; for rubricrl also
the seconds it waited for grades and those hidden behind generation and the update (`async/wait_s`, `overlap_s`).
"""

import contextlib
import io
import json
import statistics
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PRESET = "configs/rurl/tiny-cpu.yaml"
ROWS = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"
INSTANT_REWARD = "benches.gpu_smoke_child.instant_reward"  # trl grpo imports it by its dotted path, from ROOT
SLOW_REWARD = "benches.gpu_smoke_child.slow_reward"  # the same, answering after SLOW_JUDGE_S (an async def)
FIRST_STEPS = 2  # steps apart from the steady ones: compilation, allocator and cache warm-up on both sides

SHAPES = {
    # SmolLM2-135M's own architecture with the preset's settings: LoRA, 8 completions x 48 tokens
    "135M LoRA 8x48": {"config": {}, "flags": []},
    # SmolLM2-1.7B's: full fine-tuning with gradient checkpointing, 16 completions x 128 tokens
    "1.7B full 16x128": {
        "config": {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "intermediate_size": 8192,
        },
        "flags": ["--use_peft", "false", "--gradient_checkpointing", "true", "--per_device_train_batch_size", "16"]
        + ["--max_completion_length", "128", "--learning_rate", "1e-6", "--overlong_buffer", "32"],
    },
}
DRY_SHAPES = {
    # on the CPU the script is checked, not the speed: 2 layers, a few tokens; the second shape's settings are
    # resolved for both commands but not run (each GRPO process costs the suite's shared cores ~20 s of imports)
    "135M LoRA 8x48": {"config": {"num_hidden_layers": 2}, "flags": []},
    "1.7B full 16x128": {"config": {}, "flags": SHAPES["1.7B full 16x128"]["flags"], "resolve_only": True},
}
DRY_RUN_SHORT = ("--max_completion_length", "12", "--overlong_buffer", "4")
"""A dry run's shorter completions (gpu_smoke's Run.device_flags adds them on the CPU only)."""
NO_CHECKPOINTS = ("--save_strategy", "no")
"""Every GRPO command of the smoke, both sides (`trl grpo` gets the resolved key): no checkpoint is timed or read."""
SLOW_SHAPE = "135M LoRA 8x48"  # the shape of the slow-judge comparison
SLOW_JUDGE_S = 2.0  # its canned judge's answer time, without jitter; gpu_smoke_child.SLOW_REWARD_S is the same
SLOW_FLAGS = ("--eval_size", "0")
"""The slow-judge runs of `rurl train` evaluate nothing: an evaluation is not in a step's time, and with a 2 s judge
each of the preset's three (steps 2, 4 and 6) would cost the command a generation and 2 s more of the deadline."""
SLOW_SIDES = {
    # name in gpu_smoke.json: (what the report calls it, `rurl train --async_steps` or None for trl grpo)
    "rubricrl_async_1": ("rubricrl --async_steps 1", 1),
    "rubricrl_async_0": ("rubricrl --async_steps 0", 0),
    "trl_slow_reward": (f"trl grpo, an async reward answering in {SLOW_JUDGE_S:g} s", None),
}
"""In the order they run: where the deadline is near, the last ones are skipped (their entry says so)."""
RESERVE_S = 15.0  # what the smoke keeps for itself after the last command: the report and the copy to --out
RUBRICRL_ONLY = {"rubrics", "merge_adapter", "reward_funcs", "dry_run", "llm", "synthesis", "grading", "ruft", "rurl"}
"""Keys of `rurl train`'s resolved settings that are rubricrl's, not GRPOConfig's or ModelConfig's."""


def rurl_argv(model_dir: Path, out: Path, judge_url: str, steps: int, flags: list[str]) -> list[str]:
    argv = ["rurl", "train", "--config", PRESET, "--output_dir", str(out), "--model_name_or_path", str(model_dir)]
    argv += ["--max_steps", str(steps), "--report_to", "none", "--base_url", judge_url, "--model", "canned"]
    return argv + [*NO_CHECKPOINTS, *flags]


def resolved(argv: list[str]) -> dict:
    """`rurl train ARGV`'s resolved settings, as its --dry_run prints them (ours and TRL's), in this process."""
    from commands.main import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main([*argv, "--dry_run", "true"])
    if code != 0:
        raise RuntimeError(f"rurl train --dry_run exited {code}")
    return yaml.safe_load(printed.getvalue())


def trl_config(argv: list[str], dataset: Path, out: Path, reward: str = INSTANT_REWARD) -> dict:
    """`rurl train ARGV`'s resolved settings, TRL's keys alone, as `trl grpo --config` takes them; `reward` the
    dotted path of its reward function."""
    config = {key: value for key, value in resolved(argv).items() if key not in RUBRICRL_ONLY}
    config.update(output_dir=str(out), eval_strategy="no", dataset_name=str(dataset), reward_funcs=[reward])
    return config


def write_prompts(folder: Path) -> Path:
    """The preset's prompts as a dataset folder that `load_dataset(folder)` reads (a train split, `prompt` only)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    (folder / "train.jsonl").write_text("".join(json.dumps({"prompt": row["prompt"]}) + "\n" for row in rows))
    return folder


def shapes(dry_run: bool) -> dict:
    return DRY_SHAPES if dry_run else SHAPES


def compare(run, model_for, judge_url: str, steps: int, done: dict) -> dict:
    """Each shape: `rurl train` then `trl grpo` on one random model (`model_for(slug, config overrides)` makes it);
    their figures and the steady ratio. `run` is gpu_smoke's Run (its child processes, device flags and deadline);
    `done` maps a shape to the (argv, figures) of a `rurl train` already run on it (the smoke's own GRPO run)."""
    dataset = write_prompts(run.work / "prompts")
    figures = {}
    for name, shape in shapes(run.dry_run).items():
        slug = name.split()[0].lower().replace(".", "_")
        flags = [*shape["flags"], *run.device_flags(*DRY_RUN_SHORT)]
        if name in done:
            argv, rubricrl = done[name]
        elif shape.get("resolve_only"):
            argv = rurl_argv(run.work / "model", run.work / f"rurl-{slug}", judge_url, steps, flags)
        else:
            argv = rurl_argv(model_for(slug, shape["config"]), run.work / f"rurl-{slug}", judge_url, steps, flags)
            rubricrl = run.command(f"h2h-rurl-{slug}", argv)
        config = trl_config(argv, dataset, run.work / f"trl-{slug}")
        (run.work / f"trl-{slug}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        if shape.get("resolve_only"):
            figures[name] = {"resolved_only": True}
            continue
        trl = run.command(f"h2h-trl-{slug}", ["--config", str(run.work / f"trl-{slug}.yaml")], kind="trl")
        for side, ran in (("rubricrl", rubricrl), ("trl grpo", trl)):
            if len(ran["step_seconds"]) != steps:
                raise RuntimeError(f"{name}, {side}: {len(ran['step_seconds'])} steps timed, {steps} asked")
        figures[name] = {"rubricrl": summarize(rubricrl), "trl": summarize(trl)}
        figures[name]["rubricrl"].update(breakdown(Path(argv[argv.index("--output_dir") + 1])))
        steady = figures[name]["rubricrl"]["steady_median_s"], figures[name]["trl"]["steady_median_s"]
        figures[name]["steady_ratio"] = steady[0] / steady[1] if None not in steady else None
    return figures


def slow_judge(run, model_dir: Path, judge_url: str, steps: int, figures: dict) -> dict:
    """SLOW_SHAPE with a judge that answers in SLOW_JUDGE_S (`judge_url`, `model_dir` the shape's random model):
    `rurl train` at --async_steps 1 and 0, `trl grpo` with slow_reward, in that order, each in a fresh process; per
    side its figures and `ratio_to_trl_instant`, its steady median over trl grpo's with the instant reward
    (`figures`: compare's, SLOW_SHAPE run). A side the deadline leaves too little time for is skipped (it says so).
    A dry run builds and resolves all three commands and runs none (see gpu_smoke.py: the suite's cores)."""
    instant = figures[SLOW_SHAPE]
    entry: dict = {
        "judge_s": SLOW_JUDGE_S,
        "steps": steps,
        "trl_instant_steady_median_s": instant["trl"]["steady_median_s"],
    }
    flags = [*SLOW_FLAGS, *run.device_flags(*DRY_RUN_SHORT)]
    commands = {}
    for name, (_, async_steps) in SLOW_SIDES.items():
        if async_steps is None:
            continue
        out = run.work / f"rurl-slow-{async_steps}"
        argv = rurl_argv(model_dir, out, judge_url, steps, [*flags, "--async_steps", str(async_steps)])
        settings = resolved(argv)
        if settings["rurl"]["async_steps"] != async_steps or settings["save_strategy"] != "no":
            raise RuntimeError(
                f"{name}: resolved async_steps {settings['rurl']['async_steps']}, save_strategy "
                f"{settings['save_strategy']}; asked {async_steps} and no"
            )
        commands[name] = ("command", f"h2h-rurl-slow-{async_steps}", argv)
    config = trl_config(
        commands["rubricrl_async_0"][2], write_prompts(run.work / "prompts"), run.work / "trl-slow", SLOW_REWARD
    )
    trl_file = run.work / "trl-135m-slow.yaml"
    trl_file.write_text(yaml.safe_dump(config, sort_keys=False))
    check_async_reward(SLOW_REWARD)
    commands["trl_slow_reward"] = ("trl", "h2h-trl-slow", ["--config", str(trl_file)])
    for name, (kind, log, argv) in commands.items():
        if run.dry_run:
            entry[name] = {"resolved_only": True, "argv": argv}
            continue
        needed = slow_run_estimate(instant, kind, steps)
        if run.left() < needed + RESERVE_S:
            entry[name] = {"skipped": f"{run.left():.0f} s left before the deadline, about {needed:.0f} s needed"}
            continue
        ran = run.command(log, argv, kind=kind)
        if len(ran["step_seconds"]) != steps:
            raise RuntimeError(f"slow judge, {name}: {len(ran['step_seconds'])} steps timed, {steps} asked")
        entry[name] = summarize(ran)
        if kind == "command":
            entry[name].update(breakdown(Path(argv[argv.index("--output_dir") + 1])))
        steady, base = entry[name]["steady_median_s"], entry["trl_instant_steady_median_s"]
        entry[name]["ratio_to_trl_instant"] = steady / base if None not in (steady, base) else None
    return entry


def check_async_reward(dotted: str) -> None:
    """What `trl grpo` does with a reward's dotted path: import it, and run it as async if it is a coroutine
    function (TRL's is_async_callable): a slow reward that was not would block the step the same, but say nothing."""
    import importlib
    import inspect

    module, name = dotted.rsplit(".", 1)
    if not inspect.iscoroutinefunction(getattr(importlib.import_module(module), name)):
        raise RuntimeError(f"{dotted} is not an async def")


def slow_run_estimate(instant: dict, kind: str, steps: int) -> float:
    """About how long a slow-judge command takes: its instant-judge twin's whole command plus the judge's time at
    every step; for rubricrl also at the preflight and an extra round's grading (the evaluations it leaves out are the
    margin)."""
    if kind == "trl":
        return instant["trl"]["command_s"] + steps * SLOW_JUDGE_S
    return instant["rubricrl"]["command_s"] + (steps + 2) * SLOW_JUDGE_S


def summarize(ran: dict) -> dict:
    steps = ran["step_seconds"]
    steady = steps[FIRST_STEPS:]
    phases = ran.get("step_phases") or []
    return {
        "first_steps_s": steps[:FIRST_STEPS],
        "first_steps_phases": phases[:FIRST_STEPS],
        "steady_phases_median": {
            name: statistics.median(step.get(name, 0.0) for step in phases[FIRST_STEPS:])
            for name in sorted({name for step in phases[FIRST_STEPS:] for name in step})
        },
        "steady_median_s": statistics.median(steady) if steady else None,
        "steady_steps_s": steady,
        "command_s": ran["seconds"],
        "peak_allocated_gib": ran["peak_allocated_gib"],
        "peak_reserved_gib": ran["peak_reserved_gib"],
    }


def breakdown(out: Path) -> dict:
    """What `rurl train` does that `trl grpo` does not, from its output folder: per step, the generation rounds
    beyond the first (dynamic sampling) and the seconds the judge took; the command's seconds by phase."""
    logged = [e for e in json.loads((out / "log_history.json").read_text()) if "reward" in e]
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    figures = {
        "extra_rounds": [int(e.get("dynamic_sampling/extra_rounds", 0)) for e in logged],
        "judge_s": [round(e.get("rubric/judge_latency_s", 0.0), 2) for e in logged],
        "seconds_by_phase": summary.get("seconds_by_phase"),
    }
    if summary.get("async"):  # --async_steps 1: per step, the seconds waited for grades and those graded meanwhile
        figures["wait_s"] = [round(e.get("async/wait_s", 0.0), 2) for e in logged]
        figures["overlap_s"] = [round(e.get("async/overlap_s", 0.0), 2) for e in logged]
        figures["staleness"] = [int(e.get("async/staleness", 0)) for e in logged]
        figures["async"] = summary["async"]
    return figures


def side(name: str, ran: dict) -> str:
    memory = "" if ran["peak_allocated_gib"] is None else f", peak {ran['peak_allocated_gib']:.2f} GiB allocated"
    steady = "-" if ran["steady_median_s"] is None else f"{ran['steady_median_s']:.2f} s"
    first = ", ".join(f"{s:.2f}" for s in ran["first_steps_s"])
    return f"{name}: steady median {steady}, first steps {first} s, command {ran['command_s']:.1f} s{memory}"


def phase_lines(shape: dict) -> list[str]:
    """Where each side's first steps and steady step go, by the blocks TRL profiles (host seconds; the blocks nest:
    generation and rewards are inside _prepare_inputs), the larger first."""

    def phases(seconds: dict) -> str:
        return ", ".join(f"{name} {s:.2f}" for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])) or "-"

    lines = []
    for label, ran in (("rubricrl", shape["rubricrl"]), ("trl grpo", shape["trl"])):
        for i, step in enumerate(ran.get("first_steps_phases") or []):
            lines.append(f"    {label} step {i + 1} s: {phases(step)}")
        if ran.get("steady_phases_median"):
            lines.append(f"    {label} steady (median) s: {phases(ran['steady_phases_median'])}")
    return lines


def slow_judge_lines(slow: dict) -> list[str]:
    base = slow["trl_instant_steady_median_s"]
    lines = [
        f"{SLOW_SHAPE} with a {slow['judge_s']:g} s judge, {slow['steps']} steps a side; ratio: steady step / trl "
        f"grpo's with the instant reward ({'-' if base is None else f'{base:.2f} s'})"
    ]
    for name, (label, _) in SLOW_SIDES.items():
        ran = slow[name]
        if ran.get("resolved_only"):
            lines.append(f"  {label}: command built and resolved, not run (dry run)")
            continue
        if "skipped" in ran:
            lines.append(f"  {label}: skipped, {ran['skipped']}")
            continue
        ratio = "-" if ran["ratio_to_trl_instant"] is None else f"{ran['ratio_to_trl_instant']:.2f}"
        lines.append(f"  ratio {ratio}, {side(label, ran)}")
        if "extra_rounds" in ran:
            waits = f"; waited s {ran['wait_s']}, graded meanwhile s {ran['overlap_s']}" if "wait_s" in ran else ""
            lines.append(
                f"    per step: extra generation rounds {ran['extra_rounds']}, judge s {ran['judge_s']}{waits}"
            )
    return lines


def report_lines(figures: dict) -> list[str]:
    lines = []
    for name, shape in figures.items():
        if shape.get("resolved_only"):
            lines.append(f"{name}: settings resolved for both commands, not run (dry run)")
            continue
        ratio = "-" if shape["steady_ratio"] is None else f"{shape['steady_ratio']:.2f}"
        lines.append(f"{name}: steady-step ratio rubricrl / trl grpo {ratio}")
        lines += [f"  {side('rubricrl', shape['rubricrl'])}", f"  {side('trl grpo', shape['trl'])}"]
        lines += phase_lines(shape)
        ours = shape["rubricrl"]
        phases = ", ".join(f"{name} {s:.1f} s" for name, s in (ours["seconds_by_phase"] or {}).items())
        lines.append(
            f"  rubricrl per step: extra generation rounds {ours['extra_rounds']}, judge s {ours['judge_s']}; "
            f"by phase: {phases}"
        )
        if "slow_judge" in shape:
            lines += slow_judge_lines(shape["slow_judge"])
    return lines
