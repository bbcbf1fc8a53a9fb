"""A comparison's tie test (reports/distinguish.py, checks/evidence.py sign_flip): it calls two models apart no more
often than its 5% level says when they do not differ, at the demo's 8 examples as at 100, and its interval agrees
with its verdict."""

import itertools
import random

import numpy as np
import pytest

from checks.evidence import SIGN_FLIP_EXACT, sign_flip
from reports.distinguish import is_tie, paired_difference


def records(scores):
    return [{"id": f"q{i}", "score": s} for i, s in enumerate(scores)]


def compare(differences, seed=0):
    return paired_difference(records([0.0] * len(differences)), records(differences), seed=seed)


def brute_force_p(differences):
    """The share of all sign assignments whose |sum| is at least the observed |sum|."""
    values = np.asarray(differences, dtype=float)
    signs = np.array(list(itertools.product((1, -1), repeat=len(values))))
    return float(np.mean(np.abs(signs @ values) >= abs(values.sum()) - 1e-9))


def test_with_no_difference_two_models_are_called_apart_at_most_5_percent_of_the_time_at_8_examples():
    """The demo's size, simulated as benches/comparison_ties.py does: two models alike, each example's score the
    share of 4 criteria passed at that example's chance (the bootstrap interval called 7% of these apart)."""
    rng = random.Random(1)
    trials, apart = 1000, 0
    for trial in range(trials):
        chance = [rng.random() for _ in range(8)]
        a, b = ([sum(rng.random() < p for _ in range(4)) / 4 for p in chance] for _ in range(2))
        found = paired_difference(records(a), records(b), seed=trial)
        apart += not is_tie(found)
    assert apart / trials <= 0.05


@pytest.mark.parametrize("seed", range(5))
def test_whatever_the_sizes_of_the_differences_a_coin_flip_for_their_signs_is_called_apart_at_most_5_percent(seed):
    """Exactly, at 8 examples: for a set of per-example differences, every one of the 2^8 ways to sign them is as
    likely when the models do not differ; at most 5% of them may be called apart."""
    rng = random.Random(seed)
    sizes = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(8)]
    apart = sum(
        not is_tie(compare([s * size for s, size in zip(signs, sizes)]))
        for signs in itertools.product((1, -1), repeat=8)
    )
    assert apart <= 0.05 * 2**8


def test_the_p_value_is_the_share_of_sign_assignments_at_least_as_extreme():
    rng = random.Random(0)
    for n in (2, 5, 8, 12):
        for _ in range(10):
            differences = [rng.choice([-0.5, -0.25, 0.0, 0.25, 0.5, 0.75]) for _ in range(n)]
            assert compare(differences)["p"] == pytest.approx(brute_force_p(differences))


def test_a_difference_needs_six_examples_that_all_moved_alike_to_stand_out():
    """At 5 examples the smallest p-value there is (every example moved the same way) is 2 / 2^5 > 5%: nothing can
    be told apart, and the interval says so by being unbounded; at 6 it is 2 / 2^6 and the difference stands out."""
    five = compare([0.25] * 5)
    assert five["p"] == pytest.approx(2 / 32) and is_tie(five)
    assert five["low"] == float("-inf") and five["high"] == float("inf")
    six = compare([0.25] * 6)
    assert six["p"] == pytest.approx(2 / 64) and not is_tie(six)
    assert six["low"] == pytest.approx(0.25) and six["high"] == pytest.approx(0.25)
    # an example that did not move counts for nothing
    assert compare([0.25] * 6 + [0.0] * 3)["p"] == pytest.approx(2 / 64)


def test_the_interval_holds_0_exactly_when_the_difference_is_a_tie_and_its_ends_are_where_the_test_turns():
    """On many random comparisons, small (exact) and large (Monte Carlo), with tied and zero differences: the
    verdict and the interval agree, the interval holds the mean, and just inside its ends the test keeps the shift,
    just outside it rejects it."""
    rng = random.Random(2)
    for case in range(80):
        n = rng.choice([6, 8, 12, 17, 30, 60])
        shift = rng.choice([0.0, 0.05, 0.1, 0.2, 0.4])
        differences = [rng.choice([-0.5, -0.25, 0, 0.25, 0.5]) + shift * rng.random() for _ in range(n)]
        found = compare(differences, seed=case)
        assert is_tie(found) == (found["low"] <= 0 <= found["high"])
        assert found["low"] <= found["difference"] <= found["high"]
        step = min(1e-6, (found["high"] - found["low"]) / 2)
        for end, outward in ((found["low"], -1), (found["high"], 1)):
            assert sign_flip([d - (end - outward * step) for d in differences], seed=case)[0] > 0.05
            assert sign_flip([d - (end + outward * 1e-6) for d in differences], seed=case)[0] <= 0.05


def test_beyond_the_exact_size_the_p_value_is_drawn_seeded_close_to_the_exact_one():
    """Above SIGN_FLIP_EXACT examples, seeded sign assignments with the add-one correction: the same input gives the
    same answer, within sampling error of the exact share, never 0."""
    rng = random.Random(3)
    differences = [rng.choice([-0.25, 0.25, 0.5]) for _ in range(SIGN_FLIP_EXACT + 1)]
    found = compare(differences, seed=7)
    assert found == compare(differences, seed=7) and "10,000 seeded" in found["test"]
    assert found["p"] == pytest.approx(brute_force_p(differences), abs=0.02)
    assert compare([0.5] * 40)["p"] > 0
