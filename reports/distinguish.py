"""What a comparison of evaluated models can claim: which differences stand out of the noise, and whether the judge
tells the models apart at all. Pure, on graded records (grading's `graded.jsonl`) of the same held-out rows.

- A difference is the mean over the examples both models scored of (b's score - a's): paired, so the examples'
  own spread cancels. It is told apart from 0 by a paired sign-flip test, exact up to 16 examples, which keeps its
  5% level at any size (a bootstrap runs hot at the few examples a demo compares); its 95% interval is the same test
  inverted, so it holds 0 exactly when the difference is a tie, whatever the two means say. It takes 6 examples
  whose scores differ to tell two models apart at all (the most extreme of 2^n sign assignments has p = 2 / 2^n).
- A judge that credits nearly every positive criterion whatever the answer cannot rank answers: when it credits
  SATURATED or more of the positive criteria it decided (its own verdicts: rule checks are decided in code) on every
  model, the comparison says so first.
- So does a judge whose probes (`rubricrl probe`, a folder in the same report) found criteria it credits to answers
  with no substance more often than chance allows: a model may differ by what the judge pays for, not by quality.
"""

import math
import statistics
from typing import Any

from checks.evidence import SIGN_FLIP_DRAWS, SIGN_FLIP_EXACT, sign_flip
from grading.report import judged_positive

LEVEL = 0.05
"""A paired difference is told apart from 0 at p <= LEVEL; its interval is the 1 - LEVEL one."""

SATURATED = 0.95
"""The share of positive criteria credited on every model above which the judge is said not to tell them apart."""


def positive_credit(records: list[dict[str, Any]]) -> tuple[int, int]:
    """(positive criteria the judge credited, positive criteria it decided) over the records; rule checks, decided in
    code, are not the judge's (grading/report.py judged_positive)."""
    met = decided = 0
    for record in records:
        for verdict in record.get("verdicts") or []:
            if judged_positive(verdict) and verdict.get("met") is not None:
                decided += 1
                met += bool(verdict["met"])
    return met, decided


def paired_difference(a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0) -> dict[str, Any] | None:
    """b's mean score minus a's over the examples both scored (`difference`, over `n` examples), the two-sided
    p-value of the paired sign-flip test (`p`, checks/evidence.py sign_flip; `test` says which) and the 95% interval
    that inverts it (`low`, `high`: unbounded where no difference could be told apart); None with fewer than 2 such
    examples."""
    scores_a = {r["id"]: r["score"] for r in a if r.get("score") is not None and "id" in r}
    pairs = [(scores_a[r["id"]], r["score"]) for r in b if r.get("score") is not None and r.get("id") in scores_a]
    if len(pairs) < 2:
        return None
    differences = [y - x for x, y in pairs]
    p, low, high = sign_flip(differences, seed=seed, level=1 - LEVEL)
    n = len(pairs)
    assignments = (
        f"all {2**n:,} sign assignments" if n <= SIGN_FLIP_EXACT else f"{SIGN_FLIP_DRAWS:,} seeded sign assignments"
    )
    test = (
        f"two-sided paired sign-flip test over {assignments}, apart at p <= {LEVEL}; "
        f"the {1 - LEVEL:.0%} interval holds the shifts it does not reject"
    )
    return {"difference": statistics.fmean(differences), "low": low, "high": high, "n": n, "p": p, "test": test}


def is_tie(found: dict[str, Any]) -> bool:
    """Whether a paired difference is within the noise: its sign-flip p-value is above LEVEL (then, and only then,
    its interval holds 0)."""
    return found["p"] > LEVEL


def verdict(found: dict[str, Any]) -> str:
    """What a paired difference (`paired_difference`) says of b against a: a tie within the noise, better or worse."""
    if is_tie(found):
        return "a tie within the noise"
    return "better" if found["difference"] > 0 else "worse"


def saturation_line(graded: dict[str, list[dict[str, Any]]]) -> str | None:
    """The line that says the judge cannot tell the models in `graded` apart, when it credits SATURATED or more of
    the positive criteria it decides on every one of them (two models or more); else None."""
    if len(graded) < 2:
        return None
    credit = {label: positive_credit(records) for label, records in graded.items()}
    shares = {label: met / decided for label, (met, decided) in credit.items() if decided}
    if len(shares) < len(graded) or min(shares.values()) < SATURATED:
        return None
    each = ", ".join(f"{label} {shares[label]:.0%} of {credit[label][1]}" for label in graded)
    return (
        f"The judge cannot tell these models apart: it credits at least {SATURATED:.0%} of the positive criteria "
        f"it decides on every model ({each}); a difference between them is not evidence of a better model."
    )


def probe_line(probes: dict[str, dict[str, Any]]) -> str | None:
    """The line that says a judge's probes flag it, from probe summaries (label -> summary.json of `rubricrl
    probe`): per judge with exploitable criteria, how many of its positive criteria, by which probe kinds, under
    which test; None when no probe flags anything."""
    found = []
    for label, summary in probes.items():
        rule = (summary.get("test") or {}).get("rule") or "the probe's test"
        for judge, e in (summary.get("exploitable") or {}).items():
            if e.get("flagged"):
                kinds = ", ".join(f"{kind} {n}" for kind, n in e.get("by_kind", {}).items())
                found.append(
                    f"{judge} in {label}: {e['flagged']} of {e['criteria']} positive criteria, by {kinds}; {rule}"
                )
    if not found:
        return None
    return (
        "The judge cannot tell these models apart reliably: in its probes, answers with no substance earn criteria "
        f"beyond chance ({' / '.join(found)}); a difference between the models may be what the reward pays for, "
        "not a better model."
    )


def comparison_findings(
    graded: dict[str, list[dict[str, Any]]], probes: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """What the comparison of the models in `graded` (label -> graded records, the first the reference) can say:
    first a line when the judge cannot tell them apart (it credits nearly everything, or its `probes` flag it), then
    each model against the first: better, worse, or a tie within the noise."""
    labels = list(graded)
    if len(labels) < 2:
        return []
    lines = [line for line in (saturation_line(graded), probe_line(probes or {})) if line]
    reference = labels[0]
    for label in labels[1:]:
        found = paired_difference(graded[reference], graded[label])
        if found is None:
            lines.append(f"{label} against {reference}: fewer than 2 examples scored by both, nothing to compare.")
            continue
        if math.isinf(found["low"]):
            interval = "95% interval unbounded (too few examples to tell any difference apart)"
        else:
            interval = f"95% interval {found['low']:+.3f} to {found['high']:+.3f}"
        interval += f", sign-flip p = {found['p']:.3f}, {found['n']} paired examples"
        lines.append(f"{label} against {reference}: {found['difference']:+.3f} ({interval}): {verdict(found)}.")
    return lines
