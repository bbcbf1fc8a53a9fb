"""Reading what grading consumes through the one record reader (rubricrl/records/reader.py): rubric datasets and
response files (JSONL, Parquet, dataset folders, Hub ids such as `org/name:test`), errors naming the file (or dataset
and split), the line or row, and the problem. Rubric rows, each made a `RubricRow`, come as synthesis's export
(`final.parquet` / `.jsonl`: `id, question, rubrics: [{criterion, points}]`, messages and reference answer from its
companion file or its lines), in HealthBench's format (`prompt_id`, `prompt` (chat messages), `rubrics: [{criterion,
points, tags}]`, `example_tags`, `ideal_completions_data`), in HealthBench Professional's (`id`, `conversation:
{messages}`, `rubric_items: [{criterion_text, points}]`, `use_case`, `type`, `difficulty`, `specialty`,
`physician_response`), or as RaR rows (`question, reference_answer, rubric`)."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.rar import PitfallConvention, criteria_from_rar
from grading.rubric import Rubric, RubricError, rubric_from_items
from rubricrl.records import InvalidRecord, conversation_of, id_column_of, open_records, record_id, rows_of


@dataclass(frozen=True)
class RubricRow:
    id: str
    conversation: list[dict[str, str]]
    rubric: Rubric
    reference: str | None = None
    """A reference answer (RaR's `reference_answer`), for reference-based judging."""
    ideal_completion: str | None = None
    """HealthBench's physician-written ideal completion, where the example has one."""
    where: str = ""
    """`file: line N` or `file: row N`, for messages."""


def load_rubric_rows(path: str | Path, rar_pitfalls: PitfallConvention = "auto") -> dict[str, RubricRow]:
    """Rows keyed by id (see iter_rubric_rows); for files that fit in memory."""
    return {row.id: row for row in iter_rubric_rows(path, rar_pitfalls)}


def iter_rubric_rows(path: str | Path, rar_pitfalls: PitfallConvention = "auto") -> Iterator[RubricRow]:
    """Rows one at a time, as the record reader reads ids and conversations (`id` or `prompt_id`, else generated
    from the content; `prompt` messages before `question`); `rar_pitfalls` reads RaR pitfalls (see rar.py).
    Memory holds the set of ids seen (duplicates are errors). A file without rows is an error."""
    opened = open_records(path)
    seen: set[str] = set()
    for where, record in rows_of(opened):
        if "rubric_items" in record and "rubrics" not in record:
            record = _from_professional(record, where)
        conversation = _conversation(record, where)  # multi-turn queries keep their turns and roles
        try:
            row_id = record_id(record.get(id_column_of(record)), id_column_of(record), conversation)
        except InvalidRecord as problem:
            raise RubricError(f"{where}: {problem}") from None
        if row_id in seen:
            raise RubricError(f"{where}: duplicate id {row_id!r}")
        seen.add(row_id)
        ideal = record.get("ideal_completions_data")
        yield RubricRow(
            id=row_id,
            conversation=conversation,
            rubric=rubric_from_items(
                _rubric_items(record, where, rar_pitfalls), where, record.get("example_tags") or ()
            ),
            reference=record.get("reference_answer"),
            ideal_completion=ideal.get("ideal_completion") if isinstance(ideal, dict) else None,
            where=where,
        )
    if not seen:
        raise RubricError(f"{opened.source}: no rows")


PROFESSIONAL_TAGS = ("use_case", "type", "difficulty", "specialty")
"""HealthBench Professional's fields per example, kept as example tags (`use_case:consult`) as HealthBench's
`theme:...` are, so the report scores each use case, type, difficulty and specialty."""


def _from_professional(record: dict, where: str) -> dict:
    """A HealthBench Professional row as the HealthBench row it stands for: `conversation.messages` is the prompt,
    each rubric item's `criterion_text` its criterion, `physician_response` the ideal completion."""
    messages = record.get("conversation")
    messages = messages.get("messages") if isinstance(messages, dict) else None
    if messages is None:
        raise RubricError(f"{where}: HealthBench Professional's 'conversation' must hold 'messages'")
    items = record["rubric_items"]
    if not isinstance(items, list | tuple):
        raise RubricError(f"{where}: 'rubric_items' must be a list of rubric items, got {items!r:.200}")
    rubrics = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RubricError(f"{where}: rubric item {i}: must be an object, got {type(item).__name__}")
        if not isinstance(item.get("criterion_text"), str):  # named as the file names it, not as HealthBench's
            raise RubricError(
                f"{where}: rubric item {i}: 'criterion_text' must be a string, got {item.get('criterion_text')!r}"
            )
        rubrics.append(
            {"criterion": item.get("criterion_text"), "points": item.get("points"), "tags": item.get("tags")}
        )
    physician = record.get("physician_response")
    return {
        "id": record.get("id"),
        "prompt": messages,
        "rubrics": rubrics,
        "example_tags": [f"{key}:{record[key]}" for key in PROFESSIONAL_TAGS if record.get(key) is not None],
        "ideal_completions_data": {"ideal_completion": physician} if isinstance(physician, str) else None,
    }


def _rubric_items(record: dict, where: str, rar_pitfalls: PitfallConvention) -> Any:
    """`rubrics` ({criterion, points}) as written by synthesis and HealthBench, or RaR's `rubric`."""
    if "rubrics" not in record and "rubric" in record:
        return criteria_from_rar(record["rubric"], where, rar_pitfalls)
    return record.get("rubrics")


def _conversation(record: dict, where: str) -> list[dict[str, str]]:
    try:
        return conversation_of(record)
    except InvalidRecord as problem:
        raise RubricError(f"{where}: {problem}") from None


def check_references(mode: str, rubrics: str | Path, graded: list[RubricRow]) -> None:
    """reference_likert rates each response against its row's reference answer: rows it would grade without one
    are refused before any call (the grader would fail on the first of them, mid-run)."""
    if mode != "reference_likert":
        return
    missing = list(
        {row.id: row for row in graded if not (isinstance(row.reference, str) and row.reference.strip())}.values()
    )
    if missing:
        first = ", ".join(f"{row.where.rpartition(': ')[2]} (id {row.id!r})" for row in missing[:3])
        more = ", ..." if len(missing) > 3 else ""
        raise RubricError(
            f"{rubrics}: --mode reference_likert needs a reference answer ('reference_answer') in "
            f"each row it grades; {len(missing)} of {len({r.id for r in graded})} have none: "
            f"{first}{more}"
        )


def load_responses(
    path: str | Path, known_ids: set[str], rubrics: str | Path = "the rubric file"
) -> list[tuple[str, str]]:
    """(id, response) pairs of a record file (JSONL, Parquet, saved dataset); every id must name a rubric row of
    `rubrics` (named in the message), and a file without rows is an error."""
    opened = open_records(path)
    pairs = []
    for where, record in rows_of(opened):
        if not isinstance(record.get("response"), str):
            raise RubricError(f"{where}: needs a string 'response'")
        if record.get("id") is None:
            raise RubricError(f"{where}: needs an 'id' (the id of its row in {rubrics})")
        row_id = str(record["id"]) if isinstance(record["id"], int) else record["id"]  # as record_id reads it
        if row_id not in known_ids:
            like = ", ".join(repr(i) for i in sorted(known_ids)[:2])
            raise RubricError(f"{where}: id {record['id']!r} is not in {rubrics} (its ids are like {like})")
        pairs.append((row_id, record["response"]))
    if not pairs:
        raise RubricError(f"{opened.source}: no responses")
    return pairs
