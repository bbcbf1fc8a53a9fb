"""benches/gpu_smoke.py, the script a session with a GPU machine runs once: its dry run on this CPU (the preparation,
pip's check that the wheels install on the GPU machine's Python, then every step of the run, one training step each),
so that it cannot rot between the sessions that have a GPU; and a failure said in one line naming the step."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benches" / "gpu_smoke.py"
sys.path.insert(0, str(SCRIPT.parent))
from gpu_smoke_prepare import CARRIED, LIMIT_MIB, MODEL_FILES  # noqa: E402


@pytest.mark.slow
def test_the_dry_run_prepares_what_may_travel_and_runs_every_step(tmp_path):
    prepared, out = tmp_path / "prepared", tmp_path / "out"
    argv = [sys.executable, str(SCRIPT), "--dry-run", "--prepared", str(prepared), "--out", str(out)]
    done = subprocess.run([*argv, "--deadline", "420"], capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stderr[-4000:]

    # what travels: a wheel of each package the GPU machine lacks, for its Python 3.12; the model without weights
    wheels = [path.name.lower() for path in (prepared / "wheels").iterdir()]
    for name in CARRIED:
        found = [wheel for wheel in wheels if wheel.startswith(name.replace("-", "_") + "-")]
        assert len(found) == 1 and ("-py3-" in found[0] or "-cp312-" in found[0] or "-py312-" in found[0]), found
    assert sorted(path.name for path in (prepared / "model").iterdir()) == sorted(MODEL_FILES)
    result = json.loads((out / "gpu_smoke.json").read_text())
    assert result["prepared"]["prepared_bytes"] + result["prepared"]["tree_bytes"] < LIMIT_MIB * 2**20

    # every step ran: one GRPO step (logged by TRL and timed), generation, the RuFT build, one SFT step
    assert len(result["grpo"]["step_seconds"]) == len(result["grpo"]["reward"]) == 3
    assert result["grpo"]["mean_completion_tokens"][0] > 0
    assert result["generate"][0]["tokens_per_s"] > 0
    assert result["ruft_build"]["seconds"] > 0
    assert len(result["sft"]["step_seconds"]) == 1
    assert result["trl"] and result["transformers"] and result["torch"]
    assert "gpu_smoke: GRPO step s:" in done.stdout and "gpu_smoke: SFT step s:" in done.stdout
    assert {"grpo.log", "generate.log", "ruft_build.log", "sft.log"} <= {path.name for path in out.iterdir()}

    # the head-to-head: the first shape through rurl train and through trl grpo, from the same resolved keys; the
    # second's settings resolved for both (a dry run does not run it: the suite's cores)
    small, full_shape = result["head_to_head"]["135M LoRA 8x48"], result["head_to_head"]["1.7B full 16x128"]
    for side in ("rubricrl", "trl"):
        assert len(small[side]["first_steps_s"]) == 2 and len(small[side]["steady_steps_s"]) == 1, small
        assert small[side]["command_s"] > sum(small[side]["first_steps_s"])
    assert small["steady_ratio"] > 0 and full_shape == {"resolved_only": True}
    assert (
        len(small["rubricrl"]["extra_rounds"]) == 3 and "steps and checkpoints" in small["rubricrl"]["seconds_by_phase"]
    )
    lora, full = (yaml.safe_load((out / f"trl-{slug}.yaml").read_text()) for slug in ("135m", "1_7b"))
    assert (lora["use_peft"], lora["lora_r"], lora["gradient_checkpointing"]) == (True, 16, False)
    assert (full["use_peft"], full["gradient_checkpointing"], full["per_device_train_batch_size"]) == (False, True, 16)
    assert lora["max_steps"] == full["max_steps"] == 3 and lora["eval_strategy"] == "no"
    assert "135M LoRA 8x48: steady-step ratio rubricrl / trl grpo" in done.stdout


def test_a_failed_step_is_one_line_that_names_it(tmp_path):
    (tmp_path / "prepared" / "wheels").mkdir(parents=True)  # never prepared
    argv = [sys.executable, str(SCRIPT), "run", "--prepared", str(tmp_path / "prepared")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"gpu_smoke: FAILED at install: no wheels in {tmp_path / 'prepared' / 'wheels'}: run "
        "`python benches/gpu_smoke.py prepare` here first"
    )
