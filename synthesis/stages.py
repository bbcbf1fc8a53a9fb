"""The stages of Coarse-to-Fine rubric synthesis, one function each; the pipeline runs them per query.
1. reference: a model writes a reference answer (response grounding);
2. contrast: two roles write responses A and B (with contrast_pool: the two best of a pool, graded after stage 4);
3. candidates: N rubric roles each write a principle-guided rubric grounded in the reference;
4. aggregate: the N candidates merged conservatively (one candidate passes through, no call);
5. evolve: stricter criteria added that would separate an excellent answer from A and B.
Single-pass Rubrics-as-Rewards is stages 1 and 3 with categories (config.py). Malformed output is resampled by the
client (bounded); what still fails raises LLMError. Rubric writers see answers without `<think>…</think>`
(rubricrl/llm/reasoning.py); one cut off while reasoning fails its query.
"""

import math
from pathlib import Path
from typing import Any

from grading.grader import Grader
from grading.rubric import rubric_from_items
from grading.select import candidates, sample_and_grade, select
from rubricrl.llm import LLMClient
from rubricrl.llm.reasoning import answer_of
from rubricrl.prompts import format_conversation, load_prompt
from synthesis.config import SynthesisConfig
from synthesis.criteria import criteria_schema, export, listing, require_usable, usable, weight_rules

PROMPTS = Path(__file__).parent / "prompts"
REFERENCE = load_prompt(PROMPTS / "reference.txt")
RESPONSE = load_prompt(PROMPTS / "response.txt")
RUBRIC = load_prompt(PROMPTS / "rubric.txt")
AGGREGATE = load_prompt(PROMPTS / "aggregate.txt")
EVOLVE = load_prompt(PROMPTS / "evolve.txt")
ALL_PROMPTS = (REFERENCE, RESPONSE, RUBRIC, AGGREGATE, EVOLVE)
EVOLVE_ONLINE = {
    situation: load_prompt(PROMPTS / f"evolve_{situation}.txt") for situation in ("saturated", "failed", "mixed")
}
"""RuRL's evolver (rurl/evolving/evolution.py), by the situation of the group it reads: answers all scored alike (stricter
criteria), all scored nothing (criteria for partial progress), or scored apart (discriminating criteria)."""

Criteria = list[dict[str, Any]]


async def reference(client: LLMClient, messages: list[dict]) -> str:
    result = await client.chat("reference", REFERENCE.render(conversation=format_conversation(messages)))
    return answer_of(result.text, what=f"the reference answer ({result.model})")


async def contrast(client: LLMClient, messages: list[dict]) -> list[str]:
    prompt = RESPONSE.render(conversation=format_conversation(messages))
    return [
        answer_of(answer.text, what=f"contrast response {answer.role} ({answer.model})")
        for answer in await client.chat_each(["response_a", "response_b"], prompt)
    ]


async def contrast_pool(
    client: LLMClient, grader: Grader, config: SynthesisConfig, messages: list[dict], merged: Criteria
) -> tuple[list[str], list[float | None]]:
    """A and B by consensus: a pool of responses graded against the merged rubric, the two best first (ties: the
    shorter), two different texts where the pool has them. Where fewer than two could be scored, unscored responses
    fill in, in sampling order, and flagged ones or ones without an answer last."""
    rubric = rubric_from_items(
        [{"criterion": c["criterion"], "points": c["points"]} for c in export(merged)], "merged rubric"
    )
    answers, graded = await sample_and_grade(client, grader, ["response_a"] * config.contrast_pool, messages, rubric)
    pool = candidates(answers, graded)
    # By score (answers cut off at max_tokens count too: on a CPU budget most are); then unscored, then flagged or
    # without an answer, in sampling order; a text already chosen is not chosen again while another is left.
    ranked = select(pool, threshold=-math.inf, keep=len(pool), truncated_ok=True)
    last = [c for c in pool if c.flagged or c.no_answer]  # no answer to contrast with: only if nothing else is left
    ranked += [c for c in pool if c not in ranked and c not in last] + last
    chosen = [c for i, c in enumerate(ranked) if c.text not in {r.text for r in ranked[:i]}][:2]
    chosen += [c for c in ranked if c not in chosen][: 2 - len(chosen)]
    return [answer_of(c.text, what=f"contrast response {c.index} of the pool") for c in chosen], [
        c.score for c in chosen
    ]


async def rubric_candidates(
    client: LLMClient, config: SynthesisConfig, messages: list[dict], ref: str
) -> list[Criteria]:
    prompt = RUBRIC.render(
        conversation=format_conversation(messages),
        reference=ref,
        min_criteria=str(config.min_criteria),
        max_criteria=str(config.max_criteria),
        weight_rules=weight_rules(config),
        category_field=', "category": "Essential|Important|Optional|Pitfall"' if config.method == "rar" else "",
    )
    schema = criteria_schema(config, config.max_criteria)
    results = await client.chat_each(
        config.rubric_roles, prompt, schema=schema, schema_name="rubric", check=require_usable
    )
    return [[{**c, "stage": "candidate", "source": r.model} for c in usable(r.value["criteria"])] for r in results]


async def aggregate(
    client: LLMClient, config: SynthesisConfig, messages: list[dict], found: list[Criteria]
) -> Criteria:
    if len(found) == 1 or not config.aggregate:  # nothing to merge, or merging off: export deduplicates
        return [c for criteria in found for c in criteria]
    lines = "\n".join(listing(c, label=f"candidate {i + 1}") for i, c in enumerate(found) if c)
    prompt = AGGREGATE.render(
        conversation=format_conversation(messages), candidates=lines, weight_rules=weight_rules(config)
    )
    limit = min(50, sum(len(c) for c in found))
    result = await client.chat(
        "aggregator", prompt, schema=criteria_schema(config, limit), schema_name="rubric", check=require_usable
    )
    return [{**c, "stage": "aggregate", "source": result.model} for c in usable(result.value["criteria"])]


async def evolve(
    client: LLMClient, config: SynthesisConfig, messages: list[dict], merged: Criteria, responses: list[str]
) -> Criteria:
    prompt = EVOLVE.render(
        conversation=format_conversation(messages),
        rubric=listing(merged),
        response_a=responses[0],
        response_b=responses[1],
        max_new=str(config.max_new_criteria),
        weight_rules=weight_rules(config),
    )
    schema = criteria_schema(config, config.max_new_criteria, min_items=0)
    result = await client.chat("evolver", prompt, schema=schema, schema_name="new_criteria")
    return [{**c, "stage": "evolve", "source": result.model} for c in usable(result.value["criteria"])]


async def evolve_group(
    client: LLMClient,
    config: SynthesisConfig,
    messages: list[dict],
    merged: Criteria,
    answers: list[tuple[str, float]],
    situation: str,
) -> Criteria:
    """New criteria for a query from a group of a policy's answers (each as the judge saw it, with its reward), by
    the group's situation (EVOLVE_ONLINE)."""
    responses = "\n\n".join(f"Response {i + 1} (score {score:.2f}):\n{text}" for i, (text, score) in enumerate(answers))
    prompt = EVOLVE_ONLINE[situation].render(
        conversation=format_conversation(messages),
        rubric=listing(merged),
        responses=responses,
        max_new=str(config.max_new_criteria),
        weight_rules=weight_rules(config),
    )
    schema = criteria_schema(config, config.max_new_criteria, min_items=0)
    result = await client.chat("evolver", prompt, schema=schema, schema_name="new_criteria")
    return [{**c, "stage": "evolve", "source": result.model} for c in usable(result.value["criteria"])]
