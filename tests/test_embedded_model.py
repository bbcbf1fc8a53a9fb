"""`rubricrl model prepare` and the first launch on a fresh machine: one conversion, atomic under SIGKILL, shared by
every rank of a `torchrun` launch that asks at once, instant afterwards."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME, MARKER
from tests.test_rurl_multiprocess_eval import run_launch

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 600
"""Seconds the launch may take (measured: about 60 s on the 2 shared cores); past it the whole launch is killed."""

# The start of `rurl train` / `ruft train` on each rank: TRL's config (which starts the gloo process group, as it
# does under torchrun), then base_model(), which prepares the embedded model. Rank 1 takes the preparation lock and,
# holding it, lets rank 0 go: rank 0 then asks while rank 1 converts, and the rank that converts is not rank 0 (the
# one rank transformers' save_pretrained writes from once a process group is up).
RANK_SCRIPT = """
import os, sys
import torch.distributed as dist
from trl import GRPOConfig, ModelConfig
import rubricrl.serving.embedded_model as embedded
from rubricrl.runs.training import base_model

rank = int(os.environ["RANK"])
def say(line):  # one write of the whole line: print's text and newline can interleave with the other rank's
    os.write(1, (line + "\\n").encode())
GRPOConfig(output_dir=sys.argv[1], use_cpu=True, bf16=False, report_to="none")
assert dist.is_initialized(), "TRL's config no longer starts the process group: this test must start it"
if rank == 0:
    dist.barrier()
else:
    download = embedded._download_gguf
    def download_after_barrier(*args):
        say(f"rank {rank} converts")
        dist.barrier()  # inside the lock: rank 0 asks now
        return download(*args)
    embedded._download_gguf = download_after_barrier
model = ModelConfig()
say(f"rank {rank} model {base_model(model)}")
"""


def prepare(home, *args, **kwargs):
    env = {**os.environ, "RUBRICRL_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "commands", "model", "prepare", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_a_killed_preparation_leaves_nothing_valid_then_two_ranks_get_the_model_converted_once(tmp_path):
    """`model prepare` SIGKILLed in the middle of its conversion leaves only a folder under a temporary name. Then
    the first `torchrun` launch on that home: both ranks ask at once (one while the other converts), one converts,
    both get the same folder, and the killed preparation's leftovers are gone. A later `model prepare` is instant.
    (One test: a conversion costs ~25 CPU-s, and the launch's is the one that completes the killed preparation.)"""
    home = tmp_path / "home"
    final = home / "models" / EMBEDDED_MODEL_NAME
    killed = prepare(home)
    for line in killed.stderr:  # kill it in the middle of the conversion
        if line.startswith("converting"):
            break
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not final.exists()
    assert list((home / "models").glob(".tmp-*"))  # the half-built folder is there, under its temp name

    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = {**os.environ, "RUBRICRL_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = run_launch([*command, str(script), str(tmp_path / "out")], env, DEADLINE)
    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("rank")) == [
        f"rank 0 model {final}",
        "rank 1 converts",
        f"rank 1 model {final}",
    ]
    assert done.stderr.count("converting SmolLM2") == 1 and done.stderr.count("downloading") == 1
    for name in (MARKER, "config.json", "tokenizer.json", "chat_template.jinja", "model.safetensors"):
        assert (final / name).is_file(), name
    assert [p.name for p in (home / "models").iterdir() if p.name != ".prepare.lock"] == [EMBEDDED_MODEL_NAME]
    with safe_open(final / "model.safetensors", "pt") as weights:
        assert str(weights.get_tensor("model.embed_tokens.weight").dtype) == "torch.bfloat16"

    again = prepare(home)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and Path(out.strip()) == final
    assert "converting" not in err and "downloading" not in err  # nothing done twice
