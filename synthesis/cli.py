"""`rubricrl synth`: queries in, a RubricHub-compatible rubric dataset out."""

import argparse
import asyncio
import itertools
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rubricrl.config import add_config_arguments, config_source, parse_settings, resolved, write_resolved
from rubricrl.llm import LLMSettings, open_llm
from rubricrl.queries import iter_queries, write_rejected
from rubricrl.manifest import package_versions, usage_lines, write_manifest
from synthesis import stages
from synthesis.config import SynthesisConfig
from synthesis.pipeline import SynthesisRun
from synthesis.publish import add_commands as add_publish_command


@dataclass
class SynthArgs:
    input: Path
    """Queries: .jsonl, .parquet or a saved Hugging Face dataset folder."""
    output_dir: Path
    """Where final.parquet, final.jsonl, details, errors, config.yaml and manifest.json go; a rerun resumes there."""
    query_column: str | None = None
    """Default: prompt, or question when there is no prompt."""
    id_column: str | None = None
    """Default: id (or prompt_id); missing ids are generated from the content."""
    limit: int | None = None
    """Only the first N valid queries."""
    skip_bad_rows: bool = False
    """Write invalid rows to rejected.jsonl and go on (default: stop at the first, before any model call)."""


def add_commands(commands) -> None:
    synth = commands.add_parser("synth", help="synthesize a rubric per query (Coarse-to-Fine or Rubrics-as-Rewards)")
    add_config_arguments(synth, [SynthArgs, SynthesisConfig, LLMSettings])
    synth.set_defaults(run=run_synth)
    add_publish_command(commands)


def run_synth(args: argparse.Namespace) -> int:
    settings = parse_settings(args, command="synth")
    synth, config, llm = settings
    synth.output_dir.mkdir(parents=True, exist_ok=True)

    # Pass 1, before any model call: validate every row (streamed), count, record the rejected ones.
    rejected = []
    reject = rejected.append if synth.skip_bad_rows else None
    read = lambda on_reject: iter_queries(synth.input, query_column=synth.query_column, id_column=synth.id_column,
                                          on_reject=on_reject)  # fmt: skip
    total = sum(1 for _ in itertools.islice(read(reject), synth.limit))
    if synth.skip_bad_rows:
        write_rejected(rejected, synth.output_dir / "rejected.jsonl")
        if rejected:
            print(f"rejected {len(rejected)} invalid rows: {synth.output_dir / 'rejected.jsonl'}", file=sys.stderr)
    write_resolved(synth.output_dir / "config.yaml", resolved(settings))
    started = time.monotonic()

    async def synthesize(session):
        async with session.client(invalid_answer_retries=config.attempts - 1) as client:
            run = SynthesisRun(synth.output_dir, config, client, in_flight=max(16, 2 * llm.concurrency))
            # Pass 2: the same rows again, streamed into the pipeline (rejected ones were recorded in pass 1).
            summary = await run.run(itertools.islice(read(lambda _: None), synth.limit), total)
            return summary, client.usage

    with open_llm(llm, config.roles, source=config_source(args), cpu_budgets=config.cpu_max_tokens()) as session:
        (synth.output_dir / "manifest.json").unlink(missing_ok=True)  # "finished" is only true again at the end
        summary, usage = asyncio.run(synthesize(session))
    manifest = {
        "command": "synth", "input": str(synth.input), "config": resolved(settings),
        "roles": {name: role.public() for name, role in session.roles.items()},
        "budgets": session.budget_note(),
        "prompts": {p.name: p.sha256 for p in stages.ALL_PROMPTS},
        "packages": package_versions(),
        "counts": {"valid_queries": total, "rejected_rows": len(rejected), "done_this_run": summary.done,
                   "already_done": summary.skipped, "failed": dict(summary.failed),
                   "rows_in_final": summary.rows_in_final},
        "usage": {name: asdict(u) for name, u in usage.items()},
        "seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    write_manifest(synth.output_dir, manifest)
    print(summary_text(manifest, summary.criteria))
    return 0 if not summary.failed else 1


def summary_text(manifest: dict, criteria: list[int]) -> str:
    counts = manifest["counts"]
    lines = [f"queries: {counts['valid_queries']} valid, {counts['rejected_rows']} rejected; "
             f"{counts['done_this_run']} done now, {counts['already_done']} done before, "
             f"failed by stage: {counts['failed'] or 'none'}; {counts['rows_in_final']} rows in final.parquet"]  # fmt: skip
    if criteria:
        lines.append(f"criteria per query (this run): min {min(criteria)}, median {statistics.median(criteria):g}, "
                     f"mean {statistics.mean(criteria):.1f}, max {max(criteria)}")  # fmt: skip
    lines += usage_lines(manifest)
    lines.append(f"wall time {manifest['seconds']} s")
    return "\n".join(lines)
