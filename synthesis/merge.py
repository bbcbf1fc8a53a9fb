"""`rubricrl merge` for synthesis: shard folders joined into one, as if one run had made them (rubricrl/runs/merge.py
checks the folders and writes what every kind shares)."""

from collections import Counter
from pathlib import Path
from typing import Any

from rubricrl.errors import UserError
from rubricrl.runs.jsonl import complete_rows
from rubricrl.runs.manifest import package_versions
from rubricrl.runs.merge import merged_from
from rubricrl.runs.provenance import totals


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
                raise UserError(
                    f"{folder / 'details.jsonl'}: no line for id {query_id!r} of final.jsonl; was the "
                    "folder changed by hand?"
                )
            merged.add(details[query_id], row)
        order += pq.read_table(folder / "final.parquet", columns=["id"]).column("id").to_pylist()
        for _, error in complete_rows(folder / "errors.jsonl"):
            merged.error(error["id"], error["stage"], error["error"])
    rows = merged.close(order=order)
    counts = [m["counts"] for m in manifests]
    failed = sum((Counter(c["failed"]) for c in counts), Counter())
    manifest = {
        **manifests[0],
        "output_dir": str(out),
        "config": config,
        "packages": package_versions(),
        "endpoints": {},
        "counts": {
            "valid_queries": sum(c["valid_queries"] for c in counts),
            "rejected_rows": max(c["rejected_rows"] for c in counts),  # every shard reads, and rejects, all rows
            "done_this_run": 0,
            "already_done": rows,
            "failed": dict(failed),
            "rows_in_final": rows,
        },
        "first_error": next((m["first_error"] for m in manifests if m.get("first_error")), None),
        "merged_from": merged_from(folders, manifests),
        **totals(out, used, merged.rows_by_fingerprint),
    }
    return manifest, f"merged {len(folders)} folders\n" + summary_text(manifest, [])
