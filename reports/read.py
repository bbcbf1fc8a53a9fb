"""Reading an output folder's files without ever writing to it (a build or a run may still be appending): JSON, YAML,
JSONL with a last line a kill or a running writer may have cut off, trainer log histories, and the prompts of a
rubric file."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from grading.scores import DEFAULT_MIN_COVERAGE
from rubricrl.errors import UserError
from rubricrl.runs.jsonl import json_object
from rubricrl.runs.training import latest_checkpoint


class ReportError(UserError):
    """A folder `rubricrl report` cannot read; the message names the folder or file and what was looked for."""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ReportError(f"{path}: cannot read: {error.strerror}") from None
    except ValueError as error:
        raise ReportError(f"{path}: not valid JSON: {error}") from None


def read_yaml(path: Path) -> dict[str, Any]:
    """A config.yaml as a mapping ({} when the folder has none)."""
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ReportError(f"{path}: cannot read the config: {error}") from None
    return data if isinstance(data, dict) else {}


def iter_jsonl(path: Path, notes: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file. A last line without its newline, or not JSON, is skipped with a note (a writer may be
    appending to it, or was killed); a bad line before the last one raises ReportError naming the line."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            row = json_object(line)
            if row is None:
                if f.read(1):
                    raise ReportError(f"{path}: line {number}: not a JSON object")
                notes.append(f"{path.name}: line {number} is incomplete (still being written, or cut off): left out")
                return
            yield row


def log_history(folder: Path) -> tuple[list[dict[str, Any]], str]:
    """transformers' Trainer log history and where it was read: log_history.json (written when a run ends), else
    the trainer_state.json of the newest checkpoint (a run in progress, or one that writes no log_history.json)."""
    path = folder / "log_history.json"
    if path.is_file():
        history = read_json(path)
        return (history if isinstance(history, list) else []), path.name
    latest = latest_checkpoint(folder)
    if latest is None:
        return [], ""
    state = read_json(latest / "trainer_state.json")
    return list(state.get("log_history") or []), str((latest / "trainer_state.json").relative_to(folder))


def find_file(name: str | None, folder: Path) -> Path | None:
    """A path a config names (relative to where the command ran, which the config does not record): as given, then
    from the folder, then from its parent."""
    if not name:
        return None
    path = Path(name).expanduser()
    for candidate in (path, folder / path, folder.parent / path):
        if candidate.exists():
            return candidate
    return None


def rubric_rows(name: str | None, folder: Path, ids: set[str], notes: list[str]) -> dict[str, Any]:
    """{id: grading.dataset.RubricRow} for `ids` from the rubric file a config names (for the prompts, which graded
    files do not repeat); {} with a note when the file is gone or unreadable: the page shows the rest."""
    if not ids:
        return {}
    path = find_file(name, folder)
    if path is None:
        notes.append(
            f"prompts not shown: the rubric file {name!r} named in the config was not found"
            if name
            else "prompts not shown: the config names no rubric file"
        )
        return {}
    from grading.dataset import iter_rubric_rows

    rows = {}
    try:
        for row in iter_rubric_rows(path):
            if row.id in ids:
                rows[row.id] = row
                if len(rows) == len(ids):
                    break
    except (UserError, OSError, ValueError) as error:
        notes.append(f"prompts not shown: cannot read the rubric file {path}: {error}")
        return {}
    if len(rows) < len(ids):
        notes.append(f"{len(ids) - len(rows)} prompt(s) not found in the rubric file {path}")
    return rows


def read_manifest(path: Path) -> dict[str, Any]:
    """A folder's manifest.json, or {} where there is none (a run still going, or killed)."""
    manifest = read_json(path / "manifest.json") if (path / "manifest.json").is_file() else {}
    return manifest if isinstance(manifest, dict) else {}


def scoring_rule(settings: dict[str, Any]) -> dict[str, Any]:
    """The scoring rule a report or a `grading:` section states (grading.scores' defaults where it says none)."""
    return {
        "min_coverage": settings.get("min_coverage", DEFAULT_MIN_COVERAGE),
        "undecided_penalty": settings.get("undecided_penalty", "unscored"),
        "undecided_criterion": settings.get("undecided_criterion", "drop"),
    }
