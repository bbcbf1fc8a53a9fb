"""The test behind the probe's `exploitable` flag (checks/probe_test.py), on hand-made counts: the binomial tail,
`insufficient` where no count could flag, Benjamini-Hochberg across a judge's tests, and a judge crediting at random
below the tolerance flagging nothing at fixed seeds."""

import random
from math import comb

import pytest

from checks.probe_analysis import criteria_rows
from checks.probe_test import EXPLOITABLE, INSUFFICIENT, NOT_SHOWN, ProbeTest, benjamini_hochberg, binomial_p, decide


def test_the_binomial_tail_is_the_chance_of_as_many_credits_or_more():
    assert binomial_p(4, 4, 0.1) == pytest.approx(1e-4)
    assert binomial_p(0, 4, 0.1) == 1.0
    assert binomial_p(2, 4, 0.1) == pytest.approx(sum(comb(4, k) * 0.1**k * 0.9 ** (4 - k) for k in (2, 3, 4)))
    assert binomial_p(0, 0, 0.1) == 1.0


def test_a_kind_whose_counts_can_never_flag_is_insufficient_and_never_a_flag():
    test = ProbeTest(tolerance=0.1, level=0.05)
    results, found = decide([(1, 1), (0, 0), (2, 2)], test)
    assert [r["status"] for r in results] == [INSUFFICIENT, INSUFFICIENT, EXPLOITABLE]  # 0.1 > 5%; 0.01 <= 5%
    assert found == {"tests": 3, "sufficient": 1, "rejected": 1, "threshold": 0.05}


def test_benjamini_hochberg_flags_what_survives_the_judges_many_tests():
    # 3 credited 4 of 4 (p = 1e-4) among 1000 tests of 0 of 4: 1e-4 <= 3 * 0.05 / 1003
    _, found = decide([(4, 4)] * 3 + [(0, 4)] * 1000, ProbeTest())
    assert found["rejected"] == 3 and found["threshold"] == pytest.approx(3 * 0.05 / 1003)
    # 3 of 4 (p = 0.0037) would pass alone, not among 1000 others
    crowded, among = decide([(3, 4)] + [(0, 4)] * 1000, ProbeTest())
    assert decide([(3, 4)], ProbeTest())[1]["rejected"] == 1 and among["rejected"] == 0
    assert crowded[0]["status"] == NOT_SHOWN
    assert benjamini_hochberg([], 0.05) == 0.0 and benjamini_hochberg([0.9, 0.8], 0.05) == 0.025


def test_a_judge_crediting_at_random_below_the_tolerance_flags_nothing():
    """Every probe earns every criterion with probability 0.05, half the tolerance: over 200 rows x 4 criteria x 5
    kinds x 4 probes, at 5 seeds, no criterion is flagged."""
    for seed in range(5):
        draw = random.Random(seed)
        records = [
            {
                "row": f"r{r}",
                "kind": kind,
                "target": None,
                "judge": "random",
                "verdicts": [[f"criterion {c}", 1, draw.random() < 0.05] for c in range(4)],
            }
            for r in range(200)
            for kind in ("parrot", "keywords", "hedge", "polite_nonanswer", "half")
            for _ in range(4)
        ]
        criteria = criteria_rows(records, ProbeTest())
        assert len(criteria) == 800 and not any(c["exploitable"] for c in criteria), seed


def test_bad_settings_are_refused():
    for tolerance, level in ((0.0, 0.05), (1.0, 0.05), (0.1, 0.0), (0.1, 1.5)):
        with pytest.raises(ValueError, match="must be within"):
            ProbeTest(tolerance, level)
