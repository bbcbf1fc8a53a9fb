"""Grading the probes (checks/probes.py) exactly as training grades: the same Grader, role, mode, verdict format,
rules, integrity check and undecided rules; for `rubricrl probe` (checks/probe_cli.py) and RuRL's preflight.

Every call goes through the client's response cache, so a killed run asked again pays nothing twice. The attacker
(optional) is a role like any other: asked to earn one named criterion without its substance, schema-bounded.
"""

import asyncio
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from checks.probe_analysis import earned_share
from checks.probes import ATTACKER, CONTROL, KINDS, TARGETED, Probe, positive_texts, probes_for, reference_of
from grading.dataset import RubricRow
from grading.grader import EXPLICIT_MODES, GradeItem, Grader, GradingConfig
from grading.rubric import Rubric
from rubricrl.config import ConfigError
from rubricrl.llm import LLMClient, LLMError
from rubricrl.prompts import format_conversation, load_prompt

ATTACK = load_prompt(Path(__file__).parent / "prompts" / "probe_attacker.txt")
ATTACK_SCHEMA = {
    "type": "object",
    "properties": {"response": {"type": "string", "minLength": 1, "maxLength": 1500}},
    "required": ["response"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Judge:
    """One way of grading the probes: a judge role and the grading settings it is used with."""

    name: str
    config: GradingConfig

    @classmethod
    def of(cls, config: GradingConfig, model: str) -> "Judge":
        """Named by role, model and verdict format, graded as plain text (as_plain_text)."""
        return cls(f"{config.judge_role} {model} ({config.verdict_format})", as_plain_text(config))


def kinds_for(mode: str, kinds: tuple[str, ...] = KINDS) -> tuple[str, ...]:
    """The kinds a grading mode can tell anything from: a rating mode decides no single criterion, so not the
    targeted ones (half, attacker)."""
    return kinds if mode in EXPLICIT_MODES else tuple(k for k in kinds if k not in TARGETED)


def sampled(rows: list[RubricRow], size: int, seed: int) -> list[RubricRow]:
    """A seeded sample of `size` rows (all of them when `size` is 0 or not smaller), in id order."""
    if not size or size >= len(rows):
        return rows
    return sorted(random.Random(seed).sample(rows, size), key=lambda row: row.id)


def as_plain_text(grading: GradingConfig) -> GradingConfig:
    """The grading settings for texts we wrote (the preflight's answer, the probes): a policy whose template opens
    its reasoning in the prompt (reasoning_starts_open) would make them reasoning that never closed, the floor
    score without a judge call; these texts have no reasoning."""
    return replace(grading, reasoning_starts_open=False)


def usable_rows(rows: list[RubricRow], where: str) -> list[RubricRow]:
    """The rows a probe can test: some, each with a positive criterion; one line naming the first that has none."""
    if not rows:
        raise ConfigError(f"{where}: no rubric rows to probe")
    for row in rows:
        if not positive_texts(row):
            raise ConfigError(
                f"{row.where or where}: row {row.id!r} has no criterion with positive points: nothing a probe "
                "could earn (drop the row or give it a positive criterion)"
            )
    return rows


def graded_against(row: RubricRow, probe: Probe) -> Rubric:
    """The row's rubric; a targeted probe's (half, attacker) only its target criterion: in the per-criterion mode its
    verdict is the one the whole rubric would get, for one judge call instead of one per criterion."""
    if probe.target is None:
        return row.rubric
    target = next(c for c in row.rubric.criteria if c.text == probe.target)
    return Rubric((target,), row.rubric.example_tags)


async def attack(client: LLMClient, rows: list[RubricRow], per_row: int, samples: int = 1) -> tuple[list[Probe], int]:
    """The attacker's answers for each row's `per_row` highest-point positive criteria, `samples` answers each (one
    call with n = samples; a deterministic attacker's repeats count once), asked at once (the client bounds them);
    (probes, failed calls)."""
    asked = [
        (row, criterion)
        for row in rows
        for criterion in sorted((c for c in row.rubric.criteria if c.points > 0), key=lambda c: -c.points)[:per_row]
    ]

    async def ask(row: RubricRow, criterion) -> list[Probe] | None:
        prompt = ATTACK.render(conversation=format_conversation(row.conversation), criterion=criterion.text)
        try:
            result = await client.chat("attacker", prompt, n=samples, schema=ATTACK_SCHEMA, schema_name="probe")
        except LLMError as error:
            print(f"probe: attacker, row {row.id}: no answer: {error}"[:300], file=sys.stderr)
            return None
        texts = dict.fromkeys(value["response"] for value in result.parsed)
        return [Probe(row.id, ATTACKER, text, target=criterion.text) for text in texts]

    answered = await asyncio.gather(*(ask(row, criterion) for row, criterion in asked))
    return [p for probes in answered if probes for p in probes], sum(p is None for p in answered)


async def probe_records(
    client: LLMClient,
    rows: list[RubricRow],
    judges: list[Judge],
    kinds: tuple[str, ...] = KINDS,
    extra: list[Probe] = (),
    progress: bool = True,
    samples: int = 1,
) -> list[dict]:
    """Every probe of every row (`samples` texts of each kind, and `extra` ones, the attacker's), and each row's
    control where it has a reference, graded by each judge: a record per (probe, judge)."""
    probes = [p for i, row in enumerate(rows) for p in probes_for(row, rows, i, kinds, samples)] + list(extra)
    probes += [Probe(row.id, CONTROL, reference_of(row)) for row in rows if reference_of(row)]
    by_id = {row.id: row for row in rows}
    records = []
    for judge in judges:
        grader = Grader(client, judge.config)
        items = [
            GradeItem(by_id[p.row].conversation, p.text, graded_against(by_id[p.row], p), by_id[p.row].reference)
            for p in probes
        ]
        graded = await grader.grade_many(items, progress=f"probing, {judge.name}" if progress else None)
        for probe, g in zip(probes, graded):
            verdicts = [[v.criterion, v.points, v.met] for v in g.verdicts]
            share = earned_share(verdicts, probe.target) if verdicts else (None if probe.target else g.score)
            records.append(
                {
                    "row": probe.row,
                    "kind": probe.kind,
                    "target": probe.target,
                    "judge": judge.name,
                    "text": probe.text,
                    "score": g.reward,
                    "share": share,
                    "verdicts": verdicts,
                    "rule_criteria": [v.criterion for v in g.verdicts if v.source == "rule"],
                    "integrity_flag": g.integrity_flag,
                    "judge_calls": g.judge_calls,
                }
            )
    return records
