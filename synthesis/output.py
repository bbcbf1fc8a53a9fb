"""The output folder of a synthesis run, written as queries finish:

- `details.jsonl`: one line per finished query with every stage's output and per-criterion detail;
- `final.jsonl`: `{id, question, rubrics: [{criterion, points}]}`, written after the query's details line, so a line
  here means the query is complete;
- `errors.jsonl`: the queries that failed in this run (they are retried next run);
- `final.parquet` (RubricHub's exact schema) and `final_details.parquet` (id, prompt, criteria with detail), built
  alongside in batches of rows under `.tmp` names and moved into place when the run ends. A resumed run first copies
  in the rows finished before, so that after a run the Parquet files hold every finished query once (during a run,
  or after a kill, they are those of the last run that ended).

Appending line by line writes each byte once; memory holds the set of finished ids and one batch of rows. Parquet
batches are converted by pyarrow's JSON reader from the lines themselves: `pa.array` on Python objects would import
pandas (a quarter of a second) and convert object by object. pyarrow itself is loaded with the first batch, not
before the first request: loading it takes a tenth of a second, during which no request would go out.
"""

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricrl.jsonl import ParquetTable, complete_rows, json_line

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
def details_schema() -> "pa.Schema":
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    criterion = pa.struct([("criterion", pa.string()), ("points", pa.int32()), ("title", pa.string()),
                           ("category", pa.string()), ("stage", pa.string()), ("source", pa.string())])  # fmt: skip
    return pa.schema([("id", pa.string()), ("prompt", pa.list_(message)), ("criteria", pa.list_(criterion))])


class OutputFolder:
    """Opened at the start of a run (cut-off lines dropped, finished ids collected), closed at its end."""

    def __init__(self, path: Path, batch_rows: int = BATCH_ROWS):
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.done: set[str] = set()
        self.final = ParquetTable(path / "final.parquet", final_schema, batch_rows)
        self.details = ParquetTable(path / "final_details.parquet", details_schema, batch_rows)
        for line, row in complete_rows(path / "final.jsonl"):
            if row["id"] not in self.done:
                self.done.add(row["id"])
                self.final.add(line)
        copied: set[str] = set()
        for _, row in complete_rows(path / "details.jsonl"):
            # a query killed between its two lines has a details line only: it is done again, and appended again
            if row["id"] in self.done and row["id"] not in copied:
                copied.add(row["id"])
                self.details.add(json_line(detail_row(row)))
        self._details = open(path / "details.jsonl", "ab")
        self._final = open(path / "final.jsonl", "ab")
        self._errors = open(path / "errors.jsonl", "wb")

    def add(self, record: dict[str, Any], final_row: dict[str, Any]) -> None:
        """A finished query: its details line, then its final line (flushed: a kill loses at most the one in hand)."""
        self._details.write(json_line(record))
        self._details.flush()
        line = json_line(final_row)
        self._final.write(line)
        self._final.flush()
        self.final.add(line)
        self.details.add(json_line(detail_row(record)))

    def error(self, query_id: str, stage: str, message: str) -> None:
        self._errors.write(json_line({"id": query_id, "stage": stage, "error": message[:1000]}))
        self._errors.flush()

    def close(self, finished: bool = True) -> int:
        """Moves the Parquet files into place, both or neither: neither when the run did not finish or when writing
        one fails (the files of an earlier finished run then stay). Returns the rows in final.parquet."""
        for f in (self._details, self._final, self._errors):
            f.close()
        tables = (self.final, self.details)
        if not finished:
            for table in tables:
                table.discard()
            return self.final.rows
        try:
            for table in tables:
                table.finish()
        except BaseException:
            for table in tables:
                table.discard()
            raise
        for table in tables:
            table.tmp.replace(table.path)
        return self.final.rows


def detail_row(record: dict[str, Any]) -> dict[str, Any]:
    return {"id": record["id"], "prompt": record["prompt"], "criteria": record["criteria"]}
