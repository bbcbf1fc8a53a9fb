"""The criterion ledger: for every criterion of every rubric graded, what it cost and what it carried.

One row per criterion (a query's id and the criterion's position in its rubric, as the rubric dataset numbers them),
counted over groups of answers to the same query (a RuRL step's rollouts, or the several responses `grade` and
`eval` were given per query):

- graded, dropped (by rubric dropout), decided, met (a probability verdict counts its share), undecided (the judge
  answered neither way, or its votes tied) and failed (no answer after its calls);
- flat: of its groups with two or more decided verdicts, those in which every answer got the same verdict, and the
  judge verdicts spent there (they cannot move an advantage);
- its share of the learning signal. An answer's score is the weighted sum of its verdicts, s_i = sum_c x_ic with
  x_ic = points_c x credit_ic / (the positive points decided in the group; an undecided verdict counts as its
  criterion's mean in the group), so a group's sum of squares splits
  exactly over its criteria: SS_g = sum_i (s_i - mean s)^2 = sum_c sum_i (x_ic - mean x_c)(s_i - mean s). Its
  `signal` is its part summed over its groups, over its query's summed SS (`rubric_signal_share`, summing to 1 over
  a rubric) and the run's (`signal_share`). Answers whose score does not come from their verdicts (vetoed, without
  an answer, unscored) are left out of the signal and the flat counts (docs/criterion-ledger.md);
- its pass rate in the first and the last fifth of a run's steps (the fifths of the planned steps: a run stopped
  early compares its first fifth with the latest one it reached);
- the judge's agreement with itself where verdicts were asked again afresh (`reasks`), and with a monitor judge
  (over- and underclaim), each with its counts.

Memory grows with the criteria seen, not with the steps: a row holds counts and sums."""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grading.report import both_decided

FIFTHS = 5
"""The windows a run's steps are counted in: the first and the last are compared."""
DECIDED, UNDECIDED, FAILED, ABSENT = "d", "u", "f", "-"
"""A verdict's state in a `LedgerAnswer`: decided; undecided; failed; not graded (dropped, or not asked)."""
COUNTS = tuple(
    "graded dropped decided undecided failed judge_verdicts groups flat_groups group_verdicts flat_verdicts reasked "
    "reask_met_met reask_met_unmet reask_unmet_met monitor_decided judge_credited monitor_credited "
    "overclaimed underclaimed".split()
)
"""The integer counts of a row. `group_verdicts`: its judge verdicts in groups counted for flatness;
`flat_verdicts`: those in flat groups. `reask_*`: (first verdict, verdict asked again) met/unmet, the re-asks
where both were unmet being the rest of `reasked`."""
SUMS = ("met", "signal")


@dataclass(frozen=True, slots=True)
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


class Ledger:
    """The per-criterion counts of a run, a grade or an eval (see the module doc). `planned_steps`: the steps a run
    plans, for its fifths (None: no windows). Rows are held as arrays (counts, sums, windows) beside the criteria
    they count; a query's rows are found by the criterion's position, else its text (an evolved rubric)."""

    def __init__(self, planned_steps: int | None = None):
        self.planned_steps = planned_steps
        self.by_query: dict[str, list[int]] = {}
        """Per query id, its rows (in the order first seen: its rubric's order)."""
        self.query_ids: list[str] = []
        self.positions: list[int] = []
        self.criteria: list[LedgerCriterion] = []
        self.query_ss: dict[str, float] = {}
        """Per query: the summed within-group sum of squares of its groups' scores."""
        self.capacity = 0
        self.counts = np.zeros((0, len(COUNTS)), dtype=np.int32)
        self.sums = np.zeros((0, len(SUMS)), dtype=np.float64)
        self.window_met = np.zeros((0, FIFTHS), dtype=np.float32)
        self.window_decided = np.zeros((0, FIFTHS), dtype=np.int32)
        self._column = {name: i for i, name in enumerate(COUNTS)}

    def __len__(self) -> int:
        return len(self.criteria)

    def row(self, query_id: str, position: int, criterion: LedgerCriterion) -> int:
        rows = self.by_query.setdefault(query_id, [])
        if position < len(rows) and self.criteria[rows[position]].text == criterion.text:
            return rows[position]
        found = next((row for row in rows if self.criteria[row].text == criterion.text), None)
        if found is not None:
            return found
        index = len(self.criteria)
        if index == self.capacity:
            self._grow(max(64, 2 * self.capacity))
        rows.append(index)
        self.query_ids.append(query_id)
        self.positions.append(position)
        self.criteria.append(criterion)
        return index

    def _grow(self, capacity: int) -> None:
        def grown(array: np.ndarray) -> np.ndarray:
            bigger = np.zeros((capacity, array.shape[1]), dtype=array.dtype)
            bigger[: array.shape[0]] = array
            return bigger

        self.counts, self.sums = grown(self.counts), grown(self.sums)
        self.window_met, self.window_decided = grown(self.window_met), grown(self.window_decided)
        self.capacity = capacity

    def flat_criteria(self) -> tuple[int, int]:
        """(criteria flat in every group they were graded in, criteria graded in groups) so far: a step's look."""
        groups, flat = (self.counts[: len(self), self._column[name]] for name in ("groups", "flat_groups"))
        return int(((groups > 0) & (flat == groups)).sum()), int((groups > 0).sum())

    def window(self, step: int | None) -> int | None:
        if step is None or not self.planned_steps:
            return None
        return min(FIFTHS - 1, max(0, step) * FIFTHS // self.planned_steps)

    def add(
        self, answers: Sequence[LedgerAnswer | None], step: int | None = None, group_size: int | None = None
    ) -> dict[str, int]:
        """Count a batch of answers (None: not judged, left out). A group is `group_size` consecutive answers (a
        GRPO batch's, where one query may fill two groups), else the answers of one query id. Returns the batch's
        own figures: judge verdicts counted for flatness and those spent in flat groups."""
        if group_size:
            groups = [answers[start : start + group_size] for start in range(0, len(answers), group_size)]
        else:
            by_query: dict[str, list[LedgerAnswer | None]] = {}
            for answer in answers:
                by_query.setdefault(answer.query_id if answer else "", []).append(answer)
            groups = list(by_query.values())
        window, batch = self.window(step), {"group_verdicts": 0, "flat_verdicts": 0}
        for group in ([answer for answer in chunk if answer is not None] for chunk in groups):
            if group:
                spent, flat = self._add_group(group[0].query_id, group, window)
                batch["group_verdicts"] += spent
                batch["flat_verdicts"] += flat
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
                    if first or again:  # unmet-unmet is what is left of reasked
                        name = "reask_" + ("met" if first else "unmet") + "_" + ("met" if again else "unmet")
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
        in_groups, in_flat = np.where(counted, spent, 0), np.where(flat, spent, 0)
        np.add.at(self.counts[:, c["groups"]], rows, counted)
        np.add.at(self.counts[:, c["flat_groups"]], rows, flat)
        np.add.at(self.counts[:, c["group_verdicts"]], rows, in_groups)
        np.add.at(self.counts[:, c["flat_verdicts"]], rows, in_flat)
        # each answer scored over the positive points decided in the group, an undecided verdict counting as its
        # criterion's mean there: a criterion flat among its decided verdicts carries exactly 0
        points = np.array([criterion.points for criterion in rubric], dtype=np.float64)
        summed = np.where(kept_decided, kept, 0.0).sum(axis=0)
        filled = np.where(kept_decided, kept, summed / np.maximum(verdicts, 1))
        positive = points[(verdicts > 0) & (points > 0)].sum()
        weighted = filled * points / positive if positive > 0 else np.zeros_like(filled)
        scores = weighted.sum(axis=1)
        deviation = scores - scores.mean()
        part = ((weighted - weighted.mean(axis=0)) * deviation[:, None]).sum(axis=0)
        np.add.at(self.sums[:, 1], rows, part)
        self.query_ss[query_id] = self.query_ss.get(query_id, 0.0) + float((deviation**2).sum())
        return int(in_groups.sum()), int(in_flat.sum())

    def add_monitor(self, judged: list[dict[str, Any]], monitored: list[dict[str, Any]]) -> None:
        """Count a training judge's graded records against a monitor's of the same answers: over- and underclaim
        per criterion (grading/report.py's `both_decided`, as checks/overclaim.py counts them)."""
        c = self._column
        for record, k, verdict, peer in both_decided(judged, monitored):
            index = self.row(str(record.get("id")), k, criterion_of(verdict))
            mine, theirs = bool(verdict["met"]), bool(peer["met"])
            self.counts[index, c["monitor_decided"]] += 1
            self.counts[index, c["judge_credited"]] += mine
            self.counts[index, c["monitor_credited"]] += theirs
            self.counts[index, c["overclaimed"]] += mine and not theirs
            self.counts[index, c["underclaimed"]] += theirs and not mine

    # --- the table -------------------------------------------------------------------------------------------

    def arrow(self):
        """The ledger as a pyarrow table (what ledger.parquet holds): identity, counts, rates and shares, and the
        state a resumed run continues from (`window_met`, `window_decided`, `query_ss`). Built from the arrays: a
        checkpoint of millions of criteria takes seconds."""
        import pyarrow as pa

        n = len(self)
        counts = {name: self.counts[:n, i].astype(np.int64) for i, name in enumerate(COUNTS)}
        met, signal = self.sums[:n, 0], self.sums[:n, 1]
        query_ss = np.array([self.query_ss.get(q, 0.0) for q in self.query_ids])
        total_ss = sum(self.query_ss.values())
        first, last = self._ends()
        groups, flat = counts["groups"], counts["flat_groups"]
        carries = np.where(groups == 0, None, np.where(flat == groups, "nothing", "signal"))
        columns: dict[str, Any] = {
            "query_id": pa.array(self.query_ids, pa.string()),
            "position": pa.array(self.positions, pa.int32()),
            "criterion": pa.array([c.text for c in self.criteria], pa.string()),
            "points": pa.array([c.points for c in self.criteria], pa.int32()),
            "tags": pa.array([list(c.tags) for c in self.criteria], pa.list_(pa.string())),
            "source": pa.array(["rule" if c.rule else "judge" for c in self.criteria], pa.string()),
            **counts,
            "met": met,
            "pass_rate": _ratio(met, counts["decided"]),
            "flat_share": _ratio(flat, groups),
            "signal": signal,
            "rubric_signal_share": _ratio(signal, query_ss),
            "signal_share": _ratio(signal, np.full(n, total_ss)),
            "carries": pa.array(carries.tolist(), pa.string()),
            "self_agreement": _ratio(
                counts["reasked"] - counts["reask_met_unmet"] - counts["reask_unmet_met"], counts["reasked"]
            ),
            "overclaim": _ratio(counts["overclaimed"], counts["judge_credited"]),
            "underclaim": _ratio(counts["underclaimed"], counts["monitor_credited"]),
        }
        for name, end in (("first", first), ("last", last)):
            decided = self.window_decided[:n, end].astype(np.int64) if end is not None else np.zeros(n, np.int64)
            window_met = self.window_met[:n, end].astype(np.float64) if end is not None else np.zeros(n)
            columns[f"{name}_decided"], columns[f"{name}_met"] = decided, window_met
            columns[f"{name}_pass_rate"] = _ratio(window_met, decided)
        for name, windows, kind in (
            ("window_met", self.window_met, np.float64),
            ("window_decided", self.window_decided, np.int64),
        ):
            columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(windows[:n].astype(kind).reshape(-1)), FIFTHS)
        columns["query_ss"] = query_ss
        return pa.table(columns)

    def table(self) -> dict[str, list]:
        """`arrow()` as columns of Python values (None where a rate is undefined)."""
        return self.arrow().to_pydict()

    def _ends(self) -> tuple[int | None, int | None]:
        """The first window and the latest one holding verdicts (None where none does: no steps were counted)."""
        if not len(self):
            return None, None
        filled = np.nonzero(self.window_decided[: len(self)].sum(axis=0))[0]
        return (None, None) if not len(filled) else (0, int(filled[-1]))

    @classmethod
    def from_table(cls, table, planned_steps: int | None = None) -> "Ledger":
        """The ledger a table holds (`arrow()`'s, or read from ledger.parquet): a resumed run continues counting."""
        columns = {name: table.column(name) for name in table.column_names}
        ledger = cls(planned_steps=planned_steps)
        n = table.num_rows
        ledger._grow(max(64, n))
        texts, points = columns["criterion"].to_pylist(), columns["points"].to_pylist()
        tags, sources = columns["tags"].to_pylist(), columns["source"].to_pylist()
        for query_id, position, text, worth, tagged, source in zip(
            columns["query_id"].to_pylist(), columns["position"].to_pylist(), texts, points, tags, sources
        ):
            ledger.by_query.setdefault(query_id, []).append(len(ledger.criteria))
            ledger.query_ids.append(query_id)
            ledger.positions.append(position)
            ledger.criteria.append(LedgerCriterion(text, worth, tuple(tagged or ()), source == "rule"))
        for query_id, ss in zip(ledger.query_ids, columns["query_ss"].to_numpy()):
            ledger.query_ss.setdefault(query_id, float(ss))
        for j, name in enumerate(COUNTS):
            ledger.counts[:n, j] = columns[name].to_numpy()
        ledger.sums[:n, 0], ledger.sums[:n, 1] = columns["met"].to_numpy(), columns["signal"].to_numpy()
        if n:
            for name, windows in (("window_met", ledger.window_met), ("window_decided", ledger.window_decided)):
                windows[:n] = np.asarray(columns[name].combine_chunks().flatten()).reshape(-1, FIFTHS)
        return ledger


def _ratio(part: np.ndarray, whole: np.ndarray):
    """part / whole as a float column, null where whole is 0."""
    import pyarrow as pa

    part, whole = np.asarray(part, dtype=np.float64), np.asarray(whole, dtype=np.float64)
    out = np.divide(part, whole, out=np.zeros(part.shape), where=whole != 0)
    return pa.array(out, pa.float64(), mask=whole == 0)


TOP = 5
"""Criteria named in a headline list."""


def headline(table, top: int = TOP) -> dict[str, Any]:
    """What a reader wants first from a ledger (a pyarrow table: `Ledger.arrow()` or ledger.parquet): the share of
    judge verdicts spent where the criterion was flat in its group; the criteria that carried no signal over the
    whole run, with the judge verdicts they cost; the few that carried most of it; those the re-asks show the judge
    answering at random; the most overclaimed (with a monitor); and the same per tag. Every figure with its counts."""
    import pyarrow as pa

    def numbers(name: str) -> np.ndarray:
        return table.column(name).to_numpy(zero_copy_only=False)

    carries = np.array(table.column("carries").to_pylist(), dtype=object)
    groups, verdicts = numbers("groups"), numbers("judge_verdicts")
    group_verdicts, flat_verdicts = int(numbers("group_verdicts").sum()), int(numbers("flat_verdicts").sum())
    share = np.nan_to_num(numbers("signal_share").astype(np.float64))
    nothing = np.nonzero((groups > 0) & (carries == "nothing"))[0]
    noise = np.nonzero(carries == "noise")[0]
    carrying = np.nonzero(share > 0)[0]
    carrying = carrying[np.argsort(-share[carrying], kind="stable")]
    overclaimed = np.nonzero(numbers("overclaimed") > 0)[0]
    overclaimed = overclaimed[
        np.lexsort((-numbers("judge_credited")[overclaimed], -numbers("overclaimed")[overclaimed]))
    ]
    cumulative = np.cumsum(share[carrying])
    reaching = np.nonzero(cumulative >= 0.5)[0]

    def named(rows: np.ndarray) -> list[dict[str, Any]]:
        keep = ["query_id", "position", "criterion", "points", "judge_verdicts", "groups", "flat_groups",
                "pass_rate", "signal_share", "rubric_signal_share", "reasked", "self_agreement", "overclaimed",
                "judge_credited", "overclaim"]  # fmt: skip
        return table.select(keep).take(pa.array(rows[:top].astype(np.int64))).to_pylist()

    return {
        "criteria": table.num_rows,
        "criteria_in_groups": int((groups > 0).sum()),
        "judge_verdicts": int(verdicts.sum()),
        "group_verdicts": group_verdicts,
        "flat_verdicts": flat_verdicts,
        "flat_verdict_share": flat_verdicts / group_verdicts if group_verdicts else None,
        "no_signal": {
            "criteria": len(nothing),
            "judge_verdicts": int(verdicts[nothing].sum()),
            "most_asked": named(nothing[np.argsort(-verdicts[nothing], kind="stable")]),
        },
        "carried_most": named(carrying),
        "top_share": float(share[carrying[:top]].sum()),
        "half_the_signal": int(reaching[0]) + 1 if len(reaching) else None,
        "noise": {"criteria": len(noise), "most_asked": named(noise[np.argsort(-verdicts[noise], kind="stable")])},
        "overclaimed": named(overclaimed),
        "tags": _per_tag(table, share, carries),
    }


def _per_tag(table, share: np.ndarray, carries: np.ndarray) -> dict[str, dict[str, Any]]:
    """Per tag (HealthBench's axes and themes): criteria, their share of the signal, the share of their judge
    verdicts spent flat, and those that carried nothing."""
    tags: dict[str, dict[str, Any]] = {}
    group_verdicts = table.column("group_verdicts").to_numpy()
    flat_verdicts = table.column("flat_verdicts").to_numpy()
    for row, tagged in enumerate(table.column("tags").to_pylist()):
        for tag in tagged or ():
            entry = tags.setdefault(tag, {"criteria": 0, "signal_share": 0.0, "group_verdicts": 0, "flat_verdicts": 0,
                                          "no_signal": 0})  # fmt: skip
            entry["criteria"] += 1
            entry["signal_share"] += float(share[row])
            entry["group_verdicts"] += int(group_verdicts[row])
            entry["flat_verdicts"] += int(flat_verdicts[row])
            entry["no_signal"] += carries[row] == "nothing"
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
        f"  no signal over the whole run: {_criteria(none['criteria'])}, {none['judge_verdicts']} judge verdicts"
        + (": " + "; ".join(_short_row(row) for row in none["most_asked"][:3]) if none["most_asked"] else ""),
    ]
    if figures["carried_most"]:
        half = figures["half_the_signal"]
        lines.append(
            f"  carried most: {_criteria(len(figures['carried_most']))} carried {pct(figures['top_share'])} of the "
            "signal"
            + (f" ({half} carry half)" if half else "")
            + ": "
            + "; ".join(f"{pct(row['signal_share'])} {_short_row(row)}" for row in figures["carried_most"][:3])
        )
    if figures["noise"]["criteria"]:
        lines.append(
            f"  judged at random? {_criteria(figures['noise']['criteria'])} whose verdicts asked again afresh do not "
            "follow the first ones (two-proportion test, FDR 5%): "
            + "; ".join(
                f"{_short_row(row)} ({pct(row['self_agreement'])} of {row['reasked']} re-asks agree)"
                for row in figures["noise"]["most_asked"][:3]
            )
        )
    if figures["tags"]:
        lines.append(
            "  per tag (share of the signal, of its judge verdicts spent flat, criteria with none): "
            + "; ".join(
                f"{tag} {pct(entry['signal_share'])}, {pct(entry['flat_verdict_share'])}, {entry['no_signal']} of "
                f"{entry['criteria']}"
                for tag, entry in list(figures["tags"].items())[:TOP]
            )
            + (f" (+{len(figures['tags']) - TOP} more tags in the table)" if len(figures["tags"]) > TOP else "")
        )
    moved = [row for row in figures.get("tags_moved") or () if row["significant"]]  # a run's (rurl/watch/ledger.py)
    if moved:
        lines.append("  tags that moved (first -> last fifth, two-proportion z-test, FDR 5%): " + "; ".join(
            f"{row['tag']} {pct(row['first_pass_rate'])} of {row['first_decided']} -> {pct(row['last_pass_rate'])} of "
            f"{row['last_decided']} (p = {row['p']:.2g})" for row in moved[:TOP]))  # fmt: skip
    if figures["overclaimed"]:
        lines.append(
            "  most overclaimed (credited by the judge, rejected by the monitor): "
            + "; ".join(
                f"{row['overclaimed']} of {row['judge_credited']} {_short_row(row)}"
                for row in figures["overclaimed"][:3]
            )
        )
    return lines


def _criteria(count: int) -> str:
    return f"{count} criterion" if count == 1 else f"{count} criteria"


def _short_row(row: dict[str, Any]) -> str:
    text = row["criterion"]
    return f"{row['query_id']}#{row['position']} {text[:50] + '…' if len(text) > 51 else text!r}"


def draw(table):
    """Signal share against pass rate, one point per criterion graded in groups; where the monitor judged its text
    (a run's monitor grades the held-out queries, whose criteria may share a text with the training queries'), the
    point's colour is that text's overclaim. The figure, or None: no matplotlib, or nothing to draw."""
    from rubricrl import charts

    texts = table.column("criterion").to_pylist()
    over, credited = Counter(), Counter()  # per text, over the queries the monitor judged
    for text, count, of in zip(
        texts, table.column("overclaimed").to_pylist(), table.column("judge_credited").to_pylist()
    ):
        over[text], credited[text] = over[text] + count, credited[text] + of
    pooled = {text: over[text] / of for text, of in credited.items() if of}
    rates, shares = table.column("pass_rate").to_pylist(), table.column("rubric_signal_share").to_pylist()
    points = [(x, y, text) for x, y, text in zip(rates, shares, texts) if x is not None and y is not None]
    if not charts.available() or not points:
        return None
    drawn, axis = charts.figure(6.4, 4.0)
    plain = [(x, y) for x, y, text in points if text not in pooled]
    judged = [(x, y, pooled[text]) for x, y, text in points if text in pooled][:: max(1, len(points) // 20_000)]
    charts.scatter(axis, [x for x, _ in plain], [y for _, y in plain], "criterion", limit=20_000, s=8, alpha=0.5)
    if judged:
        shown = axis.scatter([x for x, _, _ in judged], [y for _, y, _ in judged], c=[r for _, _, r in judged],
                             cmap="Reds", vmin=0, vmax=1, s=16, edgecolors="grey", linewidths=0.3,
                             label="criterion the monitor judged")  # fmt: skip
        drawn.colorbar(shown, ax=axis, label="overclaim of its text (monitor)")
    axis.set_xlabel("pass rate")
    axis.set_ylabel("share of its rubric's signal")
    axis.axhline(0, color="grey", linewidth=0.5)
    axis.grid(alpha=0.3)
    charts.legend_above(
        axis, [*(["criterion"] if plain else []), *(["criterion the monitor judged"] if judged else [])]
    )
    return drawn


def plot(table, path: Path) -> Path | None:
    """`draw`'s figure as a PNG at `path` (None: nothing drawn)."""
    from rubricrl import charts

    drawn = draw(table)
    return None if drawn is None else charts.save_png(drawn, path)


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
    answered = Counter(str(record.get("id")) for record in records)
    if not answered or max(answered.values()) < 2:
        return None
    ledger = Ledger()
    ledger.add([answer_from_record(record) for record in records])
    return ledger


def write_for_records(records: Sequence[dict[str, Any]], path: Path) -> dict[str, Any] | None:
    """`grade` and `eval`: where a query has several answers, the ledger of their graded records at `path` (and its
    plot beside it, .png); its headline, or None where every query has one answer (a ledger an earlier run left
    there is removed: it would speak for other records)."""
    ledger = ledger_of_records(records)
    if ledger is None:
        path.unlink(missing_ok=True)
        path.with_suffix(".png").unlink(missing_ok=True)
        return None
    table = ledger.arrow()
    write_table(table, path)
    plot(table, path.with_suffix(".png"))
    return headline(table)


def write_table(table, path: Path) -> Path:
    """ledger.parquet, written whole (rubricrl/runs/jsonl.py `write_whole`: a reader never sees half of it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rubricrl.runs.jsonl import write_whole

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return write_whole(path, sink.getvalue().to_pybytes())


def read_table(path: Path):
    """A ledger.parquet as a pyarrow table."""
    import pyarrow.parquet as pq

    return pq.read_table(path)
