"""How the judge is asked for the verdicts of one response in the explicit modes: a call per criterion, or the
criteria in chunks (batched); a criterion left without a verdict asked again (reask_undecided); and every question's
calls counted and bounded (rubricrl/llm/calls.py). A question is a criterion (per_criterion) or a chunk (batched):
the client's own retries inside it (an invalid body, an empty or off-schema answer resampled) and the re-asks all
count towards `max_judge_calls`, so one verdict that never comes costs at most that many calls, said in its record."""

from dataclasses import replace

from grading import judge
from grading.rubric import Criterion
from rubricrl.aio import gather_or_cancel
from rubricrl.llm import LLMClient
from rubricrl.llm.calls import counting_calls
from rubricrl.prompts import Prompt


async def ask_verdicts(
    client: LLMClient, config, prompt: Prompt, conversation, response: str, criteria: list[Criterion]
) -> tuple[list[judge.Verdict], int, int]:
    """(a verdict per criterion, in order, each with the calls its question took; the criteria re-asked; the calls
    made in all). `config`: the GradingConfig."""
    limit = config.max_judge_calls or None
    judged, calls = await _ask(client, config, prompt, conversation, response, criteria, config.samples, limit)
    samples, reasked = [config.samples] * len(criteria), 0
    for _ in range(config.reask_undecided):
        again: dict[int, list[int]] = {}  # samples to ask with -> the criteria asked again with as many
        for k, verdict in enumerate(judged):
            n = judge.samples_to_reask(verdict, samples[k])
            if n is not None and (limit is None or verdict.calls < limit):  # a spent budget ends the verdict
                samples[k] = n
                again.setdefault(n, []).append(k)
        if not again:
            break
        reasked += sum(map(len, again.values()))
        answers = await gather_or_cancel(
            _ask(
                client, config, prompt, conversation, response, [criteria[k] for k in ks], n,
                None if limit is None else min(limit - judged[k].calls for k in ks),
            )
            for n, ks in again.items()
        )  # fmt: skip
        for ks, (answered, spent) in zip(again.values(), answers):
            calls += spent
            for k, verdict in zip(ks, answered):
                judged[k] = replace(verdict, calls=judged[k].calls + verdict.calls)
    return judged, reasked, calls


async def _ask(client, config, prompt, conversation, response, criteria, samples: int, limit: int | None):
    """(the verdicts, the calls made): a question per criterion, or chunks of chunk_size (batched), each within
    `limit` calls; a verdict's `calls` are its question's (batched: its chunk's, shared)."""
    role, asked = config.judge_role, (conversation, response)

    async def per_criterion(criterion: Criterion) -> judge.Verdict:
        with counting_calls(limit) as count:
            verdict = await judge.judge_per_criterion(
                client, role, prompt, *asked, criterion, samples, config.verdict_format, config.probability_min_mass
            )
        return replace(verdict, calls=count.used)

    async def chunked(chunk: list[Criterion]) -> tuple[list[judge.Verdict], int]:
        with counting_calls(limit) as count:
            verdicts = await judge.judge_batched(client, role, prompt, *asked, chunk, samples, config.verdict_format)
        return [replace(v, calls=count.used) for v in verdicts], count.used

    if config.mode == "per_criterion":
        verdicts = await gather_or_cancel(per_criterion(c) for c in criteria)
        return verdicts, sum(v.calls for v in verdicts)
    chunks = [criteria[k : k + config.chunk_size] for k in range(0, len(criteria), config.chunk_size)]
    results = await gather_or_cancel(chunked(chunk) for chunk in chunks)
    return [v for verdicts, _ in results for v in verdicts], sum(spent for _, spent in results)


async def ask_afresh(client: LLMClient, config, prompt: Prompt, conversation, answer: str, criterion: Criterion):
    """One criterion's verdict asked again afresh, for the judge's self-agreement, read on its own: the sample after
    every one its grading could have used (`samples`, and one more per `reask_undecided` round; the response cache
    keeps it, so a rerun asks the same). Asked per criterion (in the batched mode with the per-criterion prompt of
    the verdict format). None where it failed; the probability format has no fresh answer (its one reply is
    deterministic) and is refused by the caller's settings."""
    if config.mode != "per_criterion":
        prompt = judge.default_prompt("per_criterion", config.verdict_format)
    index = config.samples + config.reask_undecided
    return await judge.fresh_verdict(
        client, config.judge_role, prompt, conversation, answer, criterion, index, config.verdict_format
    )
