"""Overclaim and underclaim between a training judge and a monitor, on graded records whose verdicts are known (the
gold-best checkpoint kept at the monitor's peak: tests/test_gold_best.py). The run with real trainers, two processes
and a monitor that diverges is tests/test_rurl_alarms.py."""

import pytest

from checks.overclaim import overclaim

pytestmark = pytest.mark.pure


def record(id_: str, verdicts: list[tuple[str, int, bool | None, str]]) -> dict:
    return {
        "id": id_,
        "verdicts": [{"criterion": c, "points": p, "met": m, "source": s} for c, p, m, s in verdicts],
    }


def test_overclaim_counts_what_the_training_judge_credits_and_the_monitor_rejects():
    judge = [
        record(
            "a", [("Names a drug.", 5, True, "judge"), ("Gives a dose.", 3, True, "judge"), ("Short.", 2, True, "rule")]
        ),
        record(
            "b",
            [("Names a drug.", 5, True, "judge"), ("Gives a dose.", 3, False, "judge"), ("Harms.", -4, True, "judge")],
        ),
        record("c", [("Names a drug.", 5, None, "judge")]),  # undecided by the judge: left out
    ]
    monitor = [
        record(
            "a",
            [("Names a drug.", 5, False, "judge"), ("Gives a dose.", 3, True, "judge"), ("Short.", 2, False, "rule")],
        ),
        record(
            "b",
            [("Names a drug.", 5, False, "judge"), ("Gives a dose.", 3, True, "judge"), ("Harms.", -4, False, "judge")],
        ),
        record("c", [("Names a drug.", 5, True, "judge")]),
    ]
    found = overclaim(judge, monitor)
    # positive, judged, decided by both: a's two, b's two; rule checks and penalties are not counted
    assert found["decided_by_both"] == 4 and found["judge_credited"] == 3 and found["monitor_credited"] == 2
    assert found["overclaim"] == pytest.approx(2 / 3) and found["underclaim"] == pytest.approx(1 / 2)
    assert found["top"][0] == {"criterion": "Names a drug.", "overclaims": 2, "judge_credited": 2}
    assert overclaim(judge, [])["overclaim"] is None  # nothing paired: nothing to say
