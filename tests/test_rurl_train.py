"""RuRL training on CPU with real TRL steps on a tiny random policy (LoRA): dynamic sampling keeps flat groups out of
the batch and stops a run that finds none with spread, the judge-failure guard stops a run whose judge fails (a
scripted judge: what a real one cannot do on demand), and the tiny preset runs against the real judge, is killed
and resumes (the `model` test)."""

import contextlib
import json
from pathlib import Path

import pytest

from commands.main import main
from grading.grader import Grader, GradingConfig
from grading.ledger import read_table
from rubricrl.llm import LLMClient, Role
from rurl.reward.rubric_reward import make_rubric_reward
from tests.fault_server import FaultServer
from tests.helpers import hashed_verdict, tiny_policy, tiny_rurl_train

pytestmark = pytest.mark.slow

GENERATIONS = 4
WEIGHTS = (1, 2, 4, 8, 16)
"""Binary points: a completion's reward is its 5 verdicts read as a binary number over 31."""
VARIED = ["Write one sentence about the sea."]
FLAT = ["FLAT: say hello.", "FLAT: name a colour."]
"""The scripted judge says "met" to every criterion of these: every completion scores 1, the group's std is 0."""


def scripted_verdict(body: dict) -> str:
    """Met for FLAT prompts; otherwise met or not from a hash of the request (response and criterion)."""
    if "FLAT:" in body["messages"][-1]["content"]:
        return json.dumps({"explanation": "scripted", "criteria_met": True})
    return hashed_verdict(body)


@contextlib.contextmanager
def rubric_trainer(
    tmp_path,
    judge: FaultServer,
    prompts: list[str],
    max_extra_rounds: int,
    max_steps: int = 1,
    on_exhausted: str = "repeat",
    weight_decay: float = 0.0,
    save_steps: int = 100,
    monitor: bool = False,
):
    """RubricGRPOTrainer with dynamic sampling on the tiny policy: 2 groups of GENERATIONS per step; with `monitor`,
    the failure monitor (and so the criterion ledger) as `rurl train` gives it."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    from rurl.schedule.dynamic_sampling import DynamicSampling
    from rurl.trainer import RubricGRPOTrainer
    from rurl.watch.guards import FailureMonitor, StopOnRequest

    rubric = [{"criterion": f"Criterion {i + 1}.", "points": w, "tags": None} for i, w in enumerate(WEIGHTS)]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}], "rubrics": rubric} for p in prompts])
    role = Role(base_url=judge.base_url, model="scripted-judge", temperature=0.0)
    grader = Grader(LLMClient({"judge": role}, max_retries=0, invalid_answer_retries=0), GradingConfig())
    config = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        max_steps=max_steps,
        seed=0,
        per_device_train_batch_size=2 * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=8,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="steps",
        save_steps=save_steps,
        weight_decay=weight_decay,
    )
    failures = FailureMonitor(window=5) if monitor else None
    trainer = RubricGRPOTrainer(
        model=str(tiny_policy()),
        reward_funcs=[make_rubric_reward(grader)],
        args=config,
        train_dataset=dataset,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        dynamic=DynamicSampling(std_threshold=0.02, max_extra_rounds=max_extra_rounds, on_exhausted=on_exhausted),
        failure_monitor=failures,
    )
    trainer.add_callback(StopOnRequest(trainer))
    try:
        yield trainer
    finally:
        import asyncio

        asyncio.run_coroutine_threadsafe(grader.client.aclose(), trainer.async_loop).result(timeout=60)


def test_dynamic_sampling_keeps_flat_groups_out_of_the_batch(tmp_path, quiet_env):
    """Two of the three prompts score 1 on every completion (std 0), so every first round has a flat group. With
    dynamic sampling, the batch that reaches the loss holds only groups of the other prompt, whole and at full size,
    drawing extra rounds until it is full, and never drawing again a prompt found flat. That step has signal, so its
    update goes through: the no-update gate (test_on_exhausted_stop_...) holds only signal-free steps."""
    batches = []
    with (
        FaultServer(reply=scripted_verdict) as judge,
        rubric_trainer(tmp_path, judge, VARIED + FLAT, max_extra_rounds=8, monitor=True) as trainer,
    ):
        original = trainer._generate_and_score_completions

        def keep(inputs):
            output = original(inputs)
            batches.append(output)
            return output

        trainer._generate_and_score_completions = keep
        draw, draws = trainer.sampler._more_prompts, []

        def recorded(groups, round_, seen):
            rows = draw(groups, round_, seen)
            draws.append(({trainer.sampler._key(row) for row in rows}, set(trainer.sampler.flat)))
            return rows

        trainer.sampler._more_prompts = recorded
        before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
        trainer.train()
        after = dict(trainer.model.named_parameters())
        tokenizer = trainer.processing_class
    (batch,) = batches
    prompts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    assert len(prompts) == 2 * GENERATIONS == batch["completion_ids"].shape[0] == batch["advantages"].shape[0]
    assert not [p for p in prompts if "FLAT:" in p], prompts  # no flat group reached the loss
    for g in range(2):  # two whole groups, each of one prompt, with a spread of advantages
        group = prompts[g * GENERATIONS : (g + 1) * GENERATIONS]
        assert len(set(group)) == 1, group
        assert batch["advantages"][g * GENERATIONS : (g + 1) * GENERATIONS].abs().sum() > 0
    assert batch["num_items_in_batch"] == batch["completion_mask"].sum()  # recomputed over the kept rows
    assert draws and all(not drawn & flat for drawn, flat in draws), draws  # no prompt found flat is drawn again
    logs = trainer.state.log_history[0]
    assert logs["dynamic_sampling/groups_kept"] >= 2
    assert logs["dynamic_sampling/groups_generated"] == 2 * (1 + logs["dynamic_sampling/extra_rounds"])
    assert trainer.stop_reason is None and trainer.state.global_step == 1
    assert trainer.no_update_steps == 0 and not all(torch_equal(before[name], after[name]) for name in before)
    # the criterion ledger counts every group the judge graded, the ones left out of the batch included (their
    # verdicts were paid for): the FLAT prompts' criteria carried nothing, the varied prompt's all the signal
    table = trainer.run_ledger.table().to_pydict()
    rows = [dict(zip(table, values)) for values in zip(*table.values())]
    flat = [row for row in rows if "FLAT:" in row["query_id"]]
    varied = [row for row in rows if "FLAT:" not in row["query_id"]]
    assert len(flat) == 2 * len(WEIGHTS) and len(varied) == len(WEIGHTS)
    assert all(row["carries"] == "nothing" and row["pass_rate"] == 1.0 and row["signal"] == 0 for row in flat)
    assert sum(row["signal_share"] for row in varied) == pytest.approx(1.0)
    assert sum(table["graded"]) == logs["dynamic_sampling/groups_generated"] * GENERATIONS * len(WEIGHTS)
    assert 0 < logs["ledger/flat_verdict_share"] < 1
    assert logs["ledger/no_signal_criteria"] == sum(row["carries"] == "nothing" for row in rows) >= 10


def test_dynamic_sampling_stops_with_a_checkpoint_when_no_group_has_a_spread(tmp_path, quiet_env):
    with (
        FaultServer(reply=scripted_verdict) as judge,
        rubric_trainer(tmp_path, judge, FLAT, max_extra_rounds=1, max_steps=3, monitor=True) as trainer,
    ):
        trainer.train()
    assert trainer.state.global_step == 1  # stopped after the first step, not 3
    assert "no group" in trainer.stop_reason and "dynamic_std_threshold" in trainer.stop_reason
    assert (tmp_path / "checkpoint-1" / "trainer_state.json").is_file()
    logs = trainer.state.log_history[0]
    assert (logs["dynamic_sampling/groups_kept"], logs["dynamic_sampling/extra_rounds"]) == (0, 1)
    assert logs["dynamic_sampling/groups_generated"] == 4
    state = json.loads((tmp_path / "checkpoint-1" / "rurl_state.json").read_text())
    assert len(state["flat"]) == 2  # both prompts, saved for a resumed run's draws
    with (
        FaultServer(reply=scripted_verdict) as judge,
        rubric_trainer(tmp_path / "resumed", judge, FLAT, max_extra_rounds=1, max_steps=1, monitor=True) as resumed,
    ):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))  # at max_steps already: no step
    assert resumed.sampler.flat == set(state["flat"])  # a resumed run's extra rounds skip them as the first run's did
    # the criterion ledger, saved with the checkpoint and in the run folder (with the run's tests), comes back whole
    saved = read_table(tmp_path / "checkpoint-1" / "ledger.parquet")
    assert "moved_p" in read_table(tmp_path / "ledger.parquet").column_names and "moved_p" not in saved.column_names
    assert sum(saved.column("graded").to_pylist()) == 4 * GENERATIONS * len(WEIGHTS)  # the 4 groups generated
    assert set(saved.column("carries").to_pylist()) == {"nothing"}
    assert resumed.run_ledger.ledger.table() == saved.to_pydict()


def test_on_exhausted_stop_ends_the_run_without_moving_the_weights(tmp_path, quiet_env):
    """One flat and one varied prompt per batch, no extra round: half the groups needed. With on_exhausted stop
    the run saves and stops at step 1, and that step leaves every weight as it was, although AdamW's weight decay
    alone would have moved them."""
    with (
        FaultServer(reply=scripted_verdict) as judge,
        rubric_trainer(
            tmp_path,
            judge,
            VARIED + FLAT[:1],
            max_extra_rounds=0,
            max_steps=3,
            on_exhausted="stop",
            weight_decay=0.5,
        ) as trainer,
    ):
        before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
        trainer.train()
        after = dict(trainer.model.named_parameters())
    assert trainer.state.global_step == 1 and "only 1 of the 2 groups needed" in trainer.stop_reason
    assert all(torch_equal(before[name], after[name]) for name in before)
    assert trainer.no_update_steps == 1 and trainer.state.log_history[0]["no_update"] == 1.0
    assert trainer.optimizer.param_groups[0]["lr"] > 0  # the learning rate is back for a resumed run


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a.detach(), b.detach())


def rurl_train(judge: FaultServer, out: Path, *flags: str) -> int:
    """`rurl train` of the tiny preset as plain GRPO (no dynamic sampling, no eval, no wandb), graded by the scripted
    judge; 8-token completions (what is tested is what the run does with the rewards, not the answers)."""
    plain = ["--eval_size", "0", "--dynamic_sampling", "false", "--report_to", "none"]
    plain += ["--max_completion_length", "8", "--overlong_buffer", "0"]
    return main(tiny_rurl_train(out, *plain, *flags, judge_url=judge.base_url))


def test_the_failure_guard_stops_a_run_whose_judge_fails(tmp_path, quiet_env, capsys):
    """Every judge call returns garbage: the rewards are None (no update), and the guard stops the run after the
    first step with a checkpoint and a one-line error, instead of training on for max_steps."""
    out = tmp_path / "run"
    with FaultServer(reply="garbage, not a verdict") as judge:
        code = rurl_train(judge, out, "--max_steps", "4")
    err = capsys.readouterr().err
    assert code == 2, err
    assert "judge-failure guard" in err and "100%" in err and "--resume_from_checkpoint true" in err
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()
    assert not (out / "model.safetensors").exists()  # no final model from a stopped run
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["summary"]["steps"] == 1 and "judge-failure guard" in manifest["summary"]["stopped"]
    assert manifest["summary"]["judge"]["unscored"] == manifest["summary"]["judge"]["completions"] == 8


def varied_reward(completions, **kwargs) -> list[float]:
    """A second reward function for the tests below (imported by its dotted path, as trl grpo does): a number that
    differs between completions, so that alone it would give every group a spread."""
    return [float(len(str(c)) % 7) for c in completions]


def test_trls_reward_table_trains_and_logs_each_reward(tmp_path, quiet_env, capsys):
    """`--reward_funcs think_format_reward --reward_weights 1.0 0.5`, as trl grpo takes them: one step, each reward
    logged under TRL's own rewards/<name>/mean, and the table named at start."""
    with FaultServer(reply=scripted_verdict) as judge:
        assert (
            rurl_train(
                judge,
                tmp_path / "run",
                "--max_steps",
                "1",
                "--reward_funcs",
                "think_format_reward",
                "--reward_weights",
                "1.0",
                "0.5",
            )
            == 0
        )
    assert "rewards: rubric_reward x 1, think_format_reward x 0.5" in capsys.readouterr().err
    history = json.loads((tmp_path / "run" / "log_history.json").read_text())
    logged = {key for entry in history for key in entry}
    assert {"rewards/rubric_reward/mean", "rewards/think_format_reward/mean"} <= logged
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "think_format_reward" in config and "0.5" in config


def test_a_completion_the_judge_could_not_score_stays_out_whatever_the_other_rewards_say(tmp_path, quiet_env):
    """TRL sums weighted rewards with nansum and drops a completion only when every function returned None: the
    judge's None beside a number would become a reward. Here the judge fails on everything and a second function
    varies between completions: had its numbers counted, the step would have moved the weights."""
    out = tmp_path / "run"
    with FaultServer(reply="garbage, not a verdict") as judge:
        assert rurl_train(judge, out, "--max_steps", "2", "--reward_funcs", "tests.test_rurl_train.varied_reward") == 2
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    step = next(entry for entry in state["log_history"] if "no_update" in entry)
    assert step["no_update"] == 1.0  # no completion carried an advantage
    assert step["rewards/varied_reward/mean"] is None  # NaN (written as null): its numbers left out with their rows
