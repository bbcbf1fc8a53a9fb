"""The pure grading call (grading/batch.py: grade_batch) that RuRL's reward and the reward service both make: the
reward TRL calls is that call's scores, less DAPO's overlong penalty, with the same verdict rows and counts."""

import hashlib
import json

from grading.batch import as_conversation, grade_batch
from grading.grader import Grader, GradingConfig
from grading.rubric import rubric_from_items
from rubricrl.llm import LLMClient, Role
from rurl.reward.overlong import Overlong
from rurl.reward.rubric_reward import rubric_reward
from tests.fault_server import FaultServer
from tests.helpers import run
from tests.test_dropout import ITEMS

ANSWERS = [f"Answer {i}: " + "word " * (4 * i) for i in range(6)]
PROMPTS = ["Q1"] * 3 + [[{"role": "user", "content": "Q2"}]] * 3
IDS = [[1] * (30 + 6 * i) for i in range(6)]  # token ids: the last ones run into the overlong buffer


def verdict(body) -> str:
    """A fixed verdict per request, met for two of three."""
    digest = int(hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest(), 16)
    return json.dumps({"explanation": "scripted", "criteria_met": digest % 3 != 0})


def test_the_training_reward_is_the_grading_calls_score_less_the_overlong_penalty():
    overlong = Overlong(max_length=50, buffer=20, scale=0.5)

    async def both(server):
        async with LLMClient({"judge": Role(base_url=server.base_url, model="judge", temperature=0.0)}) as client:
            grader = Grader(client, GradingConfig())
            rewards = await rubric_reward(
                prompts=PROMPTS,
                completions=ANSWERS,
                rubrics=[ITEMS] * 6,
                grader=grader,
                completion_ids=IDS,
                overlong=overlong,
                id=["q1"] * 3 + ["q2"] * 3,
            )
            batch = await grade_batch(
                grader,
                [as_conversation(p) for p in PROMPTS],
                ANSWERS,
                [rubric_from_items(ITEMS, "test")] * 6,
                groups=["q1"] * 3 + ["q2"] * 3,
            )
            return rewards, rewards.stats, batch

    with FaultServer(reply=verdict) as server:
        rewards, stats, batch = run(both(server))
    penalties = [overlong.penalty(len(ids)) for ids in IDS]
    assert penalties[0] == 0 < penalties[-1]  # the penalty bites on the longest only
    assert rewards == [score - penalty for score, penalty in zip(batch.scores, penalties)]
    assert len(set(batch.scores)) > 2  # the verdicts differ between answers: the comparison is not of constants
    assert stats.rows == batch.stats.rows and stats.verdicts == batch.stats.verdicts
    assert stats.judge_calls == batch.stats.judge_calls == 6 * sum(item.get("rule") is None for item in ITEMS)
