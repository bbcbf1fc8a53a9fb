"""The rubric reward inside a real TRL GRPOTrainer step on CPU (tiny, LoRA), judged by the embedded model."""

import asyncio
import inspect
import json
import math

import pytest

from grading.grader import Grader, GradingConfig
from grading.reward import make_rubric_reward, rubric_reward
from rubricrl.embedded_model import embedded_model_dir
from rubricrl.llm import LLMClient, Role
from tests.conftest import run

pytestmark = [pytest.mark.model, pytest.mark.slow]

RUBRICS = [
    [{"criterion": "Names Paris as the capital of France.", "points": 5, "tags": None},
     {"criterion": "Answers in one sentence.", "points": 2, "tags": None}],
    [{"criterion": "States that water boils at 100 degrees Celsius at sea level.", "points": 5, "tags": None},
     {"criterion": "Claims water boils at 50 degrees Celsius.", "points": -3, "tags": None}],
]  # fmt: skip
PROMPTS = [[{"role": "user", "content": "What is the capital of France?"}],
           [{"role": "user", "content": "At what temperature does water boil?"}]]  # fmt: skip


@pytest.fixture
def judge_roles(local_server):
    return {"judge": Role(base_url=local_server.base_url, model=local_server.model, temperature=0.0, max_tokens=200)}


def test_reward_is_detected_as_async_by_trl_and_named():
    from trl.trainer.utils import is_async_callable

    reward = make_rubric_reward(Grader.__new__(Grader))
    assert inspect.iscoroutinefunction(reward) and is_async_callable(reward) and reward.__name__ == "rubric_reward"


def test_reward_grades_a_batch_with_one_value_per_completion(judge_roles):
    metrics, extras = {}, {}

    async def go():
        async with LLMClient(judge_roles) as client:
            return await rubric_reward(
                prompts=PROMPTS * 2, completions=[[{"role": "assistant", "content": c}] for c in
                                                  ["Paris.", "100 °C at sea level.", "Lyon, I think.", "Around 50 C."]],
                rubrics=RUBRICS * 2, grader=Grader(client, GradingConfig()),
                log_metric=metrics.__setitem__, log_extra=extras.__setitem__,
            )  # fmt: skip

    rewards = run(go())
    assert len(rewards) == 4 and all(r is None or 0.0 <= r <= 1.0 for r in rewards)
    assert {"rubric/judge_failure_rate", "rubric/criteria_pass_rate", "rubric/judge_latency_s"} <= set(metrics)
    assert len(extras["rubric_verdicts"]) == 4
    assert json.loads(extras["rubric_verdicts"][0])[0][0].startswith("Names Paris")


def test_grpo_step_with_the_rubric_reward(judge_roles, tmp_path, monkeypatch):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("WANDB_MODE", "disabled")
    dataset = Dataset.from_list([{"prompt": p, "rubrics": r} for p, r in zip(PROMPTS, RUBRICS)])
    # The client is created here; TRL calls the reward on its own event loop, where the client's HTTP sessions
    # are opened on first use.
    grader = Grader(LLMClient(judge_roles), GradingConfig())
    config = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False, max_steps=1,
        per_device_train_batch_size=2, num_generations=2, max_completion_length=12, learning_rate=1e-3,
        logging_steps=1, report_to=[], save_strategy="no", log_completions=False,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=str(embedded_model_dir()), reward_funcs=[make_rubric_reward(grader)], args=config,
        train_dataset=dataset, peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    logs = trainer.state.log_history[0]
    assert math.isfinite(logs["rewards/rubric_reward/mean"]) and "rubric/judge_failure_rate" in logs
    assert logs["rubric/judge_failure_rate"] < 1.0  # the embedded judge produced verdicts
    changed = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not p.equal(before[n])]
    assert changed or logs.get("rewards/rubric_reward/std", 0) == 0  # no signal, no update: both are honest
    asyncio.run_coroutine_threadsafe(grader.client.aclose(), trainer.async_loop).result()
