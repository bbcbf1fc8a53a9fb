"""`rubricrl merge DIR... --output-dir OUT`: the output folders of shards (`synth` or `ruft build` run with
`--shard i/n`, one per machine) as one folder, as if one run had made it:

- every id exactly once: an id in two folders is an error naming both (shards of one split never share one);
- the same settings in every folder (their fingerprints, rubricrl/provenance.py): a difference is an error naming
  it, never a silent mix; with `--shard` runs, every shard of the split is there once;
- the rows of each folder's finished queries (a query a shard was killed in the middle of is left out, as a resume
  would leave it), the Parquet files and the SFT dataset written once, in shard order;
- `manifest.json` as the command writes it, with usage and time added up over every shard's runs (`runs.jsonl`
  keeps each run, with the folder it came from) and `merged_from` listing each folder, its shard and its counts.

The merged folder is an ordinary output folder: `rubricrl publish` and `rubricrl report` read it, and the same
`synth`/`ruft build` command resumes into it (the failed queries of the shards are retried, from the cache).
Graded files of `grade`/`eval` shards are merged by concatenation: `cat shard*/graded.jsonl > all.jsonl`, then
`rubricrl eval --graded all.jsonl --output-dir merged/` recomputes the report.
"""

import argparse
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from rubricrl.config import write_resolved
from rubricrl.errors import UserError
from rubricrl.jsonl import complete_rows, json_line
from rubricrl.manifest import package_versions, write_manifest
from rubricrl.provenance import FINGERPRINT_FILE, RUNS_FILE, describe_change, totals
from rubricrl.shards import parse_shard

KINDS = ("synth", "ruft build")


def add_command(commands) -> None:
    merge = commands.add_parser("merge", help="join the output folders of shards (`synth`/`ruft build` --shard i/n)")
    merge.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="finished shard output folders, in order")
    merge.add_argument("--output-dir", "--output_dir", "--output", dest="output_dir", type=Path, required=True,
                       help="the merged folder (new or empty; a merge that fails leaves it as it was)")  # fmt: skip
    merge.set_defaults(run=run_merge)


def run_merge(args: argparse.Namespace) -> int:
    folders, out = list(args.dirs), args.output_dir
    manifests = [finished_manifest(folder) for folder in folders]
    kind = manifests[0]["command"]
    for folder, manifest in zip(folders, manifests):
        if manifest["command"] != kind:
            raise UserError(f"{folder}: a `{manifest['command']}` folder, {folders[0]} a `{kind}` one; merge folders of "
                            "one command")  # fmt: skip
    check_output(out, folders)
    check_same_input(folders, manifests)
    check_shards(folders, manifests)
    used = same_settings(folders)
    check_unique_ids(folders, "final.jsonl" if kind == "synth" else "queries.jsonl")
    existed = out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with open(out / RUNS_FILE, "wb") as runs:  # every shard's runs: the totals add them up
            for folder in folders:
                for _, run in complete_rows(folder / RUNS_FILE):
                    runs.write(json_line({**run, "folder": str(folder)}))
        (out / FINGERPRINT_FILE).write_text((folders[0] / FINGERPRINT_FILE).read_text())
        config = {key: value for key, value in manifests[0]["config"].items() if key != "shard"}
        write_resolved(out / "config.yaml", config)
        if kind == "synth":
            manifest, text = merge_synthesis(folders, manifests, out, used, config)
        else:
            manifest, text = merge_ruft(folders, manifests, out, used, config)
        write_manifest(out, manifest)
    except BaseException:  # a half-merged folder would be refused by the next merge and misread by publish
        for path in out.iterdir():  # it was empty (check_output)
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        if not existed:
            out.rmdir()
        raise
    print(text)
    return 0


def finished_manifest(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    if not path.is_file():
        raise UserError(f"{folder}: no manifest.json: not a finished `synth` or `ruft build` output folder (rerun its "
                        "command there to finish it, then merge)")  # fmt: skip
    manifest = json.loads(path.read_text())
    if manifest.get("command") not in KINDS:
        raise UserError(f"{folder}: a `{manifest.get('command')}` folder; merge joins {' and '.join(KINDS)} folders "
                        "(graded files: concatenate them, then `rubricrl eval --graded`)")  # fmt: skip
    if not (folder / FINGERPRINT_FILE).is_file():
        raise UserError(f"{folder}: no {FINGERPRINT_FILE} (written by an older rubricrl): its settings cannot be "
                        "compared with the other folders'")  # fmt: skip
    return manifest


def check_output(out: Path, folders: list[Path]) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--output-dir {out}: exists and is not an empty folder; merge writes a new folder")
    for folder in folders:
        if folder.resolve() == out.resolve():
            raise UserError(f"--output-dir {out}: is one of the folders to merge")


def check_same_input(folders: list[Path], manifests: list[dict[str, Any]]) -> None:
    """One folder named twice, or shards of different inputs or limits, would not be one dataset."""
    seen: dict[Path, Path] = {}
    for folder in folders:
        if seen.setdefault(folder.resolve(), folder) is not folder:
            raise UserError(f"{folder}: named twice")
    for folder, manifest in zip(folders[1:], manifests[1:]):
        for key in ("input", "rubrics"):
            if manifest.get(key) != manifests[0].get(key):
                raise UserError(f"{folder}: made from {key} {manifest.get(key)}, {folders[0]} from "
                                f"{manifests[0].get(key)}; merge the shards of one input")  # fmt: skip
        if manifest["config"].get("limit") != manifests[0]["config"].get("limit"):
            raise UserError(f"{folder}: --limit {manifest['config'].get('limit')}, {folders[0]}: "
                            f"--limit {manifests[0]['config'].get('limit')}; merge the shards of one run")  # fmt: skip


def check_shards(folders: list[Path], manifests: list[dict[str, Any]]) -> None:
    """Folders of `--shard i/n` runs: one split (the same n), each shard once, none missing."""
    shards = [parse_shard(m["config"].get("shard"), f"{f}: shard") for f, m in zip(folders, manifests)]
    if not any(shards):
        return
    if not all(shards) or len({s.count for s in shards}) > 1:
        listed = ", ".join(f"{f}: {s or 'all'}" for f, s in zip(folders, shards))
        raise UserError(f"the folders are not the shards of one split ({listed})")
    seen: dict[int, Path] = {}
    for folder, shard in zip(folders, shards):
        if shard.index in seen:
            raise UserError(f"{folder} and {seen[shard.index]}: both are shard {shard}")
        seen[shard.index] = folder
    missing = sorted(set(range(shards[0].count)) - set(seen))
    if missing:
        raise UserError(f"shard(s) {', '.join(f'{i}/{shards[0].count}' for i in missing)} missing: merge every shard "
                        "of the split, so that the merged folder holds every id")  # fmt: skip


def same_settings(folders: list[Path]) -> list[dict[str, Any]]:
    """The settings the rows come from, the same list in every folder; a difference is named."""
    used = [json.loads((f / FINGERPRINT_FILE).read_text())["fingerprints"] for f in folders]
    for folder, other in zip(folders[1:], used[1:]):
        if [f["id"] for f in other] != [f["id"] for f in used[0]]:
            raise UserError(f"{folder}: made with other settings than {folders[0]} "
                            f"({describe_change(used[0][-1], other[-1])}); merge only shards of one run")  # fmt: skip
    return used[0]


def check_unique_ids(folders: list[Path], done_file: str) -> None:
    seen: dict[str, Path] = {}
    for folder in folders:
        for _, row in complete_rows(folder / done_file):
            if seen.setdefault(row["id"], folder) != folder:
                raise UserError(f"id {row['id']!r} is in {seen[row['id']]} and in {folder}; every id must be in one "
                                "folder only")  # fmt: skip


def merged_from(folders: list[Path], manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"folder": str(f), "shard": m["config"].get("shard"), "counts": m["counts"]}
            for f, m in zip(folders, manifests)]  # fmt: skip


def merge_synthesis(folders, manifests, out: Path, used, config) -> tuple[dict[str, Any], str]:
    import pyarrow.parquet as pq

    from synthesis.cli import summary_text
    from synthesis.output import OutputFolder

    merged = OutputFolder(out)
    order = []
    for folder in folders:
        done = {row["id"]: row for _, row in complete_rows(folder / "final.jsonl")}
        details = {}  # the last details line of each finished id (a query redone after a kill has two)
        for _, row in complete_rows(folder / "details.jsonl"):
            if row["id"] in done:
                details[row["id"]] = row
        for query_id, row in done.items():
            if query_id not in details:
                raise UserError(f"{folder / 'details.jsonl'}: no line for id {query_id!r} of final.jsonl; was the "
                                "folder changed by hand?")  # fmt: skip
            merged.add(details[query_id], row)
        order += pq.read_table(folder / "final.parquet", columns=["id"]).column("id").to_pylist()
        for _, error in complete_rows(folder / "errors.jsonl"):
            merged.error(error["id"], error["stage"], error["error"])
    rows = merged.close(order=order)
    counts = [m["counts"] for m in manifests]
    failed = sum((Counter(c["failed"]) for c in counts), Counter())
    manifest = {
        **manifests[0], "output_dir": str(out), "config": config, "packages": package_versions(), "endpoints": {},
        "counts": {"valid_queries": sum(c["valid_queries"] for c in counts),
                   "rejected_rows": max(c["rejected_rows"] for c in counts),  # every shard reads, and rejects, all rows
                   "done_this_run": 0, "already_done": rows, "failed": dict(failed), "rows_in_final": rows},
        "first_error": next((m["first_error"] for m in manifests if m.get("first_error")), None),
        "merged_from": merged_from(folders, manifests),
        **totals(out, used, merged.rows_by_fingerprint),
    }  # fmt: skip
    return manifest, f"merged {len(folders)} folders\n" + summary_text(manifest, [])


def merge_ruft(folders, manifests, out: Path, used, config) -> tuple[dict[str, Any], str]:
    from ruft.build import finish, summary_text
    from ruft.config import RuftConfig

    files = {name: open(out / name, "wb") for name in ("queries.jsonl", "candidates.jsonl", "sft.jsonl", "errors.jsonl")}
    try:
        for folder in folders:
            done = set()
            for line, row in complete_rows(folder / "queries.jsonl"):
                done.add(row["id"])
                files["queries.jsonl"].write(line)
            for name in ("candidates.jsonl", "sft.jsonl"):  # lines of queries killed in flight are left out
                files[name].writelines(line for line, row in complete_rows(folder / name) if row["id"] in done)
            if (folder / "errors.jsonl").is_file():
                with open(folder / "errors.jsonl", "rb") as errors:
                    shutil.copyfileobj(errors, files["errors.jsonl"])
    finally:
        for f in files.values():
            f.close()
    stats = finish(out, RuftConfig(**config["ruft"]), manifests[0]["judge"])
    counts = [m["counts"] for m in manifests]
    failed = sum((Counter(c["failed"]) for c in counts), Counter())
    finished = stats["counts"]["finished_queries"]
    manifest = {
        **manifests[0], "output_dir": str(out), "config": config, "packages": package_versions(), "endpoints": {},
        "counts": {"queries": sum(c["queries"] for c in counts), "done_this_run": 0, "done_before": finished,
                   "failed": dict(failed), **stats["counts"]},
        "first_error": next((m["first_error"] for m in manifests if m.get("first_error")), None),
        "scores": stats["scores"], "merged_from": merged_from(folders, manifests),
        **totals(out, used, stats["queries_by_fingerprint"]),
    }  # fmt: skip
    return manifest, f"merged {len(folders)} folders\n" + summary_text(manifest, out)

