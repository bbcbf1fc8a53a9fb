"""Per query, the rubric a RuRL run grades against while it evolves its rubrics (rurl/evolving/evolution.py): the
original criteria (never removed), the active evolved ones, and the retired ones (kept for the record).

Pure and deterministic: every process holds one, changed only by the same calls in the same order (new criteria
broadcast from the main process; verdicts gathered from all processes), so every process grades a completion alike.

- The cap (`max_active`) holds at every moment: it is applied when criteria are added. Ranked for a place, a
  criterion that split one of its recent groups comes first (the larger its share of split groups, the better),
  then the untested ones (newest first), then the ones tested without splitting anything: an untested criterion
  never displaces one that split groups, as DR Tulu keeps its top-variance rubrics and its new ones.
- Retirement looks at a recent window: a criterion is retired once none of its latest `window` groups (each with
  two or more decided answers) was split by it. A window of 1 is DR Tulu's rule: no reward variance now.
- The evolved criteria's positive points stay within `max_share` of the query's positive points, so evolution
  never outweighs the original rubric: a new positive criterion past it is refused.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

EVOLVED_TAG = "evolved"


@dataclass
class Evolved:
    criterion: str
    points: int
    step: int
    """The step whose answers it was written from."""
    source: dict[str, Any] = field(default_factory=dict)
    """The evolve call's situation and the answers it saw (their scores and text hashes)."""
    groups: int = 0
    """Groups of its query that graded it on at least two answers ..."""
    varied: int = 0
    """... and, of those, the groups whose answers it split."""
    met: int = 0
    decided: int = 0
    recent: list[list[int]] = field(default_factory=list)
    """Its latest tested groups, at most the window: [step, 1 if it split the group else 0]."""
    retired: str | None = None
    """Why it left the rubric, with the step; None while active."""

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

    def rank(self) -> tuple:
        """Smaller ranks first for a place in the rubric: split groups lately (by share), untested, the rest."""
        split = sum(s for _, s in self.recent)
        if split:
            return (0, -split / len(self.recent), -self.step)
        return (1 if not self.recent else 2, 0.0, -self.step)


class RubricBuffer:
    def __init__(self, max_active: int, window: int = 1, max_share: float = 1.0):
        self.max_active, self.window, self.max_share = max_active, window, max_share
        self.active: dict[str, list[Evolved]] = {}
        self.retired: dict[str, list[Evolved]] = {}

    def rubric(self, query_id: str, original: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The criteria a completion of this query is graded against now."""
        evolved = self.active.get(query_id)
        return original if not evolved else [*original, *(e.item() for e in evolved)]

    def room(self, query_id: str) -> int:
        """Places a new criterion could take: the cap less the active criteria that split groups lately."""
        return self.max_active - sum(e.rank()[0] == 0 for e in self.active.get(query_id, []))

    def add(
        self, query_id: str, original: list[dict[str, Any]], written: list[dict[str, Any]], step: int, source: dict
    ) -> tuple[list[Evolved], list[str]]:
        """The written criteria that are usable: a criterion text, integer points within the original's range
        (nonzero), no repeat of one the query has or had, positive points within the share, a place under the cap.
        Returns (the criteria added, why each other one was refused); what they displaced is retired."""
        known = {str(c.get("criterion", "")).strip().casefold() for c in original}
        known |= {e.criterion.casefold() for e in self.active.get(query_id, []) + self.retired.get(query_id, [])}
        bound = max((abs(c["points"]) for c in original if isinstance(c.get("points"), int)), default=10)
        original_positive = sum(c["points"] for c in original if isinstance(c.get("points"), int) and c["points"] > 0)
        evolved_positive = sum(e.points for e in self.active.get(query_id, []) if e.points > 0)
        valid, refused = [], []
        for item in written:
            text, points = str(item.get("criterion") or "").strip(), item.get("points")
            if not text:
                refused.append("empty criterion")
            elif not isinstance(points, int) or isinstance(points, bool) or points == 0 or abs(points) > bound:
                refused.append(f"points {points!r} outside ±1..{bound}")
            elif text.casefold() in known:
                refused.append(f"repeats {text[:60]!r}")
            elif points > 0 and (evolved_positive + points) > self.max_share * (
                original_positive + evolved_positive + points
            ):
                share = (evolved_positive + points) / (original_positive + evolved_positive + points)
                refused.append(f"{text[:60]!r}: evolved criteria would hold {share:.0%} of the positive points")
            else:
                valid.append(Evolved(text, points, step, dict(source)))
                known.add(text.casefold())
                evolved_positive += max(points, 0)
        current = self.active.get(query_id, [])
        ranked = sorted([*current, *valid], key=Evolved.rank)  # stable: among equals, the earlier stays
        keep = ranked[: self.max_active]
        for evolved in ranked[self.max_active :]:
            if evolved in valid:
                refused.append(f"{evolved.criterion[:60]!r}: over the cap of {self.max_active}")
            else:
                evolved.retired = f"displaced over the cap of {self.max_active} (step {step})"
                self.retired.setdefault(query_id, []).append(evolved)
        added = [e for e in valid if e in keep]
        if current or added:
            self.active[query_id] = [e for e in [*current, *valid] if e in keep]
        return added, refused

    def observe(self, answers: list[tuple[str, dict[str, bool]]], step: int) -> list[Evolved]:
        """Per group (its query id) of a scored batch, each active evolved criterion's verdicts; then retirements.
        Returns the criteria retired."""
        by_group: dict[str, dict[str, list[bool]]] = {}
        for query_id, verdicts in answers:
            if query_id in self.active:
                for text, met in verdicts.items():
                    by_group.setdefault(query_id, {}).setdefault(text, []).append(met)
        gone = []
        for query_id, verdicts in sorted(by_group.items()):
            for evolved in self.active[query_id]:
                mets = verdicts.get(evolved.criterion, [])
                evolved.met, evolved.decided = evolved.met + sum(mets), evolved.decided + len(mets)
                if len(mets) >= 2:
                    split = int(0 < sum(mets) < len(mets))
                    evolved.groups, evolved.varied = evolved.groups + 1, evolved.varied + split
                    evolved.recent = [*evolved.recent, [step, split]][-self.window :]
                    if len(evolved.recent) == self.window and not any(s for _, s in evolved.recent):
                        groups = "group" if self.window == 1 else f"{self.window} groups"
                        evolved.retired = f"no variance in its last {groups} (step {step})"
            here = [e for e in self.active[query_id] if e.retired is not None]
            if here:
                self.active[query_id] = [e for e in self.active[query_id] if e.retired is None]
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
