"""The rubric data model: criteria with integer points (negative = penalty) and tags, checked once at load.

One shape inside, converted at the boundary from RubricHub / synthesis export rows (`final.parquet`: `rubrics:
[{criterion, points}]`) and HealthBench's (`rubrics: [{criterion, points, tags}]` beside `prompt`, `prompt_id`,
`example_tags`). For a negative criterion, "met" means the undesirable behaviour is present (HealthBench's convention).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grading.rules import RuleError, validate_rule
from rubricrl.errors import UserError


class RubricError(UserError, ValueError):
    """A rubric or criterion is malformed; the message names where (file, row, criterion) and what."""


@dataclass(frozen=True)
class Criterion:
    text: str
    points: int
    tags: tuple[str, ...] = ()
    """HealthBench-style `axis:*`, `theme:*`, `cluster:*`, `level:*` tags."""
    category: str | None = None
    """Essential / Important / Optional / Pitfall, for rubrics that carry categories."""
    rule: dict[str, Any] | None = field(default=None, hash=False)
    """A check decided in code instead of by the judge (grading/rules.py), e.g. {"type": "max_words", "value": 100}.
    Like a judge verdict, the rule says whether the criterion's text holds for the response."""


@dataclass(frozen=True)
class Rubric:
    criteria: tuple[Criterion, ...]
    example_tags: tuple[str, ...] = field(default=())

    @property
    def positive_points(self) -> int:
        return sum(c.points for c in self.criteria if c.points > 0)


def criterion_from_dict(item: Mapping[str, Any], where: str) -> Criterion:
    """A `{criterion, points, tags?, category?}` mapping (Arrow may give absent keys as None)."""
    if not isinstance(item, Mapping):
        raise RubricError(f"{where}: a criterion must be an object, got {type(item).__name__}")
    text, points = item.get("criterion"), item.get("points")
    if not isinstance(text, str) or not text.strip():
        raise RubricError(f"{where}: 'criterion' must be a non-empty string, got {text!r}")
    # Points are integers; 7.0 from a float column is accepted, 7.5 or "7" is not.
    if isinstance(points, float) and points.is_integer():
        points = int(points)
    if not isinstance(points, int) or isinstance(points, bool):
        raise RubricError(f"{where}: 'points' must be an integer, got {points!r}")
    if points == 0:
        raise RubricError(f"{where}: 'points' is 0; a criterion worth nothing cannot change a score")
    tags = item.get("tags") or ()
    if not isinstance(tags, Iterable) or isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise RubricError(f"{where}: 'tags' must be a list of strings, got {tags!r}")
    if len(set(tags)) != len(list(tags)):
        raise RubricError(f"{where}: 'tags' repeats a tag: {list(tags)}")
    rule = item.get("rule")
    if isinstance(rule, Mapping):  # Arrow gives every rule every key any rule has: drop the absent (None) ones
        rule = {key: value for key, value in rule.items() if value is not None}
    if rule is not None:
        try:
            validate_rule(rule)
        except RuleError as error:
            raise RubricError(f"{where}: rule {rule!r}: {error}") from error
    return Criterion(text=text.strip(), points=points, tags=tuple(tags), category=item.get("category"), rule=rule)


def rubric_from_items(items: Any, where: str, example_tags: Iterable[str] = ()) -> Rubric:
    """A rubric from a list of criterion mappings: at least one criterion, no duplicate criterion text."""
    if not isinstance(items, list | tuple) or not items:
        raise RubricError(f"{where}: 'rubrics' must be a non-empty list of criteria, got {items!r:.200}")
    criteria = tuple(criterion_from_dict(item, f"{where}: criterion {i}") for i, item in enumerate(items))
    seen: set[str] = set()
    for i, criterion in enumerate(criteria):
        if criterion.text in seen:
            raise RubricError(f"{where}: criterion {i} repeats an earlier one: {criterion.text[:120]!r}")
        seen.add(criterion.text)
    return Rubric(criteria=criteria, example_tags=tuple(example_tags or ()))
