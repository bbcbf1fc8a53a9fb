"""benches/gpu_smoke.py, the script a session with a GPU machine runs once: its dry run on this CPU (the preparation,
pip's check that the wheels install on the GPU machine's Python, then every step of the run, one training step each,
the slow-judge comparison's commands built and resolved but not run), so that it cannot rot between the sessions that
have a GPU; that it leaves no checkpoint behind; a failure said in one line naming the step, which a failure to keep
the results after it does not hide; and the slow-judge report, which only a GPU run fills."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benches.gpu_head_to_head import SLOW_REWARD, SLOW_SIDES, slow_judge_lines
from benches.gpu_smoke_prepare import CARRIED, LIMIT_MIB, MODEL_FILES

ROOT = Path(__file__).resolve().parents[1]
SMOKE = [sys.executable, "-m", "benches.gpu_smoke"]  # run from ROOT, as on the GPU machine


@pytest.mark.slow
def test_the_dry_run_prepares_what_may_travel_and_runs_every_step(tmp_path):
    prepared, out = tmp_path / "prepared", tmp_path / "out"
    argv = [*SMOKE, "--dry-run", "--prepared", str(prepared), "--out", str(out)]
    done = subprocess.run([*argv, "--deadline", "420"], cwd=ROOT, capture_output=True, text=True, timeout=480)
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
        # where the first steps went, by the blocks TRL profiles, named alike on both sides
        for phases in small[side]["first_steps_phases"]:
            assert phases["transformers.generate"] > 0 and phases["compute_loss"] > 0, small[side]
        assert "transformers.generate" in small[side]["steady_phases_median"]
    assert "rubricrl step 1 s: " in done.stdout and "trl grpo step 1 s: " in done.stdout
    assert small["steady_ratio"] > 0 and full_shape == {"resolved_only": True}
    assert (
        len(small["rubricrl"]["extra_rounds"]) == 3 and "steps and checkpoints" in small["rubricrl"]["seconds_by_phase"]
    )
    lora, full = (yaml.safe_load((out / f"trl-{slug}.yaml").read_text()) for slug in ("135m", "1_7b"))
    assert (lora["use_peft"], lora["lora_r"], lora["gradient_checkpointing"]) == (True, 16, False)
    assert (full["use_peft"], full["gradient_checkpointing"], full["per_device_train_batch_size"]) == (False, True, 16)
    assert lora["max_steps"] == full["max_steps"] == 3 and lora["eval_strategy"] == "no"
    assert "135M LoRA 8x48: steady-step ratio rubricrl / trl grpo" in done.stdout

    # no command saved a checkpoint (the preset's save_steps: 2 filled a GPU machine's disk at the 1.7B shape)
    assert lora["save_strategy"] == full["save_strategy"] == "no"
    assert result["left_on_disk"]["checkpoints"] == [] and result["left_on_disk"]["work_gib"] > 0
    assert "checkpoint folders: none" in done.stdout

    # the slow-judge comparison (a 2 s judge, 135M shape): its three commands built and resolved, none run
    slow = small["slow_judge"]
    assert (slow["judge_s"], slow["steps"]) == (2.0, 3)
    assert slow["trl_instant_steady_median_s"] == small["trl"]["steady_median_s"]
    assert all(slow[name]["resolved_only"] for name in SLOW_SIDES)
    for name, async_steps in (("rubricrl_async_0", "0"), ("rubricrl_async_1", "1")):
        argv = slow[name]["argv"]
        assert argv[:2] == ["rurl", "train"] and argv[argv.index("--async_steps") + 1] == async_steps
        assert argv[argv.index("--save_strategy") + 1] == "no" and argv[argv.index("--eval_size") + 1] == "0"
    slow_trl = yaml.safe_load((out / "trl-135m-slow.yaml").read_text())
    assert slow["trl_slow_reward"]["argv"][-1].endswith("trl-135m-slow.yaml")
    assert slow_trl["reward_funcs"] == [SLOW_REWARD] and slow_trl["save_strategy"] == "no"
    same = {key: value for key, value in lora.items() if key not in ("reward_funcs", "output_dir")}
    assert same == {key: value for key, value in slow_trl.items() if key not in ("reward_funcs", "output_dir")}
    assert "135M LoRA 8x48 with a 2 s judge" in done.stdout
    assert "rubricrl --async_steps 1: command built and resolved, not run (dry run)" in done.stdout


def test_a_failed_step_is_one_line_that_names_it(tmp_path):
    (tmp_path / "prepared" / "wheels").mkdir(parents=True)  # never prepared
    (tmp_path / "a-file").write_text("")  # --out under a file: keeping the results fails too, after the step
    argv = [*SMOKE, "run", "--prepared", str(tmp_path / "prepared")]
    done = subprocess.run(
        [*argv, "--out", str(tmp_path / "a-file" / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    said = done.stderr.strip().splitlines()
    assert said[-1] == (
        f"gpu_smoke: FAILED at install: no wheels in {tmp_path / 'prepared' / 'wheels'}: run "
        "`python -m benches.gpu_smoke prepare` here first"
    )
    assert said[-2].startswith(
        f"gpu_smoke: note: after the failure below, also failed: keep the results in {tmp_path / 'a-file' / 'out'}: "
    ), said


def test_the_slow_judge_report_gives_each_side_its_ratio_or_why_not():
    def ran(steps, **more):
        return {
            "first_steps_s": steps[:2],
            "steady_steps_s": steps[2:],
            "steady_median_s": sorted(steps[2:])[len(steps[2:]) // 2],
            "command_s": 60.0,
            "peak_allocated_gib": 0.9,
            "peak_reserved_gib": 1.0,
            **more,
        }

    rounds = {"extra_rounds": [1, 0, 0, 0, 0, 0], "judge_s": [2.0] * 6}
    slow = {
        "judge_s": 2.0,
        "steps": 6,
        "trl_instant_steady_median_s": 3.5,
        "rubricrl_async_1": ran([12, 8, 4, 4, 4, 4], **rounds, wait_s=[0.0] * 6, overlap_s=[2.0] * 6),
        "rubricrl_async_0": ran([12, 8, 6, 6, 6, 6], **rounds),
        "trl_slow_reward": {"skipped": "40 s left before the deadline, about 70 s needed"},
    }
    slow["rubricrl_async_1"]["ratio_to_trl_instant"] = 4 / 3.5
    slow["rubricrl_async_0"]["ratio_to_trl_instant"] = 6 / 3.5
    lines = slow_judge_lines(slow)
    assert lines[0].startswith("135M LoRA 8x48 with a 2 s judge, 6 steps a side") and "(3.50 s)" in lines[0]
    assert lines[1].startswith("  ratio 1.14, rubricrl --async_steps 1: steady median 4.00 s, first steps 12.00, 8.00")
    assert "waited s [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], graded meanwhile s [2.0," in lines[2]
    assert lines[3].startswith("  ratio 1.71, rubricrl --async_steps 0: steady median 6.00 s")
    assert "waited" not in lines[4]
    assert lines[5] == (
        "  trl grpo, an async reward answering in 2 s: skipped, 40 s left before the deadline, about 70 s needed"
    )
