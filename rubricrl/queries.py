"""Reading the query files that rubric synthesis consumes: JSONL, Parquet or a saved Hugging Face dataset folder.

Every row is checked before any model call, and an error names the file, the place and the problem:
`queries.jsonl: line 3: ...` (JSONL lines count from 1, as an editor shows them) or `queries.parquet: row 3: ...`
(Parquet and dataset rows count from 0, as `pandas.read_parquet(...).iloc[3]` and `Dataset[3]` do).

Columns:
- The query column is `question` (text only: RubricHub's export stores it as a string), or `prompt` when the file has
  no `question` (text, or HealthBench's chat message list ending with a user message). A JSONL file has no schema,
  so its first JSON object decides, and every later line must have that key. Any other column named with
  `query_column` takes text or messages.
- The id column is `id`, or HealthBench's `prompt_id` in rows without `id`. An id is a non-empty string or an
  integer (converted with `str`, so `7` and `"7"` are the same id and collide). A missing or null id is generated
  from the content: `q-` + the first 16 hex digits of the sha256 of the canonical JSON of the messages. Reruns and
  reordered files get the same ids, and a plain question shares its id with the one-message prompt of the same text.
- Every other column passes through untouched in `Query.extra`.

`iter_queries` streams (memory grows only with the set of ids seen, for duplicate detection); `read_queries`
collects everything, for small files and tests. With `skip_bad_rows` / `on_reject`, a bad row becomes a `Rejected`
(location, reason, raw row) instead of an error; `write_rejected` writes them to `rejected.jsonl`. An empty file, an
unreadable file, a missing column in a Parquet/dataset schema, or a file with no valid row stays fatal.
"""

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

ROLES = ("system", "user", "assistant")
DEFAULT_QUERY_COLUMNS = ("question", "prompt")
BATCH_ROWS = 1024  # rows per Arrow batch: large enough to be fast, small enough to keep memory flat


class QueryFileError(ValueError):
    """A query file is unreadable or has a bad row; the message names the file, the line or row, and the problem."""


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


@dataclass(frozen=True)
class QueryFile:
    path: Path
    queries: list[Query]
    rejected: list[Rejected]


class _Invalid(Exception):
    """A row's problem, without its location (added by the reader, which knows it)."""


@dataclass(frozen=True)
class _RawRow:
    location: str
    raw: Any
    row: dict[str, Any] | None = None
    problem: str | None = None


def read_queries(
    path: str | Path, *, query_column: str | None = None, id_column: str | None = None, skip_bad_rows: bool = False
) -> QueryFile:
    """All queries of a file; with `skip_bad_rows`, bad rows are collected in `rejected` instead of raising."""
    rejected: list[Rejected] = []
    queries = list(
        iter_queries(path, query_column=query_column, id_column=id_column,
                     on_reject=rejected.append if skip_bad_rows else None)
    )  # fmt: skip
    return QueryFile(path=Path(path), queries=queries, rejected=rejected)


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
    path = Path(path)
    source, columns, rows = _open(path)
    query_key = query_column or (_default_query_column(columns) if columns is not None else None)
    if columns is not None and (query_key is None or query_key not in columns):
        expected = repr(query_column) if query_column else "'question' or 'prompt'"
        raise QueryFileError(f"{source}: no query column {expected}; columns: {', '.join(columns)}")
    chosen_at = None  # where a JSONL file's default query column was decided, for the error on a later line
    seen: dict[str, str] = {}  # id -> where it first appeared
    total = valid = 0
    first_problem = None
    for item in rows:
        total += 1
        try:
            if item.problem is not None:
                raise _Invalid(item.problem)
            if query_key is None:
                query_key, chosen_at = _default_query_column(item.row), item.location
                if query_key is None:
                    raise _Invalid("no 'question' or 'prompt' key; name the query column with query_column")
            query = _to_query(item.row, query_key, id_column, chosen_at)
            _check_new_id(query, item.location, seen)
        except _Invalid as problem:
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


def _open(path: Path) -> tuple[str, list[str] | None, Iterator[_RawRow]]:
    """(name for messages, column names or None for JSONL, raw rows)."""
    if path.is_dir():
        return _dataset_rows(path)
    if not path.exists():
        raise QueryFileError(f"{path}: no such file or folder")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        try:
            f = open(path, "rb")
        except OSError as error:
            raise QueryFileError(f"{path}: cannot read: {error.strerror}") from error
        return str(path), None, _jsonl_rows(f)
    if suffix == ".parquet":
        return _parquet_rows(path)
    raise QueryFileError(
        f"{path}: unknown query file type {suffix or '(no extension)'!r}; "
        "expected .jsonl, .parquet or a saved Hugging Face dataset folder"
    )


def _jsonl_rows(f) -> Iterator[_RawRow]:
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
                yield _RawRow(location, raw, problem=f"invalid UTF-8 at byte {error.start}: {error.reason}")
                continue
            if line.strip():
                yield _parse_line(line.rstrip("\r\n"), location)


def _parse_line(line: str, location: str) -> _RawRow:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        return _RawRow(location, line, problem=f"invalid JSON: {error.msg} at column {error.colno}")
    if not isinstance(row, dict):
        return _RawRow(location, line, problem=f"expected a JSON object, got {type(row).__name__}")
    return _RawRow(location, row, row=row)


def _parquet_rows(path: Path) -> tuple[str, list[str], Iterator[_RawRow]]:
    import pyarrow as pa  # only here: it takes a tenth of a second to load, and JSONL needs none of it
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:
        raise QueryFileError(f"{path}: cannot read as Parquet: {error}") from error
    return str(path), parquet.schema_arrow.names, _table_rows(parquet.iter_batches(batch_size=BATCH_ROWS))


def _dataset_rows(path: Path) -> tuple[str, list[str], Iterator[_RawRow]]:
    import datasets  # only here: `datasets` is an optional dependency (the `train` extra)

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as error:
        raise QueryFileError(
            f"{path}: not a saved Hugging Face dataset (no dataset_info.json/state.json or dataset_dict.json)"
        ) from error
    source = str(path)
    if isinstance(loaded, datasets.DatasetDict):
        split = _pick_split(path, list(loaded))
        loaded, source = loaded[split], f"{path} (split {split!r})"
    batches = loaded.with_format("arrow").iter(batch_size=BATCH_ROWS)
    return source, loaded.column_names, _table_rows(batches)


def _pick_split(path: Path, splits: list[str]) -> str:
    if "train" in splits:
        return "train"
    if len(splits) == 1:
        return splits[0]
    raise QueryFileError(f"{path}: a dataset with splits {splits} and no 'train'; save the split to use on its own")


def _table_rows(batches: "Iterable[pa.RecordBatch | pa.Table]") -> Iterator[_RawRow]:
    index = 0
    for batch in batches:
        for row in batch.to_pylist():
            yield _RawRow(f"row {index}", row, row=row)
            index += 1


def _default_query_column(keys: Iterable[str]) -> str | None:
    keys = set(keys)
    return next((column for column in DEFAULT_QUERY_COLUMNS if column in keys), None)


def _to_query(row: dict[str, Any], query_key: str, id_column: str | None, chosen_at: str | None) -> Query:
    if query_key not in row:
        note = f" (the file's query column, chosen from {chosen_at}; set query_column to use another)"
        raise _Invalid(f"missing query column {query_key!r}" + (note if chosen_at else ""))
    messages = _conversation(row[query_key], query_key)
    id_key = id_column or ("id" if "id" in row else "prompt_id")
    extra = {key: value for key, value in row.items() if key not in (query_key, id_key)}
    return Query(id=_query_id(row.get(id_key), id_key, messages), messages=messages,
                 question=messages[-1]["content"], extra=extra)  # fmt: skip


def _conversation(value: Any, key: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        if not value.strip():
            raise _Invalid(f"{key!r} is empty" + (" (whitespace only)" if value else ""))
        return [{"role": "user", "content": value}]
    if value is None:
        raise _Invalid(f"{key!r} is null")
    if isinstance(value, list) and key != "question":
        return _messages(value, key)
    expected = "text" if key == "question" else "text or a list of {role, content} messages"
    raise _Invalid(f"{key!r} must be {expected}, got {type(value).__name__}")


def _messages(value: list, key: str) -> list[dict[str, str]]:
    if not value:
        raise _Invalid(f"{key!r} is an empty message list")
    messages = [_message(message, f"{key}[{i}]") for i, message in enumerate(value)]
    last = len(messages) - 1
    if messages[last]["role"] != "user":
        raise _Invalid(f"{key}[{last}]: the last message is from {messages[last]['role']!r}; a query ends with 'user'")
    if not messages[last]["content"].strip():
        raise _Invalid(f"{key}[{last}]: the last user message is empty")
    return messages


def _message(message: Any, where: str) -> dict[str, str]:
    if not isinstance(message, dict):
        raise _Invalid(f"{where}: a message must be an object with 'role' and 'content', got {type(message).__name__}")
    # Arrow fills struct fields a message lacks with None, so only non-null unknown keys are errors.
    unknown = sorted(key for key, value in message.items() if key not in ("role", "content") and value is not None)
    if unknown:
        raise _Invalid(f"{where}: unexpected key(s) {unknown}; a message has only 'role' and 'content'")
    role, content = message.get("role"), message.get("content")
    if role not in ROLES:
        raise _Invalid(f"{where}: 'role' must be one of {', '.join(ROLES)}, got {role!r}")
    if not isinstance(content, str):
        raise _Invalid(f"{where}: 'content' must be text, got {type(content).__name__}")
    return {"role": role, "content": content}


def _query_id(value: Any, id_key: str, messages: list[dict[str, str]]) -> str:
    if value is None:  # absent, JSON null, or a Parquet null: the id comes from the content
        return generated_id(messages)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise _Invalid(f"{id_key!r} must be a non-empty string or an integer, got {type(value).__name__}")
    if not value.strip():
        raise _Invalid(f"{id_key!r} is empty")
    return value


def generated_id(messages: list[dict[str, str]]) -> str:
    """`q-` + 16 hex digits of the sha256 of the messages' canonical JSON: the same query always gets the same id."""
    canonical = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "q-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _check_new_id(query: Query, location: str, seen: dict[str, str]) -> None:
    first = seen.get(query.id)
    if first is not None:
        if query.id == generated_id(query.messages):
            raise _Invalid(f"duplicate query: the same content as {first} (generated id {query.id!r})")
        raise _Invalid(f"duplicate id {query.id!r}: also at {first}")
    seen[query.id] = location
