"""Reading what grading consumes: rubric datasets and response files. Errors name the file, the row and the
problem.

Rubric datasets come as synthesis's export (`final.parquet` / `.jsonl`: `id, question, rubrics: [{criterion,
points}]`) or in HealthBench's format (`prompt_id, prompt` (chat messages), `rubrics: [{criterion, points,
tags}]`, `example_tags`, `ideal_completions_data`); both become `RubricRow`s."""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.rar import PitfallConvention, criteria_from_rar
from grading.rubric import Rubric, RubricError, rubric_from_items


@dataclass(frozen=True)
class RubricRow:
    id: str
    conversation: list[dict[str, str]]
    rubric: Rubric
    reference: str | None = None
    """A reference answer (RaR's `reference_answer`), for reference-based judging."""
    ideal_completion: str | None = None
    """HealthBench's physician-written ideal completion, where the example has one."""


def read_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) for each row of a .jsonl or .parquet file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # only here: loading it takes a tenth of a second

        for i, record in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}: row {i}", record
        return
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", json.loads(line)
            except json.JSONDecodeError as error:
                raise RubricError(f"{path}:{number}: invalid JSON: {error.msg} at column {error.colno}") from error


def load_rubric_rows(path: str | Path, rar_pitfalls: PitfallConvention = "auto") -> dict[str, RubricRow]:
    """Rows keyed by id: `id` or HealthBench's `prompt_id`; the query as `question` (text) or `prompt` (messages);
    `rar_pitfalls` reads RaR pitfalls (see rar.py)."""
    path = Path(path)
    rows: dict[str, RubricRow] = {}
    for where, record in read_records(path):
        if not isinstance(record, dict):
            raise RubricError(f"{where}: expected an object, got {type(record).__name__}")
        row_id = record.get("id", record.get("prompt_id"))
        if not isinstance(row_id, str) or not row_id:
            raise RubricError(f"{where}: needs a non-empty string 'id' (or 'prompt_id')")
        if row_id in rows:
            raise RubricError(f"{where}: duplicate id {row_id!r}")
        ideal = record.get("ideal_completions_data")
        rows[row_id] = RubricRow(
            id=row_id,
            conversation=_conversation(record, where),
            rubric=rubric_from_items(_rubric_items(record, where, rar_pitfalls), where, record.get("example_tags") or ()),
            reference=record.get("reference_answer"),
            ideal_completion=ideal.get("ideal_completion") if isinstance(ideal, dict) else None,
        )
    if not rows:
        raise RubricError(f"{path}: no rows")
    return rows


def _rubric_items(record: dict, where: str, rar_pitfalls: PitfallConvention) -> Any:
    """`rubrics` ({criterion, points}) as written by synthesis and HealthBench, or RaR's `rubric`."""
    if "rubrics" not in record and "rubric" in record:
        return criteria_from_rar(record["rubric"], where, rar_pitfalls)
    return record.get("rubrics")


def _conversation(record: dict, where: str) -> list[dict[str, str]]:
    prompt, question = record.get("prompt"), record.get("question")
    if isinstance(prompt, list) and prompt and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt
    ):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    if isinstance(question, str) and question.strip():
        return [{"role": "user", "content": question}]
    raise RubricError(f"{where}: needs 'question' (non-empty text) or 'prompt' (a list of {{role, content}} messages)")


def load_responses(path: str | Path, known_ids: set[str]) -> list[tuple[str, str]]:
    """(id, response) pairs of a JSONL file; every id must name a rubric row."""
    path = Path(path)
    pairs = []
    for where, record in read_records(path):
        if not isinstance(record, dict) or not isinstance(record.get("response"), str):
            raise RubricError(f"{where}: needs a string 'response'")
        if record.get("id") not in known_ids:
            raise RubricError(f"{where}: id {record.get('id')!r} is not in the rubric file")
        pairs.append((record["id"], record["response"]))
    return pairs
