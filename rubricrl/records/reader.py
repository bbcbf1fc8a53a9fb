"""The one reader for every record a stage consumes (queries, rubric rows, responses), streamed: JSONL, Parquet, a saved
or repository-layout dataset folder, or a Hub dataset id (see `rubricrl.records.hub`). Errors name file, place and
problem (`queries.jsonl: line 3: ...`, `rubrics.parquet: row 3: ...`), places counting from 1: a JSONL line as an
editor shows it (blank lines counted); row N of Parquet or a dataset is `Dataset[N - 1]`, `.iloc[N - 1]`.

A record's conversation is, everywhere, `prompt` when it has one (text, or chat messages ending with a user message,
as HealthBench stores them), else `question` (text, as RubricHub's export stores it). Where a file has both,
`question` is the flattened form: a multi-turn chat as one transcript, reaching a model as one user message without
its turns and roles.
"""

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricrl.records.files import (
    InvalidRecord,
    Record,
    RecordFileError,
    jsonl_rows,
    parquet_rows,
)

ROLES = ("system", "user", "assistant")
QUERY_COLUMNS = ("prompt", "question")
"""Where the conversation is, in order of precedence."""
COMPANION_KEY = b"rubricrl.companion"
"""A Parquet file whose schema must stay exact (RubricHub's `final.parquet`) names, in this key of its metadata, a
file beside it that completes its rows: `{"file": ..., "key": "id", "columns": [...]}` (what synthesis writes)."""


@dataclass(frozen=True)
class RecordFile:
    source: str
    """The path (and the split of a dataset dict), for messages."""
    columns: list[str] | None
    """Column names; None for JSONL, which has no schema."""
    records: Iterator[Record]


def open_records(path: str | Path) -> RecordFile:
    """The records of a file, streamed; file-level problems (missing, unreadable, unknown type) raise here.
    A Parquet file that names a companion (COMPANION_KEY) comes with the companion's columns."""
    path = Path(path)
    source, columns, records = _open(path)
    companion = _companion(path) if columns is not None and path.suffix.lower() == ".parquet" else None
    if companion is not None:
        file, key, more = companion
        columns = [*columns, *(c for c in more if c not in columns)]
        records = _completed(records, file, key, more)
    return RecordFile(source, columns, records)


def iter_rows(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) for each record, `where` being `file: line N` or `file: row N`; a bad record raises."""
    yield from rows_of(open_records(path))  # a generator: the file opens at the first next(), as before


def rows_of(opened: RecordFile) -> Iterator[tuple[str, dict[str, Any]]]:
    """iter_rows of a file already opened (whose `source` a caller also wants, e.g. `org/name (test)`)."""
    for record in opened.records:
        where = f"{opened.source}: {record.location}"
        if record.problem is not None:
            raise RecordFileError(f"{where}: {record.problem}")
        yield where, record.row


def query_column(keys: Iterable[str] | dict[str, Any]) -> str | None:
    """The column that holds the conversation: the first of QUERY_COLUMNS present (in a row, the first not null,
    as Parquet rows hold every column; a null one is still named, so that the error says it is null)."""
    if isinstance(keys, dict):
        found = [c for c in QUERY_COLUMNS if keys.get(c) is not None] or [c for c in QUERY_COLUMNS if c in keys]
    else:
        found = [c for c in QUERY_COLUMNS if c in set(keys)]
    return found[0] if found else None


def conversation_of(row: dict[str, Any], key: str | None = None) -> list[dict[str, str]]:
    """The chat messages of a record (from `key`, else by QUERY_COLUMNS precedence); raises InvalidRecord."""
    key = key or query_column(row)
    if key is None:
        raise InvalidRecord("no 'prompt' or 'question' key")
    return conversation(row[key], key)


def id_column_of(row: dict[str, Any]) -> str:
    """`id`, or HealthBench's `prompt_id` in rows without `id`."""
    return "id" if "id" in row else "prompt_id"


def record_id(value: Any, id_key: str, messages: list[dict[str, str]]) -> str:
    """A record's id: a non-empty string, or an integer (as a string: `7` and `"7"` are one id), or, when absent
    or null, generated from the content (`generated_id`), so reruns and reordered files get the same ids."""
    if value is None:  # absent, JSON null, or a Parquet null: the id comes from the content
        return generated_id(messages)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise InvalidRecord(f"{id_key!r} must be a non-empty string or an integer, got {type(value).__name__}")
    if not value.strip():
        raise InvalidRecord(f"{id_key!r} is empty")
    return value


def generated_id(messages: list[dict[str, str]]) -> str:
    """`q-` + 16 hex digits of the sha256 of the messages' canonical JSON: the same query always gets the same id."""
    canonical = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "q-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _companion(path: Path) -> tuple[Path, str, list[str]] | None:
    """(file, key column, columns) of the companion a Parquet file names, if that file is beside it (a copy of the
    file alone, e.g. on the Hub, reads as it is)."""
    import pyarrow.parquet as pq

    declared = (pq.read_schema(path).metadata or {}).get(COMPANION_KEY)
    if declared is None:
        return None
    companion = json.loads(declared)
    file = path.parent / companion["file"]
    return (file, companion["key"], companion["columns"]) if file.is_file() else None


def _completed(records: Iterator[Record], file: Path, key: str, columns: list[str]) -> Iterator[Record]:
    """Each record with the companion's values for its key, where its own are null. A key the companion lacks is
    an error (a folder mixed up by hand), never a row read without them."""
    import pyarrow.parquet as pq

    table = pq.read_table(file, columns=[key, *columns])
    values = {column: table[column].to_pylist() for column in columns}
    index = {k: i for i, k in enumerate(table[key].to_pylist())}
    for record in records:
        row = record.row
        if row is not None:
            at = index.get(row.get(key))
            if at is None:
                raise RecordFileError(
                    f"{file}: no row for {key} {row.get(key)!r} of {record.location} beside it; "
                    "was the folder changed by hand?"
                )
            row = {**row, **{c: values[c][at] for c in columns if row.get(c) is None}}
            record = Record(record.location, row, row=row)
        yield record


def _open(path: Path) -> tuple[str, list[str] | None, Iterator[Record]]:
    """(name for messages, column names or None for JSONL, raw rows). A path that exists is read as it is; else it
    may name a dataset and what to read of it (`hub_datasets.dataset_source`)."""
    # imported here: the dataset reader builds on this module's records (one way), and only a dataset needs it
    from rubricrl.records.hub import dataset_source, folder_rows, named_rows

    if path.is_dir():
        return folder_rows(path, None)
    if not path.exists():
        named = dataset_source(path)
        if named is None:
            raise RecordFileError(f"{path}: no such file or folder")
        return named_rows(named) if named.hub else folder_rows(Path(named.path), named)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        try:
            f = open(path, "rb")
        except OSError as error:
            raise RecordFileError(f"{path}: cannot read: {error.strerror}") from error
        return str(path), None, jsonl_rows(f)
    if suffix == ".parquet":
        return parquet_rows(path)
    raise RecordFileError(
        f"{path}: unknown file type {suffix or '(no extension)'!r}; "
        "expected .jsonl, .parquet, a dataset folder or a Hugging Face Hub dataset id"
    )


def conversation(value: Any, key: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        if not value.strip():
            raise InvalidRecord(f"{key!r} is empty" + (" (whitespace only)" if value else ""))
        return [{"role": "user", "content": value}]
    if value is None:
        raise InvalidRecord(f"{key!r} is null")
    if isinstance(value, list) and key != "question":
        return _messages(value, key)
    expected = "text" if key == "question" else "text or a list of {role, content} messages"
    raise InvalidRecord(f"{key!r} must be {expected}, got {type(value).__name__}")


def _messages(value: list, key: str) -> list[dict[str, str]]:
    if not value:
        raise InvalidRecord(f"{key!r} is an empty message list")
    messages = [_message(message, f"{key}[{i}]") for i, message in enumerate(value)]
    last = len(messages) - 1
    if messages[last]["role"] != "user":
        raise InvalidRecord(
            f"{key}[{last}]: the last message is from {messages[last]['role']!r}; a query ends with 'user'"
        )
    if not messages[last]["content"].strip():
        raise InvalidRecord(f"{key}[{last}]: the last user message is empty")
    return messages


def _message(message: Any, where: str) -> dict[str, str]:
    if not isinstance(message, dict):
        raise InvalidRecord(
            f"{where}: a message must be an object with 'role' and 'content', got {type(message).__name__}"
        )
    # Arrow fills struct fields a message lacks with None, so only non-null unknown keys are errors.
    unknown = sorted(key for key, value in message.items() if key not in ("role", "content") and value is not None)
    if unknown:
        raise InvalidRecord(f"{where}: unexpected key(s) {unknown}; a message has only 'role' and 'content'")
    role, content = message.get("role"), message.get("content")
    if role not in ROLES:
        raise InvalidRecord(f"{where}: 'role' must be one of {', '.join(ROLES)}, got {role!r}")
    if not isinstance(content, str):
        raise InvalidRecord(f"{where}: 'content' must be text, got {type(content).__name__}")
    return {"role": role, "content": content}
