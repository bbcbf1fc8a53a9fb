"""The GPU path, run once: RuRL (GRPO) and RuFT (SFT) of the tiny presets in bf16 on CUDA, on an air-gapped machine.

The GPU machine this project can reach is bare and offline: PyTorch, transformers, accelerate, peft, pyarrow and
pandas, but no TRL, datasets, vLLM, openai, wandb or model weights. So:

    python benches/gpu_smoke.py prepare     # here, online: missing wheels, model config and tokenizer into .gpu_smoke/
    python benches/gpu_smoke.py run         # there: 3 GRPO steps, generation, `ruft build`, 3 SFT steps; the figures
    python benches/gpu_smoke.py --dry-run   # here: prepare, check the wheels install there, the run on CPU, 1 step each

`prepare` prints the folder's size against the 64 MiB that may travel; `run` installs the wheels offline and uses a
random model and a canned judge; tests/test_gpu_smoke.py runs --dry-run. A failed step prints one line naming it
(after its log's tail); the run ends itself within --deadline seconds. Figures: step times, generated tokens/s, peak
GPU memory, versions (the guide: docs/benchmarks.md).
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

ROOT = Path(__file__).resolve().parents[1]
PREPARED = ROOT / ".gpu_smoke"  # git-ignored; carried to the GPU machine as it is
LIMIT_MIB = 64  # what may travel to the GPU machine: the working tree and the prepared files together
CARRIED = "trl datasets dill multiprocess jsonschema jsonschema-specifications referencing rpds-py".split()
"""What the GPU image lacks of what `rurl train` and `ruft train` import (the device tool's package list, 2026-11-17),
at the versions installed here: the ones the suite passes with. wandb stays behind (the runs log to none)."""
THERE = {"python": "3.12", "platforms": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")}
"""The GPU machine's python3 (3.12.3, /opt/torch/.venv) and the wheel platforms it takes."""
MODEL_FILES = "config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja".split()
"""SmolLM2-135M's config and tokenizer (3.5 MB) from the embedded model: no weights travel, the run draws them."""
JUDGE_LATENCY = 0.05  # the canned judge's answer time (s): what is measured is the GPU side
CHILD = Path(__file__).with_name("gpu_smoke_child.py")  # a timed `rubricrl` command; generation alone


class StepFailed(Exception):
    """A step of the smoke run failed: the message says how in one line, `log` is the tail of its log if any."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


# --- here: preparation -------------------------------------------------------------------------------------------


def prepare(folder: Path) -> dict:
    """The wheels the GPU machine lacks and the model's config and tokenizer into `folder`, checked to fit."""
    from importlib.metadata import version

    from rubricrl.serving.embedded_model import prepare_embedded_model

    shutil.rmtree(folder, ignore_errors=True)
    (folder / "wheels").mkdir(parents=True)
    pins = [f"{name}=={version(name)}" for name in CARRIED]
    pip(["download", "--no-deps", "--dest", str(folder / "wheels"), *target_flags(), *pins], "download the wheels")
    (folder / "model").mkdir()
    source = prepare_embedded_model(log=lambda line: print(f"gpu_smoke: {line}", file=sys.stderr))
    for name in MODEL_FILES:
        shutil.copy2(source / name, folder / "model" / name)
    prepared, tree = size_of(folder.rglob("*")), size_of(ROOT / p for p in travelling_files())
    print(
        f"gpu_smoke: prepared {mib(prepared)} ({', '.join(pins)}; model config and tokenizer) + working tree "
        f"{mib(tree)} = {mib(prepared + tree)} of the {LIMIT_MIB} MiB that may travel",
        file=sys.stderr,
    )
    if prepared + tree > LIMIT_MIB * 2**20:
        raise StepFailed(f"{mib(prepared + tree)} would travel, more than {LIMIT_MIB} MiB")
    return {"wheels": pins, "prepared_bytes": prepared, "tree_bytes": tree}


def check_installable(folder: Path) -> None:
    """pip's dry run of the offline install, for the GPU machine's Python and platform (not this one's)."""
    wheels = sorted(str(p) for p in (folder / "wheels").glob("*.whl"))
    with tempfile.TemporaryDirectory() as target:
        pip(
            ["install", "--dry-run", "--no-index", "--no-deps", "--target", target, *target_flags(), *wheels], "install"
        )


def target_flags() -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", THERE["python"], "--implementation", "cp"]
    return flags + [f"--platform={platform}" for platform in THERE["platforms"]]


def travelling_files() -> list[str]:
    """The working tree as the device tool sends it: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True
    )
    return [name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def size_of(paths) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def pip(args: list[str], what: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "-q", *args], capture_output=True, text=True)
    if done.returncode != 0:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        raise StepFailed(f"pip could not {what}: {said[-1] if said else 'no message'}", "\n".join(said[-30:]))


# --- there: the run ----------------------------------------------------------------------------------------------


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

    def child(self, name: str, kind: str, args: list[str]):
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

    def command(self, name: str, argv: list[str]) -> dict:
        """A `rubricrl` command, each of its optimizer steps timed; its peak GPU memory."""
        figures, seconds = self.child(name, "command", argv)
        return {**figures, "seconds": seconds}

    def install(self, folder: Path) -> Path:
        site = self.work / "site"
        wheels = [str(p) for p in (folder / "wheels").glob("*.whl")]
        if not wheels:
            raise StepFailed(f"no wheels in {folder / 'wheels'}: run `python benches/gpu_smoke.py prepare` here first")
        offline = ["--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
        pip(["install", *offline, "--target", str(site), *wheels], "install the carried wheels")
        sys.path.insert(0, str(site))
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

    def random_model(self, folder: Path) -> Path:
        """SmolLM2-135M's architecture and tokenizer with freshly drawn weights (seed 0), saved in bf16; in a dry run
        2 of its 30 layers (what is checked is the script, and the suite's 2 cores save, load and merge it 3 times)."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(0)
        model_dir = self.work / "model"
        config = AutoConfig.from_pretrained(folder / "model")
        if self.dry_run:
            config.num_hidden_layers = 2
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(model_dir)
        AutoTokenizer.from_pretrained(folder / "model").save_pretrained(model_dir)
        shutil.copy2(folder / "model" / "generation_config.json", model_dir)
        return model_dir

    def grpo(self, model_dir: Path, judge_url: str, steps: int) -> None:
        out = self.work / "rurl"
        argv = ["rurl", "train", "--config", "configs/rurl/tiny-cpu.yaml", "--output_dir", str(out)]
        argv += ["--model_name_or_path", str(model_dir), "--max_steps", str(steps), "--report_to", "none"]
        argv += ["--base_url", judge_url, "--model", "canned"]
        argv += self.device_flags("--max_completion_length", "12", "--overlong_buffer", "4")
        ran = self.command("grpo", argv)
        logged = [e for e in json.loads((out / "log_history.json").read_text()) if "completions/mean_length" in e]
        if len(ran["step_seconds"]) != steps or len(logged) != steps:
            raise StepFailed(f"{len(ran['step_seconds'])} steps timed, {len(logged)} logged; {steps} asked")
        ran["mean_completion_tokens"] = [e["completions/mean_length"] for e in logged]
        ran["trl_step_time"] = [e.get("step_time") for e in logged]
        ran["reward"] = [e["reward"] for e in logged]
        ran["extra_rounds"] = [e.get("dynamic_sampling/extra_rounds", 0) for e in logged]  # generations beyond one
        self.result["grpo"] = ran

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
        argv += ["--save_steps", str(steps), "--report_to", "none", *self.device_flags("--max_length", "96")]
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


def smoke(folder: Path, run: Run, steps: int) -> dict:
    from harness import canned_endpoint  # after the install: it imports rubricrl

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
        with step(f"grpo ({steps} steps of configs/rurl/tiny-cpu.yaml)", run):
            run.grpo(model_dir, judge.base_url, steps)
        with step("generate", run):
            run.generate(model_dir)
        with step("ruft build", run):
            dataset = run.ruft_build(judge.base_url)
        with step(f"sft ({steps} steps of configs/ruft/tiny-cpu.yaml)", run):
            run.sft(model_dir, dataset, steps)
    return run.result


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
    ]
    return "\n".join(f"gpu_smoke: {line}" for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", nargs="?", choices=["prepare", "run"], help="prepare here, run on the GPU machine")
    parser.add_argument("--dry-run", action="store_true", help="prepare, then run on this CPU, one step each")
    parser.add_argument("--prepared", type=Path, default=PREPARED, help="the prepared folder (default .gpu_smoke)")
    parser.add_argument("--steps", type=int, help="GRPO and SFT steps (default 3; 1 in a dry run)")
    parser.add_argument("--deadline", type=float, default=420.0, help="seconds before the run stops itself")
    parser.add_argument("--out", type=Path, help="where gpu_smoke.json and the commands' logs are copied")
    args = parser.parse_args()
    if (args.stage is None) == (not args.dry_run):
        parser.error("name one of: prepare, run, --dry-run")
    sys.path.insert(0, str(ROOT))
    try:
        if args.stage == "prepare":
            with step("prepare"):
                prepare(args.prepared)
            return 0
        with tempfile.TemporaryDirectory(prefix="gpu_smoke-") as work:
            run = Run(Path(work), args.deadline, args.dry_run)
            try:
                result = smoke(args.prepared, run, args.steps or (1 if args.dry_run else 3))
            finally:
                if args.out:
                    args.out.mkdir(parents=True, exist_ok=True)
                    (args.out / "gpu_smoke.json").write_text(json.dumps(run.result, indent=1))
                    for log in Path(work).glob("*.log"):
                        shutil.copy2(log, args.out / log.name)
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
