"""`rubricrl model prepare`: one conversion, atomic under SIGKILL, instant afterwards."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME, MARKER

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def prepare(home, *args, **kwargs):
    env = {**os.environ, "RUBRICRL_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "rubricrl.cli", "model", "prepare", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_killed_preparation_leaves_nothing_that_looks_valid_then_completes(tmp_path):
    final = tmp_path / "models" / EMBEDDED_MODEL_NAME
    killed = prepare(tmp_path)
    for line in killed.stderr:  # kill it in the middle of the conversion
        if line.startswith("converting"):
            break
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not final.exists()
    assert list((tmp_path / "models").glob(".tmp-*"))  # the half-built folder is there, under its temp name

    done = prepare(tmp_path)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    assert Path(out.strip()) == final and (final / MARKER).is_file()
    assert not list((tmp_path / "models").glob(".tmp-*"))
    for name in ("config.json", "tokenizer.json", "chat_template.jinja", "model.safetensors"):
        assert (final / name).is_file(), name
    with safe_open(final / "model.safetensors", "pt") as weights:
        assert str(weights.get_tensor("model.embed_tokens.weight").dtype) == "torch.bfloat16"

    again = prepare(tmp_path)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and Path(out.strip()) == final
    assert "converting" not in err and "downloading" not in err  # nothing done twice
