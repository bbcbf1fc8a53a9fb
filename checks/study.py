"""A judge-agreement study: two judges (or a judge and physicians' labels) on the same (conversation, response,
rubric) items, through the one client and the grader, paired criterion by criterion and example by example.

A judge (`judge_spec`) is the judge role of a `rubricrl grade --config` file plus overrides; without a file, the
embedded model, per_criterion; temperature 0 unless set. Both judges are roles (`judge_a`, `judge_b`) of one client,
with one concurrency bound and one response cache, which keys on model, messages and sampling parameters: two judges
that differ in none of them are one judge. Criteria both sides decided by the same rule check (grading/rules.py)
agree by construction, so they are counted apart, outside the agreement (checks/agreement.py).
"""

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from checks.agreement import DEFAULT_SAMPLES, AgreementResult, Met, Pair, compare
from checks.metaeval import MetaEvalUnit
from grading.dataset import load_responses, load_rubric_rows
from grading.grader import EXPLICIT_MODES, Graded, GradeItem, Grader, GradingConfig
from grading.rubric import RubricError
from rubricrl.config import ConfigError, dataclass_from_dict, load_yaml
from rubricrl.llm import LLMSession, LLMSettings

DEFAULT_TEMPERATURE = 0.0


@dataclass(frozen=True)
class JudgeSpec:
    name: str
    """"a" or "b"; the judge's role in the shared client is `judge_<name>`."""
    role: dict[str, Any]
    """The role's settings (base_url, model, temperature, ...): `llm.defaults` < `llm.roles.<judge_role>` of its
    config < the overrides."""
    grading: GradingConfig
    llm: LLMSettings
    """Its config's llm section (timeout, cache and concurrency come from here)."""
    source: str

    @property
    def role_name(self) -> str:
        return self.grading.judge_role

    @property
    def explicit(self) -> bool:
        """Gives a verdict per criterion (per_criterion, batched), not one rating per example."""
        return self.grading.mode in EXPLICIT_MODES

    def describe(self) -> str:
        role = self.role
        where = f" at {role['base_url']}" if role.get("base_url") else ""
        temperature = role.get("temperature")
        return (
            f"{role.get('model') or 'embedded model'}{where}, {self.grading.mode}"
            + (f", temperature {temperature:g}" if temperature is not None else "")
            + (f", {self.grading.samples} samples" if self.grading.samples > 1 else "")
            + (f", prompt {self.grading.judge_prompt}" if self.grading.judge_prompt else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "description": self.describe(),
            "role": dict(self.role),
            "grading": asdict(self.grading),
        }


def judge_spec(
    name: str,
    config: str | Path | None = None,
    *,
    base_url: str | None = None,
    model: str | None = None,
    mode: str | None = None,
    temperature: float | None = None,
    samples: int | None = None,
    prompt: str | None = None,
) -> JudgeSpec:
    """A judge from a config file (its `llm:` and `grading:` sections; other keys belong to other commands and are
    skipped) and overrides, which win. Raises ConfigError naming the file and key."""
    file = load_yaml(config) if config else {}
    source = str(config) if config else f"judge {name}"
    llm = dataclass_from_dict(LLMSettings, file.get("llm") or {}, f"{source}: llm")
    grading_values = dict(file.get("grading") or {})
    for key, value in (("mode", mode), ("samples", samples), ("judge_prompt", prompt)):
        if value is not None:
            grading_values[key] = value
    grading = dataclass_from_dict(GradingConfig, grading_values, f"{source}: grading")
    own = llm.roles.get(grading.judge_role) or {}
    if not isinstance(own, dict):
        raise ConfigError(f"{source}: llm.roles.{grading.judge_role} must be a mapping, got {own!r:.100}")
    role = {"temperature": DEFAULT_TEMPERATURE, **llm.role_defaults(), **own}
    for key, value in (("base_url", base_url), ("model", model), ("temperature", temperature)):
        if value is not None:
            role[key] = value
    return JudgeSpec(name, role, replace(grading, judge_role=f"judge_{name}"), llm, source)


def session_settings(judges: Sequence[JudgeSpec], *, concurrency: int | None = None, cache: bool = True) -> LLMSettings:
    """One LLMSettings with each judge as its own role: the one client for all of them."""
    return LLMSettings(
        roles={judge.role_name: dict(judge.role) for judge in judges},
        concurrency=concurrency or min(judge.llm.concurrency for judge in judges),
        timeout=max(judge.llm.timeout for judge in judges),
        cache=cache and all(judge.llm.cache for judge in judges),
    )


def cpu_budgets(judges: Sequence[JudgeSpec]) -> dict[str, int]:
    """max_tokens for the judges that end up on the embedded model without their own (GradingConfig's budgets)."""
    return {name: tokens for judge in judges for name, tokens in judge.grading.cpu_max_tokens().items()}


@dataclass(frozen=True)
class Example:
    """One item both sides grade."""

    id: str
    item: GradeItem
    example_tags: tuple[str, ...] = ()
    extras: tuple[dict[str, Any], ...] = ()
    """Per criterion: more fields for its per-criterion record (a meta-eval row's labels and ids)."""


def rubric_examples(
    rubrics: str | Path,
    responses: str | Path | None = None,
    limit: int | None = None,
) -> list[Example]:
    """The rubric file's rows with the responses to grade: `responses` ({id, response} rows), else each row's
    ideal completion (HealthBench's physician-written one; rows without one are left out); the first `limit`."""
    rows = load_rubric_rows(rubrics)
    if responses is not None:
        pairs = load_responses(responses, set(rows))
    else:
        pairs = [(row.id, row.ideal_completion) for row in rows.values() if row.ideal_completion]
        if not pairs:
            raise RubricError(f"{rubrics}: no row has an ideal completion to grade; give the responses (--responses)")
    examples, seen = [], {}
    for row_id, response in pairs[:limit]:
        seen[row_id] = seen.get(row_id, 0) + 1
        row = rows[row_id]
        example_id = row_id if seen[row_id] == 1 else f"{row_id}#{seen[row_id]}"
        examples.append(
            Example(
                example_id, GradeItem(row.conversation, response, row.rubric, row.reference), row.rubric.example_tags
            )
        )
    return examples


def metaeval_examples(units: Sequence[MetaEvalUnit], points: int = 1) -> list[Example]:
    return [
        Example(
            unit.id,
            unit.item(points),
            (),
            tuple(
                {
                    "labels": list(r.labels),
                    "category": r.category,
                    "prompt_id": r.prompt_id,
                    "completion_id": r.completion_id,
                    "row": r.where,
                }
                for r in unit.rows
            ),
        )
        for unit in units
    ]


@dataclass
class Side:
    """What one side (a judge, or the physicians) said about one example."""

    score: float | None
    met: list[Met] | None
    """Per criterion, in rubric order; None when the side gives one rating per example."""
    explanations: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    """Per criterion: "judge", "rule", "none" (not graded: integrity flag) or "human"."""


def judge_side(graded: Graded, judge: JudgeSpec) -> Side:
    if not judge.explicit:
        return Side(graded.score, None)
    verdicts = graded.verdicts
    return Side(
        graded.score, [v.met for v in verdicts], [v.explanation for v in verdicts], [v.source for v in verdicts]
    )


def human_side(unit: MetaEvalUnit, points: int = 1, min_coverage: float = 0.8) -> Side:
    return Side(
        unit.human_score(points, min_coverage),
        unit.human_verdicts,
        [f"physicians: {list(r.labels)}" for r in unit.rows],
        ["human"] * len(unit.rows),
    )


async def grade_with_judges(session: LLMSession, judges: Sequence[JudgeSpec], items: list[GradeItem]) -> dict[str, Any]:
    """Every item graded by every judge, concurrently, through one client: {"graded": {name: [Graded]}, "usage":
    {name: calls and tokens}, "metadata": {name: Grader.metadata}}."""
    async with session.client() as client:
        graders = [Grader(client, judge.grading) for judge in judges]
        results = await asyncio.gather(
            *(grader.grade_many(items, progress=f"judge {judge.name}") for grader, judge in zip(graders, judges))
        )
        return {
            "graded": {judge.name: graded for judge, graded in zip(judges, results)},
            "usage": {judge.name: asdict(client.usage[judge.role_name]) for judge in judges},
            "metadata": {judge.name: grader.metadata for grader, judge in zip(graders, judges)},
        }


@dataclass
class Comparison:
    criteria: list[dict[str, Any]] | None
    """Per criterion: both verdicts and explanations (None when a side gives no verdicts per criterion)."""
    examples: list[dict[str, Any]]
    """Per example: both scores."""
    agreement: AgreementResult
    rule_decided: int
    """Criteria both sides decided by the same rule check: left out of the agreement."""


def compare_sides(
    examples: Sequence[Example],
    a: Sequence[Side],
    b: Sequence[Side],
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> Comparison:
    if not len(examples) == len(a) == len(b):
        raise ValueError(f"{len(examples)} examples but {len(a)} and {len(b)} sides")
    per_example = [
        {
            "id": e.id,
            "score_a": x.score,
            "score_b": y.score,
            "criteria": len(e.item.rubric.criteria) if e.item.rubric else 0,
        }
        for e, x, y in zip(examples, a, b)
    ]
    scores = [(x.score, y.score) for x, y in zip(a, b)]
    if any(x.met is None for x in a) or any(y.met is None for y in b):
        return Comparison(None, per_example, compare(None, scores, samples=samples, seed=seed), 0)
    records, pairs, rule_decided = [], [], 0
    for example, x, y in zip(examples, a, b):
        for j, criterion in enumerate(example.item.rubric.criteria):
            record = {
                "id": example.id,
                "criterion": criterion.text,
                "points": criterion.points,
                "tags": list(criterion.tags),
                "example_tags": list(example.example_tags),
                "a": x.met[j],
                "b": y.met[j],
                "agree": None if x.met[j] is None or y.met[j] is None else x.met[j] == y.met[j],
                "a_source": x.sources[j],
                "b_source": y.sources[j],
                "a_explanation": x.explanations[j],
                "b_explanation": y.explanations[j],
                **(example.extras[j] if example.extras else {}),
            }
            records.append(record)
            if x.sources[j] == y.sources[j] == "rule":
                rule_decided += 1
                continue
            pairs.append(Pair(x.met[j], y.met[j], (*criterion.tags, *example.example_tags), example.id))
    return Comparison(records, per_example, compare(pairs, scores, samples=samples, seed=seed), rule_decided)


def summary_metrics(result: AgreementResult) -> dict[str, float | int]:
    """Flat numbers for a run tracker: criteria/* and scores/* overall, tag/<tag>/* per tag (None left out)."""
    out: dict[str, Any] = {}
    if result.criteria is not None:
        for scope, stats in [("criteria", result.criteria), *((f"tag/{t}", s) for t, s in result.by_tag.items())]:
            out.update(
                {
                    f"{scope}/agreement": stats.agreement,
                    f"{scope}/kappa": stats.kappa,
                    f"{scope}/kappa_bootstrap_std": stats.bootstrap.get("kappa"),
                    f"{scope}/macro_f1": stats.macro_f1,
                    f"{scope}/decided": stats.decided,
                    f"{scope}/undecided": stats.undecided,
                }
            )
    s = result.scores
    out.update(
        {
            "scores/spearman": s.spearman,
            "scores/spearman_bootstrap_std": s.bootstrap.get("spearman"),
            "scores/pearson": s.pearson,
            "scores/mean_abs_diff": s.mean_abs_diff,
            "scores/paired": s.paired,
            "scores/mean_a": s.mean_a,
            "scores/mean_b": s.mean_b,
        }
    )
    return {key: value for key, value in out.items() if value is not None}
