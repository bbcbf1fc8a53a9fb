"""Score math against hand arithmetic and against HealthBench's formulas on the 30 real examples."""

import json
import random
from pathlib import Path

import numpy as np
import pytest

from grading.dataset import load_rubric_rows
from grading.rubric import RubricError, rubric_from_items
from grading.scores import aggregate, bootstrap_std, explicit_score, tag_scores, training_reward

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"


def test_reference_check():
    assert explicit_score([7, 5, 10, -6], [True, False, True, True]).score == pytest.approx(11 / 22)


def test_penalties_can_take_the_example_below_zero_and_the_reward_is_clipped():
    score = explicit_score([5, -10], [False, True]).score
    assert score == -2.0
    assert training_reward(score) == 0.0 and training_reward(score, clip=False) == -2.0
    assert training_reward(None) is None


def test_undecided_verdicts_are_left_out_not_counted_false():
    result = explicit_score([4, 4, 2, -3, 5], [True, None, True, False, True], min_coverage=0.8)
    assert result.score == pytest.approx(11 / 11) and result.partial and result.coverage == 0.8
    assert explicit_score([4, 4, 2, -3, 5], [True, None, None, False, True], min_coverage=0.8).score is None


def test_undefined_cases_are_none_never_zero():
    assert explicit_score([-5, -2], [False, False]).score is None  # nothing to earn
    assert explicit_score([3, -2], [None, True], min_coverage=0.5).score is None  # no positive points decided
    assert explicit_score([], []).score is None
    with pytest.raises(ValueError, match="2 criteria but 1 verdicts"):
        explicit_score([1, 2], [True])


def test_tag_scores_by_hand():
    rubric = rubric_from_items(
        [
            {"criterion": "a", "points": 6, "tags": ["axis:accuracy"]},
            {"criterion": "b", "points": 4, "tags": ["axis:completeness"]},
            {"criterion": "c", "points": -5, "tags": ["axis:accuracy"]},
            {"criterion": "d", "points": -2, "tags": ["axis:safety"]},
        ],
        "test",
        example_tags=["theme:emergency_referrals"],
    )
    metrics = tag_scores(rubric, [True, False, True, False])
    assert metrics == {
        "overall_score": pytest.approx((6 - 5) / 10),
        "theme:emergency_referrals": pytest.approx(0.1),
        "axis:accuracy": pytest.approx((6 - 5) / 6),
        "axis:completeness": 0.0,
        # axis:safety has only a penalty: no positive points, so no score (not 0, not 1)
    }


def simple_evals_metrics(example, met):
    """HealthBench's per-example metrics, written independently of grading.scores (numpy, all verdicts decided)."""
    points = np.array([c.points for c in example.rubric.criteria])
    met = np.array(met)
    overall = points[met].sum() / points[points > 0].sum()
    metrics = {"overall_score": overall, **{tag: overall for tag in example.rubric.example_tags}}
    for tag in {t for c in example.rubric.criteria for t in c.tags}:
        mask = np.array([tag in c.tags for c in example.rubric.criteria])
        possible = points[mask & (points > 0)].sum()
        if possible > 0:
            metrics[tag] = points[mask & met].sum() / possible
    return metrics


def test_healthbench_sample_scores_match_the_formulas():
    examples = list(load_rubric_rows(SAMPLE).values())
    assert len(examples) == 30
    assert sum(len(e.rubric.criteria) for e in examples) == 352
    assert sum(c.points < 0 for e in examples for c in e.rubric.criteria) == 102
    assert sum(e.ideal_completion is not None for e in examples) == 24
    assert sum(len(e.conversation) > 1 for e in examples) == 9

    rng = random.Random(7)
    verdicts = [[rng.random() < 0.5 for _ in e.rubric.criteria] for e in examples]
    ours = [tag_scores(e.rubric, v, min_coverage=1.0) for e, v in zip(examples, verdicts)]
    theirs = [simple_evals_metrics(e, v) for e, v in zip(examples, verdicts)]
    for mine, reference in zip(ours, theirs):
        assert mine.keys() == reference.keys()
        for name in mine:
            assert mine[name] == pytest.approx(reference[name])

    report = aggregate(ours, seed=0)
    for name in ("overall_score", "axis:accuracy", "axis:completeness", "theme:context_seeking"):
        values = [m[name] for m in theirs if name in m]
        assert report[name]["n_samples"] == len(values)
        assert report[name]["value"] == pytest.approx(np.clip(np.mean(values), 0, 1))
        np_rng = np.random.default_rng(0)
        np_std = np.std([np.clip(np.mean(np_rng.choice(values, len(values))), 0, 1) for _ in range(4000)])
        assert report[name]["bootstrap_std"] == pytest.approx(np_std, rel=0.15)
    assert aggregate(ours, seed=0) == report  # seeded: the report reproduces


def test_dataset_mean_is_clipped_and_bootstrap_of_constant_is_zero():
    report = aggregate([{"overall_score": -0.5}, {"overall_score": -0.1}])
    assert report["overall_score"]["value"] == 0.0
    assert bootstrap_std([0.3, 0.3, 0.3]) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "line_file.jsonl:1: invalid JSON"),
        (json.dumps({"prompt_id": "x", "prompt": [], "rubrics": []}), r"line_file.jsonl:1: needs 'question'.* or 'prompt'"),
        (json.dumps({"prompt_id": "x", "prompt": [{"role": "user", "content": "q"}], "rubrics": []}),
         "'rubrics' must be a non-empty list"),
        (json.dumps({"prompt_id": "x", "prompt": [{"role": "user", "content": "q"}],
                     "rubrics": [{"criterion": "a", "points": "5"}]}), r"criterion 0: 'points' must be an integer"),
        (json.dumps({"prompt_id": "x", "prompt": [{"role": "user", "content": "q"}],
                     "rubrics": [{"criterion": " ", "points": 5}]}), "'criterion' must be a non-empty string"),
    ],
)  # fmt: skip
def test_bad_healthbench_lines_are_named(tmp_path, line, message):
    path = tmp_path / "line_file.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(RubricError, match=message):
        load_rubric_rows(path)


def test_duplicate_ids_and_criteria_are_refused(tmp_path):
    row = {"prompt_id": "x", "prompt": [{"role": "user", "content": "q"}], "rubrics": [{"criterion": "a", "points": 1}]}
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(RubricError, match=r"dup.jsonl:2: duplicate id 'x'"):
        load_rubric_rows(path)
    with pytest.raises(RubricError, match="criterion 1 repeats an earlier one"):
        rubric_from_items([{"criterion": "a", "points": 1}, {"criterion": "a", "points": 2}], "r")
