"""Evolved criteria probed before they are admitted (`rurl.evolve_vet`): no criterion pays the policy that an answer
with no substance earns.

The evolver writes criteria no person reads, and they pay the policy from the step they join. Before one joins, the
main process probes it on its own row with `rubricrl probe`'s kinds that need no generation (checks/probes.py:
parrot, keywords, hedge, polite non-answer, the half of a compound, the next rows' references), `probe_per_kind`
texts of each, built from the row's positive criteria with the new one among them (the words a policy would list),
graded against the new criterion alone and exactly as training grades (the same judge role, mode, verdict format,
rules and integrity check). Each kind's counts get the probe's binomial test (checks/probe_test.py), corrected
together for the criterion: one that any kind earns more often than `probe_tolerance` allows is refused, with its
test; one whose probes decided nothing (the judge failed them) is refused as unprobed. A penalty is admitted as
written: an answer with no substance that triggers it costs the policy, it does not pay it.

The probes of one step spend at most `evolve_probe_calls` judge calls; a criterion past that waits, unadmitted, and
is probed at a later step (its counts in `evolve/waiting`). Refusals are kept across a resume: a criterion refused
once is refused again without a call. Decisions are the main process's; rurl/evolving/evolution.py hands them to every
process with the criteria, so every process admits the same ones.
"""

import asyncio
from dataclasses import replace
from typing import Any

from checks.probe_analysis import criteria_rows
from checks.probe_test import INSUFFICIENT, ProbeTest
from checks.probes import KINDS, Probe, probes_for
from checks.probing import as_plain_text, graded_against
from grading.dataset import RubricRow
from grading.grader import GradeItem, Grader, GradingConfig
from grading.rubric import rubric_from_items

ADMITTED, EXPLOITABLE, UNPROBED, WAITING = "admitted", "exploitable", "unprobed", "waiting"
PENALTY, KNOWN = "penalty", "known"
"""A written criterion's decision: admitted (its probes earned it no more than chance allows), exploitable (refused,
with its test), unprobed (refused: the judge decided none of its probes), waiting (the step's probe budget is spent),
penalty (passed on unprobed: nothing to earn), known (passed on unprobed: the query has it, the buffer refuses the
repeat)."""
PASSED = (ADMITTED, PENALTY, KNOWN)
"""The decisions that hand a criterion on to the buffer's own checks."""


class Vetting:
    def __init__(
        self,
        client: Any,
        grading: GradingConfig,
        rows: list[RubricRow],
        per_kind: int,
        test: ProbeTest,
        budget: int,
    ):
        self.client, self.grading, self.rows = client, as_plain_text(grading), rows
        self.index = {row.id: i for i, row in enumerate(rows)}
        self.per_kind, self.test, self.budget = per_kind, test, budget
        self.spent: dict[int, int] = {}
        """Probe calls per step (on the reward's event loop, where every vetting runs)."""
        self.refused: dict[str, dict[str, str]] = {}
        """query -> criterion -> the test that refused it: kept in checkpoints."""

    def probes(self, query_id: str, current: list[dict], criterion: dict) -> list[Probe]:
        """The probes of `criterion` on its row: built from the row's positive criteria with it among them, kept
        where they bear on it (a `half` targets it)."""
        row, index = self.rows[self.index[query_id]], self.index[query_id]
        positive = [{"criterion": c["criterion"], "points": c["points"]} for c in current if c["points"] > 0]
        rubric = rubric_from_items(
            [*positive, {"criterion": criterion["criterion"], "points": criterion["points"]}], f"vetting {query_id}"
        )
        probes = probes_for(replace(row, rubric=rubric), self.rows, index, KINDS, self.per_kind)
        return [p for p in probes if p.target in (None, criterion["criterion"])]

    async def vet(self, query_id: str, current: list[dict], written: list[dict], step: int) -> list[dict]:
        """Each written criterion ({criterion, points}) with its decision, and for those probed: per kind the counts
        and tests, the kinds that flagged it, the test in words and the judge calls it cost."""
        return list(await asyncio.gather(*(self._one(query_id, current, item, step) for item in written)))

    async def _one(self, query_id: str, current: list[dict], item: dict, step: int) -> dict:
        text, points = str(item.get("criterion") or "").strip(), item.get("points")
        decided = {"criterion": text, "points": points}
        if not isinstance(points, int) or points <= 0 or query_id not in self.index or not text:
            return {**decided, "decision": PENALTY}  # a penalty, or what the buffer refuses anyway
        if text.casefold() in {str(c["criterion"]).strip().casefold() for c in current}:
            return {**decided, "decision": KNOWN}
        before = self.refused.get(query_id, {}).get(text)
        if before is not None:
            return {**decided, "decision": EXPLOITABLE, "test": f"refused before: {before}", "calls": 0}
        probes = self.probes(query_id, current, decided)
        if self.spent.get(step, 0) + len(probes) > self.budget:
            return {**decided, "decision": WAITING, "probes": len(probes)}
        self.spent[step] = self.spent.get(step, 0) + len(probes)
        row = self.rows[self.index[query_id]]
        target = RubricRow(
            query_id, row.conversation, rubric_from_items([decided], f"vetting {query_id}"), row.reference
        )
        items = [GradeItem(row.conversation, p.text, graded_against(target, p), row.reference) for p in probes]
        graded = await Grader(self.client, self.grading).grade_many(items)
        records = [
            {
                "row": query_id,
                "kind": p.kind,
                "target": p.target,
                "judge": "training judge",
                "verdicts": [[v.criterion, v.points, v.met] for v in g.verdicts],
            }
            for p, g in zip(probes, graded)
        ]
        calls = sum(g.judge_calls for g in {id(g): g for g in graded}.values())
        found = next((c for c in criteria_rows(records, self.test) if c["criterion"] == text), None)
        evidence = {"probes": len(probes), "calls": calls}
        if found is None or all(t["status"] == INSUFFICIENT for t in found["tests"].values()):
            return {
                **decided,
                **evidence,
                "decision": UNPROBED,
                "test": "unprobed: the judge decided too few of its probes",
            }
        evidence |= {key: found[key] for key in ("kinds", "tests", "exploited_by", "test")}
        if found["exploitable"]:
            self.refused.setdefault(query_id, {})[text] = found["test"]
            return {**decided, **evidence, "decision": EXPLOITABLE}
        return {**decided, **evidence, "decision": ADMITTED}

    def state(self) -> dict[str, Any]:
        return {"refused": self.refused}

    def load(self, state: dict[str, Any]) -> None:
        self.refused = {query: dict(found) for query, found in state.get("refused", {}).items()}
