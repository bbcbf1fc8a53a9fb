"""The GPU path, run once: RuRL (GRPO) and RuFT (SFT) of the tiny presets in bf16 on CUDA, on an air-gapped machine.

The GPU machine this project can reach is bare and offline: PyTorch, transformers, accelerate, peft, pyarrow and
pandas, but no TRL, datasets, vLLM, openai, wandb or model weights. So:

    python -m benches.gpu_smoke prepare     # here, online: missing wheels, model config and tokenizer into .gpu_smoke/
    python3 -m benches.gpu_smoke run        # there, from the copied tree's root: 6 GRPO steps against
                                            # `trl grpo`'s in two shapes (head-to-head: benches/gpu_head_to_head.py),
                                            # generation, `ruft build`, 3 SFT steps, then the 135M shape with a 2 s
                                            # judge; the figures
    python -m benches.gpu_smoke --dry-run   # here: prepare, check the wheels install there, the run on CPU, tiny

Each runs from the repository's root (`benches` is a package there): `-m` puts that root on the path, and with it
`rubricrl`, which the GPU machine does not install.

`prepare` prints the folder's size against the 64 MiB that may travel; `run` installs the wheels offline and uses a
random model and a canned judge; tests/test_gpu_smoke.py runs --dry-run. A failed step prints one line naming it
(after its log's tail); the run ends itself within --deadline seconds. Measured: each GRPO and SFT optimizer step's
seconds (generation included for GRPO), the ratio of steady steps against trl grpo's with an instant reward, and with a
judge answering in 2 s, `rurl train` at --async_steps 0 and 1 and trl grpo with a 2 s async reward (each against trl
grpo's instant-reward step); each command's seconds, generated tokens/s, peak GPU memory, versions, and what the run
left on disk (bytes, checkpoint folders: none, no command saves one). The guide: docs/benchmarks.md.

The slow-judge runs come last, after SFT, so that a run the deadline cuts short has the rest; a side the deadline
leaves too little time for is skipped and says so. The dry run builds and resolves their three commands (the
`rurl train` settings at each --async_steps, trl grpo's config with the async reward, which it imports and checks as
TRL would) but runs none: each is a process that costs the suite's 2 shared cores 1-2.5 min (116-146 s at 3 steps,
other tests running), and what they would run beyond the commands is covered elsewhere (`--async_steps 1` in
tests/test_rurl_async.py, the same two commands at an instant judge just before them).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benches.gpu_head_to_head import (
    DRY_RUN_SHORT,
    NO_CHECKPOINTS,
    SLOW_JUDGE_S,
    SLOW_SHAPE,
    compare,
    report_lines,
    rurl_argv,
    shapes,
    slow_judge,
)
from benches.gpu_smoke_prepare import StepFailed, check_installable, pip, prepare

ROOT = Path(__file__).resolve().parents[1]
PREPARED = ROOT / ".gpu_smoke"  # git-ignored; carried to the GPU machine as it is
JUDGE_LATENCY = 0.05  # the canned judge's answer time (s): what is measured is the GPU side
CHILD = Path(__file__).with_name("gpu_smoke_child.py")  # a timed `rubricrl` or `trl grpo` command; generation alone
SMOKE_SHAPE = "135M LoRA 8x48"  # the head-to-head's shape that the smoke's own GRPO run is (its rurl train side)


class Run:
    """One smoke run in `work`: the steps in order, each timed against the deadline; figures collected in `result`."""

    def __init__(self, work: Path, deadline: float, dry_run: bool):
        self.work, self.ends, self.dry_run = work, time.monotonic() + deadline, dry_run
        self.result: dict = {"device": "cpu (dry run)" if dry_run else None}
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "RUBRICRL_HOME": str(work / "home"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            "TOKENIZERS_PARALLELISM": "false",
        }

    def left(self) -> float:
        return self.ends - time.monotonic()

    def device_flags(self, *short: str) -> list[str]:
        """CUDA in bf16; in a dry run the presets' own CPU settings, and `short` (shorter texts: the flags are what
        a dry run checks, in a test that shares 2 cores)."""
        if self.dry_run:
            return ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32", *short]
        return ["--use_cpu", "false", "--bf16", "true", "--dtype", "bfloat16"]

    def child(self, name: str, kind: str, args: list[str]) -> tuple[dict, float]:
        """benches/gpu_smoke_child.py `kind` in a child process, its log in work/<name>.log; what it wrote."""
        log, result = self.work / f"{name}.log", self.work / f"{name}.json"
        started = time.monotonic()
        try:
            with open(log, "w") as out:
                done = subprocess.run(
                    [sys.executable, str(CHILD), kind, str(result), *args],
                    cwd=ROOT,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=max(1.0, self.left()),
                )
        except subprocess.TimeoutExpired:
            raise StepFailed(f"did not end before the deadline (log {log})", tail(log)) from None
        if done.returncode != 0 or not result.is_file():
            raise StepFailed(f"exit {done.returncode}: {last_line(log)} (log {log})", tail(log))
        return json.loads(result.read_text()), time.monotonic() - started

    def command(self, name: str, argv: list[str], kind: str = "command") -> dict:
        """A `rubricrl` command (kind `trl`: `trl grpo`), each of its optimizer steps timed; its peak GPU memory."""
        figures, seconds = self.child(name, kind, argv)
        return {**figures, "seconds": seconds}

    def install(self, folder: Path) -> Path:
        site = self.work / "site"
        wheels = [str(p) for p in (folder / "wheels").glob("*.whl")]
        if not wheels:
            raise StepFailed(f"no wheels in {folder / 'wheels'}: run `python -m benches.gpu_smoke prepare` here first")
        offline = ["--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
        pip(["install", *offline, "--target", str(site), *wheels], "install the carried wheels")
        sys.path.insert(0, str(site))  # the carried wheels, for this process's own imports (versions, the judge)
        self.env["PYTHONPATH"] = os.pathsep.join([str(site), self.env["PYTHONPATH"]])
        return site

    def versions(self) -> None:
        import torch
        import transformers
        import trl

        cuda = torch.cuda.is_available()
        if not cuda and not self.dry_run:
            raise StepFailed("torch sees no CUDA device")
        self.result.update(
            device=torch.cuda.get_device_name() if cuda else self.result["device"],
            torch=torch.__version__,
            cuda=torch.version.cuda,
            transformers=transformers.__version__,
            trl=trl.__version__,
            python=sys.version.split()[0],
        )
        notes = unmet_requirements(["trl", "datasets", "peft", "accelerate", "jsonschema"])
        self.result["unmet_requirements"] = notes
        for note in notes:
            print(f"gpu_smoke: note: {note}", file=sys.stderr)

    def random_model(self, folder: Path, name: str = "model", shape: dict | None = None) -> Path:
        """SmolLM2-135M's architecture (`shape` overrides its config) and tokenizer with freshly drawn weights (seed
        0), saved in bf16; drawn on the GPU where there is one (a 1.7B model takes a while on a host's cores)."""
        from rubricrl.serving.embedded_model import save_random_model

        model_dir = self.work / name
        overrides = shape if shape is not None else shapes(self.dry_run)[SMOKE_SHAPE]["config"]
        save_random_model(folder / "model", model_dir, overrides, "bfloat16")
        return model_dir

    def grpo(self, model_dir: Path, judge_url: str, steps: int) -> list[str]:
        """The tiny preset's GRPO on the random model; returns its argv (the head-to-head's first shape reuses it)."""
        out = self.work / "rurl"
        argv = rurl_argv(model_dir, out, judge_url, steps, self.device_flags(*DRY_RUN_SHORT))
        ran = self.command("grpo", argv)
        logged = [e for e in json.loads((out / "log_history.json").read_text()) if "completions/mean_length" in e]
        if len(ran["step_seconds"]) != steps or len(logged) != steps:
            raise StepFailed(f"{len(ran['step_seconds'])} steps timed, {len(logged)} logged; {steps} asked")
        ran["mean_completion_tokens"] = [e["completions/mean_length"] for e in logged]
        ran["trl_step_time"] = [e.get("step_time") for e in logged]
        ran["reward"] = [e["reward"] for e in logged]
        ran["extra_rounds"] = [e.get("dynamic_sampling/extra_rounds", 0) for e in logged]  # generations beyond one
        self.result["grpo"] = ran
        return argv

    def generate(self, model_dir: Path) -> None:
        """transformers' generate alone, every sequence held to its length: the preset's batch (8 x 48) and 64 x 256
        (a dry run: 2 x 4)."""
        self.result["generate"] = self.child("generate", "generate", [str(model_dir)])[0]

    def ruft_build(self, judge_url: str) -> Path:
        """The SFT data: 4 canned candidates per query of the RuRL preset's rubrics, graded, the best kept (tau 0)."""
        out = self.work / "ruft-build"
        argv = ["ruft", "build", "--config", "configs/ruft/tiny-cpu.yaml", "--output_dir", str(out)]
        argv += ["--rubrics", "experiments/data/rurl_tiny.jsonl", "--threshold", "0", "--base_url", judge_url]
        argv += ["--model", "canned"]
        self.result["ruft_build"] = {"seconds": self.command("ruft_build", argv)["seconds"]}
        return out

    def sft(self, model_dir: Path, dataset: Path, steps: int) -> None:
        out = self.work / "ruft"
        argv = ["ruft", "train", "--config", "configs/ruft/tiny-cpu.yaml", "--dataset", str(dataset)]
        argv += ["--output_dir", str(out), "--model_name_or_path", str(model_dir), "--max_steps", str(steps)]
        argv += [*NO_CHECKPOINTS, "--report_to", "none", *self.device_flags("--max_length", "96")]
        ran = self.command("sft", argv)
        if len(ran["step_seconds"]) != steps:
            raise StepFailed(f"{len(ran['step_seconds'])} steps timed, {steps} asked")
        self.result["sft"] = ran


def unmet_requirements(names: list[str]) -> list[str]:
    """Each installed requirement of `names` that its own version range does not admit (not fatal: a note)."""
    from importlib.metadata import PackageNotFoundError, distribution, version

    from packaging.requirements import Requirement

    notes = []
    for name in names:
        for line in distribution(name).requires or []:
            need = Requirement(line)
            if need.marker is not None and not need.marker.evaluate({"extra": ""}):
                continue
            try:
                have = version(need.name)
            except PackageNotFoundError:
                notes.append(f"{name} needs {need}, not installed")
                continue
            if need.specifier and not need.specifier.contains(have, prereleases=True):
                notes.append(f"{name} needs {need}, the machine has {have}")
    return notes


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "no output"


@contextmanager
def step(name: str, run: Run | None = None):
    if run is not None and run.left() <= 0:
        raise StepFailed(f"{name}: not started, the deadline passed")
    print(f"gpu_smoke: {name} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        yield
    except StepFailed as error:
        raise StepFailed(f"{name}: {error}", error.log) from None
    except Exception as error:  # noqa: BLE001 - any fault of a step is reported as that step's
        first = (str(error).strip().splitlines() or [""])[0][:300]
        raise StepFailed(f"{name}: {type(error).__name__}: {first}", traceback.format_exc()[-4000:]) from error
    print(f"gpu_smoke: {name} done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)


def smoke(folder: Path, run: Run, steps: int, grpo_steps: int) -> dict:
    from benches.harness import canned_endpoint  # after the install: it imports rubricrl

    if run.dry_run:
        with step("prepare", run):
            run.result["prepared"] = prepare(folder)
        with step("install (pip's dry run for the GPU machine's Python)", run):
            check_installable(folder)
    else:
        with step("install", run):
            run.install(folder)
    with step("versions", run):
        run.versions()
    with step("random model", run):
        model_dir = run.random_model(folder)
    with ExitStack() as stack:
        with step("canned judge", run):
            judge = stack.enter_context(canned_endpoint(JUDGE_LATENCY))
        with step(f"grpo ({grpo_steps} steps of configs/rurl/tiny-cpu.yaml)", run):
            argv = run.grpo(model_dir, judge.base_url, grpo_steps)
        with step(f"head-to-head with trl grpo ({grpo_steps} steps a side; {', '.join(shapes(run.dry_run))})", run):
            done = {SMOKE_SHAPE: (argv, run.result["grpo"])}
            model_for = lambda slug, shape: run.random_model(folder, f"model-{slug}", shape)  # noqa: E731
            run.result["head_to_head"] = compare(run, model_for, judge.base_url, grpo_steps, done)
        with step("generate", run):
            run.generate(model_dir)
        with step("ruft build", run):
            dataset = run.ruft_build(judge.base_url)
        with step(f"sft ({steps} steps of configs/ruft/tiny-cpu.yaml)", run):
            run.sft(model_dir, dataset, steps)
        runs = "commands resolved, not run: a dry run" if run.dry_run else f"{grpo_steps} steps a side"
        with step(f"head-to-head with a {SLOW_JUDGE_S:g} s judge ({SLOW_SHAPE}; {runs})", run):
            slow = stack.enter_context(canned_endpoint(SLOW_JUDGE_S, jitter=0.0))
            entry = slow_judge(run, model_dir, slow.base_url, grpo_steps, run.result["head_to_head"])
            run.result["head_to_head"][SLOW_SHAPE]["slow_judge"] = entry
    return run.result


def left_on_disk(work: Path) -> dict:
    """What the run left in its work folder: GiB, checkpoint folders (none: no command saves one), the disk's free
    GiB. The checkpoint folders are then removed (nothing reads them), which frees room for the copy to --out."""
    files = [p for p in work.rglob("*") if p.is_file() and not p.is_symlink()]
    checkpoints = sorted(p for p in work.rglob("checkpoint-*") if p.is_dir())
    figures = {
        "work_gib": round(sum(p.stat().st_size for p in files) / 2**30, 3),
        "checkpoints": [str(p.relative_to(work)) for p in checkpoints],
        "free_disk_gib": round(shutil.disk_usage(work).free / 2**30, 1),
    }
    for folder in checkpoints:
        shutil.rmtree(folder, ignore_errors=True)
    return figures


def keep(run: Run, out: Path | None, failed: bool) -> None:
    """What the run left on disk into its result, then gpu_smoke.json and the commands' logs (and trl grpo's configs)
    into `out`. After a failed step a fault here is one line on stderr and the step's failure stays the one reported;
    after a run that went well it is the failure of the step `keep the results`."""
    try:
        with step("keep the results" + (f" in {out}" if out else "")):
            run.result["left_on_disk"] = left_on_disk(run.work)
            if out:
                out.mkdir(parents=True, exist_ok=True)
                (out / "gpu_smoke.json").write_text(json.dumps(run.result, indent=1))
                for log in [*run.work.glob("*.log"), *run.work.glob("trl-*.yaml")]:
                    shutil.copy2(log, out / log.name)
    except StepFailed as error:
        if not failed:
            raise
        print(f"gpu_smoke: note: after the failure below, also failed: {error}", file=sys.stderr)


def report(result: dict) -> str:
    def seconds(values) -> str:
        return ", ".join(f"{v:.2f}" for v in values)

    def gib(ran: dict) -> str:
        allocated, reserved = ran["peak_allocated_gib"], ran["peak_reserved_gib"]
        return "- (no GPU)" if allocated is None else f"{allocated:.2f} GiB allocated, {reserved:.2f} GiB reserved"

    grpo, sft = result["grpo"], result["sft"]
    lines = [
        f"device {result['device']}; torch {result['torch']} (CUDA {result['cuda']}), transformers "
        f"{result['transformers']}, TRL {result['trl']}, Python {result['python']}",
        f"GRPO step s: {seconds(grpo['step_seconds'])} (mean completion tokens {seconds(grpo['mean_completion_tokens'])};"
        f" extra generation rounds {', '.join(str(int(n)) for n in grpo['extra_rounds'])});"
        f" command {grpo['seconds']:.1f} s; peak GPU memory {gib(grpo)}",
        *(
            f"generate {g['batch']} x {g['new_tokens']} tokens: {g['tokens_per_s']:.0f} tokens/s ({g['seconds']:.2f} s)"
            for g in result["generate"]
        ),
        f"ruft build (canned candidates and judge): {result['ruft_build']['seconds']:.1f} s",
        f"SFT step s: {seconds(sft['step_seconds'])}; command {sft['seconds']:.1f} s; peak GPU memory {gib(sft)}",
        *report_lines(result["head_to_head"]),
    ]
    disk = result.get("left_on_disk")
    if disk:
        checkpoints = ", ".join(disk["checkpoints"]) or "none"
        lines.append(
            f"left on disk: {disk['work_gib']:.2f} GiB in the work folder, checkpoint folders: {checkpoints}; "
            f"{disk['free_disk_gib']:.1f} GiB free"
        )
    return "\n".join(f"gpu_smoke: {line}" for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", nargs="?", choices=["prepare", "run"], help="prepare here, run on the GPU machine")
    parser.add_argument("--dry-run", action="store_true", help="prepare, then run on this CPU, one step each")
    parser.add_argument("--prepared", type=Path, default=PREPARED, help="the prepared folder (default .gpu_smoke)")
    parser.add_argument("--steps", type=int, help="SFT steps (default 3; 1 in a dry run)")
    parser.add_argument("--grpo-steps", type=int, help="GRPO steps of each side (default 6; 3 in a dry run)")
    parser.add_argument("--deadline", type=float, default=560.0, help="seconds before the run stops itself")
    parser.add_argument("--out", type=Path, help="where gpu_smoke.json and the commands' logs are copied")
    args = parser.parse_args()
    if (args.stage is None) == (not args.dry_run):
        parser.error("name one of: prepare, run, --dry-run")
    try:
        if args.stage == "prepare":
            with step("prepare"):
                prepare(args.prepared)
            return 0
        with tempfile.TemporaryDirectory(prefix="gpu_smoke-", ignore_cleanup_errors=True) as work:
            run = Run(Path(work), args.deadline, args.dry_run)
            steps, grpo_steps = args.steps or (1 if args.dry_run else 3), args.grpo_steps or (3 if args.dry_run else 6)
            try:
                result = smoke(args.prepared, run, steps, grpo_steps)
            except BaseException:
                keep(run, args.out, failed=True)  # never in place of the failure: that is the one reported
                raise
            keep(run, args.out, failed=False)
        print(report(result))
        print(json.dumps(result))
        return 0
    except StepFailed as error:
        if error.log:
            print(error.log, file=sys.stderr)
        print(f"gpu_smoke: FAILED at {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
