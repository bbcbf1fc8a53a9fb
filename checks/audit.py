"""Does a rubric still tell answers apart? Per criterion of one query, from every graded answer to it: pass and
undecided rates, whether it separates answers, and the flags a researcher acts on before spending GPU-days.

A flag is a test that passed (checks/evidence.py): each criterion gets a p-value per flag that applies to it,
`decide` flags it where the p-value is within the dataset's Benjamini-Hochberg threshold for that flag, and where its
counts could never reach the level the outcome is `insufficient` (never a flag, never pruned). A penalty that no
answer triggers is `never_triggered`: a guard-rail at work, not a dead criterion. Only answers with a graded verdict
count (a vetoed or empty answer has none), and a query with fewer than `min_answers` of them is reported, not tested.
Met means what it means in grading: for a penalty (points < 0), the fault is present. Several verdicts for one answer
(the same response graded in several files, e.g. by two judges) are one vote each: the majority decides, a tie is
undecided, and how often they differ is the criterion's disagreement.
"""

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from checks.evidence import at_least_share, bh_threshold, binomial_at_least, same_verdicts, sign_permutation
from grading.judge import majority

FLAGS = ("saturated", "dead", "duplicate", "unreliable", "suspect_sign")
"""saturated: met by at least `saturation` (80%) of answers; dead: a positive criterion met by at most 1 - `saturation`;
duplicate: the same verdict on every answer as an earlier criterion that separates, more often than chance gives;
unreliable: undecided or disputed on more than its limit; suspect_sign: its verdicts run against the rest of its
rubric (a positive criterion met by the answers the others score lowest, or a penalty met by the best ones:
simple-evals issue 77's kind of error)."""
OUTCOMES = (*FLAGS, "never_triggered")
"""What --prune can name: the flags, and the penalties no answer triggered (kept unless named)."""
TESTS = {
    "saturated": "one-sided exact binomial: met by at least {saturation:.0%} of answers",
    "dead": "one-sided exact binomial: met by at most {dead:.0%} of answers (positive criteria)",
    "duplicate": "identical verdicts on the same answers as an earlier criterion, against chance with both pass "
    "counts fixed (1 / C(answers, met) per earlier criterion alike, summed)",
    "unreliable": "one-sided exact binomial: undecided on more than {max_undecided:.0%}, or votes disputed on more "
    "than {max_disagreement:.0%} of answers (Bonferroni over the two)",
    "suspect_sign": "one-sided permutation test of the rest-of-rubric score of the answers that met it (exact up "
    "to 20,000 arrangements): lower than chance for a positive criterion, higher for a penalty",
}
"""The test behind each flag, as reports state it (formatted with the settings)."""


@dataclass
class AuditSettings:
    min_answers: int = 4
    """Answers with a graded verdict a query needs before its criteria are tested (fewer: reported, no test)."""
    saturation: float = 0.8
    """saturated: met by at least this share of answers; dead: met by at most 1 minus it (positive criteria). At 0.9
    a criterion met by 95% of answers is found in none of 4-64 answers (benches/audit_power.py); at 0.8, from 32."""
    max_undecided: float = 0.2
    """unreliable: undecided on more than this share of its answers."""
    max_disagreement: float = 0.2
    """unreliable: votes differ on more than this share of the answers graded more than once."""
    fdr: float = 0.05
    """The false discovery rate each flag is held to over the dataset's criteria (Benjamini-Hochberg); also the level
    below which a criterion's counts must be able to reach, else its outcome is insufficient."""

    def __post_init__(self) -> None:
        if self.min_answers < 2:
            raise ValueError(f"min_answers must be at least 2 (one answer separates nothing), got {self.min_answers}")
        for name in ("max_undecided", "max_disagreement"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        for name in ("saturation", "fdr"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be between 0 and 1 (exclusive), got {getattr(self, name)}")

    def test_texts(self) -> dict[str, str]:
        values = {**vars(self), "dead": 1 - self.saturation}
        return {flag: text.format(**values) for flag, text in TESTS.items()}


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


def audit_query(query_id: str, query: QueryAnswers, settings: AuditSettings) -> tuple[dict[str, Any], list[dict]]:
    """(the query's line, one line per criterion with its tests' p-values; `decide` sets the flags)."""
    decided = {
        a: {k: majority(v) for k, v in votes.items() if k in query.criteria}
        for a, votes in query.answers.items()
        if any(k in query.criteria for k in votes)  # an answer without a graded verdict (vetoed, empty) is none
    }
    rest = {a: _rest_scores(query, verdicts) for a, verdicts in decided.items()}
    enough = len(decided) >= settings.min_answers
    rows, earlier = [], []  # earlier: (vector, text) of the criteria that separate, in rubric order
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
            "disputed": disputed,
            "graded_twice": len(several),
            "separates": met > 0 and not_met > 0,
            "sign_correlation": _sign_correlation(key, criterion.points, decided, rest),
            "never_triggered": enough and criterion.points < 0 and met == 0 and not_met > 0,
            "tests": {},
            "flags": [],
            "insufficient": [],
        }
        if enough and verdicts:
            row["tests"] = _tests(key, row, decided, rest, settings)
            if row["separates"]:
                vector = tuple(v.get(key) for v in decided.values())
                alike = [text for other, text in earlier if _alike(other, vector)]
                same = [text for other, text in earlier if other == vector]
                if alike:  # a test only where an equal vector was possible; no match is p = 1
                    floor = same_verdicts(met + not_met, met, len(alike))
                    row["tests"]["duplicate"] = {"p": floor if same else 1.0, "floor": floor}
                if same:
                    row["duplicate_of"] = same[0]
                earlier.append((vector, criterion.text))
        rows.append(row)
    line = {
        "id": query_id,
        "answers": len(decided),
        "ungraded_answers": len(query.answers) - len(decided),
        "criteria": len(rows),
        "discriminating": sum(r["separates"] for r in rows),
        "flagged": enough,
        "example_tags": query.example_tags,
    }
    return line, rows


def _tests(key: str, row: dict, decided: dict, rest: dict, settings: AuditSettings) -> dict[str, dict[str, float]]:
    """{flag: {p, floor}} for each flag whose test applies to the criterion (duplicate: in audit_query)."""
    tests = {}
    decided_n, met = row["met"] + row["not_met"], row["met"]
    if decided_n:
        p, floor = at_least_share(met, decided_n, settings.saturation)
        tests["saturated"] = {"p": p, "floor": floor}
        if row["points"] > 0:
            p, floor = at_least_share(row["not_met"], decided_n, settings.saturation)
            tests["dead"] = {"p": p, "floor": floor}
    undecided = (binomial_at_least(row["undecided"], row["answers"], settings.max_undecided),)
    floors = [settings.max_undecided ** row["answers"]]
    if row["graded_twice"]:
        undecided += (binomial_at_least(row["disputed"], row["graded_twice"], settings.max_disagreement),)
        floors.append(settings.max_disagreement ** row["graded_twice"])
    bonferroni = len(undecided)
    tests["unreliable"] = {"p": min(1.0, bonferroni * min(undecided)), "floor": min(1.0, bonferroni * min(floors))}
    if row["separates"]:
        pairs = [(v[key], rest[a][key]) for a, v in decided.items() if v.get(key) is not None and key in rest[a]]
        if pairs:
            p, floor = sign_permutation(
                [m for m, _ in pairs], [r for _, r in pairs], low_is_suspect=row["points"] > 0, seed=key
            )
            tests["suspect_sign"] = {"p": p, "floor": floor}
    return tests


def _alike(a: tuple, b: tuple) -> bool:
    """Decided on the same answers with the same number met: the vectors that could be equal by chance."""
    return [x is None for x in a] == [x is None for x in b] and a.count(True) == b.count(True)


def reachable(test: dict[str, float], settings: AuditSettings) -> bool:
    """Whether a test's counts could reach the level at all: the others are insufficient, and stay out of the
    Benjamini-Hochberg count."""
    return test["floor"] <= settings.fdr


def thresholds(p_values: dict[str, Any], settings: AuditSettings) -> dict[str, float]:
    """Per flag, the largest p-value Benjamini-Hochberg flags at `fdr`, from the reachable tests' p-values."""
    return {flag: bh_threshold(values, settings.fdr) for flag, values in p_values.items()}


def decide(row: dict[str, Any], thresholds: dict[str, float], settings: AuditSettings) -> dict[str, Any]:
    """The row's flags (a test within its flag's Benjamini-Hochberg threshold) and its insufficient tests (whose
    floor is above the level); each test's entry gains the threshold it was held to."""
    for flag, test in row["tests"].items():
        if not reachable(test, settings):
            row["insufficient"].append(flag)
            continue
        test["threshold"] = thresholds.get(flag, 0.0)
        if test["p"] <= test["threshold"]:
            row["flags"].append(flag)
    return row


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


def group_saturation(
    answers: list[tuple[str, dict[str, bool]]], penalties: set[str] = frozenset()
) -> tuple[int, int, int, int]:
    """(saturated, dead, untriggered, counted) over the (group, criterion) pairs of a generation batch decided on at
    least two answers of their group: met by every one; a positive criterion met by none (dead); a penalty (its text
    in `penalties`) met by none, a guard-rail at work (untriggered). `answers`: per completion, its group's key and
    its decided verdicts by criterion."""
    seen: dict[tuple[str, str], list[int]] = {}
    for group, verdicts in answers:
        for criterion, met in verdicts.items():
            counts = seen.setdefault((group, criterion), [0, 0])
            counts[0] += met
            counts[1] += 1
    counted = [
        (criterion in penalties, met, decided) for (_, criterion), (met, decided) in seen.items() if decided >= 2
    ]
    return (
        sum(met == decided for _, met, decided in counted),
        sum(met == 0 and not penalty for penalty, met, _ in counted),
        sum(met == 0 and penalty for penalty, met, _ in counted),
        len(counted),
    )


@dataclass
class DatasetAudit:
    """The dataset's totals, added to query by query (nothing per verdict is kept)."""

    queries: int = 0
    too_few_answers: int = 0
    answers: int = 0
    ungraded_answers: int = 0
    criteria: int = 0
    flagged_criteria: int = 0
    flags: Counter = field(default_factory=Counter)
    tested: Counter = field(default_factory=Counter)
    insufficient: Counter = field(default_factory=Counter)
    never_triggered: int = 0
    discriminating: Counter = field(default_factory=Counter)
    """Queries (with enough answers) by the number of criteria that separate their answers."""
    by_tag: dict[str, Counter] = field(default_factory=dict)
    """Per criterion tag or example tag: `criteria` and each flag."""

    def add(self, line: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """A query's line and its rows, after `decide`."""
        self.queries += 1
        self.answers += line["answers"]
        self.ungraded_answers += line["ungraded_answers"]
        self.criteria += len(rows)
        if not line["flagged"]:
            self.too_few_answers += 1
            return
        self.discriminating[line["discriminating"]] += 1
        for row in rows:
            self.flagged_criteria += 1
            self.flags.update(row["flags"])
            self.insufficient.update(row["insufficient"])
            self.tested.update(flag for flag in row["tests"] if flag not in row["insufficient"])
            self.never_triggered += row["never_triggered"]
            for tag in {*row["tags"], *line["example_tags"]}:
                counts = self.by_tag.setdefault(tag, Counter())
                counts["criteria"] += 1
                counts.update(row["flags"])

    def summary(self, thresholds: dict[str, float], settings: AuditSettings) -> dict[str, Any]:
        n = self.flagged_criteria
        texts = settings.test_texts()
        return {
            "queries": self.queries,
            "queries_with_too_few_answers": self.too_few_answers,
            "answers": self.answers,
            "ungraded_answers": self.ungraded_answers,
            "criteria": self.criteria,
            "criteria_flagged_on": n,
            "flag_counts": {flag: self.flags[flag] for flag in FLAGS},
            "flag_shares": {flag: self.flags[flag] / n if n else None for flag in FLAGS},
            "tests": {
                flag: {
                    "test": texts[flag],
                    "tested": self.tested[flag],
                    "insufficient": self.insufficient[flag],
                    "flagged": self.flags[flag],
                    "fdr": settings.fdr,
                    "threshold": thresholds.get(flag, 0.0),
                }
                for flag in FLAGS
            },
            "never_triggered": self.never_triggered,
            "discriminating_per_query": {str(k): v for k, v in sorted(self.discriminating.items())},
            "by_tag": {
                tag: {"criteria": c["criteria"], **{f: c[f] / c["criteria"] for f in FLAGS}}
                for tag, c in sorted(self.by_tag.items())
            },
        }
