"""`rubricrl merge` for RuFT builds: shard folders joined into one, the statistics recomputed from the joined
candidates (rubricrl/runs/merge.py checks the folders and writes what every kind shares)."""

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from rubricrl.runs.jsonl import complete_rows
from rubricrl.runs.manifest import package_versions
from rubricrl.runs.merge import merged_from
from rubricrl.runs.provenance import totals


def merge_ruft(folders, manifests, out: Path, used, config) -> tuple[dict[str, Any], str]:
    from ruft.build_output import finish, summary_text
    from ruft.config import RuftConfig

    files = {
        name: open(out / name, "wb") for name in ("queries.jsonl", "candidates.jsonl", "sft.jsonl", "errors.jsonl")
    }
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
        **manifests[0],
        "output_dir": str(out),
        "config": config,
        "packages": package_versions(),
        "endpoints": {},
        "counts": {
            "queries": sum(c["queries"] for c in counts),
            "done_this_run": 0,
            "done_before": finished,
            "failed": dict(failed),
            **stats["counts"],
        },
        "first_error": next((m["first_error"] for m in manifests if m.get("first_error")), None),
        "scores": stats["scores"],
        "merged_from": merged_from(folders, manifests),
        **totals(out, used, stats["queries_by_fingerprint"]),
    }
    return manifest, f"merged {len(folders)} folders\n" + summary_text(manifest, out)
