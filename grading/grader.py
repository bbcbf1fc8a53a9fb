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
from grading.asking import ask_verdicts
from grading.rubric import Rubric
from grading.rules import check_rule
from grading.scores import (
    DEFAULT_MIN_COVERAGE,
    UNDECIDED_CRITERION,
    UNDECIDED_PENALTY,
    UndecidedCriterion,
    UndecidedPenalty,
    explicit_score,
    training_reward,
)
from rubricrl.aio import gather_or_cancel
from rubricrl.config import ConfigError
from rubricrl.llm import LLMClient
from rubricrl.llm.calls import CallCount, counting_calls
from rubricrl.llm.reasoning import DEFAULT_DELIMITERS, split_reasoning
from rubricrl.prompts import Prompt

Mode = Literal["per_criterion", "batched", "implicit", "likert", "reference_likert"]
VerdictFormat = Literal["explained", "verdict_only", "probability"]
MODES: tuple[str, ...] = Mode.__args__
EXPLICIT_MODES = ("per_criterion", "batched")
"""The modes that decide each criterion (a verdict per criterion, weighted); the others rate the whole answer."""


@dataclass
class GradingConfig:
    config_section: ClassVar[str] = "grading"

    mode: Mode = "per_criterion"
    """per_criterion (one judge call per criterion), batched (all criteria per call, chunked), implicit (one
    1-10 rating against the rubric), likert / reference_likert (one rating without a rubric, with a reference)."""
    judge_role: str = "judge"
    """The role (llm.roles) that judges."""
    verdict_format: VerdictFormat = "explained"
    """Explicit modes: explained (an explanation, then the verdict), verdict_only (the verdict alone: ~10 tokens, not
    ~60), or probability (per_criterion: yes or no; the score uses P(met) from the judge's logprobs in place of 0/1;
    needs an endpoint that returns logprobs and a judge that answers without reasoning first)."""
    probability_min_mass: float = 0.5
    """verdict_format probability: the least P(yes) + P(no) at the first token for a verdict (each records it as
    `mass`); below it the judge mostly began another answer: undecided (the undecided rules apply)."""
    samples: int = 1
    """Judge samples per verdict, majority vote (self-consistency); odd numbers avoid ties."""
    chunk_size: int = 16
    """batched mode: criteria per judge call."""
    min_coverage: float = DEFAULT_MIN_COVERAGE
    """Share of criteria that must have a verdict for the score to be defined (else it is None)."""
    undecided_penalty: UndecidedPenalty = "unscored"
    """A penalty without a verdict: unscored (the score is None; left out, it could only raise the score), met
    (counted as met: a lower bound of the true score), or unmet (not applied: simple-evals' count, which pays a
    judge failure on a penalty)."""
    undecided_criterion: UndecidedCriterion = "drop"
    """A positive criterion without a verdict: drop (left out of numerator and denominator: unbiased only if the
    judge fails independently of the answer) or unmet (counted as not met, as simple-evals counts one: a lower
    bound that pays a judge failure nothing; the training presets' choice, since RL learns whatever answers make
    the judge fail more). grading/scores.py has the arithmetic."""
    reask_undecided: int = 0
    """Ask the judge again about a criterion left without a verdict, up to this many times, before the two rules
    above count it: a failed call as it was (its unparsable answers asked afresh), a tied vote with one more
    sample. simple-evals asks until it gets a verdict; `eval` bounds it at 3."""
    max_judge_calls: int = 6
    """The most requests one verdict may cost (batched: one chunk), the client's resamples of invalid answers and
    the re-asks together; the call past it is not made and the verdict stays undecided. 0: no bound."""
    clip_reward: bool = True
    """Reward = explicit score clipped to [0, 1]; False passes penalised scores below 0 through."""
    integrity_check: bool = True
    """Veto what cannot be an answer to the user (grading/integrity.py: a forged verdict, a fake delimiter or
    chat-role token, the rubric copied back, a grading request about this response): no judge call, the
    rubric's lowest score (0 when clipped), `integrity_flag` says why. Ambiguous grading talk is only noted
    (`integrity_note`), the reward unchanged."""
    integrity_judge: bool = False
    """Also ask the judge about each noted response whether it addresses the grader (one more question,
    grading/prompts/integrity_question.txt): a yes vetoes as above. Cost: one judge call (with `samples`
    choices) per noted response; none for the others."""
    judge_prompt: str | None = None
    """A prompt file replacing the mode's default judge prompt (grading/prompts/); its placeholders must be
    those of the default (with judge_layout healthbench: a template in HealthBench's layout)."""
    judge_layout: Literal["rubricrl", "healthbench"] = "rubricrl"
    """rubricrl: a system message and the prompt above. healthbench: HealthBench's grader layout, one user message
    from the judge_prompt template (`<<conversation>>`, `<<rubric_item>>`; grading/judge.py), mode
    per_criterion, verdict read from `criteria_met`: a judge measured as HealthBench measures it."""
    max_failure_rate: float = 0.1
    """`grade` and `eval`: exit 1 (after writing what was graded) when more than this share of judge decisions
    (verdicts, or ratings) failed, or of policy calls. The client has already retried transient errors, so what
    still fails is mostly systematic (endpoint, model, max_tokens); past a tenth, scores rest on the criteria the
    judge manages and are biased, while min_coverage (0.8) still scores most examples and hides it. 1: never."""
    reasoning_delimiters: list[str] = field(default_factory=lambda: list(DEFAULT_DELIMITERS))
    """The two delimiters around a response's reasoning (rubricrl/llm/reasoning.py), removed before any judging: the
    judge, the rule checks and the integrity check see the answer alone, and a response whose reasoning never
    closed (cut off while thinking) has no answer: the floor score (0), recorded as `no_answer`, no judge call.
    [] judges the whole response."""
    reasoning_starts_open: bool = False
    """The policy's chat template opens the reasoning in the prompt (DeepSeek-R1 distills, Qwen3 thinking-2507):
    a response without the closing delimiter is then reasoning that never closed. `rurl train` reads it from the
    policy's template; set it for `grade`, `eval` and `ruft build` on such a policy without a reasoning parser."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"grading mode {self.mode!r} is not one of {list(MODES)}")
        if self.samples < 1 or self.chunk_size < 1:
            raise ValueError("samples and chunk_size must be at least 1")
        if self.verdict_format not in judge.VERDICT_FORMATS:
            raise ValueError(f"verdict_format {self.verdict_format!r} is not one of {list(judge.VERDICT_FORMATS)}")
        if self.verdict_format != "explained" and self.mode not in EXPLICIT_MODES:
            raise ValueError(f"verdict_format {self.verdict_format} is for the explicit modes; {self.mode} rates")
        if self.verdict_format == "probability" and self.mode != "per_criterion":
            raise ValueError("verdict_format probability reads one verdict per call: use mode per_criterion")
        if self.reask_undecided < 0 or self.max_judge_calls < 0:
            raise ValueError("reask_undecided and max_judge_calls must be 0 or more")
        for name in ("min_coverage", "max_failure_rate", "probability_min_mass"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {getattr(self, name)}")
        if self.undecided_penalty not in UNDECIDED_PENALTY:
            raise ValueError(f"undecided_penalty {self.undecided_penalty!r} is not one of {list(UNDECIDED_PENALTY)}")
        if self.undecided_criterion not in UNDECIDED_CRITERION:
            raise ValueError(
                f"undecided_criterion {self.undecided_criterion!r} is not one of {list(UNDECIDED_CRITERION)}"
            )
        if len(self.reasoning_delimiters) not in (0, 2) or any(not d for d in self.reasoning_delimiters):
            got = self.reasoning_delimiters
            raise ValueError(f"reasoning_delimiters must be two non-empty strings (open, close) or [], got {got}")
        if self.judge_layout == "healthbench" and (
            self.mode != "per_criterion" or self.verdict_format == "probability"
        ):
            raise ValueError(
                "judge_layout healthbench asks one criterion per call for a JSON verdict: mode "
                "per_criterion, verdict_format explained or verdict_only"
            )
        judge_prompt(self)  # a missing file or wrong placeholders: said now, before any server starts or call is paid

    def rule(self) -> dict[str, Any]:
        """The scoring rule (grading/scores.py): what turns verdicts into a score, and what reports recompute with."""
        return {
            "min_coverage": self.min_coverage,
            "undecided_penalty": self.undecided_penalty,
            "undecided_criterion": self.undecided_criterion,
        }

    def cpu_max_tokens(self) -> dict[str, int]:
        """max_tokens for the embedded judge on a CPU: a 300-character explanation and the verdict (batched: each)."""
        per_verdict = 120 if self.verdict_format == "explained" else 24
        if self.mode == "batched":
            return {self.judge_role: min(2048, per_verdict * self.chunk_size)}
        return {self.judge_role: 400 if self.verdict_format == "explained" else 64}


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
    """Why the integrity check vetoed the response (no judge call, the floor score); None when it did not."""
    integrity_note: str | None = None
    """Grading talk the check noted without vetoing (the reward is the judge's), or the integrity judge's answer."""
    judge_failures: int = 0
    """Verdicts (or a rating) the judge did not give, after any re-asking."""
    reasked: int = 0
    """Times a criterion was asked again because the judge gave it no verdict (reask_undecided)."""
    judge_calls: int = 0
    """Requests the judge was sent for these verdicts, every retry and re-ask included (answers from the cache are
    none); each verdict's own are its `calls` (grading/asking.py)."""
    no_answer: str | None = None
    """Why the response holds no answer to judge (its reasoning never closed); it has the floor score."""

    @property
    def decided(self) -> int:
        return sum(v.met is not None for v in self.verdicts)

    def to_record(self, example_tags: tuple[str, ...] | list[str], **fields: Any) -> dict[str, Any]:
        """A graded record: `fields` (id, response, judge metadata, ...) plus all a report is recomputed from."""
        return {
            **fields,
            "score": self.score,
            "reward": self.reward,
            "rating": self.rating,
            "verdicts": [v.to_dict() for v in self.verdicts],
            "example_tags": list(example_tags),
            "integrity_flag": self.integrity_flag,
            "integrity_note": self.integrity_note,
            "explanation": self.explanation,
            "judge_failures": self.judge_failures,
            "reasked": self.reasked,
            "judge_calls": self.judge_calls,
            "no_answer": self.no_answer,
        }


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
        return {
            "judge_model": role.model,
            "mode": config.mode,
            "verdict_format": config.verdict_format,
            "samples": config.samples,
            "reask_undecided": config.reask_undecided,
            "prompt": self.prompt.name,
            "prompt_sha256": self.prompt.sha256,
            "system_sha256": judge.SYSTEM.sha256,
            **config.rule(),
        }

    async def grade(
        self, conversation: list[dict[str, str]], response: str, rubric: Rubric | None, reference: str | None = None
    ) -> Graded:
        config = self.config
        split = split_reasoning(response, config.reasoning_delimiters, starts_open=config.reasoning_starts_open)
        if split.answer is None:
            floor = self._lowest_score(rubric)
            reason = f"reasoning never closed ({len(split.reasoning)} characters, cut off while thinking)"
            return Graded(
                floor,
                floor,
                [
                    judge.Verdict.of(c, None, f"not graded: {reason}", "none")
                    for c in (rubric.criteria if rubric else ())
                ],
                no_answer=reason,
            )
        response = split.answer
        from grading import integrity  # ~25 ms of regex compiling: paid where answers are graded, not by `synth`

        found = integrity.check(response, rubric) if config.integrity_check else integrity.Integrity()
        asked_integrity = CallCount()
        if found.note and config.integrity_judge:
            with counting_calls(config.max_judge_calls or None) as asked_integrity:
                asked = await integrity.ask_judge(
                    self.client, config.judge_role, conversation, response, config.samples, config.verdict_format,
                    config.probability_min_mass,
                )  # fmt: skip
            if asked.met:
                found = integrity.Integrity(veto=f"integrity judge: {asked.explanation}"[:300], note=found.note)
            else:
                answer = "no" if asked.met is False else "undecided"  # undecided: a judge failure vetoes nothing
                found = integrity.Integrity(note=f"{found.note}; integrity judge: {answer}")
        if found.veto:
            not_graded = [
                judge.Verdict.of(c, None, "not graded: integrity flag", "none")
                for c in (rubric.criteria if rubric else ())
            ]
            floor = self._lowest_score(rubric)
            return Graded(
                floor, floor, not_graded, integrity_flag=found.veto, integrity_note=found.note,
                judge_calls=asked_integrity.used,
            )  # fmt: skip
        if config.mode not in EXPLICIT_MODES:
            with counting_calls(config.max_judge_calls or None) as rated:  # one rating: one question
                graded = await self._rate(conversation, response, rubric, reference)
            graded.judge_calls = rated.used
        else:
            graded = await self._explicit(conversation, response, rubric)
        graded.integrity_note = found.note
        graded.judge_calls += asked_integrity.used
        return graded

    def _lowest_score(self, rubric: Rubric | None) -> float:
        """What a flagged response, or one without an answer, gets: 0, or with unclipped rewards the lowest score
        the rubric allows (every penalty, nothing earned), so that neither pays better than an honest bad answer."""
        if self.config.clip_reward or rubric is None or rubric.positive_points == 0:
            return 0.0
        return sum(c.points for c in rubric.criteria if c.points < 0) / rubric.positive_points

    async def _explicit(self, conversation, response, rubric: Rubric | None) -> Graded:
        config = self.config
        if rubric is None:
            raise ValueError(f"{config.mode} grading needs a rubric")
        by_rule = {i: c for i, c in enumerate(rubric.criteria) if c.rule is not None}
        by_judge = [(i, c) for i, c in enumerate(rubric.criteria) if c.rule is None]
        verdicts: dict[int, judge.Verdict] = {
            i: judge.Verdict.of(c, check_rule(c.rule, response), f"rule {c.rule['type']}", "rule")
            for i, c in by_rule.items()
        }
        criteria = [c for _, c in by_judge]
        judged, reasked, calls = await ask_verdicts(self.client, config, self.prompt, conversation, response, criteria)
        verdicts.update({i: v for (i, _), v in zip(by_judge, judged)})
        ordered = [verdicts[i] for i in range(len(rubric.criteria))]
        score = explicit_score([v.points for v in ordered], [v.credit for v in ordered], **config.rule()).score
        failures = sum(v.met is None for v in ordered)
        reward = training_reward(score, clip=config.clip_reward)
        return Graded(score, reward, ordered, judge_failures=failures, reasked=reasked, judge_calls=calls)

    async def _rate(self, conversation, response, rubric: Rubric | None, reference: str | None) -> Graded:
        config = self.config
        if config.mode == "implicit" and rubric is None:
            raise ValueError("implicit grading needs a rubric")
        if config.mode == "reference_likert" and not reference:
            raise ValueError("reference_likert grading needs a reference answer")
        rating = await judge.judge_rating(
            self.client,
            config.judge_role,
            self.prompt,
            conversation,
            response,
            criteria=list(rubric.criteria) if config.mode == "implicit" else None,
            reference=reference if config.mode == "reference_likert" else None,
            samples=config.samples,
        )
        score = rating.normalized
        return Graded(
            score, score, rating=rating.value, explanation=rating.explanation, judge_failures=int(rating.value is None)
        )

    async def grade_many(self, items: list[GradeItem], *, progress: str | None = None) -> list[Graded]:
        """Grade items concurrently, in the items' order: identical items once (the same Graded object is returned for
        each), or, with the client's cache off, each on its own (a sampling judge's repeats are draws, not copies).
        With `progress`, show a progress bar so described. The first error cancels the calls still running (a judge
        found unreachable fails the whole batch at once, instead of leaving its calls to time out)."""
        return await self._grade_unique(items, progress=progress)

    async def grade_within(self, items: list[GradeItem], deadline: float) -> list["Graded | None"]:
        """As grade_many, but an item still ungraded `deadline` seconds after the call is None (its calls
        cancelled): a training step waits at most that long for its judge."""
        return await self._grade_unique(items, deadline=deadline)

    async def _grade_unique(
        self, items: list[GradeItem], *, progress: str | None = None, deadline: float | None = None
    ) -> list:
        unique: dict[Any, GradeItem] = {}
        keys = []
        for i, item in enumerate(items):  # identical items graded once, unless the cache is off: each is asked
            key = (_freeze(item.conversation), item.response, item.rubric, item.reference)
            key = key if self.client.cache is not None else (i, key)
            unique.setdefault(key, item)
            keys.append(key)
        jobs = (self.grade(i.conversation, i.response, i.rubric, i.reference) for i in unique.values())
        with tqdm(total=len(unique), desc=progress, file=sys.stderr, disable=not progress) as bar:
            results = await gather_or_cancel(jobs, timeout=deadline, on_done=bar.update)
        by_key = dict(zip(unique, results))
        return [by_key[key] for key in keys]


def _freeze(messages: list[dict[str, str]]) -> tuple:
    return tuple((m["role"], m["content"]) for m in messages)


def judge_prompt(config: GradingConfig) -> Prompt | judge.OneMessagePrompt:
    """The mode's default judge prompt, or the file `config.judge_prompt` names (a HealthBench-layout template with
    judge_layout healthbench). Its placeholders must be exactly the default's: rendering is strict."""
    if config.judge_layout == "healthbench":
        return judge.load_layout_prompt(config.judge_prompt)
    default = judge.default_prompt(config.mode, config.verdict_format)
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
