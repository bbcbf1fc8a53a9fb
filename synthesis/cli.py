"""`rubricrl synth`: queries in, a RubricHub-compatible rubric dataset out."""

import argparse
import asyncio
import itertools
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grading import judge
from grading.grader import GradingConfig, judge_prompt
from rubricrl.config import add_config_arguments, config_source, parse_settings, resolved, write_resolved
from rubricrl.hub_datasets import describe_input
from rubricrl.llm import LLMSettings, open_llm
from rubricrl.manifest import endpoint_counts, package_versions, usage_lines, write_manifest
from rubricrl.provenance import RunRecord, check_settings, fingerprint, finished_rows, role_settings, totals
from rubricrl.queries import iter_queries, write_rejected
from rubricrl.shards import parse_shard
from synthesis import stages
from synthesis.config import SynthesisConfig
from synthesis.pipeline import SynthesisRun


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
    finished_before = finished_rows(out / "final.jsonl")  # also: a bad line in the folder is said now

    async def synthesize(session, run_record: RunRecord):
        async with session.client(invalid_answer_retries=config.attempts - 1) as client:
            run_record.client = client
            slots = llm.concurrency * max(len(role.endpoints) for role in session.roles.values())
            run = SynthesisRun(
                out, config, client, in_flight=max(16, 2 * slots), fingerprint=run_record.entry["fingerprint"]
            )
            # Pass 2: the same rows again, streamed into the pipeline (rejected ones were recorded in pass 1).
            return await run.run(read(lambda _: None), total)

    with open_llm(llm, config.roles, source=config_source(args), cpu_budgets=config.cpu_max_tokens()) as session:
        # Before anything in the folder changes: are its rows made with these settings?
        current = fingerprint(synthesis_settings(synth, config, session.roles))
        used = check_settings(out, current, rows=finished_before, allow_changed=synth.allow_changed_settings)
        out.mkdir(parents=True, exist_ok=True)  # every check passed: now the folder may change
        if synth.skip_bad_rows:
            write_rejected(rejected, out / "rejected.jsonl")
            if rejected:
                print(f"rejected {len(rejected)} invalid rows: {out / 'rejected.jsonl'}", file=sys.stderr)
        config_written = resolved(settings)
        config_written.pop("allow_changed_settings")  # an acknowledgement for one run, never a saved setting
        write_resolved(out / "config.yaml", config_written)
        (out / "manifest.json").unlink(missing_ok=True)  # "finished" is only true again at the end
        run_record = RunRecord(out, current["id"])
        try:
            summary = asyncio.run(synthesize(session, run_record))
        except BaseException:  # interrupted: what it spent still counts in the folder's totals
            run_record.write(finished=False)
            raise
    counts = {
        "valid_queries": total,
        "rejected_rows": len(rejected),
        "done_this_run": summary.done,
        "already_done": summary.skipped,
        "failed": dict(summary.failed),
        "rows_in_final": summary.rows_in_final,
    }
    run_record.write(finished=True, counts=counts)
    manifest = {
        "command": "synth",
        "input": describe_input(synth.input),
        "output_dir": str(out),
        "config": config_written,
        "roles": {name: role.public() for name, role in session.roles.items()},
        "budgets": session.budget_note(),
        "prompts": {p.name: p.sha256 for p in stages.ALL_PROMPTS},
        "packages": package_versions(),
        "counts": counts,
        "first_error": summary.first_error,
        "endpoints": endpoint_counts(run_record.client),
        **totals(out, used, summary.rows_by_fingerprint),
    }
    write_manifest(out, manifest)
    print(summary_text(manifest, summary.criteria))
    return 0 if not summary.failed else 1


def synthesis_settings(synth: SynthArgs, config: SynthesisConfig, roles: dict) -> dict:
    """What determines the rows (rubricrl/provenance.py): the method and its settings, the query column, each role
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
    out = Path(manifest["output_dir"])
    failed = sum(counts["failed"].values())
    lines = [
        f"queries: {counts['valid_queries']} valid, {counts['rejected_rows']} rejected; "
        f"{counts['done_this_run']} done now, {counts['already_done']} done before, {failed} failed; "
        f"{counts['rows_in_final']} rows in final.parquet"
    ]
    if failed:
        first = manifest["first_error"] or ""
        lines.append(
            f"failed by stage: {counts['failed']}; first error: {first[:300]}; every error: "
            f"{out / 'errors.jsonl'} (failed queries are retried by the next run)"
        )
    if criteria:
        lines.append(
            f"criteria per query (this run): min {min(criteria)}, median {statistics.median(criteria):g}, "
            f"mean {statistics.mean(criteria):.1f}, max {max(criteria)}"
        )
    mixed = [f"{f['id']} ({f['rows']} rows)" for f in manifest["fingerprints"]]
    if len(mixed) > 1:
        lines.append(
            f"settings: the rows come from {len(mixed)} different settings: {', '.join(mixed)} "
            f"({out / 'fingerprint.json'}; each details line names its own)"
        )
    lines += usage_lines(manifest)
    lines.append(f"output: {out} (final.parquet, final.jsonl, final_details.parquet, details.jsonl, manifest.json)")
    return "\n".join(lines)
