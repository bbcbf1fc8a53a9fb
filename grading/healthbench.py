"""HealthBench's JSONL format (simple-evals): `prompt` (chat messages), `prompt_id`,
`rubrics: [{criterion, points, tags}]`, `example_tags`, optional `ideal_completions_data`."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.rubric import Rubric, RubricError, rubric_from_items


@dataclass(frozen=True)
class HealthBenchExample:
    prompt_id: str
    prompt: list[dict[str, str]]
    rubric: Rubric
    ideal_completion: str | None = None
    """The physician-written ideal completion, where the example has one."""


def load_healthbench(path: str | Path) -> list[HealthBenchExample]:
    """Read a HealthBench JSONL file; a bad line raises RubricError naming the file, the line and the problem."""
    path = Path(path)
    examples, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise RubricError(f"{where}: invalid JSON: {error.msg} at column {error.colno}") from error
            example = example_from_record(record, where)
            if example.prompt_id in seen:
                raise RubricError(f"{where}: duplicate prompt_id {example.prompt_id!r}")
            seen.add(example.prompt_id)
            examples.append(example)
    if not examples:
        raise RubricError(f"{path}: no examples in the file")
    return examples


def example_from_record(record: Any, where: str) -> HealthBenchExample:
    if not isinstance(record, dict):
        raise RubricError(f"{where}: a line must hold a JSON object, got {type(record).__name__}")
    prompt_id, prompt = record.get("prompt_id"), record.get("prompt")
    if not isinstance(prompt_id, str) or not prompt_id:
        raise RubricError(f"{where}: 'prompt_id' must be a non-empty string, got {prompt_id!r}")
    if not isinstance(prompt, list) or not prompt or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt
    ):
        raise RubricError(f"{where}: 'prompt' must be a non-empty list of {{role, content}} messages")
    ideal = record.get("ideal_completions_data") or {}
    return HealthBenchExample(
        prompt_id=prompt_id,
        prompt=prompt,
        rubric=rubric_from_items(record.get("rubrics"), where, record.get("example_tags") or ()),
        ideal_completion=ideal.get("ideal_completion") if isinstance(ideal, dict) else None,
    )
