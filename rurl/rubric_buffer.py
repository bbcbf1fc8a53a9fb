"""Per query, the rubric a RuRL run grades against while it evolves its rubrics (rurl/evolution.py): the original
criteria (never removed), the active evolved ones, and the retired ones (kept for the record).

Pure and deterministic: every process holds one, changed only by the same calls in the same order (new criteria
broadcast from the main process; verdicts gathered from all processes), so every process grades a completion alike.
An evolved criterion is retired when every group that graded it met it on all or none of its answers (no variance,
as RLER does), or when its query holds more than `max_active` (the least varied go first, then the oldest).
"""

from dataclasses import asdict, dataclass, field
from typing import Any

EVOLVED_TAG = "evolved"


@dataclass
class Evolved:
    criterion: str
    points: int
    step: int
    """The step whose answers it was written from; it grades from the next draw of its query."""
    source: dict[str, Any] = field(default_factory=dict)
    """The evolve call's model and the answers it separated (`best`, `worst`: their scores and text hashes)."""
    groups: int = 0
    """Groups of its query that graded it on at least two answers ..."""
    varied: int = 0
    """... and, of those, the groups whose answers it split."""
    met: int = 0
    decided: int = 0
    retired: str | None = None
    """Why it left the rubric (`no variance`, `over the cap`), with the step; None while active."""

    def item(self) -> dict[str, Any]:
        """As the `rubrics` column and every rubric file hold a criterion; `evolved` is read by nothing but us."""
        return {
            "criterion": self.criterion,
            "points": self.points,
            "tags": [EVOLVED_TAG],
            "category": None,
            "rule": None,
            "evolved": {"step": self.step, **self.source},
        }


class RubricBuffer:
    def __init__(self, max_active: int):
        self.max_active = max_active
        self.active: dict[str, list[Evolved]] = {}
        self.retired: dict[str, list[Evolved]] = {}

    def rubric(self, query_id: str, original: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The criteria a completion of this query is graded against now."""
        evolved = self.active.get(query_id)
        return original if not evolved else [*original, *(e.item() for e in evolved)]

    def add(
        self, query_id: str, original: list[dict[str, Any]], written: list[dict[str, Any]], step: int, source: dict
    ) -> tuple[int, list[str]]:
        """The written criteria that are usable: a criterion text, integer points within the original's range
        (nonzero), no repeat of one the query has or had. Returns (added, why each other one was refused)."""
        known = {str(c.get("criterion", "")).strip().casefold() for c in original}
        known |= {e.criterion.casefold() for e in self.active.get(query_id, []) + self.retired.get(query_id, [])}
        bound = max((abs(c["points"]) for c in original if isinstance(c.get("points"), int)), default=10)
        added, refused = 0, []
        for item in written:
            text, points = str(item.get("criterion") or "").strip(), item.get("points")
            if not text:
                refused.append("empty criterion")
            elif not isinstance(points, int) or isinstance(points, bool) or points == 0 or abs(points) > bound:
                refused.append(f"points {points!r} outside ±1..{bound}")
            elif text.casefold() in known:
                refused.append(f"repeats {text[:60]!r}")
            else:
                self.active.setdefault(query_id, []).append(Evolved(text, points, step, dict(source)))
                known.add(text.casefold())
                added += 1
        return added, refused

    def observe(self, answers: list[tuple[str, dict[str, bool]]], step: int) -> list[Evolved]:
        """Per group (its query id) of a scored batch, each active evolved criterion's verdicts; then retirements.
        Returns the criteria retired."""
        by_group: dict[str, dict[str, list[bool]]] = {}
        for query_id, verdicts in answers:
            if query_id in self.active:
                for text, met in verdicts.items():
                    by_group.setdefault(query_id, {}).setdefault(text, []).append(met)
        for query_id, verdicts in by_group.items():
            for evolved in self.active[query_id]:
                mets = verdicts.get(evolved.criterion, [])
                evolved.met, evolved.decided = evolved.met + sum(mets), evolved.decided + len(mets)
                if len(mets) >= 2:
                    evolved.groups += 1
                    evolved.varied += 0 < sum(mets) < len(mets)
        return self._retire(step)

    def _retire(self, step: int) -> list[Evolved]:
        gone = []
        for query_id in sorted(self.active):
            here = [e for e in self.active[query_id] if e.groups and not e.varied]
            for evolved in here:
                evolved.retired = f"no variance (step {step})"
            keep = [e for e in self.active[query_id] if e.retired is None]
            ranked = sorted(keep, key=lambda e: (-(e.varied / e.groups if e.groups else 1.0), -e.step))
            for evolved in ranked[self.max_active :]:
                evolved.retired = f"over the cap of {self.max_active} (step {step})"
                here.append(evolved)
            self.active[query_id] = [e for e in keep if e.retired is None]
            if here:
                self.retired.setdefault(query_id, []).extend(here)
                gone += here
        return gone

    def counts(self) -> dict[str, float]:
        active = [len(v) for v in self.active.values() if v]
        return {
            "active": float(sum(active)),
            "retired": float(sum(len(v) for v in self.retired.values())),
            "queries": float(len(active)),
        }

    def state(self) -> dict[str, Any]:
        return {
            kind: {q: [asdict(e) for e in items] for q, items in sorted(table.items()) if items}
            for kind, table in (("active", self.active), ("retired", self.retired))
        }

    def load(self, state: dict[str, Any]) -> None:
        self.active = {q: [Evolved(**e) for e in items] for q, items in state.get("active", {}).items()}
        self.retired = {q: [Evolved(**e) for e in items] for q, items in state.get("retired", {}).items()}
