"""benches/gpu_smoke.py's head-to-head: `rubricrl rurl train` against `trl grpo` (TRL's own trl/scripts/grpo.py), what
a user would run instead, on the same random-weight policy with the same resolved GRPOConfig and ModelConfig keys.

For each shape, `rurl train` runs the tiny preset (its canned judge answering in 50 ms) and prints its resolved
settings with --dry_run; TRL's keys among them, less ours, go to `trl grpo --config` with `eval_strategy: no` (the
script would otherwise want an eval split), the same prompts and an instant random reward. Random weights run every
completion to its length on both sides, so their generation work is equal. Figures per side: each step's seconds (the
first two apart; the median of the rest, "steady"), the whole command's seconds (a fresh process each, imports
included) and peak GPU memory; per shape the ratio of the steady medians, rubricrl / trl.
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
RUBRICRL_ONLY = {"rubrics", "merge_adapter", "reward_funcs", "dry_run", "llm", "synthesis", "grading", "ruft", "rurl"}
"""Keys of `rurl train`'s resolved settings that are rubricrl's, not GRPOConfig's or ModelConfig's."""


def rurl_argv(model_dir: Path, out: Path, judge_url: str, steps: int, flags: list[str]) -> list[str]:
    argv = ["rurl", "train", "--config", PRESET, "--output_dir", str(out), "--model_name_or_path", str(model_dir)]
    argv += ["--max_steps", str(steps), "--report_to", "none", "--base_url", judge_url, "--model", "canned"]
    return argv + flags


def trl_config(argv: list[str], dataset: Path, out: Path) -> dict:
    """`rurl train ARGV`'s resolved settings (its --dry_run), TRL's keys alone, as `trl grpo --config` takes them."""
    from rubricrl.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main([*argv, "--dry_run", "true"])
    if code != 0:
        raise RuntimeError(f"rurl train --dry_run exited {code}")
    resolved = yaml.safe_load(printed.getvalue())
    config = {key: value for key, value in resolved.items() if key not in RUBRICRL_ONLY}
    config.update(output_dir=str(out), eval_strategy="no", dataset_name=str(dataset), reward_funcs=[INSTANT_REWARD])
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


def summarize(ran: dict) -> dict:
    steps = ran["step_seconds"]
    steady = steps[FIRST_STEPS:]
    return {
        "first_steps_s": steps[:FIRST_STEPS],
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
    return {
        "extra_rounds": [int(e.get("dynamic_sampling/extra_rounds", 0)) for e in logged],
        "judge_s": [round(e.get("rubric/judge_latency_s", 0.0), 2) for e in logged],
        "seconds_by_phase": json.loads((out / "manifest.json").read_text())["summary"].get("seconds_by_phase"),
    }


def report_lines(figures: dict) -> list[str]:
    def side(name: str, ran: dict) -> str:
        memory = "" if ran["peak_allocated_gib"] is None else f", peak {ran['peak_allocated_gib']:.2f} GiB allocated"
        steady = "-" if ran["steady_median_s"] is None else f"{ran['steady_median_s']:.2f} s"
        first = ", ".join(f"{s:.2f}" for s in ran["first_steps_s"])
        return f"{name}: steady median {steady}, first steps {first} s, command {ran['command_s']:.1f} s{memory}"

    lines = []
    for name, shape in figures.items():
        if shape.get("resolved_only"):
            lines.append(f"{name}: settings resolved for both commands, not run (dry run)")
            continue
        ratio = "-" if shape["steady_ratio"] is None else f"{shape['steady_ratio']:.2f}"
        lines.append(f"{name}: steady-step ratio rubricrl / trl grpo {ratio}")
        lines += [f"  {side('rubricrl', shape['rubricrl'])}", f"  {side('trl grpo', shape['trl'])}"]
        ours = shape["rubricrl"]
        phases = ", ".join(f"{name} {s:.1f} s" for name, s in (ours["seconds_by_phase"] or {}).items())
        lines.append(
            f"  rubricrl per step: extra generation rounds {ours['extra_rounds']}, judge s {ours['judge_s']}; "
            f"by phase: {phases}"
        )
    return lines
