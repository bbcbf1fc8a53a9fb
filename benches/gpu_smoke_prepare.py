"""benches/gpu_smoke.py's preparation, here and online: the wheels the GPU machine lacks and the model's config and
tokenizer into one folder, checked to fit what may travel and to install on the GPU machine's Python."""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 64  # what may travel to the GPU machine: the working tree and the prepared files together
CARRIED = "trl datasets dill multiprocess jsonschema jsonschema-specifications referencing rpds-py".split()
"""What the GPU image lacks of what `rurl train` and `ruft train` import (the device tool's package list, 2026-11-17),
at the versions installed here: the ones the suite passes with. wandb stays behind (the runs log to none)."""
THERE = {"python": "3.12", "platforms": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")}
"""The GPU machine's python3 (3.12.3, /opt/torch/.venv) and the wheel platforms it takes."""
MODEL_FILES = "config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja".split()
"""SmolLM2-135M's config and tokenizer (3.5 MB) from the embedded model: no weights travel, the run draws them."""


class StepFailed(Exception):
    """A step of the smoke run failed: the message says how in one line, `log` is the tail of its log if any."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


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
