"""The stages of Coarse-to-Fine rubric synthesis, one function each; the pipeline runs them per query.

1. reference: a model writes a reference answer (response grounding);
2. contrast: two roles write responses A and B;
3. candidates: N rubric roles each write a principle-guided rubric grounded in the reference;
4. aggregate: the N candidates are merged conservatively (one candidate passes through, no call);
5. evolve: stricter criteria are added that would separate an excellent answer from A and B.
The single-pass Rubrics-as-Rewards method is stages 1 and 3 with categories (see config.py).
Malformed model output is sampled again by the client (bounded); what still fails raises LLMError.
"""

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from rubricrl.llm import ChatResult, LLMClient
from rubricrl.prompts import format_conversation, load_prompt
from synthesis.config import SynthesisConfig
from synthesis.criteria import criteria_schema, listing, usable, weight_rules

PROMPTS = Path(__file__).parent / "prompts"
REFERENCE = load_prompt(PROMPTS / "reference.txt")
RESPONSE = load_prompt(PROMPTS / "response.txt")
RUBRIC = load_prompt(PROMPTS / "rubric.txt")
AGGREGATE = load_prompt(PROMPTS / "aggregate.txt")
EVOLVE = load_prompt(PROMPTS / "evolve.txt")
ALL_PROMPTS = (REFERENCE, RESPONSE, RUBRIC, AGGREGATE, EVOLVE)

Criteria = list[dict[str, Any]]


async def reference(client: LLMClient, messages: list[dict]) -> str:
    return (await client.chat("reference", REFERENCE.render(conversation=format_conversation(messages)))).text


async def samples_per_role(client: LLMClient, roles: list[str], prompt: str, **kwargs: Any) -> list[ChatResult]:
    """One answer per role. Roles with the same model and sampling parameters would send the same request, which
    the cache answers once: they share one call with n = their number, and each takes its own sample."""
    groups: dict[str, list[int]] = {}
    for i, role in enumerate(roles):
        spec = client.roles[role]
        groups.setdefault(json.dumps([spec.model, spec.sampling_params()], sort_keys=True), []).append(i)
    results = await asyncio.gather(*(client.chat(roles[members[0]], prompt, n=len(members), **kwargs)
                                     for members in groups.values()))  # fmt: skip
    answers: list[ChatResult] = [None] * len(roles)  # type: ignore[list-item]
    for members, result in zip(groups.values(), results):
        for k, i in enumerate(members):
            answers[i] = replace(result, texts=[result.texts[k]], finish_reasons=[result.finish_reasons[k]],
                                 parsed=result.parsed[k : k + 1], role=roles[i])  # fmt: skip
    return answers


async def contrast(client: LLMClient, messages: list[dict]) -> list[str]:
    prompt = RESPONSE.render(conversation=format_conversation(messages))
    return [answer.text for answer in await samples_per_role(client, ["response_a", "response_b"], prompt)]


async def candidates(client: LLMClient, config: SynthesisConfig, messages: list[dict], ref: str) -> list[Criteria]:
    prompt = RUBRIC.render(
        conversation=format_conversation(messages), reference=ref, min_criteria=str(config.min_criteria),
        max_criteria=str(config.max_criteria), weight_rules=weight_rules(config),
        category_field=', "category": "Essential|Important|Optional|Pitfall"' if config.method == "rar" else "",
    )  # fmt: skip
    schema = criteria_schema(config, config.max_criteria)
    results = await samples_per_role(client, config.rubric_roles, prompt, schema=schema, schema_name="rubric")
    return [[{**c, "stage": "candidate", "source": r.model} for c in usable(r.value["criteria"])] for r in results]


async def aggregate(client: LLMClient, config: SynthesisConfig, messages: list[dict], found: list[Criteria]) -> Criteria:
    if len(found) == 1 or not config.aggregate:  # nothing to merge, or merging off: export deduplicates
        return [c for criteria in found for c in criteria]
    lines = "\n".join(listing(c, label=f"candidate {i + 1}") for i, c in enumerate(found) if c)
    prompt = AGGREGATE.render(conversation=format_conversation(messages), candidates=lines,
                              weight_rules=weight_rules(config))  # fmt: skip
    limit = min(50, sum(len(c) for c in found))
    result = await client.chat("aggregator", prompt, schema=criteria_schema(config, limit), schema_name="rubric")
    return [{**c, "stage": "aggregate", "source": result.model} for c in usable(result.value["criteria"])]


async def evolve(
    client: LLMClient, config: SynthesisConfig, messages: list[dict], merged: Criteria, responses: list[str]
) -> Criteria:
    prompt = EVOLVE.render(conversation=format_conversation(messages), rubric=listing(merged), response_a=responses[0],
                           response_b=responses[1], max_new=str(config.max_new_criteria),
                           weight_rules=weight_rules(config))  # fmt: skip
    schema = criteria_schema(config, config.max_new_criteria, min_items=0)
    result = await client.chat("evolver", prompt, schema=schema, schema_name="new_criteria")
    return [{**c, "stage": "evolve", "source": result.model} for c in usable(result.value["criteria"])]
