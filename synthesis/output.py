"""The output folder of a synthesis run, appended to as queries finish (each byte written once):
- `details.jsonl`: a line per finished query with every stage's output (`reference_answer`, `responses`,
  `candidates`, `merged`, `evolved`), per-criterion detail, and the `fingerprint` of the settings that made it;
- `final.jsonl`: `{id, question, rubrics: [{criterion, points}]}` with the `prompt` messages and `reference_answer`,
  written after the details line, so a line here means the query is whole. Both in the order queries finished;
- `errors.jsonl`: the queries that failed in this run (retried next run);
- `final.parquet` (RubricHub's schema; its metadata names `final_details.parquet`, which keeps the messages that
  `question` flattens) and `final_details.parquet` (id, prompt, reference answer, criteria with detail,
  fingerprint): built at the run's end, in input order, from the finished lines (read back by offset), under `.tmp`
  names until both are whole. During a run or after a kill they are the last ended run's.
Memory holds finished ids with their line offsets and one batch of rows, which pyarrow's JSON reader converts from
the lines (`pa.array` on Python objects would import pandas, a quarter of a second, and go object by object).
"""

import functools
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from rubricrl.prompts import format_conversation
from rubricrl.records import COMPANION_KEY
from rubricrl.runs.jsonl import ParquetTable, complete_rows, json_line
from rubricrl.runs.provenance import UNKNOWN

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 1000


@functools.cache
def final_schema() -> "pa.Schema":
    """RubricHub's public export schema: readers of theirs read ours."""
    import pyarrow as pa

    criterion = pa.struct([("criterion", pa.string()), ("points", pa.int32())])
    return pa.schema([("id", pa.string()), ("question", pa.string()), ("rubrics", pa.list_(criterion))])


@functools.cache
def exported_schema() -> "pa.Schema":
    """final.parquet's: RubricHub's fields exactly, and in its metadata the companion that completes its rows."""
    companion = {"file": "final_details.parquet", "key": "id", "columns": ["prompt", "reference_answer"]}
    return final_schema().with_metadata({COMPANION_KEY: json.dumps(companion)})


@functools.cache
def details_schema() -> "pa.Schema":
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    criterion = pa.struct(
        [
            ("criterion", pa.string()),
            ("points", pa.int32()),
            ("title", pa.string()),
            ("category", pa.string()),
            ("stage", pa.string()),
            ("source", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("id", pa.string()),
            ("prompt", pa.list_(message)),
            ("reference_answer", pa.string()),
            ("criteria", pa.list_(criterion)),
            ("fingerprint", pa.string()),
        ]
    )


def final_line(query_id: str, messages: list[dict[str, str]], rubrics: list[dict], reference: str | None) -> dict:
    """A final.jsonl row: RubricHub's three keys (its `question` is a string: the question itself, or the whole
    transcript of a multi-turn query), then what final.parquet leaves to its companion."""
    question = messages[0]["content"] if len(messages) == 1 else format_conversation(messages)
    return {"id": query_id, "question": question, "rubrics": rubrics, "prompt": messages, "reference_answer": reference}


class OutputFolder:
    """Opened at the start of a run (cut-off lines dropped, finished ids collected), closed at its end."""

    def __init__(self, path: Path, batch_rows: int = BATCH_ROWS):
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.batch_rows = batch_rows
        self.done: dict[str, int] = {}
        """Finished id -> offset of its final.jsonl line."""
        self.details_at: dict[str, int] = {}
        """Finished id -> offset of its last details.jsonl line (a query killed between its two lines is done
        again, so its last details line is the one its final line follows)."""
        self.rows_by_fingerprint: Counter = Counter()
        """Rows in the Parquet files by the fingerprint of the settings that made them (after close)."""
        self._final_size = self._index(path / "final.jsonl", self.done, keep_first=True)
        self._details_size = self._index(path / "details.jsonl", self.details_at, keep_first=False)
        self._details = open(path / "details.jsonl", "ab")
        self._final = open(path / "final.jsonl", "ab")
        self.errors = open(path / "errors.jsonl", "wb")

    def _index(self, path: Path, offsets: dict[str, int], keep_first: bool) -> int:
        """Offsets of the finished ids' lines (final.jsonl: every id is finished); returns the file's size."""
        size = 0
        for line, row in complete_rows(path):
            if (keep_first and row["id"] not in offsets) or (not keep_first and row["id"] in self.done):
                offsets[row["id"]] = size
            size += len(line)
        return size

    def add(self, record: dict[str, Any], final_row: dict[str, Any]) -> None:
        """A finished query: its details line, then its final line (flushed: a kill loses at most the one in hand)."""
        line = json_line(record)
        self._details.write(line)
        self._details.flush()
        self.details_at[record["id"]] = self._details_size
        self._details_size += len(line)
        line = json_line(final_row)
        self._final.write(line)
        self._final.flush()
        self.done[final_row["id"]] = self._final_size
        self._final_size += len(line)

    def close(self, finished: bool = True, order: Iterable[str] = ()) -> int:
        """Writes the Parquet files, both or neither: neither when the run did not finish or when writing one fails
        (the files of an earlier finished run then stay). Rows in `order` (the input's ids) first, then the other
        finished ones in the order they finished. Returns the rows in final.parquet."""
        for f in (self._details, self._final, self.errors):
            f.close()
        if not finished:
            return len(self.done)
        listed = [i for i in dict.fromkeys(order) if i in self.done]
        listed_set = set(listed)
        ids = listed + [i for i in self.done if i not in listed_set]  # self.done is in final.jsonl's order
        tables = (
            ParquetTable(self.path / "final.parquet", exported_schema, self.batch_rows),
            ParquetTable(self.path / "final_details.parquet", details_schema, self.batch_rows),
        )
        self.rows_by_fingerprint.clear()
        try:
            with open(self.path / "final.jsonl", "rb") as final, open(self.path / "details.jsonl", "rb") as details:
                for query_id in ids:
                    tables[0].add(_line_at(final, self.done[query_id]))
                    if query_id in self.details_at:
                        row = detail_row(json.loads(_line_at(details, self.details_at[query_id])))
                        self.rows_by_fingerprint[row["fingerprint"] or UNKNOWN] += 1
                        tables[1].add(json_line(row))
            for table in tables:
                table.finish()
        except BaseException:
            for table in tables:
                table.discard()
            raise
        for table in tables:
            table.tmp.replace(table.path)
        return tables[0].rows


def _line_at(f: BinaryIO, offset: int) -> bytes:
    f.seek(offset)
    return f.readline()


def detail_row(record: dict[str, Any]) -> dict[str, Any]:
    """A details line as a row of final_details.parquet (lines written before `reference_answer` was the key name
    hold it as `reference`; those written before fingerprints were recorded have none)."""
    return {
        "id": record["id"],
        "prompt": record["prompt"],
        "reference_answer": record.get("reference_answer", record.get("reference")),
        "criteria": record["criteria"],
        "fingerprint": record.get("fingerprint"),
    }
