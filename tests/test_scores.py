"""Score math against hand arithmetic and against HealthBench's formulas on the 30 real examples."""

import json
import random

import numpy as np
import pytest

from grading.dataset import load_rubric_rows
from grading.report import build_report, example_metrics, format_report, judge_decisions, provenance
from grading.rubric import RubricError, rubric_from_items
from grading.scores import aggregate, bootstrap_std, explicit_score, tag_scores, training_reward
from rubricrl.errors import UserError
from tests.helpers import HEALTHBENCH_SAMPLE as SAMPLE

pytestmark = pytest.mark.pure


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


def test_an_undecided_penalty_leaves_the_example_unscored():
    # Left out, the penalty could only raise the score: 10/10 = 1.0 here, where deciding it as met gives 0.5.
    result = explicit_score([10, -5], [True, None], min_coverage=0.5)
    assert result.score is None and result.decided == 1 and result.total == 2
    assert explicit_score([10, -5], [True, None], min_coverage=0.5, undecided_penalty="unscored").score is None


def test_an_undecided_penalty_counted_as_met_is_a_lower_bound():
    assert explicit_score([10, -5], [True, None], min_coverage=0.5, undecided_penalty="met").score == 0.5  # (10-5)/10
    assert explicit_score([10, -5], [False, None], min_coverage=0.5, undecided_penalty="met").score == -0.5
    # whatever the judge would have said, the bound is never above the truth
    for truth in (True, False):
        decided = explicit_score([10, 4, -5], [True, False, truth]).score
        bound = explicit_score([10, 4, -5], [True, False, None], min_coverage=0.6, undecided_penalty="met").score
        assert bound == pytest.approx(5 / 14) and bound <= decided
    # coverage still counts real verdicts only: the assumed one does not lift it over min_coverage
    met = explicit_score([10, -5], [True, None], min_coverage=0.8, undecided_penalty="met")
    assert met.score is None and met.coverage == 0.5
    with pytest.raises(ValueError, match="undecided_penalty"):
        explicit_score([10, -5], [True, True], undecided_penalty="false")


def test_an_undecided_positive_criterion_is_still_left_out_and_partial():
    for rule in ("unscored", "met"):
        result = explicit_score([10, 5, -5], [True, None, False], min_coverage=0.5, undecided_penalty=rule)
        assert result.score == pytest.approx(10 / 10) and result.partial and result.coverage == pytest.approx(2 / 3)


def test_an_undecided_positive_criterion_dropped_or_counted_unmet_by_hand():
    points, met = [10, 5, 3, 2, 1], [True, None, True, True, True]
    # drop (HealthBench's way): (10 + 3 + 2 + 1) / (10 + 3 + 2 + 1) = 16/16
    assert explicit_score(points, met).score == 1.0
    # unmet: the 5 points stay in the denominator, earned by nobody: 16/21
    assert explicit_score(points, met, undecided_criterion="unmet").score == pytest.approx(16 / 21)  # 0.762
    # a judge failure can only lower an unmet score: never above what either verdict would have given
    for truth in (True, False):
        decided = explicit_score(points, [True, truth, True, True, True]).score
        assert explicit_score(points, met, undecided_criterion="unmet").score <= decided
    # penalties are not touched by it; with both rules: [10, 5, -4], [T, None, None] -> (10 - 4) / 15
    both = explicit_score(
        [10, 5, -4], [True, None, None], min_coverage=0.3, undecided_penalty="met", undecided_criterion="unmet"
    )
    assert both.score == pytest.approx(6 / 15) and both.decided == 1
    # coverage still counts real verdicts: an assumed verdict does not lift it over min_coverage
    assert explicit_score(points, [True, None, None, True, True], undecided_criterion="unmet").score is None
    with pytest.raises(ValueError, match="undecided_criterion"):
        explicit_score(points, met, undecided_criterion="met")


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


PENALTY_RUBRIC = [
    {"criterion": "a", "points": 6, "tags": ["axis:accuracy"]},
    {"criterion": "b", "points": 4, "tags": ["axis:completeness"]},
    {"criterion": "c", "points": -5, "tags": ["axis:accuracy"]},
]


def test_tag_scores_with_an_undecided_penalty():
    rubric = rubric_from_items(PENALTY_RUBRIC, "test", example_tags=["theme:hedging"])
    met = [True, True, None]
    assert tag_scores(rubric, met, min_coverage=0.5) == {}  # unscored: no tag either
    assert tag_scores(rubric, met, min_coverage=0.5, undecided_penalty="met") == {
        "overall_score": pytest.approx((6 + 4 - 5) / 10),
        "theme:hedging": pytest.approx(0.5),
        "axis:accuracy": pytest.approx((6 - 5) / 6),
        "axis:completeness": 1.0,
    }


def test_report_from_a_graded_record_with_an_undecided_penalty():
    # A record graded before the rule (its stored score, 1.0, left the penalty out): the report recomputes.
    verdicts = [
        {**item, "met": met, "explanation": "", "source": "judge"}
        for item, met in zip(PENALTY_RUBRIC, [True, True, None])
    ]
    records = [
        {"id": "x", "score": 1.0, "verdicts": verdicts, "example_tags": ["theme:hedging"], "integrity_flag": None},
        {
            "id": "y",
            "score": 0.6,
            "verdicts": [{**v, "met": m} for v, m in zip(verdicts, [True, False, False])],
            "example_tags": [],
            "integrity_flag": None,
        },  # 6/10
    ]
    report = build_report(records, min_coverage=0.5)
    assert report["unscored_examples"] == 1 and report["undecided_penalty"] == "unscored"
    assert report["metrics"]["overall_score"] == pytest.approx(0.6)
    assert report["metrics"]["overall_score:n_samples"] == 1
    assert "theme:hedging" not in report["metrics"]
    report = build_report(records, min_coverage=0.5, undecided_penalty="met")
    assert report["unscored_examples"] == 0 and report["undecided_penalty"] == "met"
    assert report["metrics"]["overall_score"] == pytest.approx((0.5 + 0.6) / 2)
    assert report["metrics"]["theme:hedging"] == pytest.approx(0.5)


def test_the_report_table_never_cuts_a_metric_name():
    # HealthBench tags that were cut to the same 44 characters, and printed as two rows of one name
    tags = [
        "cluster:communication_not-health-professional_accuracy_completeness",
        "cluster:communication_not-health-professional_tailored",
    ]
    verdicts = [{"criterion": "c", "points": 1, "tags": [], "met": True, "source": "judge"}]
    records = [
        {"id": "x", "verdicts": verdicts, "example_tags": [tags[0]]},
        {"id": "y", "verdicts": [{**verdicts[0], "met": False}], "example_tags": [tags[1]]},
    ]
    lines = format_report(build_report(records)).splitlines()
    rows = {line.split()[0]: line.split()[1] for line in lines[1:-1]}
    assert rows == {"overall_score": "0.500", tags[0]: "1.000", tags[1]: "0.000"}
    assert len({len(line) for line in lines[:-1]}) == 1  # the columns line up under the header


def test_a_vetoed_or_answerless_record_counts_on_every_axis_as_nothing_earned():
    """simple-evals judges every criterion of every response, so each axis counts every example: a record the
    integrity check vetoed (or without an answer) counts on its axes too, at their lowest; and overall at the lowest
    its rubric allows, whatever it stored (a stored 0 outscored an honest answer whose penalties won)."""
    tagged = [
        {"criterion": "a", "points": 5, "tags": ["axis:accuracy"], "met": None, "source": "none"},
        {"criterion": "b", "points": 5, "tags": ["axis:completeness"], "met": None, "source": "none"},
        {"criterion": "c", "points": -5, "tags": ["axis:completeness"], "met": None, "source": "none"},
    ]
    judged = [{**v, "met": v["points"] > 0, "source": "judge"} for v in tagged]
    records = [
        {"score": 0.0, "verdicts": tagged, "example_tags": ["theme:x"], "integrity_flag": "addresses the grader"},
        {"score": -0.5, "verdicts": tagged, "example_tags": [], "no_answer": "reasoning never closed"},
        {"score": 1.0, "verdicts": judged, "example_tags": ["theme:x"]},
    ]
    metrics = build_report(records)["metrics"]
    for name in ("overall_score", "axis:accuracy", "axis:completeness"):
        assert metrics[f"{name}:n_samples"] == 3, name  # every example on every axis, as the overall score
    assert example_metrics(records[0]) == {
        "overall_score": -0.5,  # -5 / 10: every penalty, no point
        "theme:x": -0.5,
        "axis:accuracy": 0.0,
        "axis:completeness": -1.0,
    }
    assert example_metrics(records[1])["axis:completeness"] == -1.0  # unclipped: nothing earned, the penalty met
    honest = {"score": -0.2, "verdicts": [{**judged[0], "met": False}, {**judged[1], "met": True}, judged[2]]}
    honest["verdicts"][2] = {**judged[2], "met": True}
    assert example_metrics(honest)["overall_score"] == 0.0 > example_metrics(records[0])["overall_score"]


def test_the_judge_failure_rate_counts_judge_decisions_only():
    judged = {"criterion": "c", "points": 5, "tags": [], "explanation": "", "source": "judge"}
    records = [
        {"verdicts": [{**judged, "met": None}, {**judged, "met": True}, {**judged, "met": True, "source": "rule"}]},
        {"verdicts": [], "rating": None, "explanation": "judge failed: no JSON"},  # a rating mode: one decision
        {"verdicts": [], "rating": 7.0},
        {"verdicts": [{**judged, "met": None, "source": "none"}], "integrity_flag": "addresses the grader"},
        {"verdicts": [], "policy_error": "503"},  # no answer: nothing for the judge
    ]
    assert [judge_decisions(r) for r in records] == [(2, 1), (1, 1), (1, 0), (0, 0), (0, 0)]
    report = build_report(records)
    assert report["judge_failure_rate"] == pytest.approx(2 / 4) and report["policy_failures"] == 1


def test_provenance_is_what_the_records_agree_on():
    stamp = {"rubrics": "/r.jsonl", "responses": None, "policy_model": "p", "graded_at": "2025-01-01T00:00:00+00:00"}
    records = [
        {"judge": {"judge_model": "j1", "mode": "batched"}, "provenance": stamp},
        {"judge": {"judge_model": "j2", "mode": "batched"}, "provenance": stamp},
        {"policy_error": "503", "provenance": stamp},
    ]
    assert provenance(records) == {
        "judge_model": ["j1", "j2"],
        "mode": "batched",
        "rubrics": "/r.jsonl",
        "responses": None,
        "policy_model": "p",
        "graded_at": stamp["graded_at"],
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
        ("{not json", "line_file.jsonl: line 1: invalid JSON"),
        (
            json.dumps({"prompt_id": "x", "prompt": [], "rubrics": []}),
            r"line_file.jsonl: line 1: 'prompt' is an empty message list",
        ),
        (
            json.dumps({"prompt_id": "x", "prompt": [{"role": "user", "content": "q"}], "rubrics": []}),
            "'rubrics' must be a non-empty list",
        ),
        (
            json.dumps(
                {
                    "prompt_id": "x",
                    "prompt": [{"role": "user", "content": "q"}],
                    "rubrics": [{"criterion": "a", "points": "5"}],
                }
            ),
            r"criterion 0: 'points' must be an integer",
        ),
        (
            json.dumps(
                {
                    "prompt_id": "x",
                    "prompt": [{"role": "user", "content": "q"}],
                    "rubrics": [{"criterion": " ", "points": 5}],
                }
            ),
            "'criterion' must be a non-empty string",
        ),
    ],
)
def test_bad_healthbench_lines_are_named(tmp_path, line, message):
    path = tmp_path / "line_file.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UserError, match=message):  # RecordFileError for the line, RubricError for its content
        load_rubric_rows(path)


def test_duplicate_ids_and_criteria_are_refused(tmp_path):
    row = {"prompt_id": "x", "prompt": [{"role": "user", "content": "q"}], "rubrics": [{"criterion": "a", "points": 1}]}
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(RubricError, match=r"dup.jsonl: line 2: duplicate id 'x'"):
        load_rubric_rows(path)
    with pytest.raises(RubricError, match="criterion 1 repeats an earlier one"):
        rubric_from_items([{"criterion": "a", "points": 1}, {"criterion": "a", "points": 2}], "r")
