"""Where a training judge and a monitor (a stronger, or gold, judge) disagree on the same answers, criterion by
criterion (Rubric Dropout, arXiv 2608.11669: a policy trained against gpt-4o-mini reached 40% overclaim against its
gold judge, while underclaim stayed at or below 3.1%: the training judge errs one way, and the policy learns it).

Over the positive criteria both judges decided on the same answer (each judge's own verdicts: rule checks are
decided in code, the same for both, and are left out):
- overclaim: criteria the training judge credits and the monitor rejects, over those the training judge credits;
- underclaim: criteria the monitor credits and the training judge rejects, over those the monitor credits;
- the criteria with the most overclaims (the texts a policy may be learning to please)."""

from collections import Counter
from typing import Any

from grading.report import both_decided

TOP = 10


def overclaim(judged: list[dict[str, Any]], monitored: list[dict[str, Any]], top: int = TOP) -> dict[str, Any]:
    """The disagreement of two judges' graded records of the same answers, in the same order (verdicts in rubric
    order, as both graded the same rubrics)."""
    judge_credits = monitor_credits = over = under = both = 0
    overclaimed: Counter[str] = Counter()
    credited: Counter[str] = Counter()
    for _, _, verdict, peer in both_decided(judged, monitored):
        mine, theirs = verdict["met"], peer["met"]
        both += 1
        judge_credits += bool(mine)
        monitor_credits += bool(theirs)
        credited[verdict["criterion"]] += bool(mine)
        if mine and not theirs:
            over += 1
            overclaimed[verdict["criterion"]] += 1
        elif theirs and not mine:
            under += 1
    return {
        "overclaim": over / judge_credits if judge_credits else None,
        "underclaim": under / monitor_credits if monitor_credits else None,
        "decided_by_both": both,
        "judge_credited": judge_credits,
        "monitor_credited": monitor_credits,
        "overclaimed": over,
        "underclaimed": under,
        "top": [
            {"criterion": text, "overclaims": n, "judge_credited": credited[text]}
            for text, n in overclaimed.most_common(top)
        ],
    }
