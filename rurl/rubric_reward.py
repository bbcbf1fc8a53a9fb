"""The rubric reward for TRL's GRPOTrainer.

A module-level coroutine function bound to its grader with `partial`, which TRL's `inspect.iscoroutinefunction`
sees through (an object with an async `__call__` it does not), so that TRL runs it concurrently on its own loop:

    reward = make_rubric_reward(Grader(LLMClient(roles, cache=ResponseCache()), GradingConfig()))
    GRPOTrainer(..., reward_funcs=[reward], train_dataset=dataset_with_a_rubrics_column)

Each row carries its rubric in the `rubrics` column (TRL repeats it per generation). A completion that could not be
graded gets `None` (TRL: NaN, out of the advantage), never 0, and counts in `rubric/judge_failure_rate` (a penalty
left undecided too, unless `undecided_penalty` counts it: grading/scores.py). DAPO's soft overlong penalty is applied
here, on the whole completion as DAPO does, not as a second reward function: TRL's nansum would make a None beside
a number a scored completion. The reasoning (`reasoning_delimiters`, or TRL's `reasoning_content`) never reaches the
judge; a completion whose reasoning never closed gets the floor without a judge call.
Per batch it logs failure, unscored and integrity rates, judge latency and calls, pass rates (overall, per tag and
category), reasoning and answer lengths, the reward-length correlation, and each completion's verdicts.

Each process grades its own completions; `on_batch` hands the counts to rurl/guards.py, which sums them over the
processes. A per-batch deadline bounds a step's wait for its judge (unjudged completions: None, timed out). The judge
calls, failed requests and latency a batch logs are its own requests' (rubricrl/llm/calls.py), even while another
batch is graded on the same client. A setting the judge cannot be asked with (a missing API key, say) does not raise
out of a training step: the batch is unscored and `on_batch` carries the one-line reason, which stops the run with a
checkpoint (rurl/guards.py).
"""

import functools
import json
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from grading.dropout import RubricDropout
from grading.grader import GradeItem, Grader
from grading.overlong import Overlong
from grading.rubric import Rubric, rubric_from_items
from grading.scores import pearson
from rubricrl.errors import UserError
from rubricrl.llm import EndpointUnreachable
from rubricrl.llm.calls import tallying_requests
from rubricrl.llm.reasoning import as_written, split_reasoning

GRADE_AFTER: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("rubricrl_grade_after", default=None)
"""Set by a schedule that starts a batch's grading while an earlier batch's may still run (rurl/async_schedule.py):
the reward reads its rubrics at once, then awaits this before its first judge call, so that two batches never
compete for the judge's concurrency and the earlier one's wait is for its own calls alone."""


TRAINS_AT: ContextVar[int | None] = ContextVar("rubricrl_trains_at", default=None)
"""The optimizer step (trainer_state.global_step when it trains) of the batch being graded, set by a schedule that
grades a batch a step before it trains (rurl/async_schedule.py); None: the trainer's global_step at the call. Rubric
dropout's masks are drawn from it, so that a batch draws the same masks however it was scheduled or resumed."""


def make_rubric_reward(grader: Grader, **options: Any) -> Callable:
    """The reward bound to its grader; `options` are rubric_reward's keyword options (overlong, on_batch, deadline,
    count_tokens)."""
    reward = functools.partial(rubric_reward, grader=grader, **options)
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
    completion_ids: list | None = None,
    overlong: "Overlong | None" = None,
    on_batch: Callable[["BatchStats"], None] | None = None,
    deadline: float | None = None,
    count_tokens: Callable[[str], int] | None = None,
    decode: Callable[[list], list[str]] | None = None,
    rubric_for: Callable[[str, list], list] | None = None,
    dropout: RubricDropout | None = None,
    trainer_state: Any = None,
    id: list | None = None,  # noqa: A002 - TRL passes each dataset column under its own name
    **kwargs: Any,
) -> list[float | None]:
    """One reward per completion: the rubric score of `completions[i]` for `prompts[i]` against `rubrics[i]`, minus
    DAPO's soft overlong penalty when `overlong` is given (on the token count, `completion_ids`; an unscored
    completion stays None). `rubric_for(id, rubric)` gives the rubric a query's completions are graded against now
    (evolving rubrics). `on_batch` receives the batch's statistics (the judge-failure guard reads them). With
    `deadline` (seconds), completions still unjudged that long after the call are None (counted as timed out): the
    other processes of a run wait for this one at the next collective, and a hung judge must not reach the process
    group's timeout. `count_tokens` (the policy's tokenizer) measures reasoning and answer lengths in tokens;
    `decode` (its batch_decode) reads each completion from `completion_ids` as TRL decodes unparsed ones, so that a
    response template's parsing cannot hide where the reasoning ended. With `dropout`, each query's rubric loses the
    criteria its mask drops at this batch's step (TRAINS_AT, else `trainer_state.global_step`) before grading."""
    if not len(prompts) == len(completions) == len(rubrics):
        raise ValueError(f"{len(prompts)} prompts, {len(completions)} completions, {len(rubrics)} rubrics")
    if rubric_for is not None and id is not None:  # rubrics evolving during the run (rurl/evolution.py)
        rubrics = [rubric_for(str(query_id), list(rubric)) for query_id, rubric in zip(id, rubrics)]
    parsed = [rubric_from_items(list(rubric), f"rubrics column, row {i}") for i, rubric in enumerate(rubrics)]
    dropped = {"criteria": 0, "judge_verdicts": 0, "droppable": 0}
    if dropout is not None and dropout.share > 0:
        if id is None:
            raise ValueError("rubric dropout draws each query's mask from its id: the rows need an `id` column")
        step = TRAINS_AT.get()
        step = step if step is not None else (trainer_state.global_step if trainer_state is not None else 0)
        kept = []
        for items, rubric, query_id in zip(rubrics, parsed, id):
            fresh = frozenset(i for i, item in enumerate(items) if (item.get("evolved") or {}).get("step") == step)
            kept.append(dropout.kept(rubric, str(query_id), step, fresh))
            dropped["droppable"] += len(dropout.droppable(rubric, fresh))
        for full, rubric in zip(parsed, kept):
            dropped["criteria"] += len(full.criteria) - len(rubric.criteria)
            dropped["judge_verdicts"] += sum(c.rule is None for c in full.criteria) - sum(
                c.rule is None for c in rubric.criteria
            )
        parsed = kept
    config = grader.config
    if decode is not None and completion_ids is not None:
        texts = decode(completion_ids)
    else:
        texts = [_text(completion, config.reasoning_delimiters) for completion in completions]
    splits = [
        split_reasoning(text, config.reasoning_delimiters, starts_open=config.reasoning_starts_open) for text in texts
    ]
    count = count_tokens or len
    parts = [
        (count(split.reasoning) if split.reasoning else 0, count(split.answer) if split.answer else 0)
        for split in splits
    ]
    items = [
        GradeItem(_messages(prompt), text, rubric, reference_answer[i] if reference_answer else None)
        for i, (prompt, text, rubric) in enumerate(zip(prompts, texts, parsed))
    ]
    turn = GRADE_AFTER.get()
    if turn is not None:
        await turn()
    started = time.monotonic()
    error = None
    with tallying_requests() as tally:  # this batch's requests, whatever else the client sends meanwhile
        try:  # one per completion, in the items' order; None: not judged before the deadline
            graded = await (grader.grade_many(items) if deadline is None else grader.grade_within(items, deadline))
        except EndpointUnreachable:  # the judge's server is down: nothing scored (the batch's other calls cancelled)
            graded = None
        except UserError as problem:  # a setting the judge cannot be asked with: the run stops on it, checkpointed
            graded, error = None, str(problem)
    if graded is None:
        if on_batch is not None:
            asked = sum(sum(c.rule is None for c in rubric.criteria) or 1 for rubric in parsed)  # the judge's share
            on_batch(
                BatchStats(
                    completions=len(items),
                    unscored=len(items),
                    flagged=0,
                    verdicts=asked,
                    failed_verdicts=asked,
                    seconds=time.monotonic() - started,
                    judge_calls=tally.answered,
                    failed_requests=tally.failed,
                    request_seconds=tally.mean_seconds,
                    error=error,
                    rows=[None] * len(items),
                )
            )
        return [None] * len(items)
    seconds = time.monotonic() - started
    rewards = [None if g is None else g.reward for g in graded]
    lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else [len(t) for t in texts]
    if overlong is not None and completion_ids is not None:
        rewards = [None if r is None else r - overlong.penalty(n) for r, n in zip(rewards, lengths)]
    # a group: the query's id where the data has one, else its prompt (TRL repeats both across the group)
    groups = [str(i) for i in id] if id is not None else [json.dumps(_messages(p), ensure_ascii=False) for p in prompts]
    stats = batch_stats(graded, parsed, rewards, lengths, seconds, tally.answered, parts, groups=groups)
    stats.rows = verdict_rows(graded, rewards, config.undecided_criterion, config.undecided_penalty)
    stats.dropped_verdicts = dropped["judge_verdicts"] if dropout is not None and dropout.share > 0 else None
    stats.failed_requests, stats.request_seconds = tally.failed, tally.mean_seconds
    if on_batch is not None:
        on_batch(stats)
    if log_metric is not None:
        for name, value in {**stats.metrics(), **endpoint_metrics(grader.client)}.items():
            log_metric(name, value)
        if dropout is not None and dropout.share > 0:  # per completion (the batch's total of judge verdicts saved
            # is summed over the processes by rurl train: BatchStats.dropped_verdicts)
            log_metric("rubric/dropped_criteria", dropped["criteria"] / len(items))
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
                for g in graded
            ],
        )
        log_extra("rubric_flag", [(g.integrity_flag or "") if g else "" for g in graded])
    return rewards


def verdict_rows(graded: list, rewards: list[float | None], undecided: str, undecided_penalty: str) -> list:
    """Per completion: None when unscored; "floor" when it earns the floor whatever its verdicts (the integrity check
    vetoed it, or it holds no answer); else each criterion's (points, credit) in rubric order, credit in [0, 1] (a
    probability verdict's share) and an undecided verdict as grading scores it (grading/scores.py): a positive
    criterion unmet or left out (None) as `undecided` says, a penalty met or unmet as `undecided_penalty` says (under
    "unscored" the completion has no score: None)."""
    rows: list = []
    for g, reward in zip(graded, rewards):
        if g is None or reward is None:
            rows.append(None)
        elif g.integrity_flag is not None or g.no_answer is not None:
            rows.append("floor")
        else:
            credits = [(v.points, v.credit) for v in g.verdicts if v.source != "none"]
            rows.append([(p, _credit(p, c, undecided, undecided_penalty)) for p, c in credits])
    return rows


def _credit(points: int, credit: float | bool | None, undecided: str, undecided_penalty: str) -> float | None:
    if credit is not None:
        return float(credit)
    if points < 0:
        return {"met": 1.0, "unmet": 0.0}.get(undecided_penalty)
    return 0.0 if undecided == "unmet" else None


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


@dataclass
class BatchStats:
    """What one reward call saw: completions, unscored ones, verdicts and their pass rates, judge time and calls."""

    completions: int
    unscored: int
    flagged: int
    verdicts: int
    failed_verdicts: int
    seconds: float
    """From the batch's first judge call to its last answer (after its turn, when batches queue)."""
    judge_calls: int
    """The batch's own requests answered (cache hits, and answers shared with an identical request in flight, are
    no calls)."""
    failed_requests: int = 0
    """The batch's own requests that failed or came back invalid (each re-ask after an invalid body counted; the
    transport's own resends after a 429 or a 5xx are inside one request)."""
    request_seconds: float = 0.0
    """Mean seconds per request of the batch's own, from asking the endpoint pool to the answer (waiting behind the
    client's concurrency and the transport's resends included)."""
    error: str | None = None
    """Why nothing of the batch could be asked (a setting, such as a missing API key): the run stops on it."""
    timed_out: int = 0
    """Completions not judged before the reward's deadline (counted in unscored too)."""
    no_answer: int = 0
    """Completions whose reasoning never closed: the floor score, no judge call."""
    noted: int = 0
    """Completions the integrity check noted (grading talk) without vetoing: their reward is the judge's."""
    reasoning_length: float = 0.0
    answer_length: float = 0.0
    """Mean lengths of the reasoning and of the answer (tokens, or characters without a tokenizer)."""
    pass_rates: dict[str, float] = field(default_factory=dict)
    """criteria_pass_rate overall, and per tag (`tag/axis:accuracy`) and per category (`category/Essential`)."""
    mean_length: float = 0.0
    length_reward_corr: float | None = None
    """Pearson correlation of reward and completion length over the scored completions: the verbosity signal."""
    criteria: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per criterion (its text): (times met, times decided) in this batch; the run adds them up into the table of
    its hardest and easiest criteria."""
    answers: list[tuple[str, dict[str, bool]]] = field(default_factory=list)
    """Per judged completion: its group (the prompt) and its decided verdicts by criterion, for the share of
    criteria every completion of a group meets (saturated) or none does (dead), over the processes."""
    penalties: set[str] = field(default_factory=set)
    """The criteria (texts) with negative points among the batch's verdicts: one that no completion of a group
    triggers is a guard-rail at work, counted apart from dead criteria."""
    rows: list = field(default_factory=list)
    """Per completion, in the batch's order, what criterion-level advantages are computed from (`verdict_rows`)."""
    dropped_verdicts: int | None = None
    """Judge verdicts rubric dropout left out (never asked); None without rubric dropout."""

    def metrics(self) -> dict[str, float]:
        out = {
            "rubric/judge_failure_rate": self.failed_verdicts / self.verdicts if self.verdicts else 0.0,
            "rubric/unscored_rate": self.unscored / self.completions if self.completions else 0.0,
            "rubric/integrity_flag_rate": self.flagged / self.completions if self.completions else 0.0,
            "rubric/timed_out_rate": self.timed_out / self.completions if self.completions else 0.0,
            "rubric/no_answer_rate": self.no_answer / self.completions if self.completions else 0.0,
            "rubric/integrity_note_rate": self.noted / self.completions if self.completions else 0.0,
            "rubric/reasoning_length": self.reasoning_length,
            "rubric/answer_length": self.answer_length,
            "rubric/judge_latency_s": self.seconds,
            "rubric/judge_calls": float(self.judge_calls),
            "rubric/judge_failed_requests": float(self.failed_requests),
            "rubric/judge_request_s": self.request_seconds,
            "rubric/completion_length": self.mean_length,
            **{f"rubric/{name}": rate for name, rate in self.pass_rates.items()},
        }
        if self.length_reward_corr is not None:
            out["rubric/length_reward_corr"] = self.length_reward_corr
        return out


def batch_stats(
    graded: list,
    rubrics: list[Rubric],
    rewards: list[float | None],
    lengths: list[int],
    seconds: float,
    judge_calls: int,
    parts: list[tuple[int, int]] | None = None,
    groups: list[str] | None = None,
) -> BatchStats:
    """Pure: the statistics of one graded batch (verdicts read against their rubric's criteria for categories);
    `graded` holds None for a completion not judged before the deadline; `parts`: each completion's (reasoning,
    answer) lengths."""
    decided: dict[str, list[bool]] = defaultdict(list)
    criteria: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    verdicts = failed = 0
    answers = []
    for i, (g, rubric) in enumerate(zip(graded, rubrics)):
        if g is None:  # not judged before the deadline
            continue
        if groups is not None:
            answers.append((groups[i], {v.criterion: v.met for v in g.verdicts if v.met is not None}))
        by_text = {c.text: c for c in rubric.criteria}
        for v in g.verdicts:
            if v.source == "none":
                continue
            if v.source != "rule":  # the failure rate counts the judge's decisions, as grade/eval report it
                verdicts += 1
                failed += v.met is None
            if v.met is None:
                continue
            criteria[v.criterion][0] += v.met
            criteria[v.criterion][1] += 1
            category = by_text[v.criterion].category if v.criterion in by_text else None
            for key in (
                "criteria_pass_rate",
                *(f"tag/{t}" for t in v.tags),
                *((f"category/{category}",) if category else ()),
            ):
                decided[key].append(v.met)
    scored = [(r, n) for r, n in zip(rewards, lengths) if r is not None]
    return BatchStats(
        completions=len(graded),
        unscored=sum(r is None for r in rewards),
        flagged=sum(g is not None and g.integrity_flag is not None for g in graded),
        verdicts=verdicts,
        failed_verdicts=failed,
        seconds=seconds,
        judge_calls=judge_calls,
        timed_out=sum(g is None for g in graded),
        criteria={text: (met, total) for text, (met, total) in criteria.items()},
        answers=answers,
        penalties={v.criterion for g in graded if g is not None for v in g.verdicts if v.points < 0},
        pass_rates={key: sum(values) / len(values) for key, values in decided.items()},
        mean_length=sum(lengths) / len(lengths) if lengths else 0.0,
        no_answer=sum(g is not None and g.no_answer is not None for g in graded),
        noted=sum(g is not None and g.integrity_flag is None and bool(g.integrity_note) for g in graded),
        reasoning_length=sum(r for r, _ in parts) / len(parts) if parts else 0.0,
        answer_length=sum(a for _, a in parts) / len(parts) if parts else 0.0,
        length_reward_corr=pearson([r for r, _ in scored], [n for _, n in scored]),
    )


def _messages(prompt: Any) -> list[dict[str, str]]:
    """TRL prompts are a string or a list of chat messages."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


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
