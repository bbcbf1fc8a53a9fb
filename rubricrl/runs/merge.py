"""`rubricrl merge DIR... --output-dir OUT`: the folders of `--shard i/n` runs of `synth` or `ruft build` as one, as
if one run had made it. Every id once (one in two folders is an error naming both); the same settings everywhere
(fingerprints, rubricrl/runs/provenance.py), else an error naming the difference, and with `--shard`, every shard of
the split once; each folder's finished queries (not one a shard was killed in, as a resume would), Parquet files
and SFT dataset written once, in shard order; `manifest.json` with usage and time summed over all runs (`runs.jsonl`
keeps each, with its folder) and `merged_from` naming each folder, shard and counts. The result is an ordinary
folder: `rubricrl publish` and `report` read it, `synth`/`ruft build` resume into it (retrying the shards' failed
queries from the cache). `grade`/`eval` shards merge by concatenation: `cat shard*/graded.jsonl > all.jsonl`, then
`rubricrl eval --graded all.jsonl --output-dir merged/`.
"""

import argparse
import functools
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricrl.config import write_resolved
from rubricrl.errors import UserError
from rubricrl.runs.jsonl import complete_rows, json_line
from rubricrl.runs.manifest import write_manifest
from rubricrl.runs.provenance import FINGERPRINT_FILE, RUNS_FILE, describe_change
from rubricrl.runs.shards import parse_shard

Merger = Callable[
    [list[Path], list[dict[str, Any]], Path, list[dict[str, Any]], dict[str, Any]], tuple[dict[str, Any], str]
]
"""How a command's shard folders become one: (folders, their manifests, the output folder, the settings used, the
merged config) -> (its manifest, the summary to print). Each stage merges its own (synthesis/merge.py,
ruft/merge.py); the entry point hands them in, so that the core imports no stage."""


@dataclass(frozen=True)
class MergeKind:
    done_file: str
    """The file whose ids are the folder's finished rows (shards must not share one)."""
    merge: Merger


def add_command(commands, kinds: dict[str, MergeKind]) -> None:
    """The `merge` command for the folders of the commands `kinds` names (a manifest's "command")."""
    merge = commands.add_parser("merge", help="join the output folders of shards (`synth`/`ruft build` --shard i/n)")
    merge.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="finished shard output folders, in order")
    merge.add_argument(
        "--output-dir",
        "--output_dir",
        "--output",
        dest="output_dir",
        type=Path,
        required=True,
        help="the merged folder (new or empty; a merge that fails leaves it as it was)",
    )
    merge.set_defaults(run=functools.partial(run_merge, kinds=kinds))


def run_merge(args: argparse.Namespace, kinds: dict[str, MergeKind]) -> int:
    folders, out = list(args.dirs), args.output_dir
    manifests = [finished_manifest(folder, kinds) for folder in folders]
    kind = manifests[0]["command"]
    for folder, manifest in zip(folders, manifests):
        if manifest["command"] != kind:
            raise UserError(
                f"{folder}: a `{manifest['command']}` folder, {folders[0]} a `{kind}` one; merge folders of one command"
            )
    check_output(out, folders)
    check_same_input(folders, manifests)
    check_shards(folders, manifests)
    used = same_settings(folders)
    check_unique_ids(folders, kinds[kind].done_file)
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
        manifest, text = kinds[kind].merge(folders, manifests, out, used, config)
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


def finished_manifest(folder: Path, kinds: dict[str, MergeKind]) -> dict[str, Any]:
    path = folder / "manifest.json"
    if not path.is_file():
        raise UserError(
            f"{folder}: no manifest.json: not a finished `synth` or `ruft build` output folder (rerun its "
            "command there to finish it, then merge)"
        )
    manifest = json.loads(path.read_text())
    if manifest.get("command") not in kinds:
        raise UserError(
            f"{folder}: a `{manifest.get('command')}` folder; merge joins {' and '.join(kinds)} folders "
            "(graded files: concatenate them, then `rubricrl eval --graded`)"
        )
    if not (folder / FINGERPRINT_FILE).is_file():
        raise UserError(
            f"{folder}: no {FINGERPRINT_FILE} (written by an older rubricrl): its settings cannot be "
            "compared with the other folders'"
        )
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
                raise UserError(
                    f"{folder}: made from {key} {manifest.get(key)}, {folders[0]} from "
                    f"{manifests[0].get(key)}; merge the shards of one input"
                )
        if manifest["config"].get("limit") != manifests[0]["config"].get("limit"):
            raise UserError(
                f"{folder}: --limit {manifest['config'].get('limit')}, {folders[0]}: "
                f"--limit {manifests[0]['config'].get('limit')}; merge the shards of one run"
            )


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
        raise UserError(
            f"shard(s) {', '.join(f'{i}/{shards[0].count}' for i in missing)} missing: merge every shard "
            "of the split, so that the merged folder holds every id"
        )


def same_settings(folders: list[Path]) -> list[dict[str, Any]]:
    """The settings the rows come from, the same list in every folder; a difference is named."""
    used = [json.loads((f / FINGERPRINT_FILE).read_text())["fingerprints"] for f in folders]
    for folder, other in zip(folders[1:], used[1:]):
        if [f["id"] for f in other] != [f["id"] for f in used[0]]:
            raise UserError(
                f"{folder}: made with other settings than {folders[0]} "
                f"({describe_change(used[0][-1], other[-1])}); merge only shards of one run"
            )
    return used[0]


def check_unique_ids(folders: list[Path], done_file: str) -> None:
    seen: dict[str, Path] = {}
    for folder in folders:
        for _, row in complete_rows(folder / done_file):
            if seen.setdefault(row["id"], folder) != folder:
                raise UserError(
                    f"id {row['id']!r} is in {seen[row['id']]} and in {folder}; every id must be in one folder only"
                )


def merged_from(folders: list[Path], manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"folder": str(f), "shard": m["config"].get("shard"), "counts": m["counts"]} for f, m in zip(folders, manifests)
    ]
