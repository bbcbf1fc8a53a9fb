"""One batch of answers graded against their rubrics: the pure grading call that RuRL's reward
(rurl/reward/rubric_reward.py), the reward service (engines/service.py) and `grade`/`eval` (grading/cli.py) make.
In: each answer's conversation, its text as the policy wrote it (reasoning included: the grader keeps it from the
judge) and its rubric; out: each answer's grade and score, its verdict rows, and the batch's statistics
(`BatchStats`: failure, unscored and integrity counts, judge calls and latency, pass rates overall, per tag and
category, reasoning and answer lengths, the reward-length correlation).

A completion that could not be graded scores None, never 0 (a penalty left undecided too, unless
`undecided_penalty` counts it: grading/scores.py). With a deadline (seconds), completions still unjudged that long
after the call score None (counted as timed out). The judge calls, failed requests and latency a batch counts are its
own requests' (rubricrl/llm/calls.py), even while another batch is graded on the same client. A judge whose server is
down scores nothing; a setting the judge cannot be asked with (a missing API key, say) does not raise: nothing is
scored, `BatchStats.error` carries the one-line reason and `GradedBatch.unasked` the error itself (`grade` and
`eval` raise it).
"""

import json
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from grading.grader import Graded, GradeItem, Grader
from grading.rubric import Rubric
from grading.scores import pearson
from rubricrl.errors import UserError
from rubricrl.llm import EndpointUnreachable
from rubricrl.llm.calls import tallying_requests
from rubricrl.llm.reasoning import split_reasoning


@dataclass
class GradedBatch:
    """A graded batch: per answer its grade (None: not judged before the deadline) and its score (None: unscored;
    any penalty already taken off), and the batch's statistics with its verdict rows. `graded` is None when nothing
    could be asked (the judge's server down, or `stats.error`); `unasked` is then why (the error raised)."""

    graded: "list[Graded | None] | None"
    scores: list[float | None]
    stats: "BatchStats"
    unasked: Exception | None = None


async def grade_batch(
    grader: Grader,
    conversations: list[list[dict[str, str]]],
    texts: list[str],
    rubrics: list[Rubric],
    *,
    references: list[str | None] | None = None,
    deadline: float | None = None,
    groups: list[str] | None = None,
    lengths: list[int] | None = None,
    penalties: list[float] | None = None,
    count_tokens: Callable[[str], int] | None = None,
    grade_after: Callable[[], Awaitable[None]] | None = None,
    progress: str | None = None,
) -> GradedBatch:
    """Grade `texts[i]`, the answer to `conversations[i]`, against `rubrics[i]`. `groups` names each answer's group
    (answers to one query: default its conversation), `lengths` each answer's length (default its characters) and
    `penalties` what is taken off its score (an unscored answer stays None); `count_tokens` measures reasoning and
    answer lengths (default characters). `grade_after` is awaited before the first judge call (a schedule that
    starts a batch while an earlier one is still graded: two batches never compete for the judge's concurrency).
    With `progress` (and no deadline), a progress bar so described."""
    if not len(conversations) == len(texts) == len(rubrics):
        raise ValueError(f"{len(conversations)} conversations, {len(texts)} answers, {len(rubrics)} rubrics")
    config = grader.config
    splits = [
        split_reasoning(text, config.reasoning_delimiters, starts_open=config.reasoning_starts_open) for text in texts
    ]
    count = count_tokens or len
    parts = [
        (count(split.reasoning) if split.reasoning else 0, count(split.answer) if split.answer else 0)
        for split in splits
    ]
    items = [
        GradeItem(conversation, text, rubric, references[i] if references else None)
        for i, (conversation, text, rubric) in enumerate(zip(conversations, texts, rubrics))
    ]
    if grade_after is not None:
        await grade_after()
    started = time.monotonic()
    error = unasked = None
    with tallying_requests() as tally:  # this batch's requests, whatever else the client sends meanwhile
        try:  # one per completion, in the items' order; None: not judged before the deadline
            if deadline is None:
                graded = await grader.grade_many(items, progress=progress)
            else:
                graded = await grader.grade_within(items, deadline)
        except EndpointUnreachable as down:  # the judge's server is down: nothing scored (its other calls cancelled)
            graded, unasked = None, down
        except UserError as problem:  # a setting the judge cannot be asked with
            graded, error, unasked = None, str(problem), problem
    if graded is None:
        asked = sum(sum(c.rule is None for c in rubric.criteria) or 1 for rubric in rubrics)  # the judge's share
        stats = BatchStats(
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
        return GradedBatch(None, [None] * len(items), stats, unasked)
    seconds = time.monotonic() - started
    scores = [None if g is None else g.reward for g in graded]
    if penalties is not None:
        scores = [None if s is None else s - p for s, p in zip(scores, penalties)]
    lengths = lengths if lengths is not None else [len(t) for t in texts]
    groups = groups if groups is not None else [json.dumps(c, ensure_ascii=False) for c in conversations]
    stats = batch_stats(graded, rubrics, scores, lengths, seconds, tally.answered, parts, groups=groups)
    stats.rows = verdict_rows(graded, scores, config.undecided_criterion, config.undecided_penalty)
    stats.failed_requests, stats.request_seconds = tally.failed, tally.mean_seconds
    return GradedBatch(graded, scores, stats)


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
    ledger: list = field(default_factory=list)
    """Per completion, in the batch's order, its verdicts against its query's whole rubric for the criterion ledger
    (grading/ledger.py `LedgerAnswer`; None: not judged); filled by the caller that knows the whole rubric."""

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


def as_conversation(prompt: str | list[dict]) -> list[dict[str, str]]:
    """A prompt as the grader reads it: a string is one user turn; of chat messages, each one's role and content."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]
