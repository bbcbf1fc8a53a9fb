"""HealthBench's meta-evaluation format: a judge against physicians' labels.

Each row is one criterion judged on one completion by several physicians (simple-evals' `oss_meta_eval.jsonl`):
`prompt` (chat messages), `completion`, `rubric` (the criterion's text), `binary_labels` (one bool per physician),
optionally `category` (`cluster:...`), `prompt_id`, `completion_id`, `anonymized_physician_ids` (one per label: the
physician baseline); read with the one record reader (rubricrl/records/reader.py).

A row's human verdict is its labels' majority; a tie is undecided (None), never a guess. Rows of one completion
(`completion_id`, else same conversation and completion) form one unit, a `GradeItem` holding their criteria (a
repeated criterion starts a second unit), so the judge sees what HealthBench's grader sees and each unit has a score
on both sides. Rows carry no points, so every criterion gets `points` (default 1, positive, as HealthBench's
consensus criteria are): a unit's score is the share of its decided criteria met. `pairwise_pairs` gives what
HealthBench itself compares: the judge's verdict against each physician's label (`pairwise_model_f1_balanced` is
their macro F1); checks/healthbench_metrics.py computes every figure simple-evals reports, by category and for the
physicians, under its names. `unit_rows` lays the rows out for it.
"""

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from checks.agreement import Met, Pair
from grading.grader import GradeItem
from grading.judge import majority
from grading.rubric import Criterion, Rubric
from grading.scores import DEFAULT_MIN_COVERAGE, explicit_score
from rubricrl.records import InvalidRecord, RecordFileError, conversation_of, iter_rows


@dataclass(frozen=True)
class MetaEvalRow:
    where: str
    """`file: line N` (or `row N`), for messages and per-criterion output."""
    conversation: list[dict[str, str]] = field(hash=False)
    completion: str
    criterion: str
    labels: tuple[bool, ...]
    category: str | None = None
    prompt_id: str | None = None
    completion_id: str | None = None
    physicians: tuple[str, ...] | None = None
    """`anonymized_physician_ids`, one per label: the physician baseline (checks/healthbench_metrics.py)."""

    @property
    def human(self) -> Met:
        return human_label(self.labels)


def human_label(labels: Sequence[bool]) -> Met:
    """The physicians' majority; a tie (or no label) is undecided: [T, T, F] -> True, [T, F] -> None."""
    return majority(list(labels))


@dataclass
class MetaEvalUnit:
    """One completion of one conversation, with the criteria physicians judged it on."""

    id: str
    rows: list[MetaEvalRow]

    def item(self, points: int = 1) -> GradeItem:
        first = self.rows[0]
        criteria = tuple(Criterion(r.criterion, points, (r.category,) if r.category else ()) for r in self.rows)
        return GradeItem(first.conversation, first.completion, Rubric(criteria))

    @property
    def human_verdicts(self) -> list[Met]:
        return [row.human for row in self.rows]

    def human_score(self, points: int = 1, min_coverage: float = DEFAULT_MIN_COVERAGE) -> float | None:
        """The unit's score under the physicians' majority verdicts (the grader's rules: grading/scores.py)."""
        return explicit_score([points] * len(self.rows), self.human_verdicts, min_coverage=min_coverage).score


def iter_metaeval_rows(path: str | Path) -> Iterator[MetaEvalRow]:
    """Rows one at a time, checked; a bad row raises RecordFileError naming the file and the line or row."""
    for where, record in iter_rows(path):
        try:
            yield _row(where, record)
        except InvalidRecord as problem:
            raise RecordFileError(f"{where}: {problem}") from None


def _row(where: str, record: dict) -> MetaEvalRow:
    if "prompt" not in record:
        raise InvalidRecord("needs 'prompt' (the chat messages): not a HealthBench meta-eval row")
    conversation = conversation_of(record, "prompt")
    completion, criterion, labels = record.get("completion"), record.get("rubric"), record.get("binary_labels")
    if not isinstance(completion, str) or not completion.strip():
        raise InvalidRecord(f"'completion' must be a non-empty string, got {completion!r:.80}")
    if not isinstance(criterion, str) or not criterion.strip():
        raise InvalidRecord(f"'rubric' (the criterion) must be a non-empty string, got {criterion!r:.80}")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, bool) for x in labels):
        raise InvalidRecord(f"'binary_labels' must be a non-empty list of true/false, got {labels!r:.80}")
    category = record.get("category")
    if category is not None and not isinstance(category, str):
        raise InvalidRecord(f"'category' must be a string, got {category!r:.80}")
    physicians = record.get("anonymized_physician_ids")
    if physicians is not None and (
        not isinstance(physicians, list)
        or len(physicians) != len(labels)
        or not all(isinstance(x, str | int) and not isinstance(x, bool) for x in physicians)
    ):
        raise InvalidRecord(
            f"'anonymized_physician_ids' must list one id per label ({len(labels)}), got {physicians!r:.80}"
        )
    ids = {}
    for key in ("prompt_id", "completion_id"):
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, str | int) or value == ""):
            raise InvalidRecord(f"{key!r} must be a non-empty string or an integer, got {value!r:.80}")
        ids[key] = None if value is None else str(value)
    physicians = None if physicians is None else tuple(str(x) for x in physicians)
    return MetaEvalRow(
        where,
        conversation,
        completion,
        criterion.strip(),
        tuple(labels),
        category or None,
        **ids,
        physicians=physicians,
    )


def load_metaeval(path: str | Path, limit: int | None = None) -> list[MetaEvalUnit]:
    """The file's rows grouped into units, in order of first appearance; with `limit`, the first `limit` units
    (the file is read to its end all the same: a unit's rows need not be adjacent)."""
    units: dict[str, MetaEvalUnit] = {}
    rows = 0
    for row in iter_metaeval_rows(path):
        rows += 1
        key = row.completion_id or _content_id(row)
        unit_id, copy = key, 1
        while unit_id in units and any(r.criterion == row.criterion for r in units[unit_id].rows):
            copy += 1
            unit_id = f"{key}#{copy}"
        units.setdefault(unit_id, MetaEvalUnit(unit_id, [])).rows.append(row)
    if not rows:
        raise RecordFileError(f"{path}: no rows")
    return list(units.values())[:limit]


def pairwise_pairs(units: Sequence[MetaEvalUnit], predictions: Sequence[Sequence[Met]]) -> list[Pair]:
    """The judge's verdict on each row against each physician label of that row (HealthBench's pairwise metrics),
    grouped by unit for the bootstrap; `predictions[i][j]` is the judge's verdict on row j of unit i."""
    return [
        Pair(met, label, (row.category,) if row.category else (), unit.id)
        for unit, verdicts in zip(units, predictions, strict=True)
        for row, met in zip(unit.rows, verdicts, strict=True)
        for label in row.labels
    ]


def _content_id(row: MetaEvalRow) -> str:
    canonical = json.dumps([row.conversation, row.completion], sort_keys=True, ensure_ascii=False)
    return "m-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def unit_rows(units: Sequence[MetaEvalUnit], predictions: Sequence[Sequence[Met]]) -> dict[str, list]:
    """The rows of `units` in order, as checks/healthbench_metrics.py takes them: labels, the judge's verdicts,
    categories and physician ids."""
    rows = [
        (row, met)
        for unit, verdicts in zip(units, predictions, strict=True)
        for row, met in zip(unit.rows, verdicts, strict=True)
    ]
    return {
        "labels": [row.labels for row, _ in rows],
        "verdicts": [met for _, met in rows],
        "categories": [row.category for row, _ in rows],
        "physicians": [row.physicians for row, _ in rows],
    }
