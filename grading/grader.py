"""Grade (conversation, response, rubric) triples: rule checks in code, the rest by the judge, then scores.

`Grader.grade_many` grades a batch of `GradeItem`s concurrently (the client bounds the concurrency) and grades
identical items once; the response cache makes a repeated batch free. What a graded record holds is enough to
recompute every report without a judge call: verdicts with each criterion's points and tags, example tags,
judge model, mode and the hash of the prompt actually used.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from tqdm import tqdm

from grading import judge
from grading.integrity import integrity_flag
from grading.rubric import Rubric
from grading.rules import check_rule
from grading.scores import (DEFAULT_MIN_COVERAGE, UNDECIDED_PENALTY, UndecidedPenalty, explicit_score,
                            training_reward)  # fmt: skip
from rubricrl.aio import gather_or_cancel
from rubricrl.config import ConfigError
from rubricrl.llm import LLMClient
from rubricrl.prompts import Prompt

Mode = Literal["per_criterion", "batched", "implicit", "likert", "reference_likert"]
MODES: tuple[str, ...] = Mode.__args__


@dataclass
class GradingConfig:
    config_section: ClassVar[str] = "grading"

    mode: Mode = "per_criterion"
    """per_criterion (one judge call per criterion), batched (all criteria per call, chunked), implicit (one
    1-10 rating against the rubric), likert / reference_likert (one rating without a rubric, with a reference)."""
    judge_role: str = "judge"
    """The role (llm.roles) that judges."""
    samples: int = 1
    """Judge samples per verdict, majority vote (self-consistency); odd numbers avoid ties."""
    chunk_size: int = 16
    """batched mode: criteria per judge call."""
    min_coverage: float = DEFAULT_MIN_COVERAGE
    """Share of criteria that must have a verdict for the score to be defined (else it is None)."""
    undecided_penalty: UndecidedPenalty = "unscored"
    """A penalty without a verdict: unscored (the score is None; left out, it could only raise the score), or
    met (counted as met: a lower bound of the true score)."""
    clip_reward: bool = True
    """Reward = explicit score clipped to [0, 1]; False passes penalised scores below 0 through."""
    integrity_check: bool = True
    """Flag responses addressed to the grader (grading/integrity.py): no judge call, score and reward 0."""
    judge_prompt: str | None = None
    """A prompt file replacing the mode's default judge prompt (grading/prompts/); its placeholders must be
    those of the default."""
    max_failure_rate: float = 0.1
    """`grade` and `eval`: exit 1 (after writing what was graded) when more than this share of judge decisions
    (verdicts, or ratings) failed, or of policy calls. The client has already retried transient errors, so what
    still fails is mostly systematic (endpoint, model, max_tokens); past a tenth, scores rest on the criteria the
    judge manages and are biased, while min_coverage (0.8) still scores most examples and hides it. 1: never."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"grading mode {self.mode!r} is not one of {list(MODES)}")
        if self.samples < 1 or self.chunk_size < 1:
            raise ValueError("samples and chunk_size must be at least 1")
        if not 0.0 <= self.min_coverage <= 1.0:
            raise ValueError(f"min_coverage must be within [0, 1], got {self.min_coverage}")
        if not 0.0 <= self.max_failure_rate <= 1.0:
            raise ValueError(f"max_failure_rate must be within [0, 1], got {self.max_failure_rate}")
        if self.undecided_penalty not in UNDECIDED_PENALTY:
            raise ValueError(f"undecided_penalty {self.undecided_penalty!r} is not one of {list(UNDECIDED_PENALTY)}")
        judge_prompt(self)  # a missing file or wrong placeholders: said now, before any server starts or call is paid

    def cpu_max_tokens(self) -> dict[str, int]:
        """max_tokens for a judge on the embedded model on a CPU that sets none: room for a 300-character
        explanation and the verdict (batched: one per criterion of a chunk)."""
        return {self.judge_role: min(2048, 120 * self.chunk_size) if self.mode == "batched" else 400}


@dataclass(frozen=True)
class GradeItem:
    """One response to grade: what the judge sees (conversation, response) and what it grades against."""

    conversation: list[dict[str, str]]
    response: str
    rubric: Rubric | None
    """None only in the likert modes, which grade without a rubric."""
    reference: str | None = None
    """A reference answer: used by reference_likert only."""


@dataclass
class Graded:
    score: float | None
    """Explicit modes: Σ met / Σ positive points over decided verdicts (unclipped); rating modes: normalized."""
    reward: float | None
    verdicts: list[judge.Verdict] = field(default_factory=list)
    rating: float | None = None
    """Rating modes: the judge's mean 1-10 rating."""
    explanation: str = ""
    integrity_flag: str | None = None
    judge_failures: int = 0

    @property
    def decided(self) -> int:
        return sum(v.met is not None for v in self.verdicts)

    def to_record(self, example_tags: tuple[str, ...] | list[str], **fields: Any) -> dict[str, Any]:
        """A graded record: `fields` (id, response, judge metadata, ...) plus all a report is recomputed from."""
        return {**fields, "score": self.score, "reward": self.reward, "rating": self.rating,
                "verdicts": [v.to_dict() for v in self.verdicts], "example_tags": list(example_tags),
                "integrity_flag": self.integrity_flag, "explanation": self.explanation,
                "judge_failures": self.judge_failures}  # fmt: skip


class Grader:
    def __init__(self, client: LLMClient, config: GradingConfig | None = None):
        self.client = client
        self.config = config or GradingConfig()
        self.prompt = judge_prompt(self.config)
        """The prompt the judge renders: the mode's default or `config.judge_prompt`."""

    @property
    def metadata(self) -> dict[str, Any]:
        """What produced a grade: recorded with every graded record."""
        config = self.config
        role = self.client.roles[config.judge_role]
        return {"judge_model": role.model, "mode": config.mode, "samples": config.samples,
                "prompt": self.prompt.name, "prompt_sha256": self.prompt.sha256, "system_sha256": judge.SYSTEM.sha256,
                "min_coverage": config.min_coverage, "undecided_penalty": config.undecided_penalty}  # fmt: skip

    async def grade(
        self, conversation: list[dict[str, str]], response: str, rubric: Rubric | None, reference: str | None = None
    ) -> Graded:
        config = self.config
        if config.integrity_check and (flag := integrity_flag(response, rubric)):
            not_graded = [judge.Verdict.of(c, None, "not graded: integrity flag", "none")
                          for c in (rubric.criteria if rubric else ())]  # fmt: skip
            floor = self._lowest_score(rubric)
            return Graded(floor, floor, not_graded, integrity_flag=flag)
        if config.mode in ("implicit", "likert", "reference_likert"):
            return await self._rate(conversation, response, rubric, reference)
        return await self._explicit(conversation, response, rubric)

    def _lowest_score(self, rubric: Rubric | None) -> float:
        """What a flagged response gets: 0, or with unclipped rewards the lowest score the rubric allows (every
        penalty, nothing earned), so that addressing the grader never pays better than an honest bad answer."""
        if self.config.clip_reward or rubric is None or rubric.positive_points == 0:
            return 0.0
        return sum(c.points for c in rubric.criteria if c.points < 0) / rubric.positive_points

    async def _explicit(self, conversation, response, rubric: Rubric | None) -> Graded:
        config, client, role, prompt = self.config, self.client, self.config.judge_role, self.prompt
        if rubric is None:
            raise ValueError(f"{config.mode} grading needs a rubric")
        by_rule = {i: c for i, c in enumerate(rubric.criteria) if c.rule is not None}
        by_judge = [(i, c) for i, c in enumerate(rubric.criteria) if c.rule is None]
        verdicts: dict[int, judge.Verdict] = {
            i: judge.Verdict.of(c, check_rule(c.rule, response), f"rule {c.rule['type']}", "rule")
            for i, c in by_rule.items()
        }
        if config.mode == "per_criterion":
            judged = await gather_or_cancel(
                judge.judge_per_criterion(client, role, prompt, conversation, response, c, config.samples)
                for _, c in by_judge
            )  # fmt: skip
        else:
            chunks = [by_judge[k : k + config.chunk_size] for k in range(0, len(by_judge), config.chunk_size)]
            results = await gather_or_cancel(judge.judge_batched(client, role, prompt, conversation, response,
                                                                 [c for _, c in chunk], config.samples)
                                             for chunk in chunks)  # fmt: skip
            judged = [v for chunk in results for v in chunk]
        verdicts.update({i: v for (i, _), v in zip(by_judge, judged)})
        ordered = [verdicts[i] for i in range(len(rubric.criteria))]
        score = explicit_score([v.points for v in ordered], [v.met for v in ordered], min_coverage=config.min_coverage,
                               undecided_penalty=config.undecided_penalty).score  # fmt: skip
        failures = sum(v.met is None for v in ordered)
        return Graded(score, training_reward(score, clip=config.clip_reward), ordered, judge_failures=failures)

    async def _rate(self, conversation, response, rubric: Rubric | None, reference: str | None) -> Graded:
        config = self.config
        if config.mode == "implicit" and rubric is None:
            raise ValueError("implicit grading needs a rubric")
        if config.mode == "reference_likert" and not reference:
            raise ValueError("reference_likert grading needs a reference answer")
        rating = await judge.judge_rating(
            self.client, config.judge_role, self.prompt, conversation, response,
            criteria=list(rubric.criteria) if config.mode == "implicit" else None,
            reference=reference if config.mode == "reference_likert" else None, samples=config.samples,
        )  # fmt: skip
        score = rating.normalized
        return Graded(score, score, rating=rating.value, explanation=rating.explanation,
                      judge_failures=int(rating.value is None))  # fmt: skip

    async def grade_many(self, items: list[GradeItem], *, progress: str | None = None) -> list[Graded]:
        """Grade items concurrently, identical items once (the same Graded object is returned for each), in the
        items' order; with `progress`, show a progress bar so described. The first error cancels the calls still
        running (a judge found unreachable fails the whole batch at once, instead of leaving its calls to time out)."""
        return await self._grade_unique(items, progress=progress)

    async def grade_within(self, items: list[GradeItem], deadline: float) -> list["Graded | None"]:
        """As grade_many, but an item still ungraded `deadline` seconds after the call is None (its calls
        cancelled): a training step waits at most that long for its judge."""
        return await self._grade_unique(items, deadline=deadline)

    async def _grade_unique(self, items: list[GradeItem], *, progress: str | None = None,
                            deadline: float | None = None) -> list:  # fmt: skip
        unique: dict[Any, GradeItem] = {}
        keys = []
        for item in items:
            key = (_freeze(item.conversation), item.response, item.rubric, item.reference)
            unique.setdefault(key, item)
            keys.append(key)
        jobs = (self.grade(i.conversation, i.response, i.rubric, i.reference) for i in unique.values())
        with tqdm(total=len(unique), desc=progress, file=sys.stderr, disable=not progress) as bar:
            results = await gather_or_cancel(jobs, timeout=deadline, on_done=bar.update)
        by_key = dict(zip(unique, results))
        return [by_key[key] for key in keys]


def _freeze(messages: list[dict[str, str]]) -> tuple:
    return tuple((m["role"], m["content"]) for m in messages)


def judge_prompt(config: GradingConfig) -> Prompt:
    """The mode's default judge prompt, or the file `config.judge_prompt` names. Its placeholders must be exactly
    the default's: rendering is strict, so a difference would otherwise fail (or drop a value) on every call."""
    default = judge.PROMPT_FOR_MODE[config.mode]
    if config.judge_prompt is None:
        return default
    path = Path(config.judge_prompt)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read judge prompt {path}: {getattr(error, 'strerror', None) or error}") from error
    prompt = Prompt(str(path), text.strip() + "\n")  # normalised as load_prompt does: equal files, equal hashes
    missing, unknown = default.placeholders - prompt.placeholders, prompt.placeholders - default.placeholders
    if missing or unknown:
        raise ConfigError(
            f"judge prompt {path}: its placeholders must be those of the {config.mode} prompt ({default.name}: "
            f"{sorted(default.placeholders)}); missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    return prompt
