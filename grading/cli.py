"""`rubricrl grade` and `rubricrl eval`: grade responses against rubrics; HealthBench-style reports."""

import argparse
import asyncio
import json
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from tqdm.asyncio import tqdm_asyncio

from grading.batch import grade_batch
from grading.dataset import RubricRow, check_references, load_responses, load_rubric_rows
from grading.grader import Grader, GradingConfig
from grading.report import build_report, first_judge_error, format_report, provenance, with_score_alias
from grading.rubric import RubricError
from grading.scores import UndecidedCriterion, UndecidedPenalty
from rubricrl.config import ConfigError, add_config_arguments, config_source, parse_settings, resolved, write_resolved
from rubricrl.llm import LLMError, LLMSession, LLMSettings, open_llm
from rubricrl.llm.reasoning import as_written, split_reasoning
from rubricrl.llm.self_judging import check_judge_apart
from rubricrl.records import iter_rows
from rubricrl.records.hub import describe_input
from rubricrl.runs.jsonl import write_jsonl
from rubricrl.runs.shards import parse_shard
from rubricrl.serving.policy_model import local_policy
from rubricrl.serving.server import local_endpoint

Pitfalls = Literal["auto", "mistake", "avoidance"]


@dataclass
class GradeArgs:
    rubrics: Path
    """Rubric dataset: .parquet, .jsonl, a saved HF dataset, a repository folder or a Hub id (org/name[:SPLIT]):
    RubricHub/synthesis output, HealthBench, RaR."""
    responses: Path
    """Responses to grade: {id, response} per row, ids as in the rubric file."""
    output: Path
    """Graded JSONL (*.jsonl) to write, each record with its provenance (judge, files, time); its settings go
    beside it, in <name>.config.yaml."""
    rar_pitfalls: Pitfalls = "auto"
    """RaR rubrics: whether pitfall texts name the mistake or what to avoid (grading/rar.py)."""

    shard: str | None = None
    """i/n: grade only the ids of shard i of n (0 <= i < n; a split by id, independent of row order: each machine
    of n runs one; concatenate their graded files and `rubricrl eval --graded` reports on the whole); default: all."""

    def __post_init__(self) -> None:
        parse_shard(self.shard)


@dataclass
class EvalArgs:
    output_dir: Path
    """Where graded.jsonl, report.json and config.yaml go."""
    rubrics: Path | None = None
    """Rubric dataset: .parquet, .jsonl, a saved HF dataset, a repository folder or a Hub id (org/name[:SPLIT]):
    RubricHub/synthesis output, HealthBench, RaR;
    not needed with --graded."""
    policy: str | None = None
    """The policy model that answers each prompt: a model name at the policy role's endpoint (shorthand for --roles
    policy.model=NAME), or a folder on this machine (a `ruft train` / `rurl train` output, or a LoRA checkpoint,
    merged into its base), which a local vLLM server serves for the run and stops after it; default: the model of
    the policy role, --model, or the local model."""
    policy_base: str | None = None
    """For a LoRA adapter folder as --policy: the base model to merge it into (default: the one its
    adapter_config.json names)."""
    self_judging: bool = False
    """Let the judge grade a policy that is its own model at its own endpoint (refused otherwise: a model rates its
    own answers higher)."""
    responses: Path | None = None
    """Grade these {id, response} rows instead of generating."""
    graded: Path | None = None
    """Recompute the report from a graded JSONL, without a judge call (into a folder other than the run that
    wrote it, whose settings stay)."""
    rar_pitfalls: Pitfalls = "auto"
    """RaR rubrics: whether pitfall texts name the mistake or what to avoid (grading/rar.py)."""
    length_adjusted: bool = False
    """Also report simple-evals' length-adjusted score (`overall_score_length_adjusted`, as in its HealthBench
    Professional mode): each example's score less 0.0147 per 500 characters of answer beyond 2,000."""

    shard: str | None = None
    """i/n: grade only the ids of shard i of n (0 <= i < n; a split by id, independent of row order: each machine
    of n runs one; concatenate their graded files and `rubricrl eval --graded` reports on the whole); default: all."""

    def __post_init__(self) -> None:
        parse_shard(self.shard)
        if sum(x is not None for x in (self.policy, self.responses, self.graded)) > 1:
            raise ValueError("give at most one of policy, responses and graded")
        if self.policy_base is not None and self.policy is None:
            raise ValueError("policy_base is the base of a LoRA adapter given as --policy; give --policy too")
        if self.rubrics is None and self.graded is None:
            raise ValueError("give the rubric dataset (--rubrics), or a graded file to report on (--graded)")


@dataclass
class EvalGradingConfig(GradingConfig):
    """`rubricrl eval`'s grading: HealthBench as simple-evals scores it. A verdict the judge does not give is asked
    again (3 times: simple-evals asks until it gets one), then counted as simple-evals' `calculate_score` counts a
    missing one, not met whatever its sign; every example is scored (no coverage threshold). `grade` and training
    keep their own defaults (docs/grading.md says why they differ)."""

    min_coverage: float = 0.0
    undecided_penalty: UndecidedPenalty = "unmet"
    undecided_criterion: UndecidedCriterion = "unmet"
    reask_undecided: int = 3


def add_commands(commands) -> None:
    grade = commands.add_parser("grade", help="grade responses against rubrics with an LLM judge")
    add_config_arguments(grade, [GradeArgs, GradingConfig, LLMSettings])
    grade.set_defaults(run=run_grade)

    evaluate = commands.add_parser("eval", help="evaluate a policy HealthBench-style (generate, grade, report)")
    add_config_arguments(evaluate, [EvalArgs, EvalGradingConfig, LLMSettings])
    evaluate.set_defaults(run=run_eval)


def run_grade(args: argparse.Namespace) -> int:
    settings = parse_settings(args, command="grade")
    grade, config, llm = settings
    rows = load_rubric_rows(grade.rubrics, grade.rar_pitfalls)
    pairs = load_responses(grade.responses, set(rows), grade.rubrics)  # checked before any call
    shard = parse_shard(grade.shard)
    pairs = [(i, response) for i, response in pairs if shard is None or i in shard]
    check_references(config.mode, grade.rubrics, [rows[i] for i, _ in pairs])
    check_not_an_input(grade.output, "--output", {"--rubrics": grade.rubrics, "--responses": grade.responses})
    if grade.output.suffix.lower() != ".jsonl":
        raise ConfigError(
            f"--output {grade.output}: graded records are JSONL; name the file *.jsonl "
            "(`eval --graded` and `rubricrl report` know a file by its extension)"
        )
    make_folder(grade.output.parent, f"--output {grade.output}")

    async def grade_all(session: LLMSession):
        async with session.client() as client:
            try:
                return await grade_pairs(Grader(client, config), rows, pairs)
            finally:
                _print_endpoints(client)

    with open_llm(llm, [config.judge_role], source=config_source(args), cpu_budgets=config.cpu_max_tokens()) as session:
        records = asyncio.run(grade_all(session))
    records = with_provenance(records, rubrics=grade.rubrics, responses=grade.responses)
    write_jsonl(grade.output, records)
    write_resolved(grade.output.with_name(grade.output.stem + ".config.yaml"), resolved(settings))
    report = build_report(records, **config.rule())
    print(format_report(report))
    _write_ledger(records, grade.output.with_name(grade.output.stem + ".ledger.parquet"))
    _print_budgets(session)
    print(f"wrote {len(records)} graded records to {grade.output}", file=sys.stderr)
    return failure_status(report, records, config)


def run_eval(args: argparse.Namespace) -> int:
    settings = parse_settings(args, command="eval")
    evaluate, config, llm = settings
    graded_file = evaluate.output_dir / "graded.jsonl"
    if evaluate.graded:
        here = evaluate.graded.resolve().parent == evaluate.output_dir.resolve()
        if here and (evaluate.output_dir / "config.yaml").exists():  # the settings of the run that graded: kept
            raise ConfigError(
                f"--output-dir {evaluate.output_dir}: it holds the run that wrote --graded "
                f"{evaluate.graded}, whose config.yaml and report.json this would replace; "
                "choose another --output-dir"
            )
        records = read_graded(evaluate.graded)
    else:
        inputs = {"--rubrics": evaluate.rubrics, "--responses": evaluate.responses}
        check_not_an_input(graded_file, "--output-dir", inputs)
    make_folder(evaluate.output_dir, f"--output-dir {evaluate.output_dir}")
    write_resolved(evaluate.output_dir / "config.yaml", resolved(settings))
    if not evaluate.graded:
        records = generate_and_grade(evaluate, config, llm, config_source(args))
        write_jsonl(graded_file, records)
    lengths = [answer_length(r, config) for r in records] if evaluate.length_adjusted else None
    report = with_score_alias(build_report(records, **config.rule(), answer_lengths=lengths))
    report["provenance"] = provenance(records)
    report["ledger"] = _write_ledger(records, evaluate.output_dir / "ledger.parquet")
    (evaluate.output_dir / "report.json").write_text(json.dumps(report, indent=2))
    print(format_report(report))
    print(f"report: {evaluate.output_dir / 'report.json'}", file=sys.stderr)
    return 0 if evaluate.graded else failure_status(report, records, config)  # --graded made no call to judge


def generate_and_grade(evaluate: EvalArgs, config: GradingConfig, llm: LLMSettings, source: str) -> list[dict]:
    """Generate one response per prompt with the policy role (unless responses are given), then grade; the
    records carry their provenance."""
    rows = load_rubric_rows(evaluate.rubrics, evaluate.rar_pitfalls)
    given = load_responses(evaluate.responses, set(rows), evaluate.rubrics) if evaluate.responses else None
    shard = parse_shard(evaluate.shard)
    if shard is not None:
        rows = {i: row for i, row in rows.items() if i in shard}
        given = None if given is None else [(i, response) for i, response in given if i in shard]
    to_grade = [rows[i] for i, _ in given] if given is not None else list(rows.values())
    check_references(config.mode, evaluate.rubrics, to_grade)
    names = [config.judge_role] if given is not None else [config.judge_role, "policy"]  # all checked: now call
    folder = None
    if evaluate.policy:
        if config.judge_role == "policy":
            raise ConfigError("the judge role cannot be named 'policy' when --policy sets the policy model")
        folder = local_policy(evaluate.policy, evaluate.policy_base)
        policy = {"model": evaluate.policy} if folder is None else {"model": str(folder), "base_url": None}
        llm = replace(llm, roles={**llm.roles, "policy": {**(llm.roles.get("policy") or {}), **policy}})
    if given is None:
        check_judge_apart(llm, config.judge_role, ["policy"], evaluate.self_judging, "--self_judging")

    async def answer(client, row_id: str) -> tuple[str, str | None, str | None]:
        """(id, response, error): a policy call that fails is recorded and left unscored, never fatal. The
        response is the completion as the policy wrote it (a reasoning parser's reasoning put back between the
        delimiters: the grader judges the answer, and one cut off while reasoning scores 0, not unscored)."""
        try:
            result = await client.chat("policy", rows[row_id].conversation, allow_empty=True)
            return row_id, as_written(result.text, result.reasoning, config.reasoning_delimiters), None
        except LLMError as error:
            return row_id, None, str(error)

    async def run(session: LLMSession):
        async with session.client() as client:
            try:
                return await answer_and_grade(client)
            finally:
                _print_endpoints(client)

    async def answer_and_grade(client):
        grader = Grader(client, config)
        if given is not None:
            return await grade_pairs(grader, rows, given)
        answers = await tqdm_asyncio.gather(
            *(answer(client, row_id) for row_id in rows), desc="generating", file=sys.stderr
        )
        graded = await grade_pairs(grader, rows, [(i, r) for i, r, e in answers if e is None])
        failed = [
            {
                "id": i,
                "response": None,
                "score": None,
                "verdicts": [],
                "policy_error": e,
                "example_tags": list(rows[i].rubric.example_tags),
            }
            for i, _, e in answers
            if e is not None
        ]
        if failed:
            print(f"{len(failed)} policy calls failed; those examples are unscored (see policy_error)", file=sys.stderr)
        return graded + failed

    with ExitStack() as stack:
        if folder is not None:  # its own server, the judge's resolved as ever: stopped on every way out of here
            served = stack.enter_context(local_endpoint(str(folder), llm.server_timeout))
            policy = {"base_url": served.base_url, "model": served.model, "api_key_env": ""}
            llm = replace(llm, roles={**llm.roles, "policy": {**llm.roles["policy"], **policy}})
        session = stack.enter_context(open_llm(llm, names, source=source, cpu_budgets=config.cpu_max_tokens()))
        records = asyncio.run(run(session))
    _print_budgets(session)
    policy_model = None if given is not None else session.roles["policy"].model
    if folder is not None:  # the folder the user named (an adapter's, not its merge), absolute as the files are
        policy_model = str(Path(evaluate.policy).expanduser().resolve())
    elif evaluate.policy:
        policy_model = evaluate.policy
    return with_provenance(records, rubrics=evaluate.rubrics, responses=evaluate.responses, policy_model=policy_model)


def answer_length(record: dict, config: GradingConfig) -> int:
    """Characters of the answer the judge saw: the response less its reasoning (0 where it never closed)."""
    response = record.get("response") or ""
    split = split_reasoning(response, config.reasoning_delimiters, starts_open=config.reasoning_starts_open)
    return len(split.answer or "")


def check_not_an_input(output: Path, flag: str, inputs: dict[str, Path | None]) -> None:
    """An output file that is one of the inputs would be replaced by what is read from it: refused."""
    for name, path in inputs.items():
        if path is not None and output.resolve() == path.resolve():
            raise ConfigError(f"{flag}: {output} is the {name} file, which writing the graded records would replace")


def make_folder(folder: Path, named: str) -> None:
    """The output's folder, made now: one that cannot be made or written to fails before any call, not after."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"{named}: cannot make the folder {folder}: {error.strerror}") from None
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"{named}: the folder {folder} is not writable")


def with_provenance(
    records: list[dict], *, rubrics: Path, responses: Path | None = None, policy_model: str | None = None
) -> list[dict]:
    """Each record with what graded it besides the judge (its `judge` block): the rubric and responses files
    (absolute: a report read elsewhere still names them) or the policy model, and when (see report.PROVENANCE_KEYS).
    In every record rather than in a file beside them, so that a graded file copied, concatenated or read by
    `eval --graded` keeps it."""
    stamp = {
        "rubrics": describe_input(rubrics),
        "responses": describe_input(responses) if responses else None,
        "policy_model": policy_model,
        "graded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return [{**record, "provenance": stamp} for record in records]


def failure_status(report: dict, records: list[dict], config: GradingConfig) -> int:
    """0, or 1 with one line on stderr when judge decisions (or policy calls) failed beyond max_failure_rate:
    a run that graded little must not pass for a result in a script. What was graded is written all the same."""
    limit = config.max_failure_rate
    policy_rate = report["policy_failures"] / report["examples"] if report["examples"] else 0.0
    if report["judge_failure_rate"] > limit:
        what, rate, first = "judge", report["judge_failure_rate"], first_judge_error(records)
    elif policy_rate > limit:
        what, rate, first = "policy", policy_rate, next(r["policy_error"] for r in records if r.get("policy_error"))
    else:
        return 0
    error = f"; first {what} error: {' '.join(first.split())}" if first else " (tied votes, no call failed)"
    print(
        f"rubricrl: error: {what} failure rate {rate:.1%} is above max_failure_rate {limit:g} (set it with "
        f"--max-failure-rate or grading.max_failure_rate in --config){error}",
        file=sys.stderr,
    )
    return 1


async def grade_pairs(grader: Grader, rows: dict[str, RubricRow], pairs: list[tuple[str, str]]) -> list[dict]:
    """Graded records for (id, response) pairs, in input order (identical pairs graded once), graded as every path
    grades a batch (grading/batch.py); a judge that could not be asked at all is an error."""
    chosen = [rows[i] for i, _ in pairs]
    batch = await grade_batch(
        grader,
        [row.conversation for row in chosen],
        [response for _, response in pairs],
        [row.rubric for row in chosen],
        references=[row.reference for row in chosen],
        progress="grading",
    )
    if batch.unasked is not None:  # the judge's server down, or a setting it cannot be asked with
        raise batch.unasked
    graded = batch.graded
    return [
        g.to_record(rows[row_id].rubric.example_tags, id=row_id, response=response, judge=grader.metadata)
        for (row_id, response), g in zip(pairs, graded)
    ]


def read_graded(path: Path) -> list[dict]:
    """Graded records (as `grade` and `eval` write them), checked enough to recompute a report from."""
    records = []
    for where, record in iter_rows(path):
        verdicts = record.get("verdicts")
        if not isinstance(verdicts, list) or not all(
            isinstance(v, dict) and isinstance(v.get("points"), int) and "met" in v for v in verdicts
        ):
            raise RubricError(f"{where}: not a graded record: needs 'verdicts', each with integer 'points' and 'met'")
        records.append(record)
    if not records:
        raise RubricError(f"{path}: no graded records")
    return records


def _write_ledger(records: list[dict], path: Path) -> dict | None:
    """The criterion ledger (grading/ledger.py) where the answers came several per query: written, its headline
    printed and returned."""
    from grading.ledger import headline_lines, write_for_records

    figures = write_for_records(records, path)
    if figures is not None:
        print("\n".join(headline_lines(figures)) + f"\n  ledger: {path}", file=sys.stderr)
    return figures


def _print_endpoints(client) -> None:
    """Per-endpoint counts on stderr when there are several endpoints or one failed."""
    from rubricrl.runs.manifest import endpoint_counts, endpoint_lines

    for line in endpoint_lines(endpoint_counts(client)):
        print(line.strip(), file=sys.stderr)


def _print_budgets(session: LLMSession) -> None:
    if session.budget_note():
        print(session.budget_note(), file=sys.stderr)
