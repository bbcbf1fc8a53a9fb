"""The rubric dataset as GRPOTrainer takes it: one row per query with `prompt` (chat messages, every turn kept),
`rubrics` (the criteria the reward grades against), `reference_answer` (for reference_likert), `example_tags` and
`id`. GRPOTrainer hands every column to the reward function (its `remove_unused_columns` is False).

Optionally held out: rows for evaluation (seeded split). Optionally dropped: rows whose RuFT candidate scores do not
vary (`rurl.prefilter`, the offline form of dynamic sampling)."""

import random
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grading.dataset import RubricRow, iter_rubric_rows
from grading.rubric import Rubric, RubricError
from rubricrl.config import ConfigError
from rubricrl.jsonl import complete_rows
from rurl.config import RurlConfig

if TYPE_CHECKING:
    from datasets import Dataset


@dataclass
class RurlData:
    train: list[RubricRow]
    evaluation: list[RubricRow]
    source: str
    prefiltered: dict[str, int] = field(default_factory=dict)
    """Counts of the RuFT prefilter, when one ran: rows kept, dropped as flat, dropped out of the band, not built."""

    def train_dataset(self) -> "Dataset":
        from datasets import Dataset

        return Dataset.from_list([trainer_row(row) for row in self.train])


def trainer_row(row: RubricRow) -> dict[str, Any]:
    return {"id": row.id, "prompt": row.conversation, "rubrics": rubric_items(row.rubric),
            "reference_answer": row.reference, "example_tags": list(row.rubric.example_tags)}  # fmt: skip


def rubric_items(rubric: Rubric) -> list[dict[str, Any]]:
    """The rubric as the `rubrics` column holds it (grading.rubric.rubric_from_items reads it back). Rules are kept
    as given; Arrow fills the keys one rule lacks with None, which the reader drops."""
    return [{"criterion": c.text, "points": c.points, "tags": list(c.tags), "category": c.category, "rule": c.rule}
            for c in rubric.criteria]  # fmt: skip


def load_rurl_data(path: Path, config: RurlConfig, seed: int) -> RurlData:
    """Every row checked (RubricError names the file and row), split, prefiltered. Raises ConfigError when nothing
    is left to train on."""
    rows = list(iter_rubric_rows(path))
    bad = next((row for row in rows if not row.conversation or row.conversation[-1]["role"] != "user"), None)
    if bad is not None:
        raise RubricError(f"{path}: row {bad.id!r}: the prompt must end with the user's turn (the policy answers it)")
    held = _held_out(len(rows), config.eval_size)
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held_ids = set(order[:held])
    evaluation = [row for i, row in enumerate(rows) if i in held_ids]
    train = [row for i, row in enumerate(rows) if i not in held_ids]
    counts: dict[str, int] = {}
    if config.prefilter is not None:
        train, counts = prefilter(train, config)
    if not train:
        raise ConfigError(f"{path}: no row left to train on ({len(rows)} rows, {held} held out"
                          + (f", prefilter: {counts}" if counts else "") + ")")  # fmt: skip
    return RurlData(train, evaluation, str(path), counts)


def _held_out(total: int, size: float) -> int:
    if size <= 0:
        return 0
    held = round(total * size) if size < 1 else int(size)
    if held >= total:
        raise ConfigError(f"eval_size {size}: holds out {held} of {total} rows, leaving none to train on")
    return max(1, held)


def prefilter(rows: list[RubricRow], config: RurlConfig) -> tuple[list[RubricRow], dict[str, int]]:
    """The rows whose RuFT candidates' scores have std > prefilter_min_std and a mean inside prefilter_mean_range;
    the scores are read from the build's candidates.jsonl (complete lines only)."""
    path = Path(config.prefilter) / "candidates.jsonl"
    if not path.is_file():
        raise ConfigError(f"rurl.prefilter {config.prefilter}: no candidates.jsonl (is it a `ruft build` folder?)")
    scores: dict[str, list[float]] = defaultdict(list)
    for _, candidate in complete_rows(path):
        if candidate.get("score") is not None:
            scores[str(candidate["id"])].append(candidate["score"])
    low, high = config.prefilter_mean_range
    kept, counts = [], {"kept": 0, "flat": 0, "outside_band": 0, "not_built": 0}
    for row in rows:
        values = scores.get(row.id, [])
        if len(values) < 2:
            counts["not_built"] += 1
        elif statistics.pstdev(values) <= config.prefilter_min_std:
            counts["flat"] += 1
        elif not low <= statistics.fmean(values) <= high:
            counts["outside_band"] += 1
        else:
            counts["kept"] += 1
            kept.append(row)
    return kept, counts
