"""Criterion-level advantages (rurl/reward/criterion_advantage.py) on hand-made groups, worked out by hand, and in a real
training run with a scripted judge: the advantages trained on (the completions table's) are the ones the verdicts
give; `none` leaves TRL's advantages as they are."""

import math
import statistics

import pytest

from rurl.reward.criterion_advantage import advantages, criterion_scores, flat_groups, scaling

# one group of 4 completions; criteria A (+5) met by 2, B (+1) by 1, C (-3, a penalty) by the last, D (+2) by all
GROUP = [
    [(5, True), (1, True), (-3, False), (2, True)],
    [(5, True), (1, False), (-3, False), (2, True)],
    [(5, False), (1, False), (-3, False), (2, True)],
    [(5, False), (1, False), (-3, True), (2, True)],
]


def gdpo(rows: list[list], group_size: int) -> list[float]:
    """GDPO's advantages (arXiv 2601.05242) as TRL 1.16 computes them (multi_objective_aggregation
    "normalize_then_sum", grpo_trainer.py), one reward function per criterion: each normalized within its group by
    TRL's nanstd, summed with the rubric score's weights (points over the rubric's positive points), the sum
    normalized over the batch. Undecided verdicts are NaN, as TRL's None."""
    import torch
    from trl.trainer.utils import nanstd

    points = rows[0]
    positive = sum(p for p, _ in points if p > 0)
    matrix = torch.tensor([[math.nan if met is None else float(met) for _, met in row] for row in rows])
    weights = torch.tensor([p / positive for p, _ in points])
    grouped = matrix.view(-1, group_size, matrix.size(1))
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (nanstd(grouped, dim=1, keepdim=True) + 1e-4)).view(-1, matrix.size(1))
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    return ((rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4)).tolist()


def trained(rows: list, group_size: int, mode: str, scale: str = "group") -> list[float]:
    scores, _ = criterion_scores(rows, group_size, mode)
    return advantages(scores, group_size, scaling(mode, scale))[0]


def test_decoupled_is_gdpo_as_trl_computes_it():
    assert trained(GROUP, 4, "decoupled") == pytest.approx(gdpo(GROUP, 4), abs=1e-6)
    undecided = [[*row[:1], (1, None), *row[2:]] if i == 1 else row for i, row in enumerate(GROUP)]
    assert trained(undecided, 4, "decoupled") == pytest.approx(gdpo(undecided, 4), abs=1e-6)
    # the flat share counts criteria decided twice or more: D alone is flat of the 4
    assert criterion_scores(GROUP, 4, "decoupled")[1] == {"rubric/flat_criteria": 0.25}


def test_decoupled_keeps_the_weighting_across_groups():
    """Two groups graded on the same rubric (1 and 10 points): one differs on the 1-point criterion, the other on the
    10-point one. GDPO's sum is normalized over the batch, so the second moves ten times as far; per-group scaling
    (TRL's default scale_rewards) gave both the same +-0.71."""
    rows = [[(1, True), (10, True)], [(1, False), (10, True)], [(1, True), (10, True)], [(1, True), (10, False)]]
    values = trained(rows, 2, "decoupled")
    assert values == pytest.approx(gdpo(rows, 2), abs=1e-6)
    assert values[2] == pytest.approx(10 * values[0]) and values[0] > 0 > values[1]
    assert trained(rows, 2, "decoupled", scale="batch") == values  # scale_rewards does not apply


@pytest.mark.pure
def test_discriminating_weighs_each_criterion_by_the_spread_of_its_verdicts():
    scores, _ = criterion_scores(GROUP, 4, "discriminating")
    a, b, c = 5 * 0.5, 1 * math.sqrt(3) / 4, 3 * math.sqrt(3) / 4  # |points| x the group std of the verdicts
    assert scores == pytest.approx([(a + b) / (a + b + c), a / (a + b + c), 0.0, -c / (a + b + c)])


@pytest.mark.pure
@pytest.mark.parametrize("mode", ["decoupled", "discriminating"])
def test_an_undecided_verdict_moves_its_completion_neither_way(mode):
    """Left undecided (undecided_criterion drop), a verdict counts as neither met nor unmet: its completion ranks
    between one that met the criterion and one that did not, the rest alike."""
    rows = [[(5, True), (1, None)], [(5, True), (1, False)], [(5, True), (1, True)], [(5, False), (1, True)]]
    scores, _ = criterion_scores(rows, 4, mode)
    assert scores[1] < scores[0] < scores[2]


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


WORST = [(5, False), (1, False), (-3, True), (2, False)]
"""A judged completion that earned nothing and met the penalty: the rubric's lowest score, the floor's own."""


@pytest.mark.pure
@pytest.mark.parametrize("mode", ["decoupled", "discriminating"])
def test_a_vetoed_or_answerless_completion_trains_below_every_judged_one_as_trls_scalar_advantages_say(mode):
    """One judged completion and three vetoed (or cut off while reasoning), three judged that tie and one vetoed,
    all vetoed: the advantages TRL's scalar gives (the rubric score, the floor at the lowest), whatever the judged
    ones' verdicts (the worst possible included)."""
    for judged in (GROUP[0], WORST):
        assert trained([judged, "floor", "floor", "floor"], 4, mode) == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-3)
        assert trained([judged, judged, judged, "floor"], 4, mode) == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-3)
    assert trained(["floor"] * 4, 4, mode) == [0.0] * 4
    assert trained(["floor", None, "floor", None], 4, mode) == [0.0] * 4


@pytest.mark.pure
@pytest.mark.parametrize("mode", ["decoupled", "discriminating"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_in_random_groups_every_floor_completion_is_below_every_judged_one(mode, scale):
    import random

    rng = random.Random(0)
    for _ in range(300):
        size = rng.choice([2, 4, 8])
        points = [rng.choice([-5, -1, 1, 2, 5, 10]) for _ in range(rng.randint(1, 6))]
        points[0] = abs(points[0])  # at least one positive criterion
        rows = []
        for _ in range(2 * size):
            kind = rng.random()
            if kind < 0.3:
                rows.append("floor")
            elif kind < 0.4:
                rows.append(None)
            else:
                rows.append([(p, rng.choice([True, False, None])) for p in points])
        values = trained(rows, size, mode, scale)
        for start in range(0, len(rows), size):
            group = list(zip(rows[start : start + size], values[start : start + size]))
            floors = [v for r, v in group if r == "floor"]
            judged = [v for r, v in group if isinstance(r, list)]
            if floors and judged:
                assert max(floors) < min(judged)
            assert all(v == 0.0 for r, v in group if r is None)


@pytest.mark.pure
def test_verdict_rows_score_every_verdict_as_grading_scores_it():
    """For every combination of the two undecided settings, the score recomputed from the rows criterion-level
    advantages train on (sum of points x credit over the positive points of the criteria counted) is grading's."""
    from itertools import product
    from types import SimpleNamespace

    from grading.batch import verdict_rows
    from grading.scores import UNDECIDED_CRITERION, UNDECIDED_PENALTY, explicit_score

    cases = [
        [(7, True), (5, None), (10, True), (-6, None)],
        [(7, False), (5, True), (10, None), (-6, True), (-2, None)],
        [(4, True), (3, True), (2, True), (-6, False), (1, 0.25)],
    ]
    for (penalty, positive), case in product(product(UNDECIDED_PENALTY, UNDECIDED_CRITERION), cases):
        points, met = [p for p, _ in case], [m for _, m in case]
        score = explicit_score(points, met, min_coverage=0, undecided_penalty=penalty, undecided_criterion=positive)
        graded = SimpleNamespace(
            verdicts=[SimpleNamespace(points=p, credit=m, source="judge") for p, m in case],
            integrity_flag=None,
            no_answer=None,
        )
        [row] = verdict_rows([graded], [score.score], positive, penalty)
        if score.score is None:
            assert row is None
            continue
        counted = [(p, c) for p, c in row if c is not None]
        assert sum(p * c for p, c in counted) / sum(p for p, _ in counted if p > 0) == pytest.approx(score.score)
    vetoed = SimpleNamespace(verdicts=[], integrity_flag="talks to the grader", no_answer=None)
    assert verdict_rows([vetoed, None], [0.0, None], "unmet", "met") == ["floor", None]


def test_dynamic_sampling_keeps_the_groups_whose_trained_advantages_are_not_all_zero():
    """Under criterion-level advantages a group is flat when its advantages are: one whose rewards tie can still
    differ criterion by criterion (kept), and one the rewards alone would keep is left out when they are all zero."""
    from types import SimpleNamespace

    import torch

    from rurl.schedule.dynamic_sampling import DynamicSampler, DynamicSampling

    # rewards: group 0 ties, group 1 spreads; criterion-level advantages: the other way round
    trainer = SimpleNamespace(
        last_rewards=torch.tensor([[0.5], [0.5], [0.2], [0.9]]),
        reward_weights=torch.tensor([1.0]),
        num_generations=2,
        criterion_flat=flat_groups([0.7, -0.7, 0.0, 0.0], 2),
    )
    sampler = DynamicSampler.__new__(DynamicSampler)
    sampler.trainer, sampler.config = trainer, DynamicSampling(std_threshold=0.02, max_extra_rounds=1)
    assert sampler._group_spread().tolist() == [True, False]
    trainer.criterion_flat = None  # mode none: the rewards' spread
    assert sampler._group_spread().tolist() == [False, True]


@pytest.mark.slow
@pytest.mark.parametrize("mode, async_steps", [("decoupled", 0), ("discriminating", 0), ("decoupled", 1)])
def test_a_run_trains_on_the_advantages_its_verdicts_give(mode, async_steps, tmp_path):
    """Synchronous and one step ahead (where a batch is graded a step after it was generated): each trained batch's
    advantages are those its own verdicts give."""
    from rurl.watch.guards import FailureMonitor
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
        expected = trained(rows, GENERATIONS, mode)
        assert table["advantage"] == pytest.approx(expected, abs=1e-5)
    logged = [entry for entry in history if "rubric/flat_criteria" in entry]
    assert len(logged) == 2 and all(0 <= e["rubric/zero_advantage_groups"] <= 1 for e in logged)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--criterion_advantage", "decoupled"], "the overlong penalty would be lost"),  # the tiny preset shapes length
        (["--criterion_advantage", "decoupled", "--overlong_buffer", "0", "--mode", "implicit"], "needs a verdict per"),
        (["--criterion_advantage", "decoupled", "--overlong_buffer", "0", "--scale_rewards", "none"], "does not apply"),
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

    from commands.main import main

    config = Path(__file__).resolve().parents[1] / "configs" / "rurl" / "tiny-cpu.yaml"
    assert (
        main(["rurl", "train", "--config", str(config), "--output_dir", str(tmp_path / "o"), "--dry_run", *flags]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
