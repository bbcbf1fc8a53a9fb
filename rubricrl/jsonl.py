"""The JSONL files a run appends to, and the files written whole: one line per record, crash-safe.

A run appends one line per finished unit of work and flushes it, so a kill loses at most the line in hand. Reopening
(`complete_rows`) drops a last line cut off by a kill; a bad line before the last one is not a kill's doing and is an
error. A file written whole (`write_jsonl`) goes to a temporary name first and replaces the old one at once.
"""

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rubricrl.errors import UserError


class OutputFolderError(UserError, ValueError):
    """A file of an output folder holds something this harness did not write; the message names file and line."""


def json_line(row: dict[str, Any]) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode() + b"\n"


def complete_rows(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """(line, row) for each line of a JSONL file we append to. The last line may have been cut off by a kill (no
    newline, or not a row): it is truncated away once the lines have been read. A bad line before the last one is
    not a kill's doing, and is an error: truncating there would drop the finished rows after it."""
    if not path.exists():
        return
    good_bytes = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            row = _row(line)
            if row is None:
                if f.read(1):
                    raise OutputFolderError(f"{path}: line {number}: not a row this harness wrote (JSON with an id); "
                                            "fix or remove that line, or use another --output-dir")  # fmt: skip
                break
            good_bytes += len(line)
            yield line, row
    if good_bytes != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good_bytes)


def _row(line: bytes) -> dict[str, Any] | None:
    if not line.endswith(b"\n"):
        return None
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) and isinstance(row.get("id"), str) else None


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """The whole file at once: written under a temporary name, then moved into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        for record in records:
            f.write(json_line(record))
    tmp.replace(path)
