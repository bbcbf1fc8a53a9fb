"""The criterion ledger: for every criterion of every rubric graded, what it cost and what it carried.

One row per criterion (a query's id and the criterion's position in its rubric, as the rubric dataset numbers them),
counted over groups of answers to the same query (a RuRL step's rollouts, or the several responses `grade` and
`eval` were given per query):

- graded, dropped (by rubric dropout), decided, met (a probability verdict counts its share), undecided (the judge
  answered neither way, or its votes tied) and failed (no answer after its calls);
- flat: of its groups with two or more decided verdicts, those in which every answer got the same verdict, and the
  judge verdicts spent there (they cannot move an advantage);
- its share of the learning signal. An answer's score is the weighted sum of its verdicts, s_i = sum_c x_ic with
  x_ic = points_c x credit_ic / (the positive points decided for that answer), so a group's sum of squares splits
  exactly over its criteria: SS_g = sum_i (s_i - mean s)^2 = sum_c sum_i (x_ic - mean x_c)(s_i - mean s). A
  criterion's `signal` is its part summed over its groups; `rubric_signal_share` divides it by its query's summed
  SS (the shares of a rubric sum to 1) and `signal_share` by the whole run's (the shares of all rows sum to 1). A
  criterion flat in every group carries exactly 0; a negative share pulls against the rest of its rubric. Answers
  the integrity check vetoed, without an answer, or unscored, earn their score whatever their verdicts: they are
  left out of the signal and the flat counts (their verdicts are counted as graded);
- its pass rate in the first and the last fifth of a run's steps (the fifths of the planned steps: a run stopped
  early compares its first fifth with the latest one it reached);
- the judge's agreement with itself where verdicts were asked again afresh (`reasks`), and with a monitor judge
  (over- and underclaim), each with its counts.

Memory grows with the criteria seen, not with the steps: a row holds counts and sums."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FIFTHS = 5
"""The windows a run's steps are counted in: the first and the last are compared."""
DECIDED, UNDECIDED, FAILED, ABSENT = "d", "u", "f", "-"
"""A verdict's state in a `LedgerAnswer`: decided; undecided; failed; not graded (dropped, or not asked)."""
COUNTS = (
    "graded",
    "dropped",
    "decided",
    "undecided",
    "failed",
    "judge_verdicts",
    "groups",
    "flat_groups",
    "group_verdicts",
    "flat_verdicts",
    "reasked",
    "reask_agreed",
    "reask_met_met",
    "reask_met_unmet",
    "reask_unmet_met",
    "monitor_decided",
    "judge_credited",
    "monitor_credited",
    "overclaimed",
    "underclaimed",
)
"""The integer counts of a row. `group_verdicts`: its judge verdicts in groups counted for flatness;
`flat_verdicts`: those in flat groups. `reask_*`: (first verdict, verdict asked again) met/unmet."""
SUMS = ("met", "signal")


@dataclass(frozen=True)
class LedgerCriterion:
    """A criterion as the ledger names it."""

    text: str
    points: int
    tags: tuple[str, ...] = ()
    rule: bool = False
    """Decided by a rule check in code, not by the judge."""


@dataclass(frozen=True)
class LedgerAnswer:
    """One answer's verdicts against its query's whole rubric (`criteria`, in the rubric's order: dropped criteria
    included), aligned with it: `credits[c]` in [0, 1] where decided, `states[c]` one of DECIDED, UNDECIDED, FAILED,
    ABSENT. `scored`: False for an answer whose score does not come from its verdicts (vetoed, no answer, unscored).
    `reasks`: (position, first verdict, verdict asked again afresh) for the verdicts asked twice."""

    query_id: str
    criteria: tuple[LedgerCriterion, ...]
    credits: tuple[float | None, ...]
    states: str
    scored: bool = True
    dropped: frozenset[int] = frozenset()
    reasks: tuple[tuple[int, bool, bool], ...] = ()


@dataclass
class Ledger:
    """The per-criterion counts of a run, a grade or an eval (see the module doc). `planned_steps`: the steps a run
    plans, for its fifths (None: no windows)."""

    planned_steps: int | None = None
    rows: dict[tuple[str, str], int] = field(default_factory=dict)
    """(query id, criterion text) -> row; a rubric never repeats a criterion's text."""
    keys: list[tuple[str, int, LedgerCriterion]] = field(default_factory=list)
    query_ss: dict[str, float] = field(default_factory=dict)
    """Per query: the summed within-group sum of squares of its groups' scores."""
    capacity: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros((0, len(COUNTS)), dtype=np.int64)
        self.sums = np.zeros((0, len(SUMS)), dtype=np.float64)
        self.window_met = np.zeros((0, FIFTHS), dtype=np.float64)
        self.window_decided = np.zeros((0, FIFTHS), dtype=np.int64)
        self._column = {name: i for i, name in enumerate(COUNTS)}

    def __len__(self) -> int:
        return len(self.keys)

    def row(self, query_id: str, position: int, criterion: LedgerCriterion) -> int:
        key = (query_id, criterion.text)
        found = self.rows.get(key)
        if found is not None:
            return found
        index = len(self.keys)
        if index == self.capacity:
            self._grow(max(64, 2 * self.capacity))
        self.rows[key] = index
        self.keys.append((query_id, position, criterion))
        return index

    def _grow(self, capacity: int) -> None:
        def grown(array: np.ndarray) -> np.ndarray:
            bigger = np.zeros((capacity, array.shape[1]), dtype=array.dtype)
            bigger[: array.shape[0]] = array
            return bigger

        self.counts, self.sums = grown(self.counts), grown(self.sums)
        self.window_met, self.window_decided = grown(self.window_met), grown(self.window_decided)
        self.capacity = capacity

    def window(self, step: int | None) -> int | None:
        if step is None or not self.planned_steps:
            return None
        return min(FIFTHS - 1, max(0, step) * FIFTHS // self.planned_steps)

    def add(self, answers: Sequence[LedgerAnswer], step: int | None = None) -> dict[str, int]:
        """Count a batch of answers (grouped by query id, in any order). Returns the batch's own figures: judge
        verdicts counted for flatness and those spent in flat groups."""
        groups: dict[str, list[LedgerAnswer]] = {}
        for answer in answers:
            groups.setdefault(answer.query_id, []).append(answer)
        window = self.window(step)
        batch = {"group_verdicts": 0, "flat_verdicts": 0}
        for query_id, group in groups.items():
            counted = self._add_group(query_id, group, window)
            batch["group_verdicts"] += counted[0]
            batch["flat_verdicts"] += counted[1]
        return batch

    def _add_group(self, query_id: str, group: list[LedgerAnswer], window: int | None) -> tuple[int, int]:
        c = self._column
        rubric = max((a.criteria for a in group), key=len)  # the same rubric for a group (evolving: the longest)
        rows = np.array([self.row(query_id, k, criterion) for k, criterion in enumerate(rubric)], dtype=np.int64)
        size = len(rubric)
        credit = np.full((len(group), size), np.nan)
        state = np.full((len(group), size), ABSENT)
        for i, answer in enumerate(group):
            n = min(size, len(answer.states))
            state[i, :n] = list(answer.states[:n])
            credit[i, :n] = [np.nan if v is None else v for v in answer.credits[:n]]
            for k in answer.dropped:
                if k < size:
                    self.counts[rows[k], c["dropped"]] += 1
            for k, first, again in answer.reasks:
                if k < size:
                    self.counts[rows[k], c["reasked"]] += 1
                    self.counts[rows[k], c["reask_agreed"]] += first == again
                    name = "reask_" + ("met" if first else "unmet") + "_" + ("met" if again else "unmet")
                    if name in c:
                        self.counts[rows[k], c[name]] += 1
        decided = state == DECIDED
        graded = state != ABSENT
        judged = np.array([not criterion.rule for criterion in rubric])
        np.add.at(self.counts[:, c["graded"]], rows, graded.sum(axis=0))
        np.add.at(self.counts[:, c["decided"]], rows, decided.sum(axis=0))
        np.add.at(self.counts[:, c["undecided"]], rows, (state == UNDECIDED).sum(axis=0))
        np.add.at(self.counts[:, c["failed"]], rows, (state == FAILED).sum(axis=0))
        np.add.at(self.counts[:, c["judge_verdicts"]], rows, graded.sum(axis=0) * judged)
        met = np.where(decided, credit, 0.0).sum(axis=0)
        np.add.at(self.sums[:, 0], rows, met)
        if window is not None:
            np.add.at(self.window_met[:, window], rows, met)
            np.add.at(self.window_decided[:, window], rows, decided.sum(axis=0))
        # flatness and signal over the answers whose score comes from their verdicts
        scored = np.array([a.scored for a in group])
        if scored.sum() < 2:
            return 0, 0
        kept, kept_decided = credit[scored], decided[scored]
        verdicts = kept_decided.sum(axis=0)
        high = np.where(kept_decided, kept, -np.inf).max(axis=0)
        low = np.where(kept_decided, kept, np.inf).min(axis=0)
        counted = verdicts >= 2
        flat = counted & (high == low)
        spent = (graded[scored].sum(axis=0)) * judged
        np.add.at(self.counts[:, c["groups"]], rows, counted)
        np.add.at(self.counts[:, c["flat_groups"]], rows, flat)
        np.add.at(self.counts[:, c["group_verdicts"]], rows, np.where(counted, spent, 0))
        np.add.at(self.counts[:, c["flat_verdicts"]], rows, np.where(flat, spent, 0))
        points = np.array([criterion.points for criterion in rubric], dtype=np.float64)
        contribution = np.where(kept_decided, kept, 0.0) * points
        positive = (kept_decided * (points > 0) * points).sum(axis=1, keepdims=True)
        weighted = np.divide(contribution, positive, out=np.zeros_like(contribution), where=positive > 0)
        scores = weighted.sum(axis=1)
        deviation = scores - scores.mean()
        part = ((weighted - weighted.mean(axis=0)) * deviation[:, None]).sum(axis=0)
        np.add.at(self.sums[:, 1], rows, part)
        self.query_ss[query_id] = self.query_ss.get(query_id, 0.0) + float((deviation**2).sum())
        return int(np.where(counted, spent, 0).sum()), int(np.where(flat, spent, 0).sum())

    def add_monitor(self, judged: Iterable[dict[str, Any]], monitored: Iterable[dict[str, Any]]) -> None:
        """Count a training judge's graded records against a monitor's of the same answers (checks/overclaim.py's
        pairing: verdicts in rubric order, positive criteria both decided)."""
        c = self._column
        for record, other in zip(judged, monitored):
            query_id = str(record.get("id"))
            for k, (verdict, peer) in enumerate(zip(record.get("verdicts") or [], other.get("verdicts") or [])):
                if verdict["criterion"] != peer["criterion"] or verdict.get("source") != "judge":
                    continue
                if verdict["points"] <= 0 or verdict.get("met") is None or peer.get("met") is None:
                    continue
                index = self.row(query_id, k, criterion_of(verdict))
                mine, theirs = bool(verdict["met"]), bool(peer["met"])
                self.counts[index, c["monitor_decided"]] += 1
                self.counts[index, c["judge_credited"]] += mine
                self.counts[index, c["monitor_credited"]] += theirs
                self.counts[index, c["overclaimed"]] += mine and not theirs
                self.counts[index, c["underclaimed"]] += theirs and not mine

    # --- the table -------------------------------------------------------------------------------------------

    def table(self) -> dict[str, list]:
        """The ledger as columns (what ledger.parquet holds): identity, counts, rates and shares, and the state a
        resumed run continues from (`window_met`, `window_decided`, `query_ss`)."""
        n = len(self)
        counts = {name: self.counts[:n, i] for i, name in enumerate(COUNTS)}
        met, signal = self.sums[:n, 0], self.sums[:n, 1]
        ids = [query_id for query_id, _, _ in self.keys]
        query_ss = np.array([self.query_ss.get(q, 0.0) for q in ids])
        total_ss = sum(self.query_ss.values())
        first, last = self._ends()
        columns: dict[str, Any] = {
            "query_id": ids,
            "position": [position for _, position, _ in self.keys],
            "criterion": [criterion.text for _, _, criterion in self.keys],
            "points": [criterion.points for _, _, criterion in self.keys],
            "tags": [list(criterion.tags) for _, _, criterion in self.keys],
            "source": ["rule" if criterion.rule else "judge" for _, _, criterion in self.keys],
            **{name: values.tolist() for name, values in counts.items()},
            "met": met.tolist(),
            "pass_rate": _rate(met, counts["decided"]),
            "flat_share": _rate(counts["flat_groups"], counts["groups"]),
            "signal": signal.tolist(),
            "rubric_signal_share": _rate(signal, query_ss),
            "signal_share": (signal / total_ss).tolist() if total_ss > 0 else [None] * n,
            "first_decided": self.window_decided[:n, first].tolist() if first is not None else [0] * n,
            "first_pass_rate": _rate(self.window_met[:n, first], self.window_decided[:n, first])
            if first is not None
            else [None] * n,
            "last_decided": self.window_decided[:n, last].tolist() if last is not None else [0] * n,
            "last_pass_rate": _rate(self.window_met[:n, last], self.window_decided[:n, last])
            if last is not None
            else [None] * n,
            "self_agreement": _rate(counts["reask_agreed"], counts["reasked"]),
            "overclaim": _rate(counts["overclaimed"], counts["judge_credited"]),
            "underclaim": _rate(counts["underclaimed"], counts["monitor_credited"]),
            "window_met": self.window_met[:n].tolist(),
            "window_decided": self.window_decided[:n].tolist(),
            "query_ss": query_ss.tolist(),
        }
        for name, end in (("first", first), ("last", last)):
            columns[f"{name}_met"] = self.window_met[:n, end].tolist() if end is not None else [0.0] * n
        columns["carries"] = [
            None if not groups else "nothing" if flat == groups else "signal"
            for groups, flat in zip(columns["groups"], columns["flat_groups"])
        ]
        return columns

    def _ends(self) -> tuple[int | None, int | None]:
        """The first window and the latest one holding verdicts (None without windows, or before any)."""
        if not self.planned_steps or not len(self):
            return None, None
        filled = np.nonzero(self.window_decided[: len(self)].sum(axis=0))[0]
        return (None, None) if not len(filled) else (0, int(filled[-1]))

    @classmethod
    def from_table(cls, columns: dict[str, list], planned_steps: int | None = None) -> "Ledger":
        """The ledger a table holds (a resumed run continues counting from it)."""
        ledger = cls(planned_steps=planned_steps)
        n = len(columns["query_id"])
        ledger._grow(max(64, n))
        for i in range(n):
            criterion = LedgerCriterion(
                columns["criterion"][i],
                int(columns["points"][i]),
                tuple(columns["tags"][i] or ()),
                columns["source"][i] == "rule",
            )
            ledger.row(str(columns["query_id"][i]), int(columns["position"][i]), criterion)
            ledger.query_ss.setdefault(str(columns["query_id"][i]), float(columns["query_ss"][i]))
        for j, name in enumerate(COUNTS):
            ledger.counts[:n, j] = columns[name]
        ledger.sums[:n, 0], ledger.sums[:n, 1] = columns["met"], columns["signal"]
        if n:
            ledger.window_met[:n] = np.asarray(columns["window_met"], dtype=np.float64).reshape(n, FIFTHS)
            ledger.window_decided[:n] = np.asarray(columns["window_decided"], dtype=np.int64).reshape(n, FIFTHS)
        return ledger


TOP = 5
"""Criteria named in a headline list."""


def headline(columns: dict[str, list], top: int = TOP) -> dict[str, Any]:
    """What a reader wants first from a ledger table: the share of judge verdicts spent where the criterion was flat
    in its group; the criteria that carried no signal over the whole run, with the judge verdicts they cost; the few
    that carried most of it; those the re-asks show the judge answering at random; the most overclaimed (with a
    monitor); and the same per tag. Every figure with its counts."""
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    counted = [row for row in rows if row["groups"]]
    nothing = [row for row in counted if row["carries"] == "nothing"]
    noise = [row for row in counted if row["carries"] == "noise"]
    carrying = sorted((row for row in counted if (row["signal_share"] or 0) > 0), key=lambda r: -r["signal_share"])
    group_verdicts = sum(row["group_verdicts"] for row in rows)
    flat_verdicts = sum(row["flat_verdicts"] for row in rows)
    monitored = [row for row in rows if row["overclaimed"]]
    out: dict[str, Any] = {
        "criteria": len(rows),
        "criteria_in_groups": len(counted),
        "judge_verdicts": sum(row["judge_verdicts"] for row in rows),
        "group_verdicts": group_verdicts,
        "flat_verdicts": flat_verdicts,
        "flat_verdict_share": flat_verdicts / group_verdicts if group_verdicts else None,
        "no_signal": {
            "criteria": len(nothing),
            "judge_verdicts": sum(row["judge_verdicts"] for row in nothing),
            "most_asked": [_named(row) for row in sorted(nothing, key=lambda r: -r["judge_verdicts"])[:top]],
        },
        "carried_most": [_named(row) for row in carrying[:top]],
        "top_share": sum(row["signal_share"] for row in carrying[:top]),
        "half_the_signal": _criteria_for(carrying, 0.5),
        "noise": {"criteria": len(noise), "most_asked": [_named(row) for row in noise[:top]]},
        "overclaimed": [
            _named(row) for row in sorted(monitored, key=lambda r: (-r["overclaimed"], -r["judge_credited"]))[:top]
        ],
        "tags": _per_tag(rows),
    }
    return out


def _named(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("query_id", "position", "criterion", "points", "judge_verdicts", "groups", "flat_groups", "pass_rate",
            "signal_share", "rubric_signal_share", "reasked", "self_agreement", "overclaimed", "judge_credited",
            "overclaim")  # fmt: skip
    return {key: row[key] for key in keep}


def _criteria_for(carrying: list[dict[str, Any]], share: float) -> int | None:
    """How many of the largest carriers it takes to reach `share` of the signal (None: they never do)."""
    total = 0.0
    for count, row in enumerate(carrying, 1):
        total += row["signal_share"]
        if total >= share:
            return count
    return None


def _per_tag(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per tag (HealthBench's axes and themes): criteria, their share of the signal, the share of their judge
    verdicts spent flat, and those that carried nothing."""
    tags: dict[str, dict[str, Any]] = {}
    for row in rows:
        for tag in row["tags"] or ():
            entry = tags.setdefault(tag, {"criteria": 0, "signal_share": 0.0, "group_verdicts": 0, "flat_verdicts": 0,
                                          "no_signal": 0})  # fmt: skip
            entry["criteria"] += 1
            entry["signal_share"] += row["signal_share"] or 0.0
            entry["group_verdicts"] += row["group_verdicts"]
            entry["flat_verdicts"] += row["flat_verdicts"]
            entry["no_signal"] += row["carries"] == "nothing"
    for entry in tags.values():
        entry["flat_verdict_share"] = (
            entry["flat_verdicts"] / entry["group_verdicts"] if entry["group_verdicts"] else None
        )
    return dict(sorted(tags.items(), key=lambda item: -item[1]["signal_share"]))


def headline_lines(figures: dict[str, Any]) -> list[str]:
    """The headline as the summary and the report open with it."""
    from rubricrl.markdown import pct

    none = figures["no_signal"]
    lines = [
        f"criterion ledger: {figures['criteria_in_groups']} of {figures['criteria']} criteria graded in groups; "
        f"{pct(figures['flat_verdict_share'])} of the judge verdicts in groups ({figures['flat_verdicts']} of "
        f"{figures['group_verdicts']}) went to criteria flat in their group",
        f"  no signal over the whole run: {none['criteria']} criteria, {none['judge_verdicts']} judge verdicts"
        + (": " + "; ".join(_short_row(row) for row in none["most_asked"][:3]) if none["most_asked"] else ""),
    ]
    if figures["carried_most"]:
        half = figures["half_the_signal"]
        lines.append(
            f"  carried most: {len(figures['carried_most'])} criteria carried {pct(figures['top_share'])} of the "
            "signal"
            + (f" ({half} carry half)" if half else "")
            + ": "
            + "; ".join(f"{pct(row['signal_share'])} {_short_row(row)}" for row in figures["carried_most"][:3])
        )
    if figures["noise"]["criteria"]:
        lines.append(
            f"  judged at random (re-asks agree no better than chance): {figures['noise']['criteria']} criteria: "
            + "; ".join(
                f"{_short_row(row)} ({pct(row['self_agreement'])} of {row['reasked']} re-asks agree)"
                for row in figures["noise"]["most_asked"][:3]
            )
        )
    if figures["overclaimed"]:
        lines.append(
            "  most overclaimed (credited by the judge, rejected by the monitor): "
            + "; ".join(
                f"{row['overclaimed']} of {row['judge_credited']} {_short_row(row)}"
                for row in figures["overclaimed"][:3]
            )
        )
    return lines


def _short_row(row: dict[str, Any]) -> str:
    text = row["criterion"]
    return f"{row['query_id']}#{row['position']} {text[:50] + '…' if len(text) > 51 else text!r}"


def plot(columns: dict[str, list], path: Path) -> Path | None:
    """Signal share against pass rate, one point per criterion graded in groups; overclaimed ones marked (None:
    no matplotlib, or nothing to draw)."""
    from rubricrl import charts

    points = [
        (rate, share, over)
        for rate, share, over in zip(columns["pass_rate"], columns["rubric_signal_share"], columns["overclaimed"])
        if rate is not None and share is not None
    ]
    if not charts.available() or not points:
        return None
    drawn, axis = charts.figure(6.4, 4.0)
    plain = [(x, y) for x, y, over in points if not over]
    marked = [(x, y) for x, y, over in points if over]
    charts.scatter(axis, [x for x, _ in plain], [y for _, y in plain], "criterion", limit=20_000, s=8, alpha=0.5)
    if marked:
        charts.scatter(axis, [x for x, _ in marked], [y for _, y in marked], "overclaimed (monitor)", limit=20_000,
                       s=14, color="tab:red", marker="x")  # fmt: skip
    axis.set_xlabel("pass rate")
    axis.set_ylabel("share of its rubric's signal")
    axis.axhline(0, color="grey", linewidth=0.5)
    axis.grid(alpha=0.3)
    charts.legend_above(axis, ["criterion", "overclaimed (monitor)"] if marked else ["criterion"])
    return charts.save_png(drawn, path)


def _rate(part, whole) -> list[float | None]:
    part, whole = np.asarray(part, dtype=np.float64), np.asarray(whole, dtype=np.float64)
    out = np.divide(part, whole, out=np.full(part.shape, np.nan), where=whole != 0)
    return [None if np.isnan(v) else float(v) for v in out]


def criterion_of(verdict: dict[str, Any]) -> LedgerCriterion:
    """A graded record's verdict as the ledger names its criterion."""
    return LedgerCriterion(verdict["criterion"], int(verdict["points"]), tuple(verdict.get("tags") or ()),
                           verdict.get("source") == "rule")  # fmt: skip


def verdict_state(met: bool | None, source: str, explanation: str = "") -> str:
    """A verdict's state in a `LedgerAnswer` (grading/judge.py marks a failed question's explanation)."""
    from grading.judge import FAILED

    if source == "none":
        return ABSENT
    if met is not None:
        return DECIDED
    return FAILED if explanation.startswith(FAILED) else UNDECIDED


def answer_of_graded(
    query_id: str,
    rubric,
    graded,
    scored: bool,
    kept=None,
    reasks: tuple[tuple[str, bool, bool], ...] = (),
) -> LedgerAnswer | None:
    """An answer graded in training (grading/grader.py's `Graded`; None: not judged before the deadline, nothing to
    count) against its query's whole `rubric`, of which the criteria not in `kept` (rubric dropout's rubric) were
    left out. `reasks`: (criterion text, first verdict, verdict asked again)."""
    if graded is None:
        return None
    criteria = tuple(LedgerCriterion(c.text, c.points, c.tags, c.rule is not None) for c in rubric.criteria)
    verdicts = {v.criterion: v for v in graded.verdicts}
    in_kept = None if kept is None else {c.text for c in kept.criteria}
    states, credits = [], []
    for criterion in rubric.criteria:
        v = verdicts.get(criterion.text)
        if v is None:
            states.append(ABSENT)
            credits.append(None)
            continue
        states.append(verdict_state(v.met, v.source, v.explanation))
        credit = v.credit
        credits.append(None if credit is None else float(credit))
    dropped = frozenset(
        k for k, criterion in enumerate(rubric.criteria) if in_kept is not None and criterion.text not in in_kept
    )
    position = {criterion.text: k for k, criterion in enumerate(rubric.criteria)}
    again = tuple((position[text], first, second) for text, first, second in reasks if text in position)
    return LedgerAnswer(query_id, criteria, tuple(credits), "".join(states), scored, dropped, again)


def answer_from_record(record: dict[str, Any]) -> LedgerAnswer:
    """A graded record (grade, eval) as a ledger answer: its verdicts in rubric order; scored when it has a reward
    that its verdicts make (not vetoed, not without an answer)."""
    verdicts = record.get("verdicts") or []
    return LedgerAnswer(
        query_id=str(record.get("id")),
        criteria=tuple(criterion_of(v) for v in verdicts),
        credits=tuple(_credit(v) for v in verdicts),
        states="".join(
            verdict_state(v.get("met"), v.get("source", "judge"), v.get("explanation") or "") for v in verdicts
        ),
        scored=record.get("reward") is not None and not record.get("integrity_flag") and not record.get("no_answer"),
    )


def _credit(verdict: dict[str, Any]) -> float | None:
    if verdict.get("met") is None:
        return None
    probability = verdict.get("probability")
    return float(probability) if probability is not None else float(bool(verdict["met"]))


def ledger_of_records(records: Sequence[dict[str, Any]]) -> Ledger | None:
    """The ledger of graded records where some query has two or more answers (a rubric set judged on several
    samples per query); None where every query has one (nothing to compare within a group)."""
    per_query: dict[str, int] = {}
    for record in records:
        per_query[str(record.get("id"))] = per_query.get(str(record.get("id")), 0) + 1
    if not per_query or max(per_query.values()) < 2:
        return None
    ledger = Ledger()
    ledger.add([answer_from_record(record) for record in records])
    return ledger


def write_table(columns: dict[str, list], path: Path) -> Path:
    """ledger.parquet, written whole (a reader never sees half of it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table(columns), partial)
    partial.replace(path)
    return path


def read_table(path: Path) -> dict[str, list]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pydict()
