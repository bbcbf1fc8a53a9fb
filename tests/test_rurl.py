"""`rubricrl rurl train` without a policy: every preset resolves, bad input is a one-line error before any model
loads, and the pure parts (overlong shaping, batch statistics, the RuFT prefilter) by hand arithmetic. The reward's
None for an unscored completion survives overlong shaping, with a scripted judge that fails on demand."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commands.main import main
from grading.batch import batch_stats
from grading.grader import Grader, GradingConfig
from grading.judge import Verdict
from grading.rubric import rubric_from_items
from rubricrl.config import ConfigError
from rubricrl.llm import LLMClient, Role
from rurl.config import RurlConfig
from rurl.data import load_rurl_data, prefilter
from rurl.reward.overlong import Overlong
from rurl.reward.rubric_reward import rubric_reward
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
    assert (
        main(
            rurl_train(
                "--config",
                str(TINY),
                "--dry_run",
                "--max_steps",
                "7",
                "--dynamic_std_threshold",
                "0.1",
                "--roles",
                "judge.temperature=0.5",
            )
        )
        == 0
    )
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["max_steps"] == 7 and resolved["rurl"]["dynamic_std_threshold"] == 0.1
    assert resolved["llm"]["roles"]["judge"] == {"temperature": 0.5}


def test_one_step_ahead_turns_dropout_off_and_refuses_it_left_on(capsys, no_model_load):
    """`async_steps: 1` runs with dropout off (the ratio at staleness 0 is exact), said once; the synchronous
    schedule keeps TRL's default; and dropout asked for by the user beside it is a one-line error."""
    assert main(rurl_train("--config", str(TINY), "--dry_run", "--async_steps", "1")) == 0
    printed = capsys.readouterr()
    assert yaml.safe_load(printed.out)["disable_dropout"] is True and "dropout off" in printed.err
    assert main(rurl_train("--config", str(TINY), "--dry_run")) == 0
    assert yaml.safe_load(capsys.readouterr().out)["disable_dropout"] is False
    flags = ("--async_steps", "1", "--disable_dropout", "false")
    assert main(rurl_train("--config", str(TINY), "--dry_run", *flags)) == 2
    error = capsys.readouterr().err.strip()
    assert "disable_dropout" in error and "async_steps" in error and len(error.splitlines()) == 1


def test_the_dapo_preset_dry_run_shows_dapo(capsys, no_model_load):
    """configs/rurl/dapo.yaml resolves to DAPO as arXiv 2503.14476 runs it: clip 0.2 / 0.28, token-level loss, no KL,
    dynamic sampling that stops when its rounds run out (verl), truncated completions masked, the soft overlong
    penalty over the last 4,096 of 20,480 tokens, 16 responses, 16 optimizer steps per rollout batch."""
    assert main(rurl_train("--config", str(ROOT / "configs" / "rurl" / "dapo.yaml"), "--dry_run")) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    rurl = resolved["rurl"]
    assert (rurl["dynamic_sampling"], rurl["on_exhausted"], rurl["overlong_buffer"], rurl["overlong_penalty"]) == (
        True,
        "stop",
        4096,
        1.0,
    )
    assert {
        key: resolved[key]
        for key in (
            "loss_type",
            "epsilon",
            "epsilon_high",
            "beta",
            "num_generations",
            "mask_truncated_completions",
            "max_completion_length",
            "temperature",
            "learning_rate",
            "lr_scheduler_type",
        )
    } == {
        "loss_type": "dapo",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "beta": 0.0,
        "num_generations": 16,
        "mask_truncated_completions": True,
        "max_completion_length": 20480,
        "temperature": 1.0,
        "learning_rate": 1e-6,
        "lr_scheduler_type": "constant_with_warmup",
    }
    assert resolved["warmup_steps"] > 0
    assert resolved["steps_per_generation"] == 16 * resolved["gradient_accumulation_steps"]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_no_preset_penalises_length_from_the_first_token_and_colocated_vllm_sleeps(preset):
    """The overlong penalty covers a part of the response limit (buffer = limit would cost every token, as
    RubricHub's recipe with its template .env does); a vLLM colocated with training releases its memory while the
    policy trains (TRL 1.16's vllm_enable_sleep_mode)."""
    file = yaml.safe_load(preset.read_text())
    buffer = file.get("rurl", {}).get("overlong_buffer", 0)
    assert buffer < file.get("max_completion_length", 512)
    if file.get("use_vllm") and file.get("vllm_mode") == "colocate":
        assert file.get("vllm_enable_sleep_mode") is True


def test_an_overlong_buffer_longer_than_the_limit_is_refused():
    from trl import GRPOConfig

    from rurl.config import check_with_trl

    grpo = GRPOConfig(output_dir="unused", max_completion_length=48, use_cpu=True, bf16=False)
    check_with_trl(RurlConfig(overlong_buffer=48), grpo)  # the whole limit: allowed (and documented in the presets)
    with pytest.raises(ConfigError, match=r"rurl.overlong_buffer 64 is longer than max_completion_length 48"):
        check_with_trl(RurlConfig(overlong_buffer=64), grpo)


def test_the_trl_seams_dynamic_sampling_overrides_are_still_there():
    """rurl/trainer.py overrides private GRPOTrainer methods (read in TRL 1.16.0); when TRL renames them or changes
    their parameters, this fails before a training run silently loses dynamic sampling or the async schedule. That
    TRL still calls them where they take effect, the dynamic-sampling runs of tests/test_rurl_train.py and the
    async runs of tests/test_rurl_async.py show."""
    import inspect

    from trl import GRPOTrainer

    from rurl.trainer import check_trl_version

    check_trl_version()  # the installed TRL is one the overrides were checked against
    seams = {
        "_generate_and_score_completions": ["self", "inputs"],
        "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
        "_prepare_inputs": ["self", "generation_batch"],
        "_generate": ["self", "prompts"],
        "get_batch_samples": ["self", "epoch_iterator", "num_batches", "device"],
    }
    for name, parameters in seams.items():
        method = getattr(GRPOTrainer, name, None)
        assert method is not None, f"TRL's GRPOTrainer has no {name} any more: see rurl/trainer.py"
        assert list(inspect.signature(method).parameters) == parameters, (
            f"GRPOTrainer.{name} changed: see rurl/trainer.py"
        )
    logps = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert logps[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"], logps


TRAINER_WITHOUT_VLLM = """
import importlib.util, json, sys
from rubricrl.config import ConfigError
from rurl.trainer_import import rubric_trainer_class
trainer = rubric_trainer_class(use_vllm=False)
said = {"trainer": trainer.__name__, "imported": "vllm" in sys.modules,
        "visible_after": importlib.util.find_spec("vllm") is not None}
try:
    rubric_trainer_class(use_vllm=True)
except ConfigError as error:
    said["refused"] = str(error)
print(json.dumps(said))
"""


@pytest.mark.slow
def test_a_run_without_vllm_imports_trls_trainer_without_it():
    """rurl/trainer_import.py: GRPOTrainer imported with vLLM hidden (4 s and 160 MiB a process here). Fails when a
    TRL release imports vLLM so that hiding it breaks the import; a later run asking for vLLM in the same process is
    refused in one line."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", TRAINER_WITHOUT_VLLM], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["trainer"] == "RubricGRPOTrainer" and not said["imported"] and said["visible_after"]
    assert said["refused"].startswith("use_vllm: this process imported TRL's trainer without vLLM")


# --- bad input: one line, before any model --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus_key", "1"], "bogus_key"),
        (["--num_generations", "3"], "divisible"),  # 8 completions per step are not groups of 3
        (["--max_failure_rate", "1.5"], "--max-failure-rate must be within [0, 1], got 1.5"),
        (["--dynamic_std_threshold", "-0.1"], "--dynamic-std-threshold must be within [0, 1]"),
        (["--eval_size", "2.5"], "--eval-size must be a share in (0, 1)"),
        (["--prefilter_mean_range", "0.9", "0.1"], "--prefilter-mean-range must be [low, high]"),
        (["--overlong_buffer", "64"], "rurl.overlong_buffer 64 is longer than max_completion_length 48"),
        (["--judge_deadline", "1000"], "rurl.judge_deadline 1000 s is more than half of ddp_timeout 1800 s"),
        (
            ["--judge_deadline", "400", "--ddp_timeout", "600"],
            "rurl.judge_deadline 400 s is more than half of ddp_timeout",
        ),
        (["--evolve", "true", "--evolve_deadline", "1000"], "rurl.evolve_deadline 1000 s is more than half of"),
        (["--evolve_max_share", "0"], "--evolve-max-share must be within (0, 1], got 0.0"),
        (["--evolve", "true", "--mode", "implicit"], "rurl.evolve: grading.mode implicit decides no criterion"),
        (["--ledger_reask", "1.5"], "--ledger-reask must be within [0, 1] (a share of the judge verdicts), got 1.5"),
        (["--ledger_reask", "0.1", "--verdict-format", "probability"], "rurl.ledger_reask asks verdicts again afresh"),
    ],
)
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
    no_prompt.write_text(
        TINY_DATA.read_text().splitlines()[0]
        + "\n"
        + json.dumps({"rubrics": [{"criterion": "Is kind.", "points": 1}]})
        + "\n"
    )
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
    assert (
        main(rurl_train("--config", str(TINY), "--output_dir", str(tmp_path), "--base-url", url, "--model", "j")) == 2
    )
    err = capsys.readouterr().err
    assert url in err and "does not answer" in err


def test_an_evolver_or_monitor_that_does_not_answer_stops_before_the_policy_loads(tmp_path, capsys, no_model_load):
    with FaultServer() as dead:
        url = dead.base_url
    with FaultServer(reply=json.dumps({"explanation": "ok", "criteria_met": True})) as judge:
        for role, flag in (("evolver", "--evolve"), ("monitor", "--monitor_judge")):
            argv = ["--config", str(TINY), "--output_dir", str(tmp_path), "--base-url", judge.base_url, "--model", "j"]
            argv += [flag, "true", "--roles", f"{role}.base_url={url}"]
            assert main(rurl_train(*argv)) == 2
            err = capsys.readouterr().err
            assert url in err and "does not answer" in err and f"roles ['{role}']" in err


def test_a_monitor_that_is_the_training_judge_elsewhere_is_refused(tmp_path, capsys, no_model_load):
    """Issue 39: two endpoints serving a model of one name, with the same parameters: the monitor's requests were the
    judge's cached ones (0 calls, gap 0.000 while the endpoints disagreed). Another model name is accepted."""
    verdict = json.dumps({"explanation": "ok", "criteria_met": True})
    with FaultServer(reply=verdict) as judge, FaultServer(reply=verdict) as other:
        argv = ["--config", str(TINY), "--output_dir", str(tmp_path), "--base-url", judge.base_url, "--model", "fake"]
        argv += ["--monitor_judge", "true", "--roles", f"monitor.base_url={other.base_url}", "monitor.temperature=0"]
        assert main(rurl_train(*argv)) == 2
        err = capsys.readouterr().err
        assert "the monitor role is the training judge (fake, the same parameters" in err and other.base_url in err
        assert judge.requests == other.requests == []  # refused before the preflight's first grade


def test_a_judge_that_answers_no_verdict_fails_the_preflight(tmp_path, capsys, no_model_load):
    with FaultServer(reply="I cannot grade this.") as judge:
        code = main(
            rurl_train(
                "--config",
                str(TINY),
                "--output_dir",
                str(tmp_path),
                "--base-url",
                judge.base_url,
                "--model",
                "scripted-judge",
                "--no-cache",
            )
        )
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
    rubric = rubric_from_items(
        [
            {"criterion": "A", "points": 3, "tags": ["axis:accuracy"], "category": "Essential"},
            {"criterion": "B", "points": 1, "tags": ["axis:accuracy", "theme:x"]},
        ],
        "test",
    )

    class Graded:
        def __init__(self, met_a, met_b, flag=None):
            self.verdicts = [
                Verdict("A", 3, ("axis:accuracy",), met_a, "", "judge"),
                Verdict("B", 1, ("axis:accuracy", "theme:x"), met_b, "", "rule"),
            ]
            self.integrity_flag, self.integrity_note, self.no_answer = flag, None, None

    graded = [Graded(True, False), Graded(True, True), Graded(None, False)]
    stats = batch_stats(
        graded, [rubric] * 3, rewards=[0.75, 1.0, None], lengths=[10, 20, 30], seconds=1.5, judge_calls=6
    )
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
    grouped = batch_stats(graded, [rubric] * 3, [0.75, 1.0, None], [10, 20, 30], 1.5, 6, groups=["p", "p", "q"])
    assert grouped.answers == [("p", {"A": True, "B": False}), ("p", {"A": True, "B": True}), ("q", {"B": False})]


def test_criteria_json_compares_the_first_and_latest_windows_of_batches():
    from grading.batch import BatchStats
    from rurl.trainer import criterion_row
    from rurl.watch.guards import FailureMonitor

    monitor = FailureMonitor(window=5, criteria_window=2)
    for met in (0, 1, 3, 4):  # four batches of 4 verdicts of one criterion: met 0, 1, 3, 4 times
        monitor.record(BatchStats(4, 0, 0, 4, 0, 0.1, 4, criteria={"C": (met, 4)}))
        monitor.sync()
    windows = monitor.windows()
    assert windows == {"first": {"C": [1, 8]}, "last": {"C": [7, 8]}}
    row = criterion_row("C", {"all": monitor.criteria["C"], **{w: counts["C"] for w, counts in windows.items()}})
    assert (row["pass_rate"], row["first_pass_rate"], row["last_pass_rate"]) == (8 / 16, 1 / 8, 7 / 8)
    assert row["moved"] == pytest.approx(0.75)
    assert criterion_row("D", {"all": [1, 2], "first": None, "last": [1, 2]})["moved"] is None


def write_rows(path: Path, ids: list[str]) -> Path:
    with open(path, "w") as f:
        for row_id in ids:
            f.write(
                json.dumps(
                    {
                        "id": row_id,
                        "prompt": [{"role": "user", "content": f"Question {row_id}?"}],
                        "rubrics": [{"criterion": "Answers.", "points": 1}],
                    }
                )
                + "\n"
            )
    return path


def test_prefilter_keeps_queries_whose_ruft_scores_vary_inside_the_band(tmp_path):
    rows = write_rows(tmp_path / "rubrics.jsonl", ["varied", "flat", "solved", "hopeless", "missing"])
    build = tmp_path / "build"
    build.mkdir()
    scores = {
        "varied": [0.2, 0.6, 0.4, 0.8],
        "flat": [0.5, 0.5, 0.5, 0.5],
        "solved": [1.0, 0.8, 1.0, 1.0],
        "hopeless": [0.0, 0.0, 0.1, 0.0],
    }
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
    _, counts, _ = prefilter(data.train, RurlConfig(prefilter=build, prefilter_min_std=0.5))
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
                prompts=["Q1", "Q2", "Q3"],
                completions=["short", "long", "FAIL long"],
                rubrics=[rubric] * 3,
                completion_ids=[[1] * 10, [1] * 95, [1] * 95],
                grader=Grader(client, GradingConfig()),
                overlong=Overlong(max_length=100, buffer=20, scale=1.0),
            )

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
            return await rubric_reward(
                prompts=[f"Q{i}" for i in range(12)],
                completions=["Hello."] * 12,
                rubrics=[rubric] * 12,
                grader=Grader(client, GradingConfig(integrity_check=False)),
                log_metric=metrics.__setitem__,
            )

    with FaultServer(reply=verdict, latency=0.05) as a, FaultServer(reply=verdict, latency=0.05) as b:
        assert run(go(f"{a.base_url},{b.base_url}")) == [1.0] * 12
        counts = {server.base_url: server.count for server in (a, b)}
    for url, count in counts.items():
        name = "rubric/endpoint/" + url.split("//")[1].split("/")[0]
        assert metrics[f"{name}/requests"] == count > 0 and metrics[f"{name}/failures"] == 0


# --- rows that can never train, the prefilter's role ---------------------------------------------------------------


def bad_rows_file(path: Path) -> Path:
    """The tiny data (lines 1-8), then a rubric of penalties only (line 9) and a prompt of ~9,000 tokens, over the
    embedded model's 8,192-token context (line 10)."""
    penalty = {
        "id": "all-penalties",
        "prompt": [{"role": "user", "content": "Any tips?"}],
        "rubrics": [{"criterion": "Is rude.", "points": -3}, {"criterion": "Is wrong.", "points": -5}],
    }
    long = {
        "id": "too-long",
        "prompt": [{"role": "user", "content": "word " * 9000}],
        "rubrics": [{"criterion": "Answers.", "points": 1}],
    }
    path.write_text(TINY_DATA.read_text() + json.dumps(penalty) + "\n" + json.dumps(long) + "\n")
    return path


def test_rows_that_can_never_train_are_refused_in_one_line_before_the_policy(tmp_path, capsys, no_model_load):
    rows = bad_rows_file(tmp_path / "rubrics.jsonl")
    assert main(rurl_train("--config", str(TINY), "--rubrics", str(rows), "--output_dir", str(tmp_path / "out"))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "2 of 10 rows can never train" in err, err
    assert f"{rows}: line 9 (id 'all-penalties'): no criterion with positive points" in err
    # counted with the policy's chat template, against its context (no vLLM here) minus max_completion_length 48
    assert f"{rows}: line 10 (id 'too-long'): prompt of" in err and "over the prompt budget of 8144" in err
    assert "max_position_embeddings 8192 - max_completion_length 48" in err and "rurl.bad_rows: skip" in err
    assert not (tmp_path / "out").exists()


def test_skipped_bad_rows_are_left_out_listed_and_counted(tmp_path, capsys, no_model_load):
    from trl import GRPOConfig, ModelConfig

    from rurl.data import prompt_budget

    rows = bad_rows_file(tmp_path / "rubrics.jsonl")
    with FaultServer() as dead:  # past the data: the run goes on to the judge, which is not there
        url = dead.base_url
    assert (
        main(
            rurl_train(
                "--config",
                str(TINY),
                "--rubrics",
                str(rows),
                "--output_dir",
                str(tmp_path / "out"),
                "--bad_rows",
                "skip",
                "--base-url",
                url,
                "--model",
                "j",
            )
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "left out 2 of 10 rows that can never train" in err and "does not answer" in err, err
    data = load_rurl_data(rows, RurlConfig(bad_rows="skip"), seed=0)  # no budget: the penalty row only
    assert len(data.train) == 9 and data.bad_rows == {"no_positive_points": 1}
    # with vLLM, its context is vllm_max_model_length (the embedded model's tokenizer counts)
    grpo = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        use_vllm=True,
        vllm_max_model_length=1024,
        max_completion_length=24,
        num_generations=2,
        per_device_train_batch_size=2,
    )
    budget = prompt_budget(grpo, ModelConfig())
    assert budget.tokens == 1000 and budget.source == "vllm_max_model_length 1024 - max_completion_length 24"
    data = load_rurl_data(rows, RurlConfig(bad_rows="skip", eval_size=2), seed=0, budget=budget)
    assert data.bad_rows == {"no_positive_points": 1, "prompt_too_long": 1}
    assert len(data.train) + len(data.evaluation) == 8 and len(data.evaluation) == 2
    assert [(r.location, r.row["id"]) for r in data.rejected] == [
        (f"{rows}: line 9", "all-penalties"),
        (f"{rows}: line 10", "too-long"),
    ]
    # rating modes score without points: the penalty row trains there
    assert load_rurl_data(rows, RurlConfig(), seed=0, mode="likert").bad_rows == {}


def test_the_prefilter_measures_the_spread_of_one_candidate_role(tmp_path):
    rows = write_rows(tmp_path / "rubrics.jsonl", ["policy-flat", "policy-varied"])
    build = tmp_path / "build"
    build.mkdir()
    # {policy: 4, strong: 2}: mixed, both queries vary; the policy's own answers vary on one only
    scores = {
        "policy-flat": {"policy": [0.2, 0.2, 0.2, 0.2], "strong": [0.9, 0.9]},
        "policy-varied": {"policy": [0.2, 0.6, 0.4, 0.8], "strong": [0.9, 0.9]},
    }
    with open(build / "candidates.jsonl", "w") as f:
        for row_id, by_role in scores.items():
            for role, values in by_role.items():
                for score in values:
                    f.write(json.dumps({"id": row_id, "role": role, "model": role, "score": score}) + "\n")
    data = load_rurl_data(rows, RurlConfig(prefilter=build), seed=0)
    assert [row.id for row in data.train] == ["policy-varied"] and data.prefilter_role == "policy"
    assert data.prefiltered == {"kept": 1, "flat": 1, "outside_band": 0, "not_built": 0}
    with pytest.raises(ConfigError, match="none left|no row left"):  # the strong role is flat on both
        load_rurl_data(rows, RurlConfig(prefilter=build, prefilter_role="strong"), seed=0)
    with pytest.raises(ConfigError, match=r"prefilter_role 'weak': no candidate of that role .* policy, strong"):
        load_rurl_data(rows, RurlConfig(prefilter=build, prefilter_role="weak"), seed=0)
    (build / "candidates.jsonl").write_text((build / "candidates.jsonl").read_text().replace('"policy"', '"small"'))
    assert load_rurl_data(rows, RurlConfig(prefilter=build), seed=0).prefilter_role == "small"  # the most candidates


def test_kept_groups_are_assigned_own_first_then_surplus_then_repeats():
    """rurl.schedule.groups.assign: which kept groups (round, process, group) each process trains on. Pure: every process
    computes it alike. A process keeps its own first (nothing sent), takes other processes' surplus next, and repeats
    (its own when it has any) only when the processes together kept too few; it never runs out."""
    from rurl.schedule.groups import assign

    order = [(0, 0, 0), (0, 0, 1), (0, 0, 2), (1, 1, 0)]  # process 0 kept 3, process 1 kept 1 (in an extra round)
    assert assign(order, 2, 2) == [[(0, 0, 0), (0, 0, 1)], [(1, 1, 0), (0, 0, 2)]]  # surplus moved, no repeat
    assert assign(order, 1, 2) == [[(0, 0, 0)], [(1, 1, 0)]]  # enough of its own: nothing moves
    assert assign([(0, 1, 0)], 2, 2) == [[(0, 1, 0), (0, 1, 0)], [(0, 1, 0), (0, 1, 0)]]  # one kept: repeated
    for processes, wanted, kept in [(3, 1, 1), (2, 2, 1), (2, 4, 1), (8, 4, 1), (8, 4, 5), (2, 3, 2)]:
        order = [(0, p % processes, p) for p in range(kept)]
        assignment = assign(order, wanted, processes)
        assert [len(groups) for groups in assignment] == [wanted] * processes
        assert set(order) <= {s for groups in assignment for s in groups}  # every kept group is used
        for process, groups in enumerate(assignment):  # repeats are of a process's own groups when it has any
            own = [s for s in order if s[1] == process]
            if own:
                assert own[:wanted] == groups[: len(own[:wanted])]


def loose_judge(body: dict) -> str:
    """Credits a criterion whenever two of its words appear in the response: what the probes are built to catch."""
    content = body["messages"][-1]["content"]
    response = content.split("]]\n", 1)[1].rsplit("\n[[end of response", 1)[0].lower()
    criterion = content.rsplit("points):\n", 1)[1].split("\n", 1)[0].lower()
    met = sum(word in response for word in set(re.findall(r"[a-z]{4,}", criterion))) >= 2
    return json.dumps({"explanation": "scripted", "criteria_met": met})


def test_the_probe_preflight_warns_or_stops_before_the_policy_loads(tmp_path, capsys, no_model_load):
    """rurl.probe_rows: the probes of 3 training rows, graded by the (loose) training judge: the keyword list earns
    every criterion whose words it holds, every time, and the test flags them. on_probe stop ends the command before
    any model loads, naming a criterion and its evidence; warn says so and goes on to load the policy (which the
    fixture refuses)."""
    with FaultServer(reply=loose_judge) as judge:
        argv = ["--config", str(TINY), "--base-url", judge.base_url, "--model", "loose", "--probe_rows", "3"]
        stopped = tmp_path / "stopped"
        assert main(rurl_train(*argv, "--output_dir", str(stopped), "--on_probe", "stop")) == 2
        err = capsys.readouterr().err
        assert "probe preflight on 3 training rows (judge loose (explained)): answers with no substance earned" in err
        assert (
            "rubricrl: error: probe preflight: " in err and "criteria exploitable by answers with no substance" in err
        )
        assert "earned it 4 of 4 (p = 0.0001)" in err and "stopped before the policy loads" in err
        found = json.loads((stopped / "probe_preflight.json").read_text())
        assert found["best_paid_kind"] in {"keywords", "parrot"} and found["rows"] == 3
        flagged = found["exploitable_criteria"]
        assert flagged and all(c["exploited_by"] and c["test"].startswith("exploitable: ") for c in flagged)
        assert any("keywords" in c["exploited_by"] for c in flagged)
        found_p = [c["tests"][kind]["p"] for c in flagged for kind in c["exploited_by"]]
        assert max(found_p) <= flagged[0]["threshold"] <= 0.05  # each flag's p passed the correction
        assert found["test"]["tolerance"] == 0.1 and found["test"]["level"] == 0.05
        with pytest.raises(AssertionError, match="a model was loaded"):
            main(rurl_train(*argv, "--output_dir", str(tmp_path / "warned")))
        assert "warning: probe preflight: " in capsys.readouterr().err


def test_eval_rubrics_holds_out_another_dataset_whole(tmp_path):
    """rurl.eval_rubrics: the in-training evaluation reads another dataset (HealthBench-Hard, say), every training
    row trains; with eval_size too it is one line."""
    other = tmp_path / "held_out.jsonl"
    other.write_text(
        "".join(
            json.dumps({"id": f"h{i}", "question": f"Held-out {i}?", "rubrics": [{"criterion": "c", "points": 1}]})
            + "\n"
            for i in range(3)
        )
    )
    data = load_rurl_data(TINY_DATA, RurlConfig(eval_rubrics=other), seed=0)
    assert [row.id for row in data.evaluation] == ["h0", "h1", "h2"] and len(data.train) == 8
    with pytest.raises(ValueError, match="give eval_rubrics .* or eval_size .*, not both"):
        RurlConfig(eval_rubrics=other, eval_size=2)
