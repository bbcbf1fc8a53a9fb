"""The rubric reward for TRL's GRPOTrainer: one batch judged by the real embedded model, and real GRPO steps on
CPU (helpers.tiny_policy, LoRA) with a scripted judge, so that the rewards are known to differ
within a group, the update is checked, and TRL's treatment of unscorable completions is pinned."""

import asyncio
import contextlib
import inspect
import json
from collections import defaultdict

import pytest

from grading.grader import Grader, GradingConfig
from grading.judge import response_code
from rubricrl.llm import LLMClient, Role
from rurl.reward.rubric_reward import make_rubric_reward, rubric_reward
from tests.fault_server import FaultServer
from tests.helpers import hashed_verdict, run, tiny_policy

pytestmark = pytest.mark.slow

RUBRICS = [
    [
        {"criterion": "Names Paris as the capital of France.", "points": 5, "tags": None},
        {"criterion": "Answers in one sentence.", "points": 2, "tags": None},
    ],
    [
        {"criterion": "States that water boils at 100 degrees Celsius at sea level.", "points": 5, "tags": None},
        {"criterion": "Claims water boils at 50 degrees Celsius.", "points": -3, "tags": None},
    ],
]
PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "At what temperature does water boil?"}],
]


@pytest.fixture
def judge_roles(local_server):
    return {"judge": Role(base_url=local_server.base_url, model=local_server.model, temperature=0.0, max_tokens=200)}


def test_reward_is_detected_as_async_by_trl_and_named():
    from trl.trainer.utils import is_async_callable

    reward = make_rubric_reward(Grader.__new__(Grader))
    assert inspect.iscoroutinefunction(reward) and is_async_callable(reward) and reward.__name__ == "rubric_reward"


@pytest.mark.model
def test_reward_grades_a_batch_with_one_value_per_completion(judge_roles):
    metrics, extras = {}, {}

    async def go():
        async with LLMClient(judge_roles) as client:
            return await rubric_reward(
                prompts=PROMPTS * 2,
                completions=[
                    [{"role": "assistant", "content": c}]
                    for c in ["Paris.", "100 °C at sea level.", "Lyon, I think.", "Around 50 C."]
                ],
                rubrics=RUBRICS * 2,
                grader=Grader(client, GradingConfig()),
                log_metric=metrics.__setitem__,
                log_extra=extras.__setitem__,
            )

    rewards = run(go())
    assert len(rewards) == 4 and all(r is None or 0.0 <= r <= 1.0 for r in rewards)
    assert {"rubric/judge_failure_rate", "rubric/criteria_pass_rate", "rubric/judge_latency_s"} <= set(metrics)
    assert len(extras["rubric_verdicts"]) == 4
    assert json.loads(extras["rubric_verdicts"][0])[0][0].startswith("Names Paris")


@pytest.mark.model
def test_the_reward_hands_the_ledger_each_answer_against_its_whole_rubric_and_its_verdicts_asked_afresh(
    local_server, tmp_path
):
    """With rubric dropout and rurl.ledger_reask 1: each answer's ledger entry holds its query's whole rubric, the
    dropped criterion absent, and every decided judge verdict asked again at a fresh sample of a sampling judge; a
    rerun asks nothing (the cache holds the fresh samples too) and gets the same."""
    from grading.ledger import ABSENT
    from rubricrl.llm import ResponseCache
    from rurl.reward.dropout import RubricDropout

    rubrics = [rubric + [{"criterion": "Is polite.", "points": 1, "tags": None}] for rubric in RUBRICS] * 2
    role = Role(base_url=local_server.base_url, model=local_server.model, temperature=1.0, max_tokens=200)

    async def go():
        async with LLMClient({"judge": role}, cache=ResponseCache(tmp_path / "cache")) as client:
            return await rubric_reward(
                prompts=PROMPTS * 2,
                completions=["Paris.", "100 °C at sea level.", "Lyon, I think.", "Around 50 C."],
                rubrics=rubrics,
                id=["france", "water", "france", "water"],
                grader=Grader(client, GradingConfig(verdict_format="verdict_only")),  # a few tokens a verdict
                dropout=RubricDropout(0.5),
                reask=1.0,
            )

    first, again = run(go()), run(go())
    assert first == again
    seen = [first.stats, again.stats]
    answers = seen[0].ledger
    assert [a.query_id for a in answers] == ["france", "water", "france", "water"]
    for answer, rubric in zip(answers, rubrics):
        assert [c.text for c in answer.criteria] == [c["criterion"] for c in rubric]  # the whole rubric
        assert len(answer.dropped) == 1 and all(answer.states[k] == ABSENT for k in answer.dropped)
        decided = {k for k, state in enumerate(answer.states) if state == "d"}
        assert {k for k, _, _ in answer.reasks} <= decided and not {k for k, _, _ in answer.reasks} & answer.dropped
    assert sum(len(a.reasks) for a in answers) >= 4  # the 135M judge at temperature 1 fails a few
    assert seen[0].judge_calls > sum(len(a.reasks) for a in answers)  # the grading's and the re-asks' calls
    assert seen[1].judge_calls == 0 and [a.reasks for a in seen[1].ledger] == [a.reasks for a in answers]


OPEN_PROMPTS = ["Write one sentence about the sea.", "Name an animal and describe it in a few words."]
"""Open-ended, so that 4 sampled completions of one prompt differ."""
WEIGHTS = (1, 2, 4, 8, 16)
"""Binary points: a completion's reward is its 5 verdicts read as a binary number over 31 (32 distinct values)."""
GENERATIONS = 4


def binary_rubric(topic: str) -> list[dict]:
    return [{"criterion": f"Criterion {i + 1} on: {topic}", "points": w, "tags": None} for i, w in enumerate(WEIGHTS)]


def recorded(reward, calls: list, before=None):
    """The reward as TRL sees it (async, named rubric_reward), recording its rows: prompt, completion, reward."""

    async def rubric_reward(prompts, completions, **kwargs):
        rows = [(p[-1]["content"], "".join(m["content"] for m in c)) for p, c in zip(prompts, completions)]
        if before is not None:
            before(rows)
        rewards = await reward(prompts=prompts, completions=completions, **kwargs)
        calls.append([(p, t, r) for (p, t), r in zip(rows, rewards)])
        return rewards

    return rubric_reward


@contextlib.contextmanager
def grpo_trainer(tmp_path, judge: FaultServer, calls: list, grading: GradingConfig | None = None, before=None):
    """A real GRPOTrainer on the tiny policy (LoRA, CPU): one step, both prompts in one generation batch of
    GENERATIONS completions each, the rubric reward judged by the scripted `judge`."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p}], "rubrics": binary_rubric(p)} for p in OPEN_PROMPTS]
    )
    role = Role(base_url=judge.base_url, model="scripted-judge", temperature=0.0)
    # The client is created here; TRL calls the reward on its own event loop, where the client's HTTP sessions
    # are opened on first use.
    grader = Grader(LLMClient({"judge": role}, max_retries=0, invalid_answer_retries=0), grading or GradingConfig())
    config = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        max_steps=1,
        seed=0,
        per_device_train_batch_size=GENERATIONS * len(OPEN_PROMPTS),
        num_generations=GENERATIONS,
        max_completion_length=8,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        log_completions=False,
    )
    trainer = GRPOTrainer(
        model=str(tiny_policy()),
        reward_funcs=[recorded(make_rubric_reward(grader), calls, before)],
        args=config,
        train_dataset=dataset,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    try:
        yield trainer
    finally:
        asyncio.run_coroutine_threadsafe(grader.client.aclose(), trainer.async_loop).result(timeout=60)


def by_prompt(rows) -> dict[str, list[tuple[str, float | None]]]:
    groups = defaultdict(list)
    for prompt, text, reward in rows:
        groups[prompt].append((text, reward))
    return groups


def test_grpo_step_learns_from_rubric_rewards_that_differ_within_a_group(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    calls = []
    with FaultServer(reply=hashed_verdict) as judge, grpo_trainer(tmp_path, judge, calls) as trainer:
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        trainer.train()
        changed = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not p.equal(before[n])]
    (rows,) = calls  # one generation batch, scored once
    groups = by_prompt(rows)
    assert sorted(groups) == sorted(OPEN_PROMPTS) and all(len(g) == GENERATIONS for g in groups.values())
    assert all(isinstance(r, float) and 0.0 <= r <= 1.0 for _, _, r in rows), rows  # every reward is a number
    for prompt, group in groups.items():
        assert len({text for text, _ in group}) > 1, f"the policy sampled one completion {GENERATIONS} times: {group}"
        assert len({reward for _, reward in group}) > 1, f"rewards tie within the group of {prompt!r}: {group}"
    logs = trainer.state.log_history[0]
    assert logs["rubric/judge_failure_rate"] == 0.0 and judge.count > 0  # the scripted judge gave every verdict
    assert logs["frac_reward_zero_std"] == 0.0  # TRL saw a reward spread in every group
    assert changed, "no trainable parameter moved although every group had differing rewards"
    assert all("lora_" in n for n in changed)


def test_trl_gives_unscorable_completions_advantage_zero_outside_the_group_statistics(tmp_path, monkeypatch):
    """Pins TRL's GRPOTrainer (>=1.16,<1.17, pyproject's range; read in 1.16.0, grpo_trainer.py,
    `_generate_and_score_completions`): a completion for which every reward function returned None is NaN,
    left out of the nan-aware group mean and std, and its advantage is set to 0. RuRL relies on it: a judge
    failure must neither count as reward 0 nor move the policy."""
    import torch
    from trl import GRPOTrainer

    if not callable(getattr(GRPOTrainer, "_generate_and_score_completions", None)):
        pytest.fail(
            "TRL no longer has GRPOTrainer._generate_and_score_completions, which this test wraps to read "
            "the advantages: find where TRL computes them now, and check again that rows whose rewards are "
            "all None get advantage 0 and stay out of the group mean/std"
        )
    monkeypatch.setenv("WANDB_MODE", "disabled")
    failing_prompt, scored_prompt = OPEN_PROMPTS
    failing_codes = set()

    def one_scored_completion_fails_too(rows):
        # the first completion of the scored prompt (and any identical one) is failed by the judge as well, so that
        # its group has a None among numbers: the case where counting None as 0 would shift the group mean
        failing_codes.add(response_code(next(text for prompt, text in rows if prompt == scored_prompt)))

    def judge_reply(body):
        content = body["messages"][-1]["content"]
        if failing_prompt in content or any(code in content for code in failing_codes):
            return "I refuse to answer in JSON."  # unparsable: the verdict is None, so is the reward
        return hashed_verdict(body)

    calls, advantages = [], []
    grading = GradingConfig(integrity_check=False)  # a flagged completion would get 0, not None
    with (
        FaultServer(reply=judge_reply) as judge,
        grpo_trainer(tmp_path, judge, calls, grading, one_scored_completion_fails_too) as trainer,
    ):
        original = trainer._generate_and_score_completions

        def keep_advantages(inputs):
            output = original(inputs)
            advantages.append(output["advantages"].detach().clone())
            return output

        trainer._generate_and_score_completions = keep_advantages
        trainer.train()
    (rows,), (advantage,) = calls, advantages
    assert advantage.shape == (len(rows),) == (GENERATIONS * len(OPEN_PROMPTS),)
    failed = [i for i, (prompt, _, _) in enumerate(rows) if prompt == failing_prompt]
    scored = [i for i, (prompt, _, _) in enumerate(rows) if prompt == scored_prompt]
    assert len(failed) == len(scored) == GENERATIONS
    assert all(rows[i][2] is None for i in failed), rows  # the whole group failed
    unscored = [i for i in scored if rows[i][2] is None]
    numeric = [i for i in scored if rows[i][2] is not None]
    assert unscored, f"the judge failed no completion of {scored_prompt!r} (is the response code still quoted?): {rows}"
    assert len({rows[i][2] for i in numeric}) > 1, f"the numeric rewards tie: {rows}"

    assert all(advantage[i].item() == 0.0 for i in failed + unscored), advantage  # exactly 0, not NaN
    rewards = torch.tensor([rows[i][2] for i in numeric], dtype=advantage.dtype)
    got = advantage[numeric]
    assert torch.isfinite(got).all() and (got != 0).any(), advantage
    # the group's mean and (Bessel) std over its numeric rewards only ("group" scaling, TRL's default)
    torch.testing.assert_close(got, (rewards - rewards.mean()) / (rewards.std() + 1e-4))
    as_zero = torch.tensor([rows[i][2] or 0.0 for i in scored], dtype=advantage.dtype)  # None counted as 0
    wrong = ((as_zero - as_zero.mean()) / (as_zero.std() + 1e-4))[[scored.index(i) for i in numeric]]
    assert not torch.allclose(got, wrong)  # the check above tells the two apart


def _slow_judge(body: dict) -> str:
    """Answers at once, except for responses marked SLOW (30 s: far past the test's deadline)."""
    import time

    if "SLOW" in body["messages"][-1]["content"]:
        time.sleep(30)
    return json.dumps({"explanation": "scripted", "criteria_met": True})


def test_completions_unjudged_at_the_deadline_get_no_score_and_are_counted():
    """A hung judge cannot hold a training step past the reward's deadline: the completions it has not judged by
    then are None (counted as timed out and unscored), the others keep their scores, and their calls are gone."""
    import time

    with FaultServer(reply=_slow_judge) as judge:
        role = Role(base_url=judge.base_url, model="scripted-judge", temperature=0.0)

        async def go():
            async with LLMClient({"judge": role}, max_retries=0) as client:
                started = time.monotonic()
                rewards = await rubric_reward(
                    prompts=PROMPTS,
                    completions=["Paris is the capital.", "SLOW: it boils at 100 C."],
                    rubrics=RUBRICS,
                    grader=Grader(client, GradingConfig()),
                    deadline=1.0,
                )
                left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                return rewards, time.monotonic() - started, left

        rewards, seconds, left = run(go())
    assert rewards[0] == 1.0 and rewards[1] is None
    assert seconds < 10 and not left  # back at the deadline, not after the judge's 30 s; no call left running
    stats = rewards.stats
    assert (stats.timed_out, stats.unscored, stats.completions) == (1, 1, 2)
    assert stats.metrics()["rubric/timed_out_rate"] == 0.5


MIXED = [
    {"criterion": "SLOW: names Paris.", "points": 5, "tags": None},
    *({"criterion": f"DOWN: answers in one sentence ({i}).", "points": 2, "tags": None} for i in range(3)),
]
"""One completion's criteria: one call hangs, the others take the server down and find no connection (3 calls in a
row without one: the client's sign of an unreachable endpoint)."""


def test_a_judge_found_unreachable_cancels_the_rest_of_its_batch():
    """The judge's server goes down while other calls of the batch hang on it, one of them a criterion of the same
    completion: the batch ends at once, unscored (the failure guard's business), with no call left running, instead
    of waiting for the hung calls' timeouts."""
    import time

    def going_down(body: dict) -> str:
        if "DOWN" in body["messages"][-1]["content"]:
            judge.go_down()
            return "not a verdict"
        return _slow_judge(body)

    with FaultServer(reply=going_down) as judge:
        # sampled, so that a DOWN criterion answered "not a verdict" is asked again, into the closed server, whatever
        # the order its requests arrived in (greedy, all three could be answered before the server closed, and the
        # client never saw a refused connection: the batch then waited for the hung calls, as one CI run showed)
        role = Role(base_url=judge.base_url, model="scripted-judge", temperature=1.0)

        async def go():
            async with LLMClient({"judge": role}, max_retries=3, invalid_answer_retries=3) as client:
                started = time.monotonic()
                rewards = await rubric_reward(
                    prompts=PROMPTS * 2,
                    completions=["SLOW: Paris.", "SLOW: 100 C.", "Paris.", "SLOW: 90 C."],
                    rubrics=[*RUBRICS, MIXED, RUBRICS[1]],
                    grader=Grader(client, GradingConfig()),
                )
                left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                return rewards, time.monotonic() - started, left

        rewards, seconds, left = run(go())
    assert rewards == [None] * 4 and rewards.stats.unscored == 4
    assert seconds < 20 and not left
