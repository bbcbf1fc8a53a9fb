"""Does a rubric still tell answers apart? Per criterion of one query, from every graded answer to it: pass and
undecided rates, whether it separates answers, and the flags a researcher acts on before spending GPU-days.

A flag needs `min_answers` answers to the query; a query with fewer is counted and reported, not flagged. Met means
what it means in grading: for a penalty (points < 0), the fault is present. Several verdicts for one answer (the
same response graded in several files, e.g. by two judges) are one vote each: the majority decides, a tie is
undecided, and how often they differ is the criterion's disagreement.
"""

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

FLAGS = ("saturated", "dead", "duplicate", "unreliable", "suspect_sign")
"""saturated: met by every decided answer; dead: by none; duplicate: the same verdict on every answer as an
earlier criterion that separates; unreliable: undecided or disputed too often; suspect_sign: its verdicts run
against the rest of its rubric (a positive criterion met mostly by the answers the others score lowest, or a penalty
met mostly by the best ones: simple-evals issue 77's kind of error)."""


@dataclass
class AuditSettings:
    min_answers: int = 4
    """Answers a query needs before its criteria are flagged (fewer: reported as too few, no flag)."""
    max_undecided: float = 0.2
    """A criterion undecided on more than this share of its answers is unreliable."""
    max_disagreement: float = 0.2
    """A criterion whose votes differ on more than this share of the answers graded more than once is unreliable."""
    sign_correlation: float = 0.5
    """suspect_sign: the correlation between a criterion's verdicts and the score of the rest of its rubric, in the
    criterion's own direction (points' sign), at or below minus this."""

    def __post_init__(self) -> None:
        if self.min_answers < 2:
            raise ValueError(f"min_answers must be at least 2 (one answer separates nothing), got {self.min_answers}")
        for name in ("max_undecided", "max_disagreement", "sign_correlation"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}")


@dataclass
class Criterion:
    text: str
    points: int
    tags: list[str] = field(default_factory=list)


@dataclass
class QueryAnswers:
    """What the audit knows of one query: its criteria by key, in rubric order, and per answer the votes per key."""

    criteria: dict[str, Criterion] = field(default_factory=dict)
    answers: dict[str, dict[str, list[bool | None]]] = field(default_factory=dict)
    example_tags: list[str] = field(default_factory=list)


def majority(votes: list[bool | None]) -> bool | None:
    decided = Counter(v for v in votes if v is not None)
    if decided[True] == decided[False]:
        return None
    return decided[True] > decided[False]


def audit_query(query_id: str, query: QueryAnswers, settings: AuditSettings) -> tuple[dict[str, Any], list[dict]]:
    """(the query's line, one line per criterion)."""
    decided = {
        a: {k: majority(v) for k, v in votes.items() if k in query.criteria} for a, votes in query.answers.items()
    }
    rest = {a: _rest_scores(query, verdicts) for a, verdicts in decided.items()}
    enough = len(decided) >= settings.min_answers
    rows, seen_vectors = [], {}
    for key, criterion in query.criteria.items():
        verdicts = [v[key] for v in decided.values() if key in v]
        met, not_met = verdicts.count(True), verdicts.count(False)
        undecided = len(verdicts) - met - not_met
        several = [v[key] for v in query.answers.values() if sum(x is not None for x in v.get(key, ())) > 1]
        disputed = sum(len({x for x in v if x is not None}) > 1 for v in several)
        row = {
            "id": query_id,
            "criterion": criterion.text,
            "points": criterion.points,
            "tags": criterion.tags,
            "answers": len(verdicts),
            "met": met,
            "not_met": not_met,
            "undecided": undecided,
            "pass_rate": met / (met + not_met) if met + not_met else None,
            "undecided_rate": undecided / len(verdicts) if verdicts else None,
            "disagreement": disputed / len(several) if several else None,
            "separates": met > 0 and not_met > 0,
            "sign_correlation": _sign_correlation(key, criterion.points, decided, rest),
            "flags": [],
        }
        if enough and verdicts:
            row["flags"] = _flags(row, settings)
            if row["separates"]:
                vector = tuple(v.get(key) for v in decided.values())
                if vector in seen_vectors:
                    row["flags"].append("duplicate")
                    row["duplicate_of"] = seen_vectors[vector]
                else:
                    seen_vectors[vector] = criterion.text
        rows.append(row)
    line = {
        "id": query_id,
        "answers": len(decided),
        "criteria": len(rows),
        "discriminating": sum(r["separates"] for r in rows),
        "flagged": enough,
        "example_tags": query.example_tags,
    }
    return line, rows


def _flags(row: dict[str, Any], settings: AuditSettings) -> list[str]:
    flags = []
    if row["met"] and not row["not_met"]:
        flags.append("saturated")
    if row["not_met"] and not row["met"]:
        flags.append("dead")
    if (row["undecided_rate"] or 0) > settings.max_undecided or (row["disagreement"] or 0) > settings.max_disagreement:
        flags.append("unreliable")
    if row["separates"] and row["sign_correlation"] is not None:
        if row["sign_correlation"] <= -settings.sign_correlation:
            flags.append("suspect_sign")
    return flags


def _rest_scores(query: QueryAnswers, verdicts: dict[str, bool | None]) -> dict[str, float]:
    """Per criterion, the answer's score on the rest of its rubric (met points over positive points, HealthBench's
    rule, with that criterion left out), from the decided verdicts."""
    decided = [(k, query.criteria[k].points, m) for k, m in verdicts.items() if m is not None]
    earned = sum(p for _, p, m in decided if m)
    possible = sum(p for _, p, _ in decided if p > 0)
    scores = {}
    for k, p, m in decided:
        if possible - max(p, 0) > 0:
            scores[k] = (earned - (p if m else 0)) / (possible - max(p, 0))
    return scores


def _sign_correlation(key: str, points: int, decided: dict[str, dict], rest: dict[str, dict]) -> float | None:
    """Correlation of met (1/0) with the rest-of-rubric score, times the sign of the criterion's points: positive
    is what a sound criterion shows; None where either side does not vary."""
    pairs = [
        (1.0 if v[key] else 0.0, rest[a][key]) for a, v in decided.items() if v.get(key) is not None and key in rest[a]
    ]
    if len(pairs) < 3:
        return None
    try:
        r = statistics.correlation([m for m, _ in pairs], [score for _, score in pairs])
    except statistics.StatisticsError:  # one side does not vary
        return None
    return r if points > 0 else -r


def group_saturation(answers: list[tuple[str, dict[str, bool]]]) -> tuple[int, int, int]:
    """(saturated, dead, counted) over the (group, criterion) pairs of a generation batch decided on at least two
    answers of their group: met by every one, by none. `answers`: per completion, its group's key and its decided
    verdicts by criterion."""
    seen: dict[tuple[str, str], list[int]] = {}
    for group, verdicts in answers:
        for criterion, met in verdicts.items():
            counts = seen.setdefault((group, criterion), [0, 0])
            counts[0] += met
            counts[1] += 1
    counted = [(met, decided) for met, decided in seen.values() if decided >= 2]
    return sum(met == decided for met, decided in counted), sum(met == 0 for met, _ in counted), len(counted)


@dataclass
class DatasetAudit:
    """The dataset's totals, added to query by query (nothing per verdict is kept)."""

    queries: int = 0
    too_few_answers: int = 0
    answers: int = 0
    criteria: int = 0
    flagged_criteria: int = 0
    flags: Counter = field(default_factory=Counter)
    discriminating: Counter = field(default_factory=Counter)
    """Queries (with enough answers) by the number of criteria that separate their answers."""
    by_tag: dict[str, Counter] = field(default_factory=dict)
    """Per criterion tag or example tag: `criteria` and each flag."""

    def add(self, line: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        self.queries += 1
        self.answers += line["answers"]
        self.criteria += len(rows)
        if not line["flagged"]:
            self.too_few_answers += 1
            return
        self.discriminating[line["discriminating"]] += 1
        for row in rows:
            self.flagged_criteria += 1
            self.flags.update(row["flags"])
            for tag in {*row["tags"], *line["example_tags"]}:
                counts = self.by_tag.setdefault(tag, Counter())
                counts["criteria"] += 1
                counts.update(row["flags"])

    def summary(self) -> dict[str, Any]:
        n = self.flagged_criteria
        return {
            "queries": self.queries,
            "queries_with_too_few_answers": self.too_few_answers,
            "answers": self.answers,
            "criteria": self.criteria,
            "criteria_flagged_on": n,
            "flag_counts": {flag: self.flags[flag] for flag in FLAGS},
            "flag_shares": {flag: self.flags[flag] / n if n else None for flag in FLAGS},
            "discriminating_per_query": {str(k): v for k, v in sorted(self.discriminating.items())},
            "by_tag": {
                tag: {"criteria": c["criteria"], **{f: c[f] / c["criteria"] for f in FLAGS}}
                for tag, c in sorted(self.by_tag.items())
            },
        }
