"""The rubric reward for TRL's GRPOTrainer.

TRL runs `async def` reward functions concurrently with each other on its own event loop; it detects them with
`inspect.iscoroutinefunction`, which sees through `functools.partial` but not through an object with an async
`__call__`. So the reward is a module-level coroutine function bound to its grader with `partial`:

    reward = make_rubric_reward(Grader(LLMClient(roles, cache=ResponseCache()), GradingConfig()))
    GRPOTrainer(..., reward_funcs=[reward], train_dataset=dataset_with_a_rubrics_column)

Each dataset row carries its rubric in the `rubrics` column (`[{criterion, points, tags?}]`, as in the rubric
dataset); TRL repeats it once per generation. A completion whose grade could not be obtained gets `None` (TRL:
NaN, left out of the advantage), never 0, and the failure is counted in `rubric/judge_failure_rate`; that
includes a penalty left undecided, unless `GradingConfig.undecided_penalty` is "met" (grading/scores.py).
"""

import functools
import json
import time
from collections.abc import Callable
from typing import Any

from grading.grader import GradeItem, Grader
from grading.rubric import rubric_from_items


def make_rubric_reward(grader: Grader) -> Callable:
    reward = functools.partial(rubric_reward, grader=grader)
    reward.__name__ = "rubric_reward"  # TRL names metrics after the function
    return reward


async def rubric_reward(
    prompts: list,
    completions: list,
    rubrics: list,
    *,
    grader: Grader,
    log_metric: Callable[[str, float], None] | None = None,
    log_extra: Callable[[str, list], None] | None = None,
    reference_answer: list | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """One reward per completion: the rubric score of `completions[i]` for `prompts[i]` against `rubrics[i]`."""
    if not len(prompts) == len(completions) == len(rubrics):
        raise ValueError(f"{len(prompts)} prompts, {len(completions)} completions, {len(rubrics)} rubrics")
    items = [
        GradeItem(_messages(prompt), _text(completion), rubric_from_items(list(rubric), f"rubrics column, row {i}"),
                  reference_answer[i] if reference_answer else None)
        for i, (prompt, completion, rubric) in enumerate(zip(prompts, completions, rubrics))
    ]  # fmt: skip
    started = time.monotonic()
    graded = await grader.grade_many(items)
    rewards = [g.reward for g in graded]  # one per completion: grade_many keeps the items' order and count
    if log_metric is not None:
        verdicts = [v for g in graded for v in g.verdicts if v.source != "none"]
        decided = [v for v in verdicts if v.met is not None]
        log_metric("rubric/judge_failure_rate", 1 - len(decided) / len(verdicts) if verdicts else 0.0)
        log_metric("rubric/criteria_pass_rate", sum(v.met for v in decided) / len(decided) if decided else 0.0)
        log_metric("rubric/unscored_rate", sum(r is None for r in rewards) / len(rewards))
        log_metric("rubric/integrity_flag_rate", sum(g.integrity_flag is not None for g in graded) / len(graded))
        log_metric("rubric/judge_latency_s", time.monotonic() - started)
    if log_extra is not None:
        log_extra("rubric_verdicts", [json.dumps([[v.criterion[:60], v.points, v.met] for v in g.verdicts],
                                                 ensure_ascii=False) for g in graded])  # fmt: skip
        log_extra("rubric_flag", [g.integrity_flag or "" for g in graded])
    return rewards


def _messages(prompt: Any) -> list[dict[str, str]]:
    """TRL prompts are a string or a list of chat messages."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def _text(completion: Any) -> str:
    """TRL completions are a string or, for conversational data, [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, str):
        return completion
    return "".join(m["content"] for m in completion if m.get("role") == "assistant")
