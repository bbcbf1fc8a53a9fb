"""Rubric dropout (Rubric Dropout, arXiv 2608.11669): at each training step a share of each rubric's positive
criteria is left out of the reward, so that a policy cannot learn every criterion the training judge over-credits at
once. One mask per prompt group, shared by its rollouts (their advantages compare like with like), drawn from the
query's id and the step the batch trains at, so that every process and a resumed run draw the same. Penalties
(negative points) and protected criteria (tagged `protected`: the safety-critical ones) are never dropped, at least
`minimum` positive criteria are kept, and the reward is normalized over the kept criteria (the dropped ones are left
out of the rubric before grading: they are never sent to the judge). Evaluation grades the full rubric."""

import hashlib
import math
import random
from dataclasses import dataclass, replace

from grading.rubric import Criterion, Rubric

PROTECTED_TAG = "protected"
"""A criterion carrying this tag is never dropped (a rubric row: `"tags": ["protected", ...]`)."""


def protected(criterion: Criterion) -> bool:
    return PROTECTED_TAG in criterion.tags


@dataclass(frozen=True)
class RubricDropout:
    share: float
    """The share of each rubric's droppable positive criteria left out at a step, in [0, 1): 0 leaves all in."""
    minimum: int = 1
    """Positive criteria kept at least, whatever the share."""

    def __post_init__(self) -> None:
        if not 0 <= self.share < 1:
            raise ValueError(
                f"rubric_dropout must be within [0, 1) (a share of the positive criteria), got {self.share}"
            )
        if self.minimum < 1:
            raise ValueError(f"rubric_dropout_min must be at least 1, got {self.minimum}")

    @staticmethod
    def droppable(rubric: Rubric, fresh: frozenset[int] = frozenset()) -> list[int]:
        """The indices of the criteria a mask may drop: positive, not protected, not `fresh` (see `dropped`)."""
        return [i for i, c in enumerate(rubric.criteria) if c.points > 0 and not protected(c) and i not in fresh]

    def dropped(self, rubric: Rubric, query_id: str, step: int, fresh: frozenset[int] = frozenset()) -> frozenset[int]:
        """The indices of `rubric`'s criteria left out for query `query_id` at `step`. The number dropped is the share
        of the droppable ones rounded up or down at random (a fraction f of the time up, f its fractional part; drawn
        from the mask's own seed), so that the share dropped on average is the setting at any rubric size, less
        where `minimum` binds. `fresh`: criteria written for this query at this very step (evolving rubrics), never
        dropped then and left out of the draw, so the others' mask is the one drawn without them."""
        droppable = self.droppable(rubric, fresh)
        positives = sum(c.points > 0 for c in rubric.criteria)
        seed = int.from_bytes(hashlib.sha256(f"{query_id}\0{step}".encode()).digest()[:8], "big")
        rng = random.Random(seed)
        share = self.share * len(droppable)
        count = min(math.floor(share) + (rng.random() < share - math.floor(share)), max(0, positives - self.minimum))
        if count <= 0:
            return frozenset()
        return frozenset(rng.sample(droppable, count))

    def kept(self, rubric: Rubric, query_id: str, step: int, fresh: frozenset[int] = frozenset()) -> Rubric:
        """`rubric` without the criteria dropped for `query_id` at `step` (`fresh`: see `dropped`)."""
        dropped = self.dropped(rubric, query_id, step, fresh)
        if not dropped:
            return rubric
        return replace(rubric, criteria=tuple(c for i, c in enumerate(rubric.criteria) if i not in dropped))

    def batch(self, items: list, rubrics: list[Rubric], ids: list, step: int) -> tuple[list[Rubric], dict[str, int]]:
        """A batch's rubrics (`rubrics`, parsed from the rows' criterion lists `items`) for queries `ids` at `step`,
        each without its dropped criteria (a criterion evolved at this very step is `fresh`: never dropped then), and
        the counts: criteria dropped, judge verdicts dropped (criteria without a rule), criteria droppable."""
        counts = {"criteria": 0, "judge_verdicts": 0, "droppable": 0}
        kept = []
        for rows, rubric, query_id in zip(items, rubrics, ids):
            fresh = frozenset(i for i, item in enumerate(rows) if (item.get("evolved") or {}).get("step") == step)
            left = self.kept(rubric, str(query_id), step, fresh)
            counts["droppable"] += len(self.droppable(rubric, fresh))
            counts["criteria"] += len(rubric.criteria) - len(left.criteria)
            counts["judge_verdicts"] += sum(c.rule is None for c in rubric.criteria) - sum(
                c.rule is None for c in left.criteria
            )
            kept.append(left)
        return kept, counts
