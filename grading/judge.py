"""LLM judges: per-criterion, batched, implicit (one rating against the rubric) and Likert baselines.

Every judge reads the response quoted between markers carrying a code from the response's own hash: the response
cannot close them (it would have to contain its own hash), and the code being deterministic, identical calls still
hit the cache. Verdicts are read only from the judge's structured output. A call that fails for good (transport, or
output unparsable after bounded resampling) gives `None` verdicts, never False: a judge failure is not a score.

`samples` = k judge samples per call, majority vote per criterion; a tie is undecided (None), so use an odd k.
Ratings (implicit, Likert) average over samples. Verdicts come in three formats (VERDICT_FORMATS): explained (an
explanation, then the verdict), verdict_only (the verdict alone, a few tokens) and probability (one word, yes or no,
whose first-token log-probabilities give P(met); per criterion only). Each judge renders the prompt it is given
(defaults in `PROMPT_FOR_MODE` and `PROMPT_FOR_FORMAT`; the grader may pass one with the same placeholders): no
module state decides what is asked.
"""

import hashlib
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.rubric import Criterion
from rubricrl.config import ConfigError
from rubricrl.errors import UserError
from rubricrl.llm import EndpointUnreachable, LLMClient, LLMError
from rubricrl.prompts import Prompt, format_conversation, load_prompt

# --- HealthBench's layout -----------------------------------------------------------------------------------
# Asking a judge in HealthBench's layout (`grading.judge_layout: healthbench`), to measure a judge exactly as
# HealthBench's grader asks it (simple-evals `healthbench_eval.py`, `GRADER_TEMPLATE`; its meta-evaluation sends the
# same).
#
# One user message, no system message: the template with `<<conversation>>` replaced by the conversation and the answer
# as its last assistant turn (each turn `role: content`, turns separated by a blank line) and `<<rubric_item>>` by the
# criterion's text (the meta-evaluation's rows hold the criterion alone; HealthBench's own eval prefixes its points,
# `[5] ...`, which a template may carry itself). The verdict is read from the answer's JSON `criteria_met`, as
# HealthBench reads it (the structured-output schema asks for the same keys). The template is a file given by path
# (`grading.judge_prompt`): HealthBench's own is the string `GRADER_TEMPLATE` in simple-evals' `healthbench_eval.py`,
# which can be saved to a file as it is.

SLOTS = ("<<conversation>>", "<<rubric_item>>")


@dataclass(frozen=True)
class OneMessagePrompt:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def messages(self, conversation: list[dict[str, str]], response: str, criterion: str) -> list[dict[str, str]]:
        turns = [*conversation, {"role": "assistant", "content": response}]
        convo = "\n\n".join(f"{turn['role']}: {turn['content']}" for turn in turns)
        return [{"role": "user", "content": self.text.replace(SLOTS[0], convo).replace(SLOTS[1], criterion)}]


def load_layout_prompt(path: str | None) -> OneMessagePrompt:
    """The template file, holding both slots; a clear error naming the file otherwise."""
    if path is None:
        raise ConfigError(
            "grading.judge_layout healthbench needs grading.judge_prompt: a template file in HealthBench's layout "
            f"(with {' and '.join(SLOTS)}; HealthBench's own is GRADER_TEMPLATE in simple-evals' healthbench_eval.py)"
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read judge prompt {path}: {getattr(error, 'strerror', None) or error}") from error
    missing = [slot for slot in SLOTS if slot not in text]
    if missing:
        raise ConfigError(f"judge prompt {path}: a healthbench-layout template must hold {' and '.join(missing)}")
    return OneMessagePrompt(str(path), text)


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
VERDICT_FORMATS = ("explained", "verdict_only", "probability")
PROMPT_FOR_FORMAT = {
    ("per_criterion", "verdict_only"): load_prompt(PROMPTS / "judge_criterion_verdict_only.txt"),
    ("batched", "verdict_only"): load_prompt(PROMPTS / "judge_batched_verdict_only.txt"),
    ("per_criterion", "probability"): load_prompt(PROMPTS / "judge_criterion_probability.txt"),
}
"""The default prompt of a mode in a format other than explained (the same placeholders as the mode's)."""


def default_prompt(mode: str, verdict_format: str) -> Prompt:
    """The prompt a mode asks with in a verdict format, unless a judge_prompt file replaces it."""
    return PROMPT_FOR_FORMAT.get((mode, verdict_format)) or PROMPT_FOR_MODE[mode]


def credit(met: bool | None, probability: float | None) -> float | bool | None:
    """What the score counts for a verdict: P(met) where the judge gave one, else met."""
    return met if probability is None else probability


PROBABILITY_REQUEST = {"max_tokens": 1, "logprobs": True, "top_logprobs": 20}
NEITHER = "neither yes nor no"
"""One answer token and its 20 likeliest alternatives (vLLM's default max_logprobs, and OpenAI's limit)."""

# Short enough that the JSON closes well within a judge's max_tokens even in scripts that take a token per
# character: with 600 characters, a small judge repeating itself in Spanish ran out of tokens mid-string.
EXPLANATION = {"type": "string", "maxLength": 300}
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"explanation": EXPLANATION, "criteria_met": {"type": "boolean"}},
    "required": ["explanation", "criteria_met"],
    "additionalProperties": False,
}
VERDICT_ONLY_SCHEMA = {
    "type": "object",
    "properties": {"criteria_met": {"type": "boolean"}},
    "required": ["criteria_met"],
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
    probability: float | None = None
    """The probability format's P(met) (met is P >= 0.5); the score uses it in place of 0/1. None otherwise."""
    mass: float | None = None
    """The probability format's P(yes) + P(no) at the answer's first token: how much of the judge's answer was a
    verdict at all (below grading.probability_min_mass the verdict is undecided). None otherwise."""
    calls: int = 0
    """Requests its question took, retries and re-asks included (grading/asking.py; batched: its chunk's)."""

    @classmethod
    def of(
        cls,
        criterion: Criterion,
        met: bool | None,
        explanation: str,
        source: str,
        probability: float | None = None,
        mass: float | None = None,
    ) -> "Verdict":
        return cls(criterion.text, criterion.points, criterion.tags, met, explanation, source, probability, mass)

    @property
    def credit(self) -> float | bool | None:
        return credit(self.met, self.probability)

    def to_dict(self) -> dict[str, Any]:
        verdict = {
            "criterion": self.criterion,
            "points": self.points,
            "tags": list(self.tags),
            "met": self.met,
            "explanation": self.explanation,
            "source": self.source,
        }
        if self.mass is not None:
            verdict["mass"] = self.mass
        if self.source == "judge":
            verdict["calls"] = self.calls
        return verdict if self.probability is None else {**verdict, "probability": self.probability}


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


FAILED = "judge failed"


def judge_failure(error: Exception) -> str:
    """The explanation recorded for a verdict or rating the judge could not give."""
    return f"{FAILED}: {error}"[:500]


def samples_to_reask(verdict: Verdict, samples: int) -> int | None:
    """How many samples to ask again with for an undecided verdict: as many for a failed call (its unparsable
    answers were dropped, so they are asked afresh; more would only add ways to fail), one more for a tied vote
    (its samples come back from the cache and the new one breaks the tie); None where asking again would replay
    the same answer (a probability answer that was neither yes nor no)."""
    if verdict.met is not None or verdict.probability is not None:
        return None
    if verdict.explanation.startswith(FAILED):
        return samples
    return None if verdict.explanation.startswith(NEITHER) else samples + 1


def majority(votes: list[bool | None]) -> bool | None:
    """The verdict most votes give, undecided votes (None) left out: a tie, or no decided vote, is undecided. One rule
    for a judge's samples (self-consistency), an answer's repeated verdicts in the audit and physicians' labels."""
    decided = Counter(vote for vote in votes if vote is not None)
    if decided[True] == decided[False]:
        return None
    return decided[True] > decided[False]


async def judge_per_criterion(
    client: LLMClient,
    role: str,
    prompt: Prompt,
    conversation: list[dict],
    response: str,
    criterion: Criterion,
    samples: int = 1,
    verdict_format: str = "explained",
    min_mass: float = 0.0,
) -> Verdict:
    """One judge call for one criterion (HealthBench style); `prompt`: CRITERION (or the format's default) or one
    with its placeholders. `min_mass`: the probability format's floor on P(yes) + P(no)."""
    messages = criterion_messages(prompt, conversation, response, criterion)
    schema = VERDICT_SCHEMA if verdict_format == "explained" else VERDICT_ONLY_SCHEMA
    try:
        if verdict_format == "probability":
            return probability_verdict(
                criterion, await client.chat(role, messages, allow_empty=True, **PROBABILITY_REQUEST), min_mass
            )
        result = await client.chat(role, messages, n=samples, schema=schema, schema_name="verdict")
    except EndpointUnreachable:  # the judge's server is down: the command stops, not one verdict
        raise
    except LLMError as error:
        return Verdict.of(criterion, None, judge_failure(error), "judge")
    met = majority([value["criteria_met"] for value in result.parsed])
    return Verdict.of(criterion, met, result.parsed[0].get("explanation", ""), "judge")


def criterion_messages(prompt: Prompt, conversation: list[dict], response: str, criterion: Criterion) -> list[dict]:
    """The judge's messages for one criterion (HealthBench's layout: one user message)."""
    if isinstance(prompt, OneMessagePrompt):
        return prompt.messages(conversation, response, criterion.text)
    return quoted(prompt, conversation, response, points=f"{criterion.points:+d}", criterion=criterion.text)


async def fresh_verdict(
    client: LLMClient,
    role: str,
    prompt: Prompt,
    conversation: list[dict],
    response: str,
    criterion: Criterion,
    index: int,
    verdict_format: str = "explained",
) -> bool | None:
    """The judge's answer for one criterion at sample `index` alone (the samples before it come from the cache):
    a verdict asked afresh, for the judge's self-agreement. None where it failed."""
    schema = VERDICT_SCHEMA if verdict_format == "explained" else VERDICT_ONLY_SCHEMA
    messages = criterion_messages(prompt, conversation, response, criterion)
    try:
        result = await client.chat(role, messages, n=index + 1, schema=schema, schema_name="verdict")
    except EndpointUnreachable:
        raise
    except LLMError:
        return None
    return result.parsed[-1]["criteria_met"]


def probability_verdict(criterion: Criterion, result, min_mass: float = 0.0) -> Verdict:
    """The verdict in a yes-or-no answer's first-token log-probabilities: P(met) = P(yes) / (P(yes) + P(no)), each
    summed over the forms of the word among the likeliest tokens ("Yes", " yes", ...). Neither among them, or the
    two together holding less than `min_mass` of the probability (the judge mostly began some other answer, and a
    ratio of two small numbers would pass for a confident verdict): undecided, with the mass recorded. An endpoint
    that sends no log-probabilities stops the command: every verdict would fail the same."""
    positions = result.top_logprobs[0]
    if not positions:
        raise UserError(
            f"judge role '{result.role}' ({result.model}) sent no logprobs with its answer: verdict_format "
            "probability needs an endpoint that returns them (vLLM, OpenAI chat completions); choose verdict_only "
            "or explained"
        )
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in positions[0].items():
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    if total == 0:
        return Verdict.of(
            criterion, None, f"{NEITHER} among the likeliest answers ({result.text!r})", "judge", mass=0.0
        )
    if total < min_mass:
        said = f"{NEITHER} for most of the probability: yes and no hold {total:.3f} (answer {result.text!r})"
        return Verdict.of(criterion, None, said, "judge", mass=total)
    probability = mass["yes"] / total
    said = f"P(yes) = {probability:.3f} (yes and no hold {total:.3f})"
    return Verdict.of(criterion, probability >= 0.5, said, "judge", probability, total)


def batched_schema(ids: list[str], explained: bool = True) -> dict[str, Any]:
    fields = {"id": {"type": "string", "enum": ids}, **({"explanation": EXPLANATION} if explained else {})}
    item = {
        "type": "object",
        "properties": {**fields, "criteria_met": {"type": "boolean"}},
        "required": [*fields, "criteria_met"],
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
    verdict_format: str = "explained",
) -> list[Verdict]:
    """All given criteria in one call (`prompt`: BATCHED, its verdict_only form, or one with its placeholders): one
    verdict per criterion id, or the call is sampled again (bounded); never padded or truncated. The caller chunks
    long rubrics."""
    ids = [f"c{i + 1}" for i in range(len(criteria))]
    listing = "\n".join(f"{i} ({c.points:+d}): {c.text}" for i, c in zip(ids, criteria))
    messages = quoted(prompt, conversation, response, criteria=listing)
    try:
        result = await client.chat(
            role,
            messages,
            n=samples,
            schema=batched_schema(ids, explained=verdict_format == "explained"),
            schema_name="verdicts",
            check=exactly_these_ids(ids),
        )
    except EndpointUnreachable:  # the judge's server is down: the command stops, not one verdict
        raise
    except LLMError as error:
        return [Verdict.of(c, None, judge_failure(error), "judge") for c in criteria]
    by_id = [{v["id"]: v for v in value["verdicts"]} for value in result.parsed]
    return [
        Verdict.of(c, majority([s[i]["criteria_met"] for s in by_id]), by_id[0][i].get("explanation", ""), "judge")
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
