"""`rubricrl probe --rubrics R --output-dir DIR`: how much credit answers with no substance earn from a judge and
rubric, before any GPU is spent training on them. Per rubric row, probes built from the row itself (checks/probes.py:
parrot, keywords, hedge, polite_nonanswer, other_question, half; optionally the `attacker` role's), and its reference
answer as the control, graded exactly as training would grade them (pass the training preset with --config: its
`rubrics`, `grading:` and `llm:` are read, the rest left to training).

    rubricrl probe --rubrics final.parquet --output-dir runs/probe
    rubricrl probe --config configs/rurl/tiny-cpu.yaml --output-dir runs/probe --verdict_formats explained verdict_only

Each kind's texts (--probes_per_kind of them) make one binomial test per criterion (checks/probe_test.py): a criterion is
exploitable when any kind earns it more often than --tolerance allows, at a false discovery rate of --level.

Writes probes.jsonl (every probe and its verdicts, per judge), criteria.jsonl (per criterion and judge: credited of
decided per kind and each kind's test, the control's verdict, `exploitable` with the kinds that showed it),
rows.jsonl (per row each kind's score beside the control's), summary.json, probe.md, probe.png, config.yaml and
manifest.json. A killed run asked again pays no call twice (the response cache)."""

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from checks.probe_analysis import criteria_rows, row_scores
from checks.probe_analysis import summary as probe_summary
from checks.probe_summary import draw, markdown
from checks.probe_test import ProbeTest
from checks.probes import KINDS
from checks.probing import Judge, attack, kinds_for, probe_records, sampled, usable_rows
from grading.dataset import check_references, load_rubric_rows
from grading.grader import EXPLICIT_MODES, GradingConfig
from grading.judge import VERDICT_FORMATS
from rubricrl.config import ConfigError, add_config_arguments, config_source, parse_settings, resolved, write_resolved
from rubricrl.llm import LLMSettings, open_llm
from rubricrl.runs.jsonl import write_jsonl, write_whole
from rubricrl.runs.manifest import package_versions, write_manifest


@dataclass
class ProbeArgs:
    rubrics: Path
    """The rubric dataset (any format `grade` reads); a training preset's `rubrics` is read from --config."""
    output_dir: Path
    """Where probes.jsonl, criteria.jsonl, rows.jsonl, summary.json, probe.md, probe.png and config.yaml go."""
    kinds: list[str] = field(default_factory=lambda: list(KINDS))
    """The probe kinds to build (checks/probes.py): parrot, keywords, hedge, polite_nonanswer, other_question, half."""
    max_rows: int = 0
    """Probe a seeded sample of this many rows; 0: every row."""
    seed: int = 0
    """The sample's seed."""
    verdict_formats: list[str] = field(default_factory=list)
    """Verdict formats to probe beside grading.verdict_format (explained, verdict_only, probability): one judge each."""
    judge_roles: list[str] = field(default_factory=list)
    """Judge roles to probe beside grading.judge_role (each an llm role: endpoint and model), to compare judges."""
    attacker: bool = False
    """Also ask the `attacker` role (an llm role like any other) for an answer that earns a named criterion without
    its substance, for each row's highest-point positive criteria."""
    attacker_criteria: int = 2
    """Criteria per row the attacker is asked about."""
    probes_per_kind: int = 4
    """Texts per probe kind and row (other wordings of the same probe; the attacker's answers per criterion): the
    counts each kind's test is run on. With fewer than log(level) / log(tolerance) (2 at the defaults) a kind's test
    can never flag (`insufficient`)."""
    tolerance: float = 0.1
    """How often an answer with no substance may earn a criterion by chance: the rate each kind's binomial test
    asks the counts to exceed."""
    level: float = 0.05
    """The false discovery rate of the `exploitable` flags, per judge (Benjamini-Hochberg over its tests)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown or not self.kinds:
            raise ValueError(f"kinds: unknown kind(s) {unknown}; the kinds are {', '.join(KINDS)}")
        bad = sorted(set(self.verdict_formats) - set(VERDICT_FORMATS))
        if bad:
            raise ValueError(f"verdict_formats: unknown format(s) {bad}; the formats are {', '.join(VERDICT_FORMATS)}")
        if self.max_rows < 0 or self.attacker_criteria < 1 or self.probes_per_kind < 1:
            raise ValueError("max_rows must be >= 0, attacker_criteria and probes_per_kind >= 1")
        ProbeTest(self.tolerance, self.level)  # checks both

    @property
    def test(self) -> ProbeTest:
        return ProbeTest(self.tolerance, self.level)


def add_commands(commands) -> None:
    probe = commands.add_parser("probe", help="how much credit answers with no substance earn from a judge and rubric")
    add_config_arguments(
        probe,
        [ProbeArgs, GradingConfig, LLMSettings],
        shares_file_with=["rurl.config.TrainArgs", "trl.GRPOConfig", "trl.ModelConfig"],  # a training preset
    )
    probe.set_defaults(run=run_probe)


def judges_of(probe: ProbeArgs, grading: GradingConfig, models: dict[str, str]) -> list[Judge]:
    """Each (judge role, verdict format) to probe with, the grading settings otherwise the same."""
    roles = [grading.judge_role, *(r for r in probe.judge_roles if r != grading.judge_role)]
    formats = [grading.verdict_format, *(f for f in probe.verdict_formats if f != grading.verdict_format)]
    judges = []
    for role in roles:
        for verdict_format in formats:
            try:
                config = replace(grading, judge_role=role, verdict_format=verdict_format)
            except ValueError as error:
                raise ConfigError(
                    f"--verdict_formats {verdict_format} with grading.mode {grading.mode}: {error}"
                ) from None
            judges.append(Judge.of(config, models[role]))
    return judges


def sampled_rows(probe: ProbeArgs, grading: GradingConfig) -> list:
    rows = usable_rows(list(load_rubric_rows(probe.rubrics).values()), str(probe.rubrics))
    check_references(grading.mode, probe.rubrics, rows)
    if grading.mode not in EXPLICIT_MODES and probe.attacker:
        raise ConfigError(
            f"grading.mode {grading.mode} rates whole answers: the attacker aims at one criterion, which only the "
            "explicit modes (per_criterion, batched) decide"
        )
    return sampled(rows, probe.max_rows, probe.seed)


def run_probe(args: argparse.Namespace) -> int:
    started = time.monotonic()
    settings = parse_settings(args, command="probe")
    probe, grading, llm = settings[:3]
    rows = sampled_rows(probe, grading)
    out = probe.output_dir
    out.mkdir(parents=True, exist_ok=True)
    write_resolved(out / "config.yaml", resolved([probe, grading, llm]))
    kinds = kinds_for(grading.mode, tuple(probe.kinds))
    if len(kinds) < len(probe.kinds):  # a rating judge decides no single criterion: `half` would say nothing
        print(f"probe: grading.mode {grading.mode} rates whole answers: the half probes are left out", file=sys.stderr)
    roles = [grading.judge_role, *probe.judge_roles, *(["attacker"] if probe.attacker else [])]
    roles = list(dict.fromkeys(roles))
    with open_llm(llm, roles, source=config_source(args), cpu_budgets=grading.cpu_max_tokens()) as session:
        judges = judges_of(probe, grading, {name: role.model for name, role in session.roles.items()})

        async def run():
            async with session.client() as client:
                extra, failed = (
                    await attack(client, rows, probe.attacker_criteria, probe.probes_per_kind)
                    if probe.attacker
                    else ([], 0)
                )
                return await probe_records(client, rows, judges, kinds, extra, samples=probe.probes_per_kind), failed

        records, attacker_failed = asyncio.run(run())
        models = {name: role.model for name, role in session.roles.items()}
    criteria = criteria_rows(records, probe.test)
    summary = {
        **probe_summary(records, criteria, len(rows), time.monotonic() - started, probe.test),
        "attacker_failed": attacker_failed,
    }
    write_jsonl(out / "probes.jsonl", records)
    write_jsonl(out / "criteria.jsonl", criteria)
    write_jsonl(out / "rows.jsonl", row_scores(records))
    write_whole(out / "summary.json", json.dumps(summary, indent=2))
    write_whole(out / "probe.md", markdown(summary, criteria, probe.rubrics, probe))
    charts = draw(summary, out)
    write_manifest(
        out,
        {
            "command": "probe",
            "output_dir": str(out),
            "config": resolved([probe, grading, llm]),
            "rubrics": str(probe.rubrics),
            "models": models,
            "counts": {"rows": len(rows), "probes": len(records), "criteria": len(criteria)},
            "seconds": summary["seconds"],
            "packages": package_versions(),
        },
    )
    for judge in summary["judges"]:
        shares = ", ".join(f"{kind} {v['share']:.0%}" for kind, v in summary["kinds"].get(judge, {}).items())
        flagged = summary["exploitable"][judge]
        kinds_flagged = ", ".join(f"{kind} {n}" for kind, n in flagged["by_kind"].items())
        print(
            f"{judge}: {shares}; exploitable {flagged['flagged']} of {flagged['criteria']} criteria"
            f"{f' (by {kinds_flagged})' if kinds_flagged else ''}, {flagged['insufficient_criteria']} insufficient; "
            f"{probe.test.describe()}",
            file=sys.stderr,
        )
    print(
        f"output: {out} (probe.md, summary.json, criteria.jsonl, rows.jsonl, probes.jsonl"
        f"{''.join(', ' + c.name for c in charts)})",
        file=sys.stderr,
    )
    return 0
