"""HealthBench's meta-evaluation figures (checks/healthbench_metrics.py) on hand-made rows, each figure worked out by
hand with simple-evals' formulas (healthbench_meta_eval.py): the judge against each physician label, overall and per
category, undecided verdicts apart; each physician against the others; the per-row means; and the reader of
`anonymized_physician_ids`."""

import json

import pytest

from checks.healthbench_metrics import categories_of, healthbench_report, rater_metrics
from checks.metaeval import load_metaeval, unit_rows
from rubricrl.records import RecordFileError

pytestmark = pytest.mark.pure

LABELS = [(True, True, False), (True, False), (False, False, False), (True, True)]
VERDICTS = [True, False, False, None]  # the last undecided
CATEGORIES = ["a", "a", "b", "b"]
PHYSICIANS = [("p1", "p2", "p3"), ("p1", "p2"), ("p2", "p3", "p1"), ("p2", "p3")]


def value(metrics, key):
    return metrics[key]["value"]


def test_the_judge_against_each_physician_label_as_simple_evals_counts_it():
    report = healthbench_report(LABELS, VERDICTS, CATEGORIES, PHYSICIANS)
    model = report["model"]
    # pairs: row 1 T vs T,T,F; row 2 F vs T,F; row 3 F vs F,F,F; row 4 undecided, left out
    assert value(model, "pairwise_model_precision_pos") == pytest.approx(2 / 3)  # said pos: agreed 2 of 3
    assert value(model, "pairwise_model_precision_neg") == pytest.approx(4 / 5)
    assert value(model, "pairwise_model_recall_pos") == pytest.approx(2 / 3)  # label pos: agreed 2 of 3
    assert value(model, "pairwise_model_recall_neg") == pytest.approx(4 / 5)
    assert model["pairwise_model_f1_pos"] == {"n": pytest.approx(4), "value": pytest.approx(2 / 3)}  # TP+FP+FN
    assert model["pairwise_model_f1_balanced"] == {"n": pytest.approx(10), "value": pytest.approx((2 / 3 + 4 / 5) / 2)}
    assert value(model, "pairwise_model_precision_balanced") == pytest.approx((2 / 3 + 4 / 5) / 2)
    assert value(model, "a: pairwise_model_f1_balanced") == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert "b: pairwise_model_f1_balanced" not in model  # b's decided row has no positive side
    assert value(model, "b: pairwise_model_f1_neg") == 1.0
    assert report["judge_undecided"] == 1 and categories_of(report) == ["a"]
    assert report["per_row"]["num_physician_labels"] == 2.5
    assert report["per_row"]["percent_physician_pos"] == pytest.approx((2 / 3 + 1 / 2 + 0 + 1) / 4)
    assert report["per_row"]["model_predicted_positive"] == pytest.approx(1 / 3)
    assert report["per_row"]["a: model_predicted_positive"] == 0.5 and not report["missing"]


def test_each_physician_against_the_others_on_the_same_rows():
    report = healthbench_report(LABELS, VERDICTS, CATEGORIES, PHYSICIANS)
    p1 = report["physicians"]["p1"]
    # p1: row 1 T vs T,F; row 2 T vs F; row 3 F vs F,F
    assert value(p1, "pairwise_physician_precision_pos") == pytest.approx(1 / 3)
    assert value(p1, "pairwise_physician_recall_neg") == pytest.approx(1 / 2)
    assert value(p1, "pairwise_physician_f1_balanced") == pytest.approx((1 / 2 + 2 / 3) / 2)
    spread = report["physician_spread"]["pairwise_physician_f1_balanced"]
    each = [value(m, "pairwise_physician_f1_balanced") for m in report["physicians"].values()]
    assert spread["physicians"] == 3 and spread["min"] == min(each) and spread["max"] == max(each)


def test_rows_without_categories_or_physician_ids_still_run_with_what_they_allow():
    report = healthbench_report(LABELS, VERDICTS, [None] * 4, [None] * 4)
    assert "pairwise_model_f1_balanced" in report["model"] and not categories_of(report)
    assert report["physicians"] == {} and len(report["missing"]) == 2


def test_a_rater_is_scored_alike_whoever_it_is():
    as_model = rater_metrics([True, False], [[True], [True]], [None, None], "model")
    as_physician = rater_metrics([True, False], [[True], [True]], [None, None], "physician")
    assert {k.replace("model", "physician"): v for k, v in as_model.items()} == as_physician
    assert as_model["pairwise_model_recall_pos"] == {"n": 2, "value": 0.5}
    assert as_model["pairwise_model_precision_neg"] == {"n": 1, "value": 0.0}
    # no label was negative: no recall_neg, so no f1_neg and no balanced f1 (simple-evals pairs the keys it has)
    assert "pairwise_model_f1_neg" not in as_model and "pairwise_model_f1_balanced" not in as_model


def test_the_reader_takes_one_physician_id_per_label(tmp_path):
    row = {
        "prompt": [{"role": "user", "content": "Q?"}],
        "completion": "A.",
        "rubric": "Says A.",
        "binary_labels": [True, False],
        "anonymized_physician_ids": ["x", "y"],
        "category": "c",
    }
    path = tmp_path / "meta.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (unit,) = load_metaeval(path)
    laid = unit_rows([unit], [[True]])
    assert laid == {"labels": [(True, False)], "verdicts": [True], "categories": ["c"], "physicians": [("x", "y")]}
    path.write_text(json.dumps({**row, "anonymized_physician_ids": ["x"]}) + "\n")
    with pytest.raises(RecordFileError, match="line 1: 'anonymized_physician_ids' must list one id per label"):
        load_metaeval(path)
