"""Records: the one reader for every record a stage consumes (queries, rubric rows, responses), with errors that
name the file, the place and the problem. `files.py` gives one JSONL or Parquet file's rows, each with its place or
why it is no record; `hub.py` saved and repository-layout dataset folders and Hub ids, through `datasets`;
`reader.py` any of these by one path, and a record's conversation and id."""

from rubricrl.records.files import InvalidRecord, Record, RecordFileError
from rubricrl.records.reader import (
    COMPANION_KEY,
    RecordFile,
    conversation,
    conversation_of,
    generated_id,
    id_column_of,
    iter_rows,
    open_records,
    query_column,
    record_id,
    rows_of,
)

__all__ = [
    "COMPANION_KEY",
    "InvalidRecord",
    "Record",
    "RecordFile",
    "RecordFileError",
    "conversation",
    "conversation_of",
    "generated_id",
    "id_column_of",
    "iter_rows",
    "open_records",
    "query_column",
    "record_id",
    "rows_of",
]
