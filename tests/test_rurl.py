"""`rubricrl rurl train` without a policy: every preset resolves, bad input is a one-line error before any model
loads, and the pure parts (overlong shaping, batch statistics, the RuFT prefilter) by hand arithmetic. The reward's
None for an unscored completion survives overlong shaping, with a scripted judge that fails on demand."""

import json
import math
from pathlib import Path

import pytest
import yaml

from grading.grader import Grader, GradingConfig
from grading.judge import Verdict
from grading.reward import Overlong, batch_stats, rubric_reward
from grading.rubric import rubric_from_items
from rubricrl.cli import main
from rubricrl.config import ConfigError
from rubricrl.llm import LLMClient, Role
from rurl.config import RurlConfig
from rurl.data import load_rurl_data, prefilter
from tests.fault_server import FaultServer
from tests.helpers import run

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "configs" / "rurl").glob("*.yaml"))
TINY = ROOT / "configs" / "rurl" / "tiny-cpu.yaml"
TINY_DATA = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a policy fails the test: every check must come before it."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))


def rurl_train(*args: str) -> list[str]:
    return ["rurl", "train", *args]


# --- presets ----------------------------------------------------------------------------------------------------------


def test_there_are_the_four_presets():
    assert {p.stem for p in PRESETS} >= {"tiny-cpu", "rar-grpo", "rubrichub-dapo", "ruscarl"}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_resolves_with_dry_run_and_its_output_loads_back(preset, tmp_path, capsys, no_model_load):
    assert main(rurl_train("--config", str(preset), "--dry_run", "--output_dir", str(tmp_path / "out"))) == 0
    printed = capsys.readouterr().out
    resolved = yaml.safe_load(printed)
    file = yaml.safe_load(preset.read_text())
    for key, value in file.items():  # every value the preset sets is the resolved one
        if isinstance(value, dict):
            assert {k: resolved[key][k] for k in value} == value, key
        elif key == "rubrics":
            assert resolved[key] == value
        elif key not in ("lr_scheduler_type", "report_to"):  # TRL normalises these (enum, list)
            assert resolved[key] == value, key
    again = tmp_path / "resolved.yaml"
    again.write_text(printed)
    assert main(rurl_train("--config", str(again), "--dry_run")) == 0
    assert yaml.safe_load(capsys.readouterr().out) == resolved  # the printed settings are a config that reruns


def test_the_zero3_launch_config_resolves_with_the_judge_gpu_left_out():
    """configs/accelerate/zero3.yaml as `accelerate launch --config_file` reads it: DeepSpeed ZeRO-3, one process
    per policy GPU, bf16, and GPU 7 (the judge's, in the presets' comments) not among them."""
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ROOT / "configs" / "accelerate" / "zero3.yaml"))
    gpus = [int(g) for g in str(config.gpu_ids).split(",")]
    assert config.distributed_type == "DEEPSPEED" and config.deepspeed_config["zero_stage"] == 3
    assert config.num_processes == len(gpus) == 7 and 7 not in gpus and config.mixed_precision == "bf16"


def test_flags_win_over_the_preset(capsys, no_model_load):
    assert main(rurl_train("--config", str(TINY), "--dry_run", "--max_steps", "7", "--dynamic_std_threshold",
                           "0.1", "--roles", "judge.temperature=0.5")) == 0  # fmt: skip
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["max_steps"] == 7 and resolved["rurl"]["dynamic_std_threshold"] == 0.1
    assert resolved["llm"]["roles"]["judge"] == {"temperature": 0.5}


def test_the_trl_seams_dynamic_sampling_overrides_are_still_there():
    """rurl/trainer.py overrides two private GRPOTrainer methods (read in TRL 1.16.0); when TRL renames them or
    changes their parameters, this fails before a training run silently loses dynamic sampling."""
    import inspect

    from trl import GRPOTrainer

    from rurl.trainer import check_trl_version

    check_trl_version()  # the installed TRL is one the overrides were checked against
    seams = {"_generate_and_score_completions": ["self", "inputs"],
             "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
             "_prepare_inputs": ["self", "generation_batch"]}  # fmt: skip
    for name, parameters in seams.items():
        method = getattr(GRPOTrainer, name, None)
        assert method is not None, f"TRL's GRPOTrainer has no {name} any more: see rurl/trainer.py"
        assert list(inspect.signature(method).parameters) == parameters, f"GRPOTrainer.{name} changed: see rurl/trainer.py"
    source = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "self._generate_and_score_completions(generation_batch)" in source  # where dynamic sampling hooks in


# --- bad input: one line, before any model --------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus_key", "1"], "bogus_key"),
    (["--num_generations", "3"], "divisible"),  # 8 completions per step are not groups of 3
    (["--max_failure_rate", "1.5"], "--max-failure-rate must be within [0, 1], got 1.5"),
    (["--dynamic_std_threshold", "-0.1"], "--dynamic-std-threshold must be within [0, 1]"),
    (["--eval_size", "2.5"], "--eval-size must be a share in (0, 1)"),
    (["--prefilter_mean_range", "0.9", "0.1"], "--prefilter-mean-range must be [low, high]"),
])  # fmt: skip
def test_bad_settings_are_one_line_errors(args, message, tmp_path, capsys, no_model_load):
    assert main(rurl_train("--config", str(TINY), "--output_dir", str(tmp_path), *args)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("rubricrl: error:"), err


def test_an_unknown_key_in_the_file_names_the_file(tmp_path, capsys, no_model_load):
    config = tmp_path / "c.yaml"
    config.write_text(TINY.read_text() + "\nrurl_typo: 1\n")
    assert main(rurl_train("--config", str(config), "--output_dir", str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert str(config) in err and "rurl_typo" in err


def test_a_dataset_without_rubrics_or_prompts_names_the_file_and_row(tmp_path, capsys, no_model_load):
    no_rubrics = tmp_path / "no_rubrics.jsonl"
    no_rubrics.write_text(json.dumps({"prompt": [{"role": "user", "content": "Hi"}]}) + "\n")
    assert main(rurl_train("--config", str(TINY), "--rubrics", str(no_rubrics), "--output_dir", str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert f"{no_rubrics}: line 1" in err and "rubrics" in err
    no_prompt = tmp_path / "no_prompt.jsonl"
    no_prompt.write_text(TINY_DATA.read_text().splitlines()[0] + "\n"
                         + json.dumps({"rubrics": [{"criterion": "Is kind.", "points": 1}]}) + "\n")  # fmt: skip
    assert main(rurl_train("--config", str(TINY), "--rubrics", str(no_prompt), "--output_dir", str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert f"{no_prompt}: line 2" in err, err


def test_no_output_dir_is_an_error(capsys, no_model_load):
    assert main(rurl_train("--config", str(TINY))) == 2
    assert "--output_dir" in capsys.readouterr().err


def test_a_judge_that_does_not_answer_stops_before_the_policy_loads(tmp_path, capsys, no_model_load):
    with FaultServer() as dead:
        url = dead.base_url
    # the port is closed now: nothing listens there
    assert main(rurl_train("--config", str(TINY), "--output_dir", str(tmp_path), "--base-url", url, "--model", "j")) == 2
    err = capsys.readouterr().err
    assert url in err and "does not answer" in err


def test_a_judge_that_answers_no_verdict_fails_the_preflight(tmp_path, capsys, no_model_load):
    with FaultServer(reply="I cannot grade this.") as judge:
        code = main(rurl_train("--config", str(TINY), "--output_dir", str(tmp_path), "--base-url", judge.base_url,
                               "--model", "scripted-judge", "--no-cache"))  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "judge preflight" in err and "scripted-judge" in err and "verdict" in err, err
    assert not (tmp_path / "config.yaml").exists()  # nothing started


# --- pure parts, by hand --------------------------------------------------------------------------------------------


def test_soft_overlong_penalty_by_hand():
    shaping = Overlong(max_length=100, buffer=20, scale=0.5)
    # no penalty up to 80 tokens; then linear: (length - 80) / 20 * 0.5; 0.5 at and beyond 100
    assert [shaping.penalty(n) for n in (10, 80, 81, 90, 100, 120)] == [0.0, 0.0, 0.025, 0.25, 0.5, 0.5]


def test_batch_statistics_by_hand():
    rubric = rubric_from_items([
        {"criterion": "A", "points": 3, "tags": ["axis:accuracy"], "category": "Essential"},
        {"criterion": "B", "points": 1, "tags": ["axis:accuracy", "theme:x"]},
    ], "test")  # fmt: skip

    class Graded:
        def __init__(self, met_a, met_b, flag=None):
            self.verdicts = [Verdict("A", 3, ("axis:accuracy",), met_a, "", "judge"),
                             Verdict("B", 1, ("axis:accuracy", "theme:x"), met_b, "", "rule")]  # fmt: skip
            self.integrity_flag = flag

    graded = [Graded(True, False), Graded(True, True), Graded(None, False)]
    stats = batch_stats(graded, [rubric] * 3, rewards=[0.75, 1.0, None], lengths=[10, 20, 30], seconds=1.5,
                        judge_calls=6)  # fmt: skip
    # the failure rate counts the judge's decisions (A's three), not rule checks (B), as grade and eval do
    assert (stats.completions, stats.unscored, stats.verdicts, stats.failed_verdicts) == (3, 1, 3, 1)
    # decided verdicts: A met, B not, A met, B met, B not -> 3 of 5
    assert stats.pass_rates["criteria_pass_rate"] == pytest.approx(3 / 5)
    assert stats.pass_rates["tag/axis:accuracy"] == pytest.approx(3 / 5)
    assert stats.pass_rates["tag/theme:x"] == pytest.approx(1 / 3)  # B: not, met, not
    assert stats.pass_rates["category/Essential"] == 1.0  # A met twice (its third verdict failed)
    assert stats.mean_length == 20.0
    assert stats.length_reward_corr == pytest.approx(1.0)  # two scored points: (10, 0.75), (20, 1.0)
    metrics = stats.metrics()
    assert metrics["rubric/judge_failure_rate"] == pytest.approx(1 / 3)
    assert metrics["rubric/unscored_rate"] == pytest.approx(1 / 3)
    assert metrics["rubric/judge_calls"] == 6.0


def write_rows(path: Path, ids: list[str]) -> Path:
    with open(path, "w") as f:
        for row_id in ids:
            f.write(json.dumps({"id": row_id, "prompt": [{"role": "user", "content": f"Question {row_id}?"}],
                                "rubrics": [{"criterion": "Answers.", "points": 1}]}) + "\n")  # fmt: skip
    return path


def test_prefilter_keeps_queries_whose_ruft_scores_vary_inside_the_band(tmp_path):
    rows = write_rows(tmp_path / "rubrics.jsonl", ["varied", "flat", "solved", "hopeless", "missing"])
    build = tmp_path / "build"
    build.mkdir()
    scores = {"varied": [0.2, 0.6, 0.4, 0.8], "flat": [0.5, 0.5, 0.5, 0.5], "solved": [1.0, 0.8, 1.0, 1.0],
              "hopeless": [0.0, 0.0, 0.1, 0.0]}  # fmt: skip
    with open(build / "candidates.jsonl", "w") as f:
        for row_id, values in scores.items():
            for i, score in enumerate(values):
                f.write(json.dumps({"id": row_id, "candidate": i, "score": score}) + "\n")
        f.write('{"id": "varied", "candidate": 9, "sco')  # a line cut by a kill is not read
    config = RurlConfig(prefilter=build, prefilter_min_std=0.05, prefilter_mean_range=[0.1, 0.9])
    data = load_rurl_data(rows, config, seed=0)
    assert [row.id for row in data.train] == ["varied"]
    # solved: std 0.087, mean 0.95 > 0.9; hopeless: std 0.043 <= 0.05, flat (before its mean is looked at)
    assert data.prefiltered == {"kept": 1, "flat": 2, "outside_band": 1, "not_built": 1}
    _, counts = prefilter(data.train, RurlConfig(prefilter=build, prefilter_min_std=0.5))
    assert counts["flat"] == 1  # std 0.22 is not above 0.5


def test_the_eval_split_is_seeded_and_disjoint(tmp_path):
    rows = write_rows(tmp_path / "rubrics.jsonl", [f"q{i}" for i in range(10)])
    a = load_rurl_data(rows, RurlConfig(eval_size=0.3), seed=1)
    b = load_rurl_data(rows, RurlConfig(eval_size=0.3), seed=1)
    c = load_rurl_data(rows, RurlConfig(eval_size=3), seed=2)
    assert [r.id for r in a.evaluation] == [r.id for r in b.evaluation] and len(a.evaluation) == 3
    assert not {r.id for r in a.evaluation} & {r.id for r in a.train} and len(a.train) == 7
    assert len(c.evaluation) == 3
    with pytest.raises(ConfigError, match="leaving none"):
        load_rurl_data(rows, RurlConfig(eval_size=10), seed=0)


def test_overlong_shaping_keeps_an_unscored_completion_unscored():
    """Shaping lives inside the one reward: a completion the judge failed stays None (TRL: advantage 0), while a
    scored one loses the penalty for its length."""
    rubric = [{"criterion": "Is helpful.", "points": 1, "tags": None}]

    def judge(body):
        if "FAIL" in body["messages"][-1]["content"]:
            return "no json here"
        return json.dumps({"explanation": "scripted", "criteria_met": True})

    async def go(base_url):
        role = Role(base_url=base_url, model="scripted-judge", temperature=0.0)
        async with LLMClient({"judge": role}, max_retries=0, invalid_answer_retries=0) as client:
            return await rubric_reward(
                prompts=["Q1", "Q2", "Q3"], completions=["short", "long", "FAIL long"], rubrics=[rubric] * 3,
                completion_ids=[[1] * 10, [1] * 95, [1] * 95], grader=Grader(client, GradingConfig()),
                overlong=Overlong(max_length=100, buffer=20, scale=1.0),
            )  # fmt: skip

    with FaultServer(reply=judge) as server:
        rewards = run(go(server.base_url))
    assert rewards[0] == 1.0  # 10 tokens: no penalty
    assert rewards[1] == pytest.approx(1.0 - 15 / 20)  # 95 tokens: 15 into the 20-token buffer
    assert rewards[2] is None and not (isinstance(rewards[2], float) and math.isnan(rewards[2]))


def test_a_judge_on_several_endpoints_logs_each_endpoints_counts():
    rubric = [{"criterion": "Is polite.", "points": 1}]
    verdict = json.dumps({"explanation": "ok", "criteria_met": True})
    metrics = {}

    async def go(base_url):
        async with LLMClient({"judge": Role(base_url=base_url, model="judge", temperature=0.0)}) as client:
            return await rubric_reward(prompts=[f"Q{i}" for i in range(12)], completions=["Hello."] * 12,
                                       rubrics=[rubric] * 12, grader=Grader(client, GradingConfig(integrity_check=False)),
                                       log_metric=metrics.__setitem__)  # fmt: skip

    with FaultServer(reply=verdict, latency=0.05) as a, FaultServer(reply=verdict, latency=0.05) as b:
        assert run(go(f"{a.base_url},{b.base_url}")) == [1.0] * 12
        counts = {server.base_url: server.count for server in (a, b)}
    for url, count in counts.items():
        name = "rubric/endpoint/" + url.split("//")[1].split("/")[0]
        assert metrics[f"{name}/requests"] == count > 0 and metrics[f"{name}/failures"] == 0
