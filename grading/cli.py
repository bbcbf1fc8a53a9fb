"""`rubricrl grade` and `rubricrl eval`: grade responses against rubrics; HealthBench-style reports."""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from tqdm.asyncio import tqdm_asyncio

from grading.dataset import load_responses, load_rubric_rows
from grading.grader import MODES, Grader, GradingConfig
from grading.report import build_report, format_report
from rubricrl.config import dataclass_from_dict, load_yaml


def add_commands(commands) -> None:
    from rubricrl.cli import add_llm_arguments

    grade = commands.add_parser("grade", help="grade responses against rubrics with an LLM judge")
    grade.add_argument("--rubrics", type=Path, required=True, help="rubric dataset (.parquet or .jsonl; RubricHub or HealthBench)")
    grade.add_argument("--responses", type=Path, required=True, help="JSONL of {id, response}")
    grade.add_argument("--output", type=Path, required=True, help="graded JSONL to write")
    add_grading_arguments(grade)
    add_llm_arguments(grade)
    grade.set_defaults(run=run_grade)

    evaluate = commands.add_parser("eval", help="evaluate a policy HealthBench-style (generate, grade, report)")
    evaluate.add_argument("--rubrics", type=Path, required=True)
    evaluate.add_argument("--output-dir", type=Path, required=True)
    source = evaluate.add_mutually_exclusive_group()
    source.add_argument("--policy", help="policy model name (default: the model of --model / the local model)")
    source.add_argument("--responses", type=Path, help="grade these {id, response} instead of generating")
    source.add_argument("--graded", type=Path, help="recompute the report from a graded JSONL, no judge call")
    evaluate.add_argument("--policy-base-url", help="endpoint of the policy (default: that of --base-url)")
    evaluate.add_argument("--policy-max-tokens", type=int, default=1024)
    add_grading_arguments(evaluate)
    add_llm_arguments(evaluate)
    evaluate.set_defaults(run=run_eval)


def add_grading_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("grading (override the config's `grading:` section)")
    group.add_argument("--mode", choices=MODES)
    group.add_argument("--samples", type=int, help="judge samples per verdict (majority vote)")
    group.add_argument("--chunk-size", type=int, help="criteria per call in batched mode")
    group.add_argument("--rar-pitfalls", choices=["auto", "mistake", "avoidance"], default="auto",
                       help="RaR rubrics: whether pitfall texts name the mistake or what to avoid (grading/rar.py)")


def grading_config(args: argparse.Namespace) -> GradingConfig:
    values = (load_yaml(args.config).get("grading") or {}) if args.config else {}
    for name in ("mode", "samples", "chunk_size"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    return dataclass_from_dict(GradingConfig, values, f"{args.config or 'command line'}: grading")


async def grade_pairs(grader: Grader, rows, pairs) -> list[dict]:
    """Graded records for (id, response) pairs, in input order (identical pairs graded once)."""
    items = [(rows[i].conversation, response, rows[i].rubric, rows[i].reference) for i, response in pairs]
    graded = await grader.grade_many(items, progress="grading")
    return [g.to_record(rows[row_id].rubric.example_tags, id=row_id, response=response, judge=grader.metadata)
            for (row_id, response), g in zip(pairs, graded)]  # fmt: skip


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(path)


def run_grade(args: argparse.Namespace) -> int:
    from rubricrl.cli import llm_client_options, llm_config
    from rubricrl.llm import LLMClient, connected_roles

    config = grading_config(args)
    rows = load_rubric_rows(args.rubrics, args.rar_pitfalls)
    pairs = load_responses(args.responses, set(rows))
    llm, source = llm_config(args)

    async def grade_all(roles):
        async with LLMClient(roles, **llm_client_options(args)) as client:
            return await grade_pairs(Grader(client, config), rows, pairs)

    with connected_roles([config.judge_role], llm, base_url=args.base_url, model=args.model, source=source) as roles:
        records = asyncio.run(grade_all(roles))
    write_jsonl(args.output, records)
    print(format_report(build_report(records, min_coverage=config.min_coverage)))
    print(f"wrote {len(records)} graded records to {args.output}", file=sys.stderr)
    return 0


def run_eval(args: argparse.Namespace) -> int:
    config = grading_config(args)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if args.graded:
        records = [json.loads(line) for line in open(args.graded, encoding="utf-8") if line.strip()]
    else:
        records = generate_and_grade(args, config)
        write_jsonl(args.output_dir / "graded.jsonl", records)
    report = build_report(records, min_coverage=config.min_coverage)
    (args.output_dir / "report.json").write_text(json.dumps(report, indent=2))
    print(format_report(report))
    print(f"report: {args.output_dir / 'report.json'}", file=sys.stderr)
    return 0


def generate_and_grade(args: argparse.Namespace, config: GradingConfig) -> list[dict]:
    """Generate one response per prompt with the policy role (unless --responses), then grade."""
    from rubricrl.cli import llm_client_options, llm_config
    from rubricrl.llm import LLMClient, LLMError, connected_roles

    rows = load_rubric_rows(args.rubrics, args.rar_pitfalls)
    llm, source = llm_config(args)
    names = [config.judge_role] if args.responses else [config.judge_role, "policy"]
    policy = {k: v for k, v in {"model": args.policy, "base_url": args.policy_base_url}.items() if v}
    if policy:  # --policy flags override the config's policy role
        roles = dict(llm.get("roles") or {})
        roles["policy"] = {**(roles.get("policy") or {}), **policy}
        llm = {**llm, "roles": roles}

    given = load_responses(args.responses, set(rows)) if args.responses else None  # checked before any call

    async def answer(client: LLMClient, row_id: str) -> tuple[str, str | None, str | None]:
        """(id, response, error): a policy call that fails is recorded and left unscored, never fatal."""
        try:
            result = await client.chat("policy", rows[row_id].conversation, max_tokens=args.policy_max_tokens)
            return row_id, result.text, None
        except LLMError as error:
            return row_id, None, str(error)

    async def run(roles):
        async with LLMClient(roles, **llm_client_options(args)) as client:
            if given is not None:
                return await grade_pairs(Grader(client, config), rows, given)
            answers = await tqdm_asyncio.gather(*(answer(client, row_id) for row_id in rows), desc="generating",
                                                file=sys.stderr)  # fmt: skip
            graded = await grade_pairs(Grader(client, config), rows, [(i, r) for i, r, e in answers if e is None])
            failed = [{"id": i, "response": None, "score": None, "verdicts": [], "policy_error": e,
                       "example_tags": list(rows[i].rubric.example_tags)} for i, _, e in answers if e is not None]  # fmt: skip
            if failed:
                print(f"{len(failed)} policy calls failed; those examples are unscored (see policy_error)",
                      file=sys.stderr)  # fmt: skip
            return graded + failed

    with connected_roles(names, llm, base_url=args.base_url, model=args.model, source=source) as roles:
        return asyncio.run(run(roles))
