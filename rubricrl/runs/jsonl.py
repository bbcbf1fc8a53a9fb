"""The JSONL files a run appends to, and the files written whole: one line per record, crash-safe.

A line per finished unit of work, flushed, so a kill loses at most the line in hand; `complete_rows` drops a last
line cut off by a kill, and a bad line before it is an error. `write_whole` / `write_jsonl` write a temporary name
that replaces the old file at once. `ParquetTable` converts such lines in batches with pyarrow's JSON reader (memory
holds one batch): `pa.array` on Python objects would import pandas (a quarter of a second) and go object by object.
"""

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricrl.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 1000
BATCH_BYTES = 16 << 20  # long multi-turn prompts make big rows: a batch is bounded in bytes too


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
                    raise OutputFolderError(
                        f"{path}: line {number}: not a row this harness wrote (JSON with an id); "
                        "fix or remove that line, or use another --output-dir"
                    )
                break
            good_bytes += len(line)
            yield line, row
    if good_bytes != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good_bytes)


def json_object(line: bytes) -> dict[str, Any] | None:
    """A complete line of a JSONL file we append to, as its object; None for a line a kill cut off (no newline) or
    one that holds no JSON object."""
    if not line.endswith(b"\n"):
        return None
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _row(line: bytes) -> dict[str, Any] | None:
    row = json_object(line)
    return row if row is not None and isinstance(row.get("id"), str) else None


def write_whole(path: Path, data: bytes | str) -> Path:
    """A file written whole: under a temporary name first, then moved into place, so that a reader (or a kill)
    never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    tmp.replace(path)
    return path


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """A JSONL file written whole (write_whole)."""
    write_whole(path, b"".join(json_line(record) for record in records))


class ParquetTable:
    """One Parquet file, written in batches of JSON lines under a `.tmp` name until `close` moves it into place;
    with `arrow`, the same batches also go to that Arrow stream file (what `datasets` memory-maps), so that a
    dataset folder needs neither a second pass over the rows nor a copy."""

    def __init__(
        self,
        path: Path,
        schema: Callable[[], "pa.Schema"],
        batch_rows: int = BATCH_ROWS,
        batch_bytes: int = BATCH_BYTES,
        arrow: tuple[Path, "pa.Schema"] | None = None,
    ):
        self.path = path
        self.tmp = path.with_name(path.name + ".tmp")
        self.schema = schema
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self.arrow = arrow
        """(path, schema): the schema is `schema()` with the metadata the reader expects (datasets' features)."""
        self.writer = None  # opened with the first batch
        self.arrow_writer = None
        self.lines: list[bytes] = []
        self.size = 0
        self.rows = 0

    def add(self, line: bytes) -> None:
        self.lines.append(line)
        self.size += len(line)
        if len(self.lines) >= self.batch_rows or self.size >= self.batch_bytes:
            self._write()

    def _write(self) -> None:
        import pyarrow as pa
        import pyarrow.json as pj
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.tmp, self.schema())
            if self.arrow is not None:
                self.arrow_writer = pa.ipc.new_stream(str(self.arrow[0]), self.arrow[1])
        if self.lines:
            data = b"".join(self.lines)
            # one block for the whole batch: a block must hold whole lines, and a line may be long
            read = pj.ReadOptions(block_size=len(data), use_threads=False)
            parse = pj.ParseOptions(explicit_schema=self.schema(), unexpected_field_behavior="ignore")
            table = pj.read_json(pa.py_buffer(data), read_options=read, parse_options=parse)
            self.writer.write_table(table)
            if self.arrow_writer is not None:
                self.arrow_writer.write_table(table.replace_schema_metadata(self.arrow[1].metadata))
            self.rows += len(self.lines)
            self.lines, self.size = [], 0

    def finish(self) -> None:
        """The last rows written and the file closed, still under its `.tmp` name."""
        self._write()
        self.writer.close()
        if self.arrow_writer is not None:
            self.arrow_writer.close()

    def discard(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.arrow_writer is not None:
            self.arrow_writer.close()
        self.tmp.unlink(missing_ok=True)
