"""The rows of one file, each a `Record` with its place (`line 3` of JSONL, `row 3` of Parquet or a dataset, from 1)
or the reason it is no record; what the reader (`rubricrl.records.reader`) and the dataset reader
(`rubricrl.records.hub`) build on."""

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricrl.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 1024  # rows per Arrow batch: large enough to be fast, small enough to keep memory flat


class RecordFileError(UserError, ValueError):
    """A file is unreadable or has a bad record; the message names the file, the line or row, and the problem."""


class InvalidRecord(Exception):
    """A record's problem, without its location (the reader adds it, since it knows it)."""


@dataclass(frozen=True)
class Record:
    location: str
    """`line 3` (JSONL) or `row 3` (Parquet, dataset), counting from 1."""
    raw: Any
    """The parsed row, or the raw line text when the line is not a JSON object."""
    row: dict[str, Any] | None = None
    problem: str | None = None
    """Why the line is not a record (invalid JSON or UTF-8, not an object)."""


def jsonl_rows(f) -> Iterator[Record]:
    # Bytes, not text mode: an undecodable line is then reported with its number instead of failing the file,
    # and only "\n" ends a line (text mode would also split on "\r" and Unicode line separators).
    with f:
        for number, data in enumerate(f, 1):
            if number == 1:
                data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark some editors write
            location = f"line {number}"
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as error:
                raw = data.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
                yield Record(location, raw, problem=f"invalid UTF-8 at byte {error.start}: {error.reason}")
                continue
            if line.strip():
                yield _parse_line(line.rstrip("\r\n"), location)


def _parse_line(line: str, location: str) -> Record:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        return Record(location, line, problem=f"invalid JSON: {error.msg} at column {error.colno}")
    if not isinstance(row, dict):
        return Record(location, line, problem=f"expected a JSON object, got {type(row).__name__}")
    return Record(location, row, row=row)


def parquet_rows(path: Path) -> tuple[str, list[str], Iterator[Record]]:
    import pyarrow as pa  # only here: it takes a tenth of a second to load, and JSONL needs none of it
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:
        raise RecordFileError(f"{path}: cannot read as Parquet: {error}") from error
    return str(path), parquet.schema_arrow.names, table_rows(parquet.iter_batches(batch_size=BATCH_ROWS))


def table_rows(batches: "Iterable[pa.RecordBatch | pa.Table]") -> Iterator[Record]:
    index = 1  # rows count from 1, as JSONL lines do: one convention in every message
    for batch in batches:
        for row in batch.to_pylist():
            yield Record(f"row {index}", row, row=row)
            index += 1
