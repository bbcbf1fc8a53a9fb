"""How an output folder's rows were made, over every run that resumed it (`synth`, `ruft build`):
- `fingerprint.json`: the settings that determine the rows (method and its settings, each role's resolved model and
  sampling, prompt hashes; not concurrency, timeouts, limits or paths), checked before any model call. Other settings
  would leave a manifest and card describing mixed rows as made one way, so they are refused without
  `--allow-changed-settings`; with it every set is kept (oldest first) and each row names its own (`fingerprint`);
- `runs.jsonl`: a line per run (settings, seconds, model usage, counts), written when it ends or is interrupted, so
  the manifest's usage and time add up over resumed runs.
"""

import datetime
import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rubricrl.errors import UserError
from rubricrl.runs.jsonl import complete_rows, json_line, write_whole

FINGERPRINT_FILE = "fingerprint.json"
RUNS_FILE = "runs.jsonl"
UNKNOWN = "unknown"
"""The fingerprint of rows written before rubricrl recorded one."""
ALLOW_FLAG = "--allow-changed-settings"


class ChangedSettingsError(UserError):
    """A rerun into a folder whose rows were made with other settings."""


def role_settings(roles: dict[str, Any]) -> dict[str, Any]:
    """What of each role shapes its answers: model and sampling settings as resolved (CPU budgets included). Not
    the endpoint or the key: the same model gives the same answers wherever it is served (the response cache
    agrees), and a local server's port changes from run to run."""
    return {
        name: {"model": role.model, "structured_outputs": role.structured_outputs, **role.sampling_params()}
        for name, role in sorted(roles.items())
    }


def fingerprint(settings: dict[str, Any]) -> dict[str, Any]:
    """{"id": a short hash, "settings": the settings flat, as {dotted key: value}} (flat: a difference names a key)."""
    flat = _flatten(settings)
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return {"id": digest[:12], "settings": flat}


def check_settings(folder: Path, current: dict[str, Any], *, rows: int, allow_changed: bool) -> list[dict]:
    """The settings the folder's rows come from, oldest first and `current` last, written to fingerprint.json.
    Raises ChangedSettingsError, before writing anything, when the folder holds rows made with other settings than
    `current` (or with unrecorded ones) and `allow_changed` is off. `rows`: the rows the folder holds."""
    path = folder / FINGERPRINT_FILE
    used = _read_fingerprints(path) if rows else []  # without rows, earlier settings made nothing here
    if rows and not used:
        used = [{"id": UNKNOWN, "settings": None}]
    if used and used[-1]["id"] != current["id"] and not allow_changed:
        change = describe_change(used[-1], current)
        raise ChangedSettingsError(
            f"{folder}: holds {rows} finished rows made with other settings than this run's ({change}; see {path}): "
            f"use a new --output-dir, or pass {ALLOW_FLAG} to add rows made with these settings (the manifest and the "
            "dataset card then name both)"
        )
    used = [f for f in used if f["id"] != current["id"]] + [current]
    write_whole(path, json.dumps({"fingerprints": used}, indent=2, ensure_ascii=False))
    return used


def finished_rows(path: Path) -> int:
    """The rows of a JSONL file we append to (read whole: a bad line is an error now, before anything changes)."""
    return sum(1 for _ in complete_rows(path))


def describe_change(old: dict[str, Any], new: dict[str, Any], most: int = 4) -> str:
    """`key old -> new, ...` (values shortened, at most `most` keys named)."""
    if old["settings"] is None:
        return "they were written by an older rubricrl, which did not record its settings"
    before, after = old["settings"], new["settings"]
    # the same change in several roles (--model changes them all) is said once: roles.{a,b}.model "x" -> "y"
    groups: dict[tuple[str, str, str], list[str]] = {}
    for key in sorted(set(before) | set(after)):
        if before.get(key, ...) != after.get(key, ...):
            parts = key.split(".", 2)
            in_role = parts[0] == "roles" and len(parts) == 3
            role, pattern = (parts[1], f"roles.{{}}.{parts[2]}") if in_role else (key, "{}")
            groups.setdefault((pattern, _short(before.get(key)), _short(after.get(key))), []).append(role)
    changed = [
        pattern.format(names[0] if len(names) == 1 else "{" + ",".join(names) + "}") + f" {was} -> {now}"
        for (pattern, was, now), names in groups.items()
    ]
    more = f" and {len(changed) - most} more" if len(changed) > most else ""
    return ", ".join(changed[:most]) + more


def _short(value: Any, width: int = 40) -> str:
    text = "unset" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def _flatten(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _read_fingerprints(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        used = json.loads(path.read_text())["fingerprints"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(
            f"{path}: not a fingerprint file this harness wrote ({error}); restore it, or use a new --output-dir"
        ) from None
    return used


# --- runs and their totals --------------------------------------------------------------------------------------


class RunRecord:
    """One run of a folder, started now: `write` appends its line to runs.jsonl, with the usage of `client` (the
    run's LLMClient, set once it is open)."""

    def __init__(self, folder: Path, fingerprint_id: str):
        self.folder = folder
        self.client = None
        self.started = time.monotonic()
        self.entry: dict[str, Any] = {
            "id": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
            "fingerprint": fingerprint_id,
        }

    def write(self, *, finished: bool, counts: dict[str, Any] | None = None) -> None:
        usage = {name: asdict(u) for name, u in self.client.usage.items()} if self.client else {}
        self.entry.update(
            finished=finished, seconds=round(time.monotonic() - self.started, 1), usage=usage, counts=counts or {}
        )
        with open(self.folder / RUNS_FILE, "ab") as f:
            f.write(json_line(self.entry))


def totals(folder: Path, used: list[dict[str, Any]], rows: Counter) -> dict[str, Any]:
    """The manifest's provenance: the settings of this run, every set of settings the rows come from with how many
    rows each made (`rows` by fingerprint id), every run, and usage and seconds summed over the runs."""
    runs = [row for _, row in complete_rows(folder / RUNS_FILE)]
    usage: dict[str, Counter] = {}
    for run in runs:
        for role, counts in run["usage"].items():
            usage.setdefault(role, Counter()).update(counts)
    # rows naming settings that fingerprint.json lacks (it was removed by hand) are listed with unknown settings;
    # settings that made no row are left out, except this run's (the manifest's roles are its)
    listed = [{"id": i, "settings": None} for i in rows if i not in {f["id"] for f in used}] + used
    listed = [{**f, "rows": rows.get(f["id"], 0)} for f in listed if rows.get(f["id"]) or f is used[-1]]
    return {
        "fingerprint": used[-1]["id"],
        "fingerprints": listed,
        "runs": runs,
        "usage": {role: dict(counts) for role, counts in usage.items()},
        "seconds": round(sum(run["seconds"] for run in runs), 1),
    }


def card_note(manifest: dict[str, Any], unit: str, where: str) -> str:
    """Markdown for a dataset card when the rows come from more than one set of settings ("" otherwise): each set,
    oldest first, with its number of `unit`; the first with its models, the next ones with what changed."""
    used = manifest.get("fingerprints") or []
    if len(used) < 2:
        return ""
    lines = [
        f"- **mixed settings**: this folder was resumed with changed settings ({ALLOW_FLAG}), so its {unit} come "
        f"from {len(used)} different settings, oldest first ({where} names each row's):"
    ]
    previous = None
    for f in used:
        if f["settings"] is None:
            text = "settings not recorded (written by an older rubricrl)"
        elif previous is None:
            models = [
                f"{k.split('.')[1]} `{v}`"
                for k, v in f["settings"].items()
                if k.startswith("roles.") and k.endswith(".model")
            ]
            text = "models: " + ", ".join(models)
        else:
            text = "changed: " + describe_change(previous, f, most=8)
        previous = f if f["settings"] is not None else previous
        lines.append(f"  - `{f['id']}` ({f.get('rows', '?')} {unit}): {text}")
    return "\n".join(lines) + "\n"
