"""`rurl.async_steps: 1` on CPU with real TRL steps on the tiny random policy, graded by a scripted judge that answers
after a delay (what a real judge does, on demand): every grade stays with its completion, the same prompts train as
in a synchronous run, the loss's ratio is taken against the weights that generated the batch, dynamic sampling's
extra rounds and the failure guard work from grades that arrive a step later, the batch generated ahead at the end
is cancelled and counted, and a run SIGKILLed after a checkpoint resumes to the same step count."""

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
from itertools import product
from pathlib import Path

import pytest
import yaml

from grading.grader import Grader, GradingConfig
from rubricrl.llm import LLMClient, Role
from rurl.reward.rubric_reward import make_rubric_reward
from tests.fault_server import FaultServer
from tests.helpers import TINY_RURL, hashed_verdict, kill_after_checkpoint, tiny_policy, tiny_rurl_train

pytestmark = pytest.mark.slow

GENERATIONS = 4
WEIGHTS = (1, 2, 4, 8, 16)
RUBRIC = [{"criterion": f"Criterion {i + 1}.", "points": w, "tags": None} for i, w in enumerate(WEIGHTS)]


@contextlib.contextmanager
def trainer_on(tmp_path, judge: FaultServer, prompts: list[str], async_steps: int, **settings):
    """RubricGRPOTrainer on the tiny policy, 2 groups of GENERATIONS per step, graded by `judge`; `settings` go to
    GRPOConfig (LoRA unless `full=True`); `dropout`, a RubricDropout, goes to the reward."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    from rurl.trainer import RubricGRPOTrainer

    full, dynamic = settings.pop("full", False), settings.pop("dynamic", None)
    policy, lora = settings.pop("model", None), settings.pop("lora", None)
    monitor, role = settings.pop("failure_monitor", None), settings.pop("role", None)
    criterion_advantage = settings.pop("criterion_advantage", "none")
    options = {"dropout": settings.pop("dropout")} if "dropout" in settings else {}
    rows = [
        {"id": f"q{i}", "prompt": [{"role": "user", "content": p}], "rubrics": RUBRIC} for i, p in enumerate(prompts)
    ]
    role = role or Role(base_url=judge.base_url, model="scripted-judge", temperature=0.0)
    grader = Grader(LLMClient({"judge": role}, max_retries=0, invalid_answer_retries=0), GradingConfig())
    config = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "max_steps": 3,
        "seed": 0,
        "per_device_train_batch_size": 2 * GENERATIONS,
        "num_generations": GENERATIONS,
        "max_completion_length": 8,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "disable_dropout": True,  # as `rurl train` sets it one step ahead: the ratio is exact
        **settings,
    }
    trainer = RubricGRPOTrainer(
        model=policy or str(tiny_policy()),
        reward_funcs=[make_rubric_reward(grader, **options)],
        args=GRPOConfig(**config),
        train_dataset=Dataset.from_list(rows),
        peft_config=None if full else lora or LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        async_steps=async_steps,
        dynamic=dynamic,
        failure_monitor=monitor,
        criterion_advantage=criterion_advantage,
    )
    try:
        yield trainer
    finally:
        asyncio.run_coroutine_threadsafe(grader.client.aclose(), trainer.async_loop).result(timeout=60)


def logged_tables(trainer) -> list[dict]:
    """What TRL's completions table holds at each logged step (prompts, completions, rewards, advantages, verdicts)."""
    tables, log = [], trainer.log

    def keep(logs, *args, **kwargs):
        if "loss" in logs:
            table = trainer._logs
            tables.append(
                {
                    "prompt": [p[-1]["content"] for p in table["prompt"]],
                    "completion": [c[-1]["content"] for c in table["completion"]],
                    "reward": list(table["rewards"]["rubric_reward"]),
                    "advantage": list(table["advantages"]),
                    "verdicts": [json.loads(v) for v in table["extra"]["rubric_verdicts"]],
                }
            )
        return log(logs, *args, **kwargs)

    trainer.log = keep
    return tables


def judge_said(judge: FaultServer) -> list[tuple[str, bool]]:
    """Each request the scripted judge answered: (its prompt, the verdict it gave)."""
    said = []
    for body in judge.requests:
        content = body["messages"][-1]["content"]
        said.append((content, json.loads(hashed_verdict(body))["criteria_met"]))
    return said


def test_one_step_ahead_keeps_every_grade_with_its_completion_and_trains_a_synchronous_runs_prompts(
    tmp_path, quiet_env
):
    """12 prompts, 3 steps, a judge answering in 0.1 s. Every logged completion's verdicts are the ones the judge
    gave for that completion's text, its reward is their points over 31, and its advantage is its group's
    normalised reward: no batch's grades land on another. Each step trains the prompts the synchronous run trains at
    that step; the batch of step 4, generated ahead, is not trained and its calls are cancelled."""
    prompts = [f"Write one sentence about topic {i}." for i in range(12)]
    runs = {}
    for async_steps in (0, 1):
        with (
            FaultServer(reply=hashed_verdict, latency=0.1) as judge,
            trainer_on(tmp_path / str(async_steps), judge, prompts, async_steps) as trainer,
        ):
            tables = logged_tables(trainer)
            trainer.train()
            said = judge_said(judge)
        runs[async_steps] = (trainer, tables, said)
    trainer, tables, said = runs[1]
    assert len(tables) == 3
    for table in tables:
        rows = list(zip(table["completion"], table["verdicts"], table["reward"], strict=True))
        for completion, verdicts, reward in rows:
            for criterion, _, met in verdicts:
                asked = {verdict for text, verdict in said if completion in text and criterion in text}
                assert asked == {met}, (completion, criterion, asked)
            assert reward == pytest.approx(sum(points for _, points, met in verdicts if met) / 31)
        for g in range(0, len(rows), GENERATIONS):
            group = table["reward"][g : g + GENERATIONS]
            spread = statistics.stdev(group)
            expected = [(r - statistics.mean(group)) / (spread + 1e-4) for r in group]
            assert table["advantage"][g : g + GENERATIONS] == pytest.approx(expected, abs=1e-4)
            assert len(set(table["prompt"][g : g + GENERATIONS])) == 1  # a group is one prompt's
    synchronous = [sorted(set(table["prompt"])) for table in runs[0][1]]
    assert [sorted(set(table["prompt"])) for table in tables] == synchronous
    history = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert [entry["async/staleness"] for entry in history] == [0.0, 1.0, 1.0]
    assert all("async/staleness" not in entry for entry in runs[0][0].state.log_history)
    summary = trainer.ahead.summary()
    assert summary["batches"] == 3 and summary["untrained_batches"] == 1
    assert summary["untrained_completions"] == 2 * GENERATIONS
    assert summary["hidden_seconds"] > 0 and summary["grading_seconds"] >= summary["hidden_seconds"]


def test_each_batch_logs_its_own_judge_calls_and_is_graded_after_the_batch_before(tmp_path, quiet_env):
    """A judge taking 1.5 s a request, so that a batch's grading still runs when the next batch is generated. Over
    one epoch (6 steps of 2 prompts, no batch left generated ahead), each step logs the 40 calls of its own 8
    completions x 5 criteria; they sum to the run's total and to the requests the judge served; and every request
    about a batch reaches the judge after the last one about the batch before it: the two never compete."""
    from rurl.watch.guards import FailureMonitor

    prompts = [f"Write one sentence about topic {i}." for i in range(12)]
    monitor = FailureMonitor(3)
    with (
        FaultServer(reply=hashed_verdict, latency=1.5) as judge,
        trainer_on(tmp_path, judge, prompts, 1, max_steps=6, failure_monitor=monitor) as trainer,
    ):
        tables = logged_tables(trainer)
        trainer.train()
        asked = [body["messages"][-1]["content"] for body in judge.requests]
    history = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert [entry["rubric/judge_calls"] for entry in history] == [40.0] * 6
    assert monitor.totals["judge_calls"] == 240 == len(asked)
    batch_of = []
    for content in asked:
        batches = {step for step, table in enumerate(tables) if any(c in content for c in table["completion"])}
        assert len(batches) == 1, content
        batch_of.append(batches.pop())
    assert batch_of == sorted(batch_of) and set(batch_of) == set(range(6))
    assert trainer.ahead.summary()["untrained_batches"] == 0


def test_staleness_is_logged_per_optimizer_step(tmp_path, quiet_env):
    """With steps_per_generation 2, a generation batch trains two optimizer steps: the first batch (generated by
    the first step itself) at staleness 0 then 1, the next (generated a generation earlier) at 2 then 3."""
    prompts = [f"Write one sentence about topic {i}." for i in range(16)]
    with (
        FaultServer(reply=hashed_verdict) as judge,
        trainer_on(tmp_path, judge, prompts, 1, max_steps=4, steps_per_generation=2) as trainer,
    ):
        trainer.train()
    history = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["async/staleness"] for entry in history] == [0.0, 1.0, 2.0, 3.0]


def test_a_judge_that_cannot_be_asked_stops_the_run_with_its_reason(tmp_path, quiet_env, monkeypatch):
    """The judge's endpoint needs an API key that is not set: the first batch's grading fails on it mid-run. With
    the callbacks `rurl train` adds (the judge-failure guard fires at the same step) and dynamic sampling on, the run
    does not die there: it stops at step 1 with a checkpoint, no extra round is generated for nothing, and the
    reason it gives (the one `rurl train` prints first) names the missing key."""
    from rubricrl.llm import Role
    from rurl.schedule.dynamic_sampling import DynamicSampling
    from rurl.watch.guards import FailureMonitor, StopOnJudgeFailures, StopOnRequest

    monkeypatch.delenv("RUBRICRL_TEST_UNSET_KEY", raising=False)
    nowhere = Role(base_url="http://judge.invalid/v1", model="m", api_key_env="RUBRICRL_TEST_UNSET_KEY")
    prompts = [f"Write one sentence about topic {i}." for i in range(12)]
    monitor = FailureMonitor(3)
    settings = {"max_steps": 4, "failure_monitor": monitor, "role": nowhere, "dynamic": DynamicSampling(0.02, 2)}
    with FaultServer() as judge, trainer_on(tmp_path, judge, prompts, 1, **settings) as trainer:
        guard = StopOnJudgeFailures(monitor, 0.1)
        trainer.add_callback(guard)
        trainer.add_callback(StopOnRequest(trainer))
        trainer.train()
    assert trainer.state.global_step == 1 and (tmp_path / "checkpoint-1").is_dir()
    assert guard.reason is not None  # the guard fired too; the judge's own reason is the one said
    assert "needs an API key" in trainer.judge_error and "RUBRICRL_TEST_UNSET_KEY" in trainer.judge_error
    assert trainer.stop_reason == trainer.judge_error
    history = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert history[0]["dynamic_sampling/extra_rounds"] == 0


def test_log_probabilities_read_while_sampling_are_those_of_a_forward_over_the_completion():
    """What the schedule reads from `generate` (the generating weights' log-probabilities, with no forward of its
    own) equals TRL's teacher-forced forward over prompt and completion: left-padded prompts of different lengths, a
    temperature of 0.7, and sequences ending at different steps (a tenth of the vocabulary ends one); after a
    sequence's end they are 0, not the pad token's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rurl.schedule.sampled_logps import SampledLogps

    model = AutoModelForCausalLM.from_pretrained(tiny_policy()).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy(), padding_side="left")
    prompts = tokenizer(
        ["Hi.", "Write one sentence about the sea and the sky.", "Name a colour."], return_tensors="pt", padding=True
    )
    ends = list(range(0, model.config.vocab_size, 10))
    torch.manual_seed(0)
    with torch.no_grad(), SampledLogps(model, temperature=0.7) as sampled:
        out = model.generate(
            **prompts,
            do_sample=True,
            temperature=0.7,
            top_k=0,
            max_new_tokens=12,
            eos_token_id=ends,
            pad_token_id=tokenizer.pad_token_id,
        )
    completion = out[:, prompts["input_ids"].size(1) :]
    ended = torch.isin(completion, torch.tensor(ends))
    length = torch.where(ended.any(1), ended.int().argmax(1) + 1, completion.size(1))
    mask = torch.arange(completion.size(1))[None, :] < length[:, None]
    assert 1 < len(set(length.tolist())) and length.max() == completion.size(1)  # ends at different steps

    attention = torch.cat([prompts["attention_mask"], mask.long()], dim=1)
    with torch.no_grad():
        logits = model(input_ids=out, attention_mask=attention).logits[:, -completion.size(1) - 1 : -1] / 0.7
    forward = torch.log_softmax(logits.float(), -1).gather(-1, completion[..., None])[..., 0]
    read = sampled.per_token(completion, mask.long())
    assert read.shape == completion.shape
    assert (read - forward)[mask].abs().max() < 1e-5
    assert (read[mask] < 0).all() and (read[~mask] == 0).all()  # after the end: 0, as the loss's own


def test_the_ratio_is_taken_against_the_weights_that_generated_the_batch(tmp_path, quiet_env):
    """Full training at a large learning rate. One step ahead, each trained batch carries the log-probabilities of
    the weights that generated it (read while they sampled it; recomputed here from a copy of those weights), which differ from the current
    ones after an update, and PPO's clipping acts (clip fractions above 0). Synchronous, the batch carries none
    (TRL takes the current ones: a ratio of 1) and nothing is clipped."""
    carried, clipped = ratio_run(tmp_path / "sync", async_steps=0)
    assert carried == [False] * 3 and clipped == [0.0, 0.0, 0.0]
    carried, clipped = ratio_run(tmp_path / "ahead", async_steps=1)
    assert carried == [True] * 3
    assert clipped[0] == 0.0 and min(clipped[1:]) > 0  # the first batch is on-policy, the others one update old


RATIO_LIMITS = {"float32": 1e-5, "bfloat16": 1e-6, "float32 under bf16 autocast": 1e-6}
"""|log new - log old| per token at staleness 0, as docs/rurl.md states them: float32 reads them while sampling (a
cached decode: 2e-6 at most measured); bfloat16 weights, or mixed precision, compute them by the loss's own forward."""


@pytest.mark.parametrize("precision", list(RATIO_LIMITS))
def test_the_ratio_at_staleness_0_is_1_with_lora_dropout_a_low_temperature_and_short_answers(
    tmp_path, quiet_env, precision
):
    """LoRA with dropout 0.1 and an adapter moved off zero, temperature 0.1, a tenth of the vocabulary ending a
    sequence (most answers end early). At the first step (staleness 0) the log-probabilities the batch carries equal
    the loss's own forward to within RATIO_LIMITS, they are 0 after each answer's end, and the loss and every
    gradient are finite."""
    import math

    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    policy = AutoModelForCausalLM.from_pretrained(tiny_policy(), dtype=dtype)
    policy.generation_config.eos_token_id = list(range(0, policy.config.vocab_size, 10))
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["q_proj", "v_proj"])
    prompts = [f"Write one sentence about topic {i}." for i in range(12)]
    seen = []
    settings = {"model": policy, "lora": lora, "temperature": 0.1, "max_steps": 1, "bf16": precision != "float32"}
    with (
        FaultServer(reply=hashed_verdict) as judge,
        trainer_on(tmp_path, judge, prompts, 1, **settings) as trainer,
    ):
        torch.manual_seed(1)
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:  # off zero: the adapter changes what the policy writes
                parameter.data.normal_(0, 0.3)
        compute_loss = trainer.compute_loss

        def check(model, inputs, *args, **kwargs):
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            with torch.no_grad():  # the loss's forward (TRL's, under its autocast), dropout as in training
                now, _, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.model, ids, attention, inputs["completion_ids"].size(1)
                )
            loss = compute_loss(model, inputs, *args, **kwargs)
            seen.append((inputs["completion_mask"].bool(), inputs["old_per_token_logps"], now, loss.detach()))
            return loss

        trainer.compute_loss = check
        trainer.train()
        gradients = [p.grad for p in trainer.model.parameters() if p.requires_grad and p.grad is not None]
    (mask, old, now, loss), history = seen[0], trainer.state.log_history
    assert (~mask).any(dim=1).sum() >= 2  # answers ended early
    assert (old[~mask] == 0).all()
    assert (now - old)[mask].abs().max().item() <= RATIO_LIMITS[precision]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in gradients)
    assert math.isfinite(history[0]["loss"]) and math.isfinite(history[0]["grad_norm"])


def test_one_step_ahead_refuses_dropout(tmp_path, quiet_env):
    """The trainer refuses the schedule with dropout on (its ratio would compare two dropout masks)."""
    with FaultServer(reply=hashed_verdict) as judge, pytest.raises(ValueError, match="disable_dropout"):
        with trainer_on(tmp_path, judge, ["Hi."] * 4, 1, disable_dropout=False):
            pass


def ratio_run(tmp_path: Path, async_steps: int) -> tuple[list[bool], list[float]]:
    """3 steps of full training at learning rate 0.05, each trained batch's old log-probabilities checked against
    those of the weights that generated it. Returns whether each batch carried them, and the logged clip fractions."""
    import torch

    prompts = [f"Write one sentence about topic {i}." for i in range(12)]
    carried, weights_at, generated_at = [], {}, []  # weights_at: global step -> the weights generating there
    with (
        FaultServer(reply=hashed_verdict) as judge,
        trainer_on(tmp_path, judge, prompts, async_steps, full=True, learning_rate=0.05) as trainer,
    ):
        if trainer.ahead is not None:
            start, collect = trainer.ahead.start, trainer.ahead.collect

            def snapshot(inputs, **kwargs):
                weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
                weights_at[trainer.state.global_step] = weights
                return start(inputs, **kwargs)

            def remember(pending):
                generated_at.append(pending.step)
                return collect(pending)

            trainer.ahead.start, trainer.ahead.collect = snapshot, remember
        compute_loss = trainer.compute_loss

        def check(model, inputs, *args, **kwargs):
            carried.append(inputs.get("old_per_token_logps") is not None)
            if carried[-1]:
                mask = inputs["completion_mask"].bool()
                ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
                attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
                keep = inputs["completion_ids"].size(1)
                logps = trainer._get_per_token_logps_and_entropies
                with torch.no_grad():
                    now, _, _ = logps(trainer.model, ids, attention, keep)
                    current = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
                    trainer.model.load_state_dict(weights_at[generated_at[-1]], strict=False)
                    then, _, _ = logps(trainer.model, ids, attention, keep)
                    trainer.model.load_state_dict(current, strict=False)
                old = inputs["old_per_token_logps"]
                assert (old - then)[mask].abs().max() < 1e-5  # the generating weights'
                if trainer.state.global_step > generated_at[-1]:  # one update later: not the current weights'
                    assert (old - now)[mask].abs().max() > 1e-2
            return compute_loss(model, inputs, *args, **kwargs)

        trainer.compute_loss = check
        trainer.train()
    return carried, [entry["clip_ratio/region_mean"] for entry in trainer.state.log_history if "loss" in entry]


def test_dynamic_sampling_finds_flat_groups_when_their_grades_arrive(tmp_path, quiet_env):
    """Half the prompts are answered "met" on every criterion (flat groups). One step ahead, the flat groups of a
    batch are found when its grades are collected, and the extra rounds generated then fill the batch with groups
    that have a spread: no flat group reaches the loss. The second step's staleness is the share of its completions
    that come from the batch generated ahead (the extra rounds' are on-policy)."""
    from rurl.schedule.dynamic_sampling import DynamicSampling

    def verdict(body: dict) -> str:
        if "FLAT:" in body["messages"][-1]["content"]:
            return json.dumps({"explanation": "scripted", "criteria_met": True})
        return hashed_verdict(body)

    prompts = [f"{'FLAT: ' if i % 2 else ''}Write one sentence about topic {i}." for i in range(12)]
    trained, ahead = [], []
    with (
        FaultServer(reply=verdict, latency=0.2) as judge,
        trainer_on(tmp_path, judge, prompts, 1, max_steps=2, dynamic=DynamicSampling(0.02, 8)) as trainer,
    ):
        compute_loss, start = trainer.compute_loss, trainer.ahead.start

        def keep(model, inputs, *args, **kwargs):
            trained.append(trainer.processing_class.batch_decode(inputs["prompt_ids"], skip_special_tokens=True))
            assert inputs["old_per_token_logps"].shape == inputs["completion_ids"].shape
            return compute_loss(model, inputs, *args, **kwargs)

        def remember(inputs, **kwargs):
            if kwargs.get("after") is not None and trainer.state.global_step == 0:  # step 2's, generated at step 1
                ahead.extend(row["prompt"][-1]["content"] for row in inputs)
            return start(inputs, **kwargs)

        trainer.compute_loss, trainer.ahead.start = keep, remember
        trainer.train()
    assert len(trained) == 2 and all(len(batch) == 2 * GENERATIONS for batch in trained)
    assert not [p for batch in trained for p in batch if "FLAT:" in p], trained
    history = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert sum(entry["dynamic_sampling/extra_rounds"] for entry in history) >= 1  # flat groups were found
    share = statistics.fmean(any(p in text for p in ahead) for text in trained[1])
    assert [entry["async/staleness"] for entry in history] == [0.0, pytest.approx(share)]
    assert trainer.ahead.summary()["untrained_batches"] == 1


def one_step_ahead(out: Path, judge: FaultServer, *flags: str) -> list[str]:
    """`rurl train` of the tiny preset (its arguments), one step ahead, plain GRPO, graded by the scripted judge."""
    plain = ["--async_steps", "1", "--eval_size", "0", "--dynamic_sampling", "false", "--report_to", "none"]
    plain += ["--max_completion_length", "8", "--overlong_buffer", "0"]
    return tiny_rurl_train(out, *plain, *flags, judge_url=judge.base_url)


def test_the_failure_guard_stops_one_step_ahead_and_cancels_the_next_batchs_grading(tmp_path, quiet_env, capsys):
    """The judge answers garbage about the first batch's two queries (their retries included) and holds every
    question about another query until the command has ended (at most 300 s). The guard stops at step 1 with a
    checkpoint, as it does synchronously; the batch generated ahead for step 2 is not trained, its calls still in
    flight are cancelled and counted in the summary, and the command ends without waiting for a single one of them."""
    import re
    import threading

    from commands.main import main

    first, held, late, lock, ended = set(), [], [], threading.Lock(), threading.Event()

    def judge_reply(body: dict) -> str:
        content = body["messages"][-1]["content"]
        query = re.search(r"Name fact \d+\.", content).group()
        with lock:
            if len(first) < 2:  # the first batch's questions come first: its two queries
                first.add(query)
            if query not in first:
                held.append(query)
        if query not in first:
            ended.wait(timeout=300)
            late.append(query)
        return "garbage, not a verdict"

    out = tmp_path / "run"
    with FaultServer(reply=judge_reply) as judge:
        code = main(one_step_ahead(out, judge, "--max_steps", "4", "--rubrics", str(rubric_file(tmp_path))))
        answered_late, still_held = len(late), len(held)
        ended.set()
    err = capsys.readouterr().err
    assert code == 2, err
    assert "judge-failure guard" in err and "Stopped at step 1" in err
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    assert summary["steps"] == 1 and summary["judge"]["completions"] == 8
    assert summary["async"]["untrained_batches"] == 1 and summary["async"]["cancelled_completions"] == 8
    assert "1 batch generated ahead not trained (8 completions, their grading cancelled)" in err
    assert still_held > 0 and answered_late == 0  # it ended with questions unanswered: it did not wait for them


def test_a_run_one_step_ahead_killed_after_a_checkpoint_resumes_to_the_same_step_count(tmp_path, quiet_env):
    """SIGKILLed once checkpoint-2 is written, the run resumes from it: the batch that was generated ahead is
    generated again from the checkpoint's weights (staleness 0 at the resumed run's first step) and the run ends at
    max_steps with its model, one step ahead again from there on. The in-training evaluation and its monitor judge
    run every 2 steps while a batch is being graded in the background."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    flags = ["--max_steps", "5", "--save_steps", "2", "--rubrics", str(rubric_file(tmp_path)), "--eval_size", "2"]
    flags += ["--eval_every", "2", "--monitor_judge", "true", "--roles", "monitor.model=scripted-monitor"]
    with FaultServer(reply=hashed_verdict, latency=0.2) as judge:
        command = [str(Path(sys.executable).with_name("rubricrl")), *one_step_ahead(out, judge, *flags)]
        kill_after_checkpoint(command, env, out / "checkpoint-2", within=300)
        second = subprocess.run(
            command + ["--resume_from_checkpoint", "true"], env=env, capture_output=True, text=True, timeout=300
        )
        monitored = sum(body["model"] == "scripted-monitor" for body in judge.requests)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    assert summary["steps"] == 5 and summary["steps_this_run"] == 3 and summary["stopped"] is None
    assert (out / "model.safetensors").is_file()
    history = [e for e in json.loads((out / "log_history.json").read_text()) if "reward" in e]
    resumed = [e["async/staleness"] for e in history if e["step"] > 2]
    assert resumed == [0.0, 1.0, 1.0]
    assert summary["async"]["batches"] == 3 and summary["async"]["untrained_batches"] == 1
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals][-2:] == [4, 5]  # the resumed run's: at step 4 and at the end
    assert all(e["monitor"]["monitor/overall_score"] is not None for e in evals[-2:]) and monitored >= 2 * 2 * 5


def test_a_rule_only_run_one_step_ahead_asks_no_judge(tmp_path, quiet_env, capsys):
    """Every criterion a rule check (the learning check's rubrics): `rurl train` starts no judge and turns the
    integrity judge off, said once, so that an answer the integrity check notes stays a note instead of a call to
    the placeholder judge; the written config says so, and two steps one step ahead train."""
    from commands.main import main

    out = tmp_path / "run"
    rules = Path(__file__).resolve().parents[1] / "experiments" / "data" / "rurl_rules.jsonl"
    argv = ["rurl", "train", "--config", str(TINY_RURL), "--output_dir", str(out), "--rubrics", str(rules)]
    argv += ["--model_name_or_path", str(tiny_policy()), "--async_steps", "1", "--max_steps", "2", "--eval_size", "0"]
    argv += ["--dynamic_sampling", "false", "--report_to", "none", "--max_completion_length", "8"]
    argv += ["--overlong_buffer", "0", "--save_steps", "2"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("grading.integrity_judge is off") == 1 and "no judge, no server" in err
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["grading"]["integrity_judge"] is False and config["disable_dropout"] is True
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    assert summary["steps"] == 2 and summary["judge"]["judge_calls"] == 0
    card = (out / "README.md").read_text()  # the model card names what the model came from, not TRL's "[None]"
    assert f"- base model: `{tiny_policy()}`" in card and f"- trained on: `{rules}`" in card
    assert "RuRL" in card and "judge: none (rule checks only)" in card and "None" not in card.split("## Use")[0]


def rubric_file(tmp_path: Path) -> Path:
    """16 one-line queries with the tests' binary rubric: 8 steps an epoch (7 with 2 held out), so that every step of
    the tests' short runs has one ahead."""
    path = tmp_path / "rubrics.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "prompt": [{"role": "user", "content": f"Name fact {i}."}], "rubrics": RUBRIC})
            + "\n"
            for i in range(16)
        )
    )
    return path


@pytest.mark.parametrize("accumulation", [1, 2, 3, 4])
def test_a_batch_read_ahead_trains_at_the_step_a_synchronous_run_generates_it(accumulation):
    """TRL's loop simulated: a generation batch every steps_per_generation x num_iterations micro-steps (its `_step`),
    an optimizer step every gradient_accumulation_steps of them, and a short one where an epoch ends. For every batch
    read ahead within its epoch, the step its rubric dropout masks are drawn at is the global step a synchronous run
    is at when it generates that batch, at every combination TRL accepts."""
    from rurl.schedule.one_step_ahead import step_trained_at

    for spg, iterations, epochs in product([1, 2, 3, 4], [1, 2, 3], [[7, 5, 9], [8, 8], [3, 10, 1, 6]]):
        every = spg * iterations
        micro = global_step = boundary = 0
        generated = []  # (epoch, micro-step, global step, micro-steps taken of the current optimizer step)
        for epoch, length in enumerate(epochs):
            for position in range(length):
                if micro % every == 0:
                    generated.append((epoch, micro, global_step, micro - boundary))
                micro += 1
                if micro - boundary == accumulation or position == length - 1:  # an optimizer step ends
                    global_step, boundary = global_step + 1, micro
        for (epoch, at, step, taken), (next_epoch, next_at, next_step, _) in zip(generated, generated[1:]):
            if next_epoch == epoch:  # the schedule reads no batch across an epoch's end
                assert next_at == at + every
                assert step_trained_at(step, taken, every, accumulation) == next_step, (spg, iterations, epochs)
