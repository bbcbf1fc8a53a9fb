"""Criterion-level advantages (rurl/criterion_advantage.py) on hand-made groups, worked out by hand, and in a real
training run with a scripted judge: the advantages trained on (the completions table's) are the ones the verdicts
give; `none` leaves TRL's advantages as they are."""

import math
import statistics

import pytest

from rurl.criterion_advantage import advantages, criterion_scores

R3 = math.sqrt(3)
# one group of 4 completions; criteria A (+5) met by 2, B (+1) by 1, C (-3, a penalty) by the last, D (+2) by all
GROUP = [
    [(5, True), (1, True), (-3, False), (2, True)],
    [(5, True), (1, False), (-3, False), (2, True)],
    [(5, False), (1, False), (-3, False), (2, True)],
    [(5, False), (1, False), (-3, True), (2, True)],
]


@pytest.mark.pure
def test_decoupled_normalizes_each_criterion_within_its_group_before_the_weighted_sum():
    scores, flat = criterion_scores(GROUP, 4, "decoupled")
    # A: (met - 1/2) / (1/2) = +-1, times 5; B: (met - 1/4) / (sqrt(3)/4) = sqrt(3) or -1/sqrt(3); C: the same
    # spread, signed against (a penalty met counts against), times 3; D, met by all, adds nothing; over 5+1+3+2
    expected = [
        (5 + R3 + 3 / R3) / 11,
        (5 - 1 / R3 + 3 / R3) / 11,
        (-5 - 1 / R3 + 3 / R3) / 11,
        (-5 - 1 / R3 - 3 * R3) / 11,
    ]
    assert scores == pytest.approx(expected)
    assert flat == {"rubric/flat_criteria": 0.25}  # D, of the 4 criteria decided twice or more


@pytest.mark.pure
def test_discriminating_weighs_each_criterion_by_the_spread_of_its_verdicts():
    scores, _ = criterion_scores(GROUP, 4, "discriminating")
    a, b, c = 5 * 0.5, 1 * R3 / 4, 3 * R3 / 4  # |points| x the group std of the verdicts; D's spread is 0
    assert scores == pytest.approx([(a + b) / (a + b + c), a / (a + b + c), 0.0, -c / (a + b + c)])


@pytest.mark.pure
def test_advantages_are_centred_and_scaled_per_group_and_an_unscored_completion_gets_none():
    scores = [1.0, 0.0, None, 0.5, 0.2, 0.2, 0.2, 0.2]
    values, zero_groups = advantages(scores, 4, "group")
    std = statistics.stdev([1.0, 0.0, 0.5])  # the scored completions' mean is 0.5
    assert values[:4] == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.0, 0.0])
    assert values[4:] == [0.0] * 4 and zero_groups == 0.5
    assert advantages(scores, 4, "none")[0][:2] == pytest.approx([0.5, -0.5])
    # an unscored row has no verdicts: no score, no advantage
    assert criterion_scores([None, *GROUP[1:]], 4, "decoupled")[0][0] is None


@pytest.mark.slow
@pytest.mark.parametrize("mode, async_steps", [("decoupled", 0), ("discriminating", 0), ("decoupled", 1)])
def test_a_run_trains_on_the_advantages_its_verdicts_give(mode, async_steps, tmp_path):
    """Synchronous and one step ahead (where a batch is graded a step after it was generated): each trained batch's
    advantages are those its own verdicts give."""
    from rurl.guards import FailureMonitor
    from tests.fault_server import FaultServer
    from tests.helpers import hashed_verdict
    from tests.test_rurl_async import GENERATIONS, logged_tables, trainer_on

    with FaultServer(reply=hashed_verdict) as judge:
        prompts = ["Say hello.", "Name a colour.", "Name a fruit.", "Describe the rain."]
        with trainer_on(
            tmp_path,
            judge,
            prompts,
            async_steps,
            max_steps=2,
            failure_monitor=FailureMonitor(3),
            criterion_advantage=mode,
        ) as trainer:
            tables = logged_tables(trainer)
            trainer.train()
            history = trainer.state.log_history
    assert len(tables) == 2
    for table in tables:
        rows = [[(points, met) for _, points, met in verdicts] for verdicts in table["verdicts"]]
        scores, _ = criterion_scores(rows, GENERATIONS, mode)
        expected, _ = advantages(scores, GENERATIONS, "group")
        assert table["advantage"] == pytest.approx(expected, abs=1e-5)
    logged = [entry for entry in history if "rubric/flat_criteria" in entry]
    assert len(logged) == 2 and all(0 <= e["rubric/zero_advantage_groups"] <= 1 for e in logged)


@pytest.mark.pure
def test_a_vetoed_or_answerless_completion_ties_with_its_groups_lowest_and_undecided_is_as_scored():
    from types import SimpleNamespace

    from grading.reward import verdict_rows

    scores, _ = criterion_scores([*GROUP[:3], "floor"], 4, "decoupled")
    assert scores[3] == min(scores[:3])  # not pulled toward the mean: the integrity veto still costs
    verdict = SimpleNamespace(points=5, credit=None, source="judge")  # undecided
    graded = SimpleNamespace(verdicts=[verdict], integrity_flag=None, no_answer=None)
    assert verdict_rows([graded], [0.5], "unmet") == [[(5, 0.0)]] and verdict_rows([graded], [0.5], "drop") == [
        [(5, None)]
    ]
    vetoed = SimpleNamespace(verdicts=[verdict], integrity_flag="talks to the grader", no_answer=None)
    assert verdict_rows([vetoed, None], [0.0, None], "unmet") == ["floor", None]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--criterion_advantage", "decoupled"], "the overlong penalty would be lost"),  # the tiny preset shapes length
        (["--criterion_advantage", "decoupled", "--overlong_buffer", "0", "--mode", "implicit"], "needs a verdict per"),
        (
            [
                "--criterion_advantage",
                "discriminating",
                "--overlong_buffer",
                "0",
                "--reward_funcs",
                "think_format_reward",
            ],
            "would leave out reward_funcs",
        ),
    ],
)
def test_criterion_advantages_refuse_what_they_would_leave_out(flags, message, tmp_path, capsys):
    from pathlib import Path

    from rubricrl.cli import main

    config = Path(__file__).resolve().parents[1] / "configs" / "rurl" / "tiny-cpu.yaml"
    assert (
        main(["rurl", "train", "--config", str(config), "--output_dir", str(tmp_path / "o"), "--dry_run", *flags]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
