"""Queries for rubric synthesis (and any stage that starts from queries), via the one record reader
(rubricrl/records/reader.py: JSONL, Parquet, dataset folders, Hub ids such as `org/name:test`; errors name file or
split, line or row, and problem), every row checked before any model call.

Query: `prompt` (text, or chat messages ending with a user message, as in HealthBench), else `question` (text, as in
RubricHub's export; records.py says why), or the column `query_column` names (text or messages, in every row). Id: `id`,
else HealthBench's `prompt_id`, a non-empty string or an integer (`str`-ed: `7` and `"7"` collide); if missing or null,
`q-` + the first 16 hex digits of the sha256 of the messages' canonical JSON, stable across reruns and reorderings (a
question and a one-message prompt of its text share it). Other columns go to `Query.extra`. `iter_queries` streams
(memory grows only with the ids seen). With `skip_bad_rows` / `on_reject` a bad row becomes a `Rejected` (location,
reason, raw row) for `write_rejected` (`rejected.jsonl`); an empty or unreadable file, a column missing from a
Parquet/dataset schema, or no valid row stays fatal.
"""

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricrl.records import (
    InvalidRecord,
    RecordFileError,
    conversation,
    generated_id,
    id_column_of,
    open_records,
    record_id,
)
from rubricrl.records import query_column as default_query_column

QueryFileError = RecordFileError  # the one reader's error, under the name query callers know


@dataclass(frozen=True)
class Query:
    id: str
    messages: list[dict[str, str]]
    """The chat form; a plain question becomes `[{"role": "user", "content": question}]`."""
    question: str
    """The text of the last user message (RubricHub's export stores the question as a string)."""
    extra: dict[str, Any]
    """Every other column of the row, untouched."""


@dataclass(frozen=True)
class Rejected:
    location: str
    """File and place, e.g. `queries.jsonl: line 3`."""
    reason: str
    row: Any
    """The parsed row, or the raw line text when the line is not a JSON object."""

    def to_json(self) -> str:
        # default=str: Parquet rows may hold timestamps or bytes, which a record of the rejection must not choke on
        record = {"location": self.location, "reason": self.reason, "row": self.row}
        return json.dumps(record, ensure_ascii=False, default=str)


def write_rejected(rejected: Iterable[Rejected], path: str | Path) -> Path:
    """One `{"location", "reason", "row"}` line per rejected row. When streaming, pass
    `on_reject=lambda r: f.write(r.to_json() + "\\n")` to `iter_queries` instead."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        for item in rejected:
            f.write(item.to_json() + "\n")
    return path


def iter_queries(
    path: str | Path,
    *,
    query_column: str | None = None,
    id_column: str | None = None,
    on_reject: Callable[[Rejected], None] | None = None,
) -> Iterator[Query]:
    """Validated queries, one at a time. A bad row raises `QueryFileError`, or, when `on_reject` is given, is
    passed to it and skipped. As a generator it opens the file at the first `next()`, so file errors raise there."""
    opened = open_records(path)
    source, columns = opened.source, opened.columns
    query_key = query_column or (default_query_column(columns) if columns is not None else None)
    if columns is not None and (query_key is None or query_key not in columns):
        expected = repr(query_column) + " (--query-column)" if query_column else "'prompt' or 'question'"
        raise QueryFileError(f"{source}: no query column {expected}; columns: {', '.join(columns)}")
    if columns is not None and id_column is not None and id_column not in columns:
        raise QueryFileError(f"{source}: no id column {id_column!r} (--id-column); columns: {', '.join(columns)}")
    seen: dict[str, str] = {}  # id -> where it first appeared
    total = valid = 0
    first_problem = None
    for item in opened.records:
        total += 1
        try:
            if item.problem is not None:
                raise InvalidRecord(item.problem)
            key = query_column or default_query_column(item.row)  # per row: the reader's one precedence
            if key is None:
                raise InvalidRecord("no 'prompt' or 'question' key; name the query column with --query-column")
            query = _to_query(item.row, key, id_column)
            _check_new_id(query, item.location, seen)
        except InvalidRecord as problem:
            where = f"{source}: {item.location}"
            first_problem = first_problem or f"{where}: {problem}"
            if on_reject is None:
                raise QueryFileError(f"{where}: {problem}") from None
            on_reject(Rejected(location=where, reason=str(problem), row=item.raw))
            continue
        valid += 1
        yield query
    if total == 0:
        raise QueryFileError(f"{source}: no rows")
    if valid == 0:
        raise QueryFileError(f"{source}: no valid rows; all {total} rejected (first: {first_problem})")


def _to_query(row: dict[str, Any], query_key: str, id_column: str | None) -> Query:
    if query_key not in row:
        raise InvalidRecord(f"missing query column {query_key!r} (--query-column)")
    if id_column is not None and id_column not in row:  # a named column must be there; a null id is generated
        raise InvalidRecord(f"missing id column {id_column!r} (--id-column); keys: {', '.join(row)}")
    messages = conversation(row[query_key], query_key)
    id_key = id_column or id_column_of(row)
    extra = {key: value for key, value in row.items() if key not in (query_key, id_key)}
    return Query(
        id=record_id(row.get(id_key), id_key, messages),
        messages=messages,
        question=messages[-1]["content"],
        extra=extra,
    )


def _check_new_id(query: Query, location: str, seen: dict[str, str]) -> None:
    first = seen.get(query.id)
    if first is not None:
        if query.id == generated_id(query.messages):
            raise InvalidRecord(f"duplicate query: the same content as {first} (generated id {query.id!r})")
        raise InvalidRecord(f"duplicate id {query.id!r}: also at {first}")
    seen[query.id] = location
