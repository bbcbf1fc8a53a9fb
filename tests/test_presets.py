"""Every shipped preset runs its stage on this CPU through the stage's real command, with size overrides only: the
policy a tiny random model, lengths, batches and steps small, the GPU switches off (no CUDA, no vLLM rollouts, no
bf16), and every endpoint a canned server answering each request with a valid instance of its schema. What each run
leaves is checked, and the settings it ran with are the preset's wherever no override touched them. What a CPU cannot
check of a GPU preset (memory, vLLM colocated on GPUs, DeepSpeed) is said in the preset's comments and in
docs/gpu.md."""

import json
import zlib
from pathlib import Path

import pytest
import yaml

from commands.main import main
from tests.fault_server import FaultServer, schema_reply
from tests.helpers import tiny_policy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
QUERIES = ROOT / "experiments" / "data" / "demo_queries.jsonl"
RUBRICS = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"
HEALTHBENCH = ROOT / "tests" / "data" / "healthbench_sample"
CANNED = ["--model", "canned", "--no-cache"]

RURL_SIZE = {
    "--rubrics": str(RUBRICS),
    "--no-preflight": None,
    "--use_vllm": "false",
    "--bf16": "false",
    "--use_cpu": "true",
    "--dtype": "float32",
    "--gradient_checkpointing": "false",
    "--report_to": "none",
    "--num_generations": "4",
    "--per_device_train_batch_size": "4",
    "--gradient_accumulation_steps": "1",
    "--steps_per_generation": "1",
    "--max_completion_length": "8",
    "--max_steps": "2",
    "--eval_size": "2",
    "--eval_every": "2",
}
"""`rurl train` at CPU size: each override is a size or a switch a CPU lacks; the method's settings stay the preset's."""


@pytest.fixture(scope="module")
def tiny():
    return str(tiny_policy())  # beside the suite's embedded model, before a test's own RUBRICRL_HOME is set


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    for name, value in {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)


def varied_reply(body: dict) -> str:
    """schema_reply, with each yes/no verdict drawn from the request's text: answers that differ get verdicts that
    differ, so that a group's rewards spread (dynamic sampling needs it) and a rerun gets the same ones."""
    reply = schema_reply(body)
    if not body.get("response_format"):
        return reply
    text = json.dumps(body["messages"])

    def vary(value, where: str):
        if isinstance(value, bool):
            return zlib.crc32((text + where).encode()) % 2 == 0
        if isinstance(value, dict):
            return {key: vary(item, f"{where}.{key}") for key, item in value.items()}
        if isinstance(value, list):
            return [vary(item, f"{where}.{i}") for i, item in enumerate(value)]
        return value

    return json.dumps(vary(json.loads(reply), ""))


def flags(overrides: dict[str, str | None]) -> list[str]:
    return [word for flag, value in overrides.items() for word in ([flag] if value is None else [flag, value])]


def ran_as_written(preset: Path, config: dict, overridden: set[str]) -> None:
    """Each value the preset sets is the run's own, at any depth, where no override (a flag or a role setting of the
    same name) replaced it."""

    def same(written: dict, ran: dict, where: str) -> None:
        for key, value in written.items():
            if key in overridden or (not where and key in ("rubrics", "lr_scheduler_type", "report_to")):
                continue  # TRL normalises the last two (an enum, a list); rubrics is a placeholder path
            if isinstance(value, dict) and key != "extra_body":
                same(value, ran[key], f"{where}{key}.")
            else:
                assert ran[key] == value, (preset.name, where + key)

    same(yaml.safe_load(preset.read_text()), config, "")


def test_every_preset_is_run_here():
    """A preset added to configs/ without a run here fails: each stage's list below names every file."""
    shipped = {str(path.relative_to(CONFIGS)) for path in CONFIGS.glob("*/*.yaml")} - {"accelerate/zero3.yaml"}
    run_here = {f"synthesis/{p}" for p in SYNTHESIS} | {f"ruft/{p}" for p in RUFT} | {f"rurl/{p}" for p in RURL}
    assert shipped == run_here | {f"eval/{p}" for p in EVAL}
    # configs/accelerate/zero3.yaml is a launch config, resolved in tests/test_rurl.py; configs/tiny-cpu.yaml is
    # `grade`'s, run by the demo


SYNTHESIS = ["rubrichub.yaml", "rar.yaml", "tiny-cpu.yaml"]


@pytest.mark.parametrize("preset", SYNTHESIS)
def test_a_synthesis_preset_writes_a_rubric_per_query(preset, tmp_path, home):
    path = CONFIGS / "synthesis" / preset
    out = tmp_path / "rubrics"
    with FaultServer(reply=schema_reply) as server:
        argv = ["synth", "--config", str(path), "--input", str(QUERIES), "--output-dir", str(out)]
        assert main([*argv, "--base-url", server.base_url, *CANNED]) == 0
    rows = [json.loads(line) for line in (out / "final.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(row["rubrics"]) >= 1 for row in rows)
    config = yaml.safe_load((out / "config.yaml").read_text())
    ran_as_written(path, config, set())


RUFT = ["qwen3-gpu.yaml", "tiny-cpu.yaml"]
RUFT_SIZE = {
    "--model_name_or_path": None,  # the tiny policy
    "--max_steps": "1",
    "--per_device_train_batch_size": "1",
    "--gradient_accumulation_steps": "1",
    "--max_length": "64",
    "--bf16": "false",
    "--use_cpu": "true",
    "--gradient_checkpointing": "false",
    "--report_to": "none",
}


@pytest.mark.parametrize("preset", RUFT)
def test_a_ruft_preset_builds_and_trains(preset, tmp_path, home, tiny):
    path = CONFIGS / "ruft" / preset
    build, model = tmp_path / "build", tmp_path / "model"
    with FaultServer(reply=lambda body: schema_reply(body) if body.get("response_format") else "Rest.") as server:
        argv = ["ruft", "build", "--config", str(path), "--rubrics", str(RUBRICS), "--output-dir", str(build)]
        argv += ["--base-url", server.base_url, *CANNED, "--defaults", "max_tokens=32", "--self_judging"]
        assert main(argv) == 0
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["counts"]["queries_kept"] >= 1  # the canned judge credits every criterion
    size = {**RUFT_SIZE, "--model_name_or_path": tiny}
    argv = ["ruft", "train", "--config", str(path), "--dataset", str(build), "--output_dir", str(model), *flags(size)]
    assert main(argv) == 0
    assert (model / "config.json").is_file() and next(model.glob("*.safetensors"))
    # the build's settings (ruft, grading, llm) and the training's (TRL's, top-level), each in its own config.yaml
    config = {
        **yaml.safe_load((model / "config.yaml").read_text()),
        **yaml.safe_load((build / "config.yaml").read_text()),
    }
    ran_as_written(path, config, {f.lstrip("-") for f in size} | {"defaults", "self_judging"})


RURL = [
    "dapo.yaml",
    "hacking-gpu.yaml",
    "rar-grpo.yaml",
    "rler.yaml",
    "rubrichub-dapo.yaml",
    "ruscarl.yaml",
    "tiny-cpu.yaml",
]


@pytest.mark.parametrize("preset", RURL)
def test_a_rurl_preset_trains_two_steps_and_evaluates(preset, tmp_path, home, tiny):
    """Two GRPO steps with the preset's loss, advantages, clipping, dynamic sampling, schedule (one step ahead in
    rler) and evolution (rler), then its held-out evaluation; the overlong buffer and the extra sampling rounds are
    sizes, scaled down with the answers."""
    path = CONFIGS / "rurl" / preset
    written = yaml.safe_load(path.read_text())
    size = {**RURL_SIZE, "--model_name_or_path": tiny}
    if written["rurl"].get("overlong_buffer"):
        size["--overlong_buffer"] = "4"
    if written["rurl"].get("dynamic_sampling"):
        size["--max_extra_rounds"] = "1"
    if written["rurl"].get("eval_rubrics"):  # another dataset held out: two rows of the HealthBench sample
        size.update({"--eval_rubrics": str(HEALTHBENCH), "--eval_size": "0", "--eval_max_examples": "2"})
    if written["rurl"].get("rubric_dropout"):  # rubrics long enough for the preset's share to leave a criterion out
        size["--rubrics"] = str(longer_rubrics(tmp_path))
    out = tmp_path / "policy"
    with FaultServer(reply=varied_reply) as server:
        argv = ["rurl", "train", "--config", str(path), "--output_dir", str(out), *flags(size)]
        own = [
            f"{name}.base_url={server.base_url}" for name, role in written["llm"]["roles"].items() if "base_url" in role
        ]
        assert main([*argv, "--base-url", server.base_url, *CANNED, *(["--roles", *own] if own else [])]) == 0
        assert server.count > 0
    assert (out / "config.json").is_file() and next(out.glob("*.safetensors"))
    history = json.loads((out / "log_history.json").read_text())
    assert max(entry.get("step", 0) for entry in history) == 2
    assert [json.loads(line)["step"] for line in (out / "eval.jsonl").read_text().splitlines()][-1] == 2
    if written["rurl"].get("evolve"):
        assert (out / "rubric_buffer.json").is_file()
    if written["rurl"].get("rubric_dropout"):
        assert any(entry.get("rubric/dropped_judge_verdicts", 0) > 0 for entry in history)
    config = yaml.safe_load((out / "config.yaml").read_text())
    ran_as_written(path, config, {f.lstrip("-") for f in size} | {"base_url", "model"})


def longer_rubrics(folder: Path) -> Path:
    """The tiny rows with three more criteria each, and every criterion put to the judge (rule checks would cost no
    call): 6 positive, of which a share of 0.3 leaves one out of each group's grading."""
    extra = [{"criterion": text, "points": 1} for text in ("Is polite.", "Stays on topic.", "Uses plain words.")]
    rows = [json.loads(line) for line in RUBRICS.read_text().splitlines()]
    for row in rows:
        row["rubrics"] = [{k: v for k, v in item.items() if k != "rule"} for item in row["rubrics"]] + extra
    path = folder / "longer_rubrics.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


EVAL = ["healthbench.yaml"]


@pytest.mark.parametrize("preset", EVAL)
def test_the_eval_preset_grades_with_a_judge_of_its_own(preset, tmp_path, home):
    """The policy at one canned endpoint, the judge at another with the preset's model: every judge call goes to the
    judge's endpoint under that model, and the report is simple-evals' layout."""
    path = CONFIGS / "eval" / preset
    judge_model = yaml.safe_load(path.read_text())["llm"]["roles"]["judge"]["model"]
    out = tmp_path / "eval"
    with FaultServer(reply=schema_reply) as policy, FaultServer(reply=schema_reply) as judge:
        argv = ["eval", "--config", str(path), "--rubrics", str(HEALTHBENCH), "--output-dir", str(out), "--no-cache"]
        argv += ["--shard", "0/6", "--roles", f"policy.base_url={policy.base_url}", "policy.model=p"]
        argv += [f"judge.base_url={judge.base_url}"]
        assert main(argv) == 0
        assert policy.count > 0 and judge.count > 0
        assert all(body["model"] == judge_model for body in judge.requests)
        assert not any(body.get("response_format") for body in policy.requests)
    report = json.loads((out / "report.json").read_text())
    assert "overall_score" in report["metrics"] and any(k.startswith("axis:") for k in report["metrics"])
    config = yaml.safe_load((out / "config.yaml").read_text())
    ran_as_written(path, config, {"base_url"})
