"""The rubric reward for TRL's GRPOTrainer.

A module-level coroutine function bound to its grader with `partial`, which TRL's `inspect.iscoroutinefunction`
sees through (an object with an async `__call__` it does not), so that TRL runs it concurrently on its own loop:

    from rurl.reward.rubric_reward import make_rubric_reward
    reward = make_rubric_reward(Grader(LLMClient(roles, cache=ResponseCache()), GradingConfig()))
    GRPOTrainer(..., reward_funcs=[reward], train_dataset=dataset_with_a_rubrics_column)

Each row carries its rubric in the `rubrics` column (TRL repeats it per generation); the batch is graded by
grading/batch.py's `grade_batch`. A completion that could not be graded gets `None` (TRL: NaN, out of the advantage),
never 0, and counts in `rubric/judge_failure_rate`. DAPO's soft overlong penalty (rurl/reward/overlong.py) is applied
here, on the whole completion as DAPO does, not as a second reward function: TRL's nansum would make a None beside a
number a scored completion. Rubric dropout (rurl/reward/dropout.py) leaves each query's dropped criteria out of its
rubric before grading. The reasoning (`reasoning_delimiters`, or TRL's `reasoning_content`) never reaches the judge; a
completion whose reasoning never closed gets the floor without a judge call.
Per batch it logs failure, unscored and integrity rates, judge latency and calls, pass rates (overall, per tag and
category), reasoning and answer lengths, the reward-length correlation, and each completion's verdicts.

Each process grades its own completions. The rewards come back as `Rewards`: the list TRL reads, carrying the
batch's statistics (`stats`: grading/batch.py's `BatchStats`, with each completion's verdict rows and ledger answers),
which the trainer (rurl/trainer.py) takes from the call's result and sums over the processes. A per-batch deadline
bounds a step's wait for its judge. A setting the judge cannot be asked with (a missing API key, say) does not raise
out of a training step: the batch is unscored and `stats.error` carries the one-line reason, which stops the run with
a checkpoint (rurl/watch/guards.py).
"""

import asyncio
import functools
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from grading.asking import ask_afresh
from grading.batch import BatchStats, as_conversation, grade_batch
from grading.grader import Grader
from grading.ledger import ABSENT, LedgerAnswer, LedgerCriterion, verdict_state
from grading.rubric import rubric_from_items
from rubricrl.aio import gather_or_cancel
from rubricrl.llm import EndpointUnreachable
from rubricrl.llm.calls import tallying_requests
from rubricrl.llm.reasoning import as_written, split_reasoning
from rurl.reward.dropout import RubricDropout
from rurl.reward.overlong import Overlong


def make_rubric_reward(grader: Grader, **options: Any) -> Callable:
    """The reward bound to its grader; `options` are rubric_reward's keyword options (overlong, deadline, count_tokens,
    ...)."""
    reward = functools.partial(rubric_reward, grader=grader, **options)
    reward.__name__ = "rubric_reward"  # TRL names metrics after the function
    return reward


class Rewards(list):
    """One reward per completion (None: unscored), the list TRL reads, and the batch's statistics (`stats`), which
    TRL ignores and the trainer reads."""

    def __init__(self, rewards: list[float | None], stats: BatchStats):
        super().__init__(rewards)
        self.stats = stats


async def rubric_reward(
    prompts: list,
    completions: list,
    rubrics: list,
    *,
    grader: Grader,
    log_metric: Callable[[str, float], None] | None = None,
    log_extra: Callable[[str, list], None] | None = None,
    reference_answer: list | None = None,
    completion_ids: list | None = None,
    overlong: Overlong | None = None,
    deadline: float | None = None,
    count_tokens: Callable[[str], int] | None = None,
    decode: Callable[[list], list[str]] | None = None,
    rubric_for: Callable[[str, list], list] | None = None,
    dropout: RubricDropout | None = None,
    trainer_state: Any = None,
    trains_at: int | None = None,
    grade_after: Callable[[], Awaitable[None]] | None = None,
    reask: float = 0.0,
    id: list | None = None,  # noqa: A002 - TRL passes each dataset column under its own name
    **kwargs: Any,
) -> Rewards:
    """One reward per completion: the rubric score of `completions[i]` for `prompts[i]` against `rubrics[i]`, minus
    DAPO's soft overlong penalty when `overlong` is given (on the token count, `completion_ids`; an unscored
    completion stays None). `rubric_for(id, rubric)` gives the rubric a query's completions are graded against now
    (evolving rubrics). The result carries the batch's statistics (`Rewards.stats`). With `deadline` (seconds),
    completions still unjudged that long after the call are None (counted as timed out): the other processes of a run
    wait for this one at the next collective, and a hung judge must not reach the process group's timeout.
    `count_tokens` (the policy's tokenizer) measures reasoning and answer lengths in tokens; `decode` (its batch_decode)
    reads each completion from `completion_ids` as TRL decodes unparsed ones, so that a response template's parsing
    cannot hide where the reasoning ended. With `dropout`, each query's rubric loses the criteria its mask drops at the
    step this batch trains at: `trains_at`, given by a schedule that grades a batch before the step that trains it
    (rurl/schedule/one_step_ahead.py), else `trainer_state.global_step`. `grade_after` is awaited before the first judge
    call (the same schedule). `reask`: the criterion ledger's (`ledger_answers`)."""
    if not len(prompts) == len(completions) == len(rubrics):
        raise ValueError(f"{len(prompts)} prompts, {len(completions)} completions, {len(rubrics)} rubrics")
    if rubric_for is not None and id is not None:  # rubrics evolving during the run (rurl/evolving/evolution.py)
        rubrics = [rubric_for(str(query_id), list(rubric)) for query_id, rubric in zip(id, rubrics)]
    whole = parsed = [rubric_from_items(list(rubric), f"rubrics column, row {i}") for i, rubric in enumerate(rubrics)]
    dropping = dropout is not None and dropout.share > 0
    if dropping:
        if id is None:
            raise ValueError("rubric dropout draws each query's mask from its id: the rows need an `id` column")
        step = trains_at if trains_at is not None else (trainer_state.global_step if trainer_state is not None else 0)
        parsed, dropped = dropout.batch(rubrics, parsed, id, step)
    config = grader.config
    if decode is not None and completion_ids is not None:
        texts = decode(completion_ids)
    else:
        texts = [_text(completion, config.reasoning_delimiters) for completion in completions]
    lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else None
    penalties = [overlong.penalty(n) for n in lengths] if overlong is not None and lengths is not None else None
    batch = await grade_batch(
        grader,
        [as_conversation(prompt) for prompt in prompts],
        texts,
        parsed,
        references=reference_answer,
        deadline=deadline,
        # a group: the query's id where the data has one, else its prompt (TRL repeats both across the group)
        groups=[str(i) for i in id] if id is not None else None,
        lengths=lengths,
        penalties=penalties,
        count_tokens=count_tokens,
        grade_after=grade_after,
    )
    stats = batch.stats
    if batch.graded is None:  # nothing could be asked: the guard reads why (stats.error)
        return Rewards(batch.scores, stats)
    stats.dropped_verdicts = dropped["judge_verdicts"] if dropping else None
    kept = parsed if dropping else None
    stats.ledger = await ledger_answers(grader, batch, whole, kept, prompts, texts, id, (reask, deadline))
    if log_metric is not None:
        for name, value in {**stats.metrics(), **endpoint_metrics(grader.client)}.items():
            log_metric(name, value)
        if dropping:  # per completion (the batch's total of judge verdicts saved is summed over the processes by
            # rurl train: BatchStats.dropped_verdicts)
            log_metric("rubric/dropped_criteria", dropped["criteria"] / len(texts))
            log_metric(
                "rubric/dropped_share", dropped["criteria"] / dropped["droppable"] if dropped["droppable"] else 0.0
            )
    if log_extra is not None:
        log_extra(
            "rubric_verdicts",
            [
                json.dumps([[v.criterion[:60], v.points, v.met] for v in g.verdicts], ensure_ascii=False)
                if g
                else "timed out"
                for g in batch.graded
            ],
        )
        log_extra("rubric_flag", [(g.integrity_flag or "") if g else "" for g in batch.graded])
    return Rewards(batch.scores, stats)


async def ledger_answers(
    grader: Grader,
    batch,
    whole: list,
    kept: list | None,
    prompts: list,
    texts: list[str],
    ids: list | None,
    reask: tuple[float, float | None],
) -> list:
    """Per completion, its verdicts against its query's whole rubric for the criterion ledger (None: not judged);
    `kept`: each rubric as rubric dropout left it; `reask`: (the share of verdicts asked again afresh, the seconds
    they may take: the reward's deadline)."""
    query_ids = [str(i) for i in ids] if ids is not None else [str(prompt) for prompt in prompts]
    reasked = await asked_afresh(grader, batch, kept or whole, prompts, texts, query_ids, *reask) if reask[0] else {}
    return [
        None
        if g is None
        else ledger_answer(
            query_ids[i],
            whole[i],
            g,
            score is not None and not g.integrity_flag and not g.no_answer,
            None if kept is None else kept[i],
            reasked.get(i, ()),
        )
        for i, (g, score) in enumerate(zip(batch.graded, batch.scores))
    ]


def ledger_answer(
    query_id: str,
    rubric,
    graded,
    scored: bool,
    kept=None,
    reasks: tuple[tuple[str, bool, bool], ...] = (),
) -> LedgerAnswer | None:
    """An answer graded in training (grading/grader.py's `Graded`; None: not judged before the deadline, nothing to
    count) as the criterion ledger reads it (grading/ledger.py): against its query's whole `rubric`, of which the
    criteria not in `kept` (rubric dropout's rubric) were left out. `reasks`: (criterion text, first verdict, verdict
    asked again)."""
    if graded is None:
        return None
    criteria = tuple(LedgerCriterion(c.text, c.points, c.tags, c.rule is not None) for c in rubric.criteria)
    by_text = {v.criterion: v for v in graded.verdicts}
    found = [by_text.get(c.text) for c in rubric.criteria]
    states = "".join(ABSENT if v is None else verdict_state(v.met, v.source, v.explanation) for v in found)
    credits = [None if v is None or v.credit is None else float(v.credit) for v in found]
    left = set() if kept is None else {c.text for c in rubric.criteria} - {c.text for c in kept.criteria}
    dropped = frozenset(k for k, criterion in enumerate(rubric.criteria) if criterion.text in left)
    position = {criterion.text: k for k, criterion in enumerate(rubric.criteria)}
    again = tuple((position[text], first, second) for text, first, second in reasks if text in position)
    return LedgerAnswer(query_id, criteria, tuple(credits), states, scored, dropped, again)


async def asked_afresh(grader: Grader, batch, rubrics: list, prompts: list, texts: list[str],
                       query_ids: list[str], share: float, deadline: float | None) -> dict[int, tuple]:  # fmt: skip
    """Per completion (its index), the verdicts asked again afresh: (criterion text, first verdict, verdict asked
    again), for a `share` of the decided judge verdicts, drawn by a hash of the query, the criterion and the answer
    (the same on a rerun). Their calls are counted in the batch's (`batch.stats`). They are a measurement, never the
    reward's: a judge gone, or re-asks unanswered within `deadline` seconds, leave them out."""
    config, graded = grader.config, batch.graded
    chosen = [
        (i, criterion, bool(verdict.met))
        for i, (g, rubric) in enumerate(zip(graded, rubrics))
        if g is not None and not g.integrity_flag and not g.no_answer
        for criterion, verdict in zip(rubric.criteria, g.verdicts)
        if verdict.source == "judge"
        and verdict.met is not None
        and drawn(query_ids[i], criterion.text, texts[i], share)
    ]
    if not chosen:
        return {}
    answers = {  # as the judge saw them: without their reasoning
        i: split_reasoning(texts[i], config.reasoning_delimiters, starts_open=config.reasoning_starts_open).answer
        for i in {i for i, _, _ in chosen}
    }
    asking = gather_or_cancel(
        ask_afresh(grader.client, config, grader.prompt, as_conversation(prompts[i]), answers[i] or "", criterion)
        for i, criterion, _ in chosen
    )
    with tallying_requests() as tally:
        try:
            again = await asyncio.wait_for(asking, deadline)
        except (EndpointUnreachable, TimeoutError):
            again = [None] * len(chosen)
    batch.stats.judge_calls += tally.answered
    batch.stats.failed_requests += tally.failed
    out: dict[int, list] = {}
    for (i, criterion, first), answer in zip(chosen, again):
        if answer is not None:
            out.setdefault(i, []).append((criterion.text, first, bool(answer)))
    return {i: tuple(pairs) for i, pairs in out.items()}


def drawn(query_id: str, criterion: str, text: str, share: float) -> bool:
    """Whether a verdict is among the `share` asked again: a hash, not a random draw (every process, and a rerun,
    draws the same)."""
    digest = hashlib.sha256(f"{query_id}\0{criterion}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < share * 2**64


def endpoint_metrics(client) -> dict[str, float]:
    """Per judge endpoint (when there are several, or one failed), since the client opened: requests, failures,
    mean latency, times taken out of rotation; named by host:port."""
    stats = client.endpoint_stats()
    if len(stats) <= 1 and not any(s.failures for s in stats.values()):
        return {}
    metrics = {}
    for url, s in stats.items():
        parts = urlsplit(url)  # host, port and path only: credentials in a URL must not reach a metric name
        port = parts.port or (443 if parts.scheme == "https" else 80)
        name = f"rubric/endpoint/{parts.hostname}:{port}{parts.path.removesuffix('/v1')}"
        metrics.update(
            {
                f"{name}/requests": float(s.requests),
                f"{name}/failures": float(s.failures),
                f"{name}/latency_s": s.mean_latency,
                f"{name}/taken_out": float(s.ejected),
            }
        )
    return metrics


def _text(completion: Any, delimiters: list[str]) -> str:
    """TRL completions are a string or, for conversational data, [{"role": "assistant", "content": ...}]. With a
    response template TRL parses the reasoning into `reasoning_content` (`thinking` for gpt-oss) beside `content`:
    it is put back between the delimiters (`as_written`), so that the grader's one split sees the completion as the
    policy wrote it. (An empty reasoning leaves no trace in TRL's parse: `rurl train` passes `decode` instead.)"""
    if isinstance(completion, str):
        return completion
    return "".join(
        as_written(m.get("content"), m.get("reasoning_content") or m.get("thinking"), delimiters)
        for m in completion
        if m.get("role") == "assistant"
    )
