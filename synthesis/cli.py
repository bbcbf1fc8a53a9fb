"""`rubricrl synth`: queries in, a RubricHub-compatible rubric dataset out."""

import argparse
import asyncio
import itertools
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from grading import judge
from grading.grader import GradingConfig, judge_prompt
from rubricrl.config import add_config_arguments, parse_settings, resolved
from rubricrl.llm import LLMSettings
from rubricrl.queries import iter_queries
from rubricrl.records.hub import describe_input
from rubricrl.runs.folder import FolderRun, summary_head, summary_tail
from rubricrl.runs.provenance import role_settings
from rubricrl.runs.shards import parse_shard
from synthesis import stages
from synthesis.config import SynthesisConfig
from synthesis.pipeline import RunSummary, SynthesisRun


@dataclass
class SynthArgs:
    input: Path
    """Queries: .jsonl, .parquet, a saved Hugging Face dataset folder, a dataset repository folder or a Hub id
    (org/name[:SPLIT]; docs/inputs.md)."""
    output_dir: Path
    """Where final.parquet, final.jsonl, details, errors, config.yaml and manifest.json go; a rerun resumes there."""
    query_column: str | None = None
    """Default: prompt, or question when there is no prompt."""
    id_column: str | None = None
    """Default: id (or prompt_id); missing ids are generated from the content."""
    limit: int | None = field(default=None, metadata={"min": 0})
    """Only the first N valid queries (with --shard: this shard's ids among the first N of the input)."""
    skip_bad_rows: bool = False
    """Write invalid rows to rejected.jsonl and go on (default: stop at the first, before any model call)."""
    shard: str | None = None
    """i/n: only the ids of shard i of n (0 <= i < n), a split by id independent of row order, so that n machines
    each run one part (`rubricrl merge` joins their folders); default: all."""
    allow_changed_settings: bool = False
    """Resume into an output folder whose rows were made with other settings (model, method, sampling, prompts):
    the manifest and the dataset card then name each set of settings, and each details line its own. Never saved
    in config.yaml."""

    def __post_init__(self) -> None:
        parse_shard(self.shard)


def add_commands(commands) -> None:
    synth = commands.add_parser("synth", help="synthesize a rubric per query (Coarse-to-Fine or Rubrics-as-Rewards)")
    add_config_arguments(synth, [SynthArgs, SynthesisConfig, LLMSettings])
    synth.set_defaults(run=run_synth)


def run_synth(args: argparse.Namespace) -> int:
    settings = parse_settings(args, command="synth")
    synth, config, llm = settings
    out = synth.output_dir

    # Pass 1, before any model call: validate every row (streamed), count, collect the rejected ones.
    rejected = []
    reject = rejected.append if synth.skip_bad_rows else None
    shard = parse_shard(synth.shard)

    # --limit before --shard: the shards of a limited run hold the ids of that run, and merge into it
    def read(on_reject):
        return (
            q
            for q in itertools.islice(
                iter_queries(
                    synth.input, query_column=synth.query_column, id_column=synth.id_column, on_reject=on_reject
                ),
                synth.limit,
            )
            if shard is None or q.id in shard
        )

    total = sum(1 for _ in read(reject))
    run = FolderRun("synth", settings, out, done_file="final.jsonl", allow_changed=synth.allow_changed_settings)

    with run.roles(args, llm, config.roles, cpu_budgets=config.cpu_max_tokens()) as roles:
        settings_id = run.prepare(
            synthesis_settings(synth, config, roles),
            rejected=rejected if synth.skip_bad_rows else None,
            rejected_said=f"rejected {len(rejected)} invalid rows",
        )
        # Pass 2: the same rows again, streamed into the pipeline (rejected ones were recorded in pass 1).
        summary = asyncio.run(synthesize(run, config, read(lambda _: None), total, settings_id))
    counts = {
        "valid_queries": total,
        "rejected_rows": len(rejected),
        "done_this_run": summary.done,
        "already_done": summary.skipped,
        "failed": dict(summary.failed),
        "rows_in_final": summary.rows_in_final,
    }
    manifest = run.finish(
        counts,
        first_error=summary.first_error,
        rows=summary.rows_by_fingerprint,
        described={"input": describe_input(synth.input)},
        extra={"prompts": {p.name: p.sha256 for p in stages.ALL_PROMPTS}},
    )
    print(summary_text(manifest, summary.criteria))
    return 0 if not summary.failed else 1


async def synthesize(run: FolderRun, config: SynthesisConfig, queries, total: int, settings_id: str) -> RunSummary:
    async with run.client(invalid_answer_retries=config.attempts - 1) as client:
        pipeline = SynthesisRun(run.out, config, client, in_flight=max(16, 2 * run.slots), fingerprint=settings_id)
        return await pipeline.run(queries, total)


def synthesis_settings(synth: SynthArgs, config: SynthesisConfig, roles: dict) -> dict:
    """What determines the rows (rubricrl/runs/provenance.py): the method and its settings, the query column, each role
    as resolved, the prompts. Not `attempts` (it bounds retries of malformed answers, not what a good one is), nor
    concurrency, timeouts, the limit or paths."""
    method = {key: value for key, value in resolved([config])["synthesis"].items() if key != "attempts"}
    prompts = [*stages.ALL_PROMPTS, *((judge_prompt(GradingConfig()), judge.SYSTEM) if config.contrast_pool else ())]
    return {
        "command": "synth",
        "synthesis": method,
        "query_column": synth.query_column,
        "id_column": synth.id_column,
        "roles": role_settings(roles),
        "prompts": {p.name: p.sha256 for p in prompts},
    }


def summary_text(manifest: dict, criteria: list[int]) -> str:
    counts = manifest["counts"]
    lines = summary_head(
        manifest,
        f"{counts['valid_queries']} valid, {counts['rejected_rows']} rejected",
        counts["done_this_run"],
        counts["already_done"],
        also=f"; {counts['rows_in_final']} rows in final.parquet",
    )
    if criteria:
        lines.append(
            f"criteria per query (this run): min {min(criteria)}, median {statistics.median(criteria):g}, "
            f"mean {statistics.mean(criteria):.1f}, max {max(criteria)}"
        )
    lines += summary_tail(
        manifest,
        "rows",
        "details line",
        "final.parquet, final.jsonl, final_details.parquet, details.jsonl, manifest.json",
    )
    return "\n".join(lines)
