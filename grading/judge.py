"""LLM judges: per-criterion, batched, implicit (one rating against the rubric) and Likert baselines.

Every judge reads the response quoted between markers carrying a code from the response's own hash: the response
cannot close them (it would have to contain its own hash), and the code being deterministic, identical calls still
hit the cache. Verdicts are read only from the judge's structured output. A call that fails for good (transport, or
output unparsable after bounded resampling) gives `None` verdicts, never False: a judge failure is not a score.

`samples` = k judge samples per call, majority vote per criterion; a tie is undecided (None), so use an odd k.
Ratings (implicit, Likert) average over samples. Each judge renders the prompt it is given (defaults in
`PROMPT_FOR_MODE`; the grader may pass one with the same placeholders): no module state decides what is asked.
"""

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.rubric import Criterion
from rubricrl.llm import EndpointUnreachable, LLMClient, LLMError
from rubricrl.prompts import Prompt, format_conversation, load_prompt

PROMPTS = Path(__file__).parent / "prompts"
SYSTEM = load_prompt(PROMPTS / "judge_system.txt")
CRITERION = load_prompt(PROMPTS / "judge_criterion.txt")
BATCHED = load_prompt(PROMPTS / "judge_batched.txt")
IMPLICIT = load_prompt(PROMPTS / "judge_implicit.txt")
LIKERT = load_prompt(PROMPTS / "judge_likert.txt")
PROMPT_FOR_MODE = {
    "per_criterion": CRITERION,
    "batched": BATCHED,
    "implicit": IMPLICIT,
    "likert": LIKERT,
    "reference_likert": LIKERT,
}

# Short enough that the JSON closes well within a judge's max_tokens even in scripts that take a token per
# character: with 600 characters, a small judge repeating itself in Spanish ran out of tokens mid-string.
EXPLANATION = {"type": "string", "maxLength": 300}
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"explanation": EXPLANATION, "criteria_met": {"type": "boolean"}},
    "required": ["explanation", "criteria_met"],
    "additionalProperties": False,
}
RATING_SCHEMA = {
    "type": "object",
    "properties": {"explanation": EXPLANATION, "rating": {"type": "integer", "minimum": 1, "maximum": 10}},
    "required": ["explanation", "rating"],
    "additionalProperties": False,
}


@dataclass
class Verdict:
    criterion: str
    points: int
    tags: tuple[str, ...]
    met: bool | None
    """None: no verdict could be obtained (judge failure, tied vote, or not graded)."""
    explanation: str
    source: str
    """"judge", "rule", or "none" (not graded)."""

    @classmethod
    def of(cls, criterion: Criterion, met: bool | None, explanation: str, source: str) -> "Verdict":
        return cls(criterion.text, criterion.points, criterion.tags, met, explanation, source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "criterion": self.criterion,
            "points": self.points,
            "tags": list(self.tags),
            "met": self.met,
            "explanation": self.explanation,
            "source": self.source,
        }


@dataclass
class Rating:
    value: float | None
    """Mean 1-10 rating over the samples; None when the judge failed."""
    explanation: str

    @property
    def normalized(self) -> float | None:
        """(rating - 1) / 9: 1 -> 0.0, 10 -> 1.0 (RaR-Implicit's rating mapped linearly onto [0, 1])."""
        return None if self.value is None else (self.value - 1) / 9


def response_code(response: str) -> str:
    return hashlib.sha256(response.encode()).hexdigest()[:12]


def quoted(template: Prompt, conversation: list[dict[str, str]], response: str, **values: str) -> list[dict[str, str]]:
    """The judge's messages: fixed instructions, then conversation and response (a prefix shared by every
    criterion of the same response, which vLLM's prefix cache serves), then what varies."""
    user = template.render(
        conversation=format_conversation(conversation), response=response, code=response_code(response), **values
    )
    return [{"role": "system", "content": SYSTEM.text}, {"role": "user", "content": user}]


def judge_failure(error: Exception) -> str:
    """The explanation recorded for a verdict or rating the judge could not give."""
    return f"judge failed: {error}"[:500]


def majority(votes: list[bool]) -> bool | None:
    counts = Counter(votes)
    if counts[True] == counts[False]:
        return None
    return counts[True] > counts[False]


async def judge_per_criterion(
    client: LLMClient,
    role: str,
    prompt: Prompt,
    conversation: list[dict],
    response: str,
    criterion: Criterion,
    samples: int = 1,
) -> Verdict:
    """One judge call for one criterion (HealthBench style); `prompt`: CRITERION or one with its placeholders."""
    messages = quoted(prompt, conversation, response, points=f"{criterion.points:+d}", criterion=criterion.text)
    try:
        result = await client.chat(role, messages, n=samples, schema=VERDICT_SCHEMA, schema_name="verdict")
    except EndpointUnreachable:  # the judge's server is down: the command stops, not one verdict
        raise
    except LLMError as error:
        return Verdict.of(criterion, None, judge_failure(error), "judge")
    met = majority([value["criteria_met"] for value in result.parsed])
    return Verdict.of(criterion, met, result.parsed[0]["explanation"], "judge")


def batched_schema(ids: list[str]) -> dict[str, Any]:
    item = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "enum": ids},
            "explanation": EXPLANATION,
            "criteria_met": {"type": "boolean"},
        },
        "required": ["id", "explanation", "criteria_met"],
        "additionalProperties": False,
    }
    verdicts = {"type": "array", "items": item, "minItems": len(ids), "maxItems": len(ids)}
    return {
        "type": "object",
        "properties": {"verdicts": verdicts},
        "required": ["verdicts"],
        "additionalProperties": False,
    }


def exactly_these_ids(ids: list[str]):
    def check(value: dict) -> None:
        got = [v["id"] for v in value["verdicts"]]
        if sorted(got) != sorted(ids):
            missing, extra = sorted(set(ids) - set(got)), sorted(i for i, n in Counter(got).items() if n > 1)
            raise ValueError(f"verdict ids do not match the criteria: missing {missing}, repeated {extra}")

    return check


async def judge_batched(
    client: LLMClient,
    role: str,
    prompt: Prompt,
    conversation: list[dict],
    response: str,
    criteria: list[Criterion],
    samples: int = 1,
) -> list[Verdict]:
    """All given criteria in one call (`prompt`: BATCHED or one with its placeholders): one verdict per criterion
    id, or the call is sampled again (bounded); never padded or truncated. The caller chunks long rubrics."""
    ids = [f"c{i + 1}" for i in range(len(criteria))]
    listing = "\n".join(f"{i} ({c.points:+d}): {c.text}" for i, c in zip(ids, criteria))
    messages = quoted(prompt, conversation, response, criteria=listing)
    try:
        result = await client.chat(
            role, messages, n=samples, schema=batched_schema(ids), schema_name="verdicts", check=exactly_these_ids(ids)
        )
    except EndpointUnreachable:  # the judge's server is down: the command stops, not one verdict
        raise
    except LLMError as error:
        return [Verdict.of(c, None, judge_failure(error), "judge") for c in criteria]
    by_id = [{v["id"]: v for v in value["verdicts"]} for value in result.parsed]
    return [
        Verdict.of(c, majority([sample[i]["criteria_met"] for sample in by_id]), by_id[0][i]["explanation"], "judge")
        for i, c in zip(ids, criteria)
    ]


async def judge_rating(
    client: LLMClient,
    role: str,
    prompt: Prompt,
    conversation: list[dict],
    response: str,
    *,
    criteria: list[Criterion] | None = None,
    reference: str | None = None,
    samples: int = 1,
) -> Rating:
    """One 1-10 rating: against the whole rubric (implicit, when `criteria` is given; `prompt` as IMPLICIT), or
    without a rubric (Simple-Likert), optionally against a reference answer (Reference-Likert; `prompt` as LIKERT)."""
    if criteria is not None:
        listing = "\n".join(f"({c.points:+d}): {c.text}" for c in criteria)
        messages = quoted(prompt, conversation, response, criteria=listing)
    else:
        shown = f"\nA reference answer written by an expert, for comparison:\n{reference}\n" if reference else ""
        messages = quoted(prompt, conversation, response, reference=shown)
    try:
        result = await client.chat(role, messages, n=samples, schema=RATING_SCHEMA, schema_name="rating")
    except EndpointUnreachable:  # the judge's server is down: the command stops, not one verdict
        raise
    except LLMError as error:
        return Rating(None, judge_failure(error))
    ratings = [value["rating"] for value in result.parsed]
    return Rating(sum(ratings) / len(ratings), result.parsed[0]["explanation"])
