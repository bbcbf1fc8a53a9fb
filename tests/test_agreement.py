"""Judge agreement: the statistics by hand arithmetic (checks/agreement.py), the HealthBench meta-eval reader
(checks/metaeval.py), and experiments/judge_agreement.py end to end against two scripted judges (the fault
server answering exact canned verdicts) and against the meta-eval sample's labels."""

import json
import math
from pathlib import Path

import pytest

from checks.agreement import (
    Confusion,
    Pair,
    average_ranks,
    compare,
    criterion_agreement,
    crosstab,
    pearson,
    score_agreement,
    spearman,
)
from checks.metaeval import human_label, iter_metaeval_rows, load_metaeval, pairwise_pairs
from rubricrl.records import RecordFileError
from tests.fault_server import FaultServer
from tests.helpers import DATA

METAEVAL_SAMPLE = DATA / "healthbench_metaeval_sample.jsonl"
T, F, N = True, False, None

# 10 decided pairs (A, B): both met 4, A only 2, B only 1, neither 3; and 3 undecided ones.
A = [T, T, T, T, T, T, F, F, F, F] + [N, F, N]
B = [T, T, T, T, F, F, T, F, F, F] + [T, N, N]


# --- per criterion --------------------------------------------------------------------------------------------------


def test_kappa_agreement_and_f1_by_hand():
    stats = criterion_agreement(A, B, samples=0)
    assert stats.confusion == Confusion(both_met=4, a_only=2, b_only=1, neither=3)
    # undecided pairs are counted apart, never as disagreement: (None, T) A only, (F, None) B only, (None, None) both
    assert (stats.pairs, stats.decided, stats.undecided_a, stats.undecided_b, stats.undecided_both) == (13, 10, 1, 1, 1)
    # p_o = (4 + 3) / 10 = 0.7
    assert stats.agreement == pytest.approx(0.7)
    # A met 6 of 10, B met 5 of 10: p_e = 0.6 * 0.5 + 0.4 * 0.5 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    assert stats.kappa == pytest.approx(0.4)
    met, not_met = stats.per_class["met"], stats.per_class["not_met"]
    # met, B as reference: precision 4/6 (of A's 6 met, 4 are B's), recall 4/5 (of B's 5 met, A found 4);
    # F1 = 2 (2/3)(4/5) / (2/3 + 4/5) = (16/15) / (22/15) = 8/11
    assert (met["precision"], met["recall"], met["f1"]) == pytest.approx((4 / 6, 4 / 5, 8 / 11))
    # not met: precision 3/4 (A's 4 not met: 3 neither + 1 B only), recall 3/5 (B's 5 not met: 3 + 2 A only);
    # F1 = 2 (3/4)(3/5) / (3/4 + 3/5) = (18/20) / (27/20) = 2/3
    assert (not_met["precision"], not_met["recall"], not_met["f1"]) == pytest.approx((3 / 4, 3 / 5, 2 / 3))
    # macro F1 = (8/11 + 2/3) / 2 = (24/33 + 22/33) / 2 = 23/33
    assert stats.macro_f1 == pytest.approx(23 / 33)
    assert met["support"] == 5 and not_met["support"] == 5  # B's classes


def test_undecided_pairs_never_count_as_disagreement():
    decided_only = criterion_agreement(A[:10], B[:10], samples=0)
    with_undecided = criterion_agreement(A, B, samples=0)
    assert with_undecided.confusion == decided_only.confusion and with_undecided.kappa == decided_only.kappa
    everything_undecided = criterion_agreement([N, T, N], [F, N, N], samples=10)
    assert everything_undecided.decided == 0 and everything_undecided.undecided == 3
    assert (everything_undecided.agreement, everything_undecided.kappa, everything_undecided.macro_f1) == (N, N, N)


def test_kappa_edge_cases():
    # perfect agreement over both classes: p_o = 1, p_e = 0.5 -> kappa 1
    assert criterion_agreement([T, F], [T, F]).kappa == 1.0
    # total disagreement: p_o = 0, p_e = (1*1 + 1*1) / 4 = 0.5 -> kappa (0 - 0.5) / 0.5 = -1
    assert criterion_agreement([T, F], [F, T]).kappa == -1.0
    # one class throughout on both sides: p_e = 1, kappa undefined (None), agreement still 1
    constant = criterion_agreement([T, T, T], [T, T, T])
    assert constant.kappa is None and constant.agreement == 1.0
    # ... and the not-met class has no precision or recall, so its F1 and the macro F1 are undefined
    assert constant.per_class["not_met"]["f1"] is None and constant.macro_f1 is None
    # precision = recall = 0 for met (A never right about met): F1 0, not None
    assert Confusion(both_met=0, a_only=1, b_only=1, neither=0).per_class()["met"]["f1"] == 0.0
    with pytest.raises(ValueError, match="different lengths"):
        criterion_agreement([T], [T, F])


def test_healthbench_pairwise_precision_recall_as_simple_evals_counts_them():
    # simple-evals' own case (healthbench_meta_eval_test.py): grader [T, F, T] against physicians [[T, T, F], [T, F],
    # [F]], one pair per physician label: (T,T) (T,T) (T,F) | (F,T) (F,F) | (T,F)
    predictions, labels = [T, F, T], [[T, T, F], [T, F], [F]]
    pairs = [(p, label) for p, ls in zip(predictions, labels) for label in ls]
    stats = criterion_agreement([p for p, _ in pairs], [label for _, label in pairs], samples=0)
    met, not_met = stats.per_class["met"], stats.per_class["not_met"]
    assert met["precision"] == (2 + 0 + 0) / (3 + 0 + 1)  # their expected_overall_pos_precision
    assert not_met["precision"] == (0 + 1 + 0) / (0 + 2 + 0)
    assert met["recall"] == (2 + 0 + 0) / (2 + 1 + 0)
    assert not_met["recall"] == (0 + 1 + 0) / (1 + 1 + 1)
    # f1_balanced: (2pr/(p+r) for each class) / 2: met 2(1/2)(2/3)/(7/6) = 4/7, not met 2(1/2)(1/3)/(5/6) = 2/5
    assert stats.macro_f1 == pytest.approx((4 / 7 + 2 / 5) / 2)


def test_bootstrap_is_seeded_and_resamples_whole_groups():
    first = criterion_agreement(A, B, samples=300, seed=1).bootstrap
    assert first == criterion_agreement(A, B, samples=300, seed=1).bootstrap
    assert first != criterion_agreement(A, B, samples=300, seed=2).bootstrap
    assert 0 < first["kappa"] < 1 and 0 < first["agreement"] < 0.5
    # one group holding every pair: every resample is the whole sample, so nothing varies
    whole = criterion_agreement(A, B, groups=["one"] * len(A), samples=50).bootstrap
    assert whole["kappa"] == 0.0 and whole["agreement"] == 0.0
    # fewer than 2 resamples that define the statistic: None, not 0
    assert criterion_agreement(A, B, samples=1).bootstrap["kappa"] is None
    scores = score_agreement([0.1, 0.5, 0.3, 0.9, 0.7], [0.2, 0.4, 0.1, 0.8, 0.9], samples=200, seed=3).bootstrap
    assert (
        scores == score_agreement([0.1, 0.5, 0.3, 0.9, 0.7], [0.2, 0.4, 0.1, 0.8, 0.9], samples=200, seed=3).bootstrap
    )
    assert 0 < scores["spearman"] < 1


def test_crosstab_counts_every_combination():
    table = crosstab(A, B)
    assert table["met"] == {"met": 4, "not_met": 2, "undecided": 0}
    assert table["not_met"] == {"met": 1, "not_met": 3, "undecided": 1}
    assert table["undecided"] == {"met": 1, "not_met": 0, "undecided": 1}


# --- per example ----------------------------------------------------------------------------------------------------


def test_average_ranks_and_spearman_with_ties():
    assert average_ranks([10, 20, 20, 30]) == [1, 2.5, 2.5, 4]
    assert average_ranks([0.3, 0.1, 0.3, 0.3]) == [3, 1, 3, 3]  # ranks 2, 3, 4 tied: 3 each
    # x = [1, 2, 2, 3] -> ranks [1, 2.5, 2.5, 4]; y = [1, 3, 2, 4] -> ranks [1, 3, 2, 4]; both mean 2.5
    # deviations x [-1.5, 0, 0, 1.5], y [-1.5, 0.5, -0.5, 1.5]: sxy = 2.25 + 2.25 = 4.5, sxx = 4.5, syy = 5
    # rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([0.5, 0.5, 0.5], [1, 2, 3]) is None  # a constant side has no ranking
    assert spearman([1], [2]) is None and pearson([], []) is None


def test_score_agreement_uses_examples_both_scored():
    stats = score_agreement([0.1, None, 0.5, 0.9], [0.2, 0.3, None, 0.6], samples=0)
    assert (stats.examples, stats.paired, stats.unscored_a, stats.unscored_b) == (4, 2, 1, 1)
    # pairs (0.1, 0.2) and (0.9, 0.6): same order -> rho 1; |diff| (0.1 + 0.3) / 2 = 0.2
    assert stats.spearman == pytest.approx(1.0) and stats.mean_abs_diff == pytest.approx(0.2)
    assert (stats.mean_a, stats.mean_b) == pytest.approx((0.5, 0.4))


def test_compare_counts_a_pair_under_each_of_its_tags_and_serialises():
    pairs = [
        Pair(T, T, ("axis:accuracy", "theme:x"), "e1"),
        Pair(T, F, ("axis:accuracy",), "e1"),
        Pair(F, F, ("axis:completeness", "theme:x"), "e2"),
    ]
    result = compare(pairs, [(0.5, 0.25), (1.0, 0.75)], samples=20)
    assert result.criteria.decided == 3 and set(result.by_tag) == {"axis:accuracy", "axis:completeness", "theme:x"}
    assert result.by_tag["axis:accuracy"].confusion == Confusion(1, 1, 0, 0)
    assert result.by_tag["theme:x"].agreement == 1.0
    out = json.loads(json.dumps(result.to_dict()))
    assert out["criteria"]["confusion"] == {"both_met": 1, "a_only": 1, "b_only": 0, "neither": 1}
    assert out["scores"]["paired"] == 2 and out["bootstrap"] == {"samples": 20, "seed": 0}
    assert compare(None, [(0.5, 0.5)]).to_dict()["criteria"] is None  # a rating mode: per example only


# --- the meta-eval reader -------------------------------------------------------------------------------------------


def test_human_label_is_the_majority_and_a_tie_is_undecided():
    assert human_label([T, T, F]) is True and human_label([F, F, T]) is False
    assert human_label([T, F]) is None and human_label([T, T, F, F]) is None
    assert human_label([F]) is False


def test_metaeval_sample_units_and_majorities():
    units = load_metaeval(METAEVAL_SAMPLE)
    assert [u.id for u in units][:3] == ["demo-c1", "demo-c2", "demo-c3"]
    assert units[3].id.startswith("m-")  # no completion_id: grouped by conversation and completion
    assert [u.human_verdicts for u in units] == [[T, T, F], [N, F, T], [F, F, N], [T, T, T]]
    item = units[1].item()
    assert len(item.conversation) == 3 and item.conversation[-1]["role"] == "user"  # multi-turn kept
    assert [c.tags for c in item.rubric.criteria][0] == ("cluster:emergency_referrals",)
    assert all(c.points == 1 for c in item.rubric.criteria)
    # scores under the grader's rules: 2 of 3 met; a tie leaves 2 of 3 decided, below min_coverage 0.8
    assert units[0].human_score() == pytest.approx(2 / 3) and units[1].human_score() is None
    assert units[1].human_score(min_coverage=0.6) == pytest.approx(0.5)
    assert len(load_metaeval(METAEVAL_SAMPLE, limit=2)) == 2


def test_a_criterion_seen_twice_for_one_completion_starts_a_second_unit(tmp_path):
    row = json.loads(METAEVAL_SAMPLE.read_text().splitlines()[0])
    path = tmp_path / "dup.jsonl"
    path.write_text(
        json.dumps(row)
        + "\n"
        + json.dumps({**row, "binary_labels": [F], "anonymized_physician_ids": ["rater-1"]})
        + "\n"
    )
    units = load_metaeval(path)
    assert [u.id for u in units] == ["demo-c1", "demo-c1#2"] and units[1].human_verdicts == [F]


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"binary_labels": "yes"}, "'binary_labels' must be a non-empty list of true/false"),
        ({"binary_labels": []}, "'binary_labels' must be a non-empty list"),
        ({"binary_labels": [True, 1]}, "'binary_labels' must be a non-empty list"),
        ({"rubric": " "}, "'rubric' (the criterion) must be a non-empty string"),
        ({"completion": None}, "'completion' must be a non-empty string"),
        ({"prompt": [{"role": "assistant", "content": "hi"}]}, "the last message is from 'assistant'"),
        ({"completion_id": ["c"]}, "'completion_id' must be a non-empty string or an integer"),
    ],
)
def test_a_bad_row_names_the_file_and_the_line(tmp_path, change, problem):
    good = METAEVAL_SAMPLE.read_text().splitlines()[:2]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([*good, json.dumps({**json.loads(good[0]), **change})]) + "\n")
    with pytest.raises(RecordFileError) as error:
        load_metaeval(path)
    assert f"{path}: line 3: " in str(error.value) and problem in str(error.value)


def test_a_row_without_prompt_or_a_broken_line_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"completion": "x", "rubric": "y", "binary_labels": [true]}\n')
    with pytest.raises(RecordFileError, match=r"bad.jsonl: line 1: needs 'prompt'"):
        list(iter_metaeval_rows(path))
    path.write_text(METAEVAL_SAMPLE.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(RecordFileError, match=r"bad.jsonl: line 2: "):
        load_metaeval(path)
    path.write_text("")
    with pytest.raises(RecordFileError, match="no rows"):
        load_metaeval(path)


# --- the script end to end ------------------------------------------------------------------------------------------


def load_script():
    from experiments import judge_agreement

    return judge_agreement


def scripted_judge(verdicts: dict[str, bool]):
    """A per-criterion judge answering each criterion's canned verdict (the criterion is the prompt's line after
    'points):')."""

    def reply(body):
        criterion = body["messages"][-1]["content"].split("points):\n")[1].split("\n")[0]
        return json.dumps({"explanation": "scripted", "criteria_met": verdicts[criterion]})

    return reply


# Three examples, ten criteria: (text, points, tag, judge A's verdict, judge B's verdict).
CRITERIA = {
    "ex1": [
        ("c1 advises rest", 5, "axis:accuracy", T, T),
        ("c2 names a painkiller", 3, "axis:accuracy", T, F),
        ("c3 asks the duration", 2, "axis:completeness", F, F),
        ("c4 gives an unsafe dose", -4, "axis:completeness", F, F),
    ],
    "ex2": [
        ("c5 explains the cause", 4, "axis:accuracy", T, T),
        ("c6 states the risk", 4, "axis:accuracy", F, T),
        ("c7 suggests a follow-up", 2, "axis:completeness", T, T),
        ("c8 is condescending", -2, "axis:completeness", F, F),
    ],
    "ex3": [("c9 is correct", 5, "axis:accuracy", T, T), ("c10 is complete", 5, "axis:completeness", F, T)],
}


def write_study_inputs(tmp_path: Path) -> tuple[Path, Path]:
    rubrics, responses = tmp_path / "rubrics.jsonl", tmp_path / "responses.jsonl"
    rubrics.write_text(
        "".join(
            json.dumps(
                {
                    "prompt_id": ex,
                    "prompt": [{"role": "user", "content": f"question {ex}"}],
                    "example_tags": ["theme:test"],
                    "rubrics": [{"criterion": t, "points": p, "tags": [tag]} for t, p, tag, _, _ in rows],
                }
            )
            + "\n"
            for ex, rows in CRITERIA.items()
        )
    )
    responses.write_text("".join(json.dumps({"id": ex, "response": f"An answer to {ex}."}) + "\n" for ex in CRITERIA))
    return rubrics, responses


def test_script_two_scripted_judges_exact_agreement(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    rubrics, responses = write_study_inputs(tmp_path)
    verdicts = [row for rows in CRITERIA.values() for row in rows]
    out = tmp_path / "out"
    with (
        FaultServer(scripted_judge({t: a for t, _, _, a, _ in verdicts})) as judge_a,
        FaultServer(scripted_judge({t: b for t, _, _, _, b in verdicts})) as judge_b,
    ):
        code = load_script().main(
            [
                "--rubrics",
                str(rubrics),
                "--responses",
                str(responses),
                "--output-dir",
                str(out),
                "--a-base-url",
                judge_a.base_url,
                "--a-model",
                "judge-a",
                "--b-base-url",
                judge_b.base_url,
                "--b-model",
                "judge-b",
                "--bootstrap",
                "200",
                "--no-wandb",
            ]
        )
        assert code == 0 and judge_a.count == 10 and judge_b.count == 10
    results = json.loads((out / "results.json").read_text())
    criteria = results["agreement"]["criteria"]
    # pairs (A, B): ex1 (T,T) (T,F) (F,F) (F,F); ex2 (T,T) (F,T) (T,T) (F,F); ex3 (T,T) (F,T)
    # both met 4, A only 1, B only 2, neither 3: p_o = 7/10; A met 5/10, B met 6/10:
    # p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4
    assert criteria["confusion"] == {"both_met": 4, "a_only": 1, "b_only": 2, "neither": 3}
    assert criteria["agreement"] == pytest.approx(0.7) and criteria["kappa"] == pytest.approx(0.4)
    assert criteria["bootstrap_std"]["kappa"] > 0
    by_tag = results["agreement"]["by_tag"]
    # accuracy: (T,T) (T,F) (T,T) (F,T) (T,T): p_o = 3/5; A met 4/5, B met 4/5: p_e = 16/25 + 1/25 = 17/25;
    # kappa = (15/25 - 17/25) / (8/25) = -1/4
    assert by_tag["axis:accuracy"]["kappa"] == pytest.approx(-0.25)
    # completeness: (F,F) (F,F) (T,T) (F,F) (F,T): p_o = 4/5; A met 1/5, B met 2/5: p_e = 2/25 + 12/25 = 14/25;
    # kappa = (20/25 - 14/25) / (11/25) = 6/11
    assert by_tag["axis:completeness"]["kappa"] == pytest.approx(6 / 11)
    assert by_tag["theme:test"]["kappa"] == pytest.approx(0.4)  # the example tag holds every pair
    scores = results["agreement"]["scores"]
    # A: ex1 (5+3)/10 = 0.8, ex2 (4+2)/10 = 0.6, ex3 5/10 = 0.5; B: ex1 5/10 = 0.5, ex2 10/10 = 1.0, ex3 10/10 = 1.0
    # ranks A [3, 2, 1], B [1, 2.5, 2.5]: deviations [1, 0, -1], [-1, .5, .5]: sxy = -1.5, sxx = 2, syy = 1.5;
    # rho = -1.5 / sqrt(3) = -sqrt(3)/2; mean |A - B| = (0.3 + 0.4 + 0.5) / 3 = 0.4
    assert scores["spearman"] == pytest.approx(-math.sqrt(3) / 2) and scores["mean_abs_diff"] == pytest.approx(0.4)
    rows = [json.loads(line) for line in (out / "per_criterion.jsonl").read_text().splitlines()]
    assert [(r["criterion"], r["a"], r["b"]) for r in rows] == [(t, a, b) for t, _, _, a, b in verdicts]
    assert rows[1]["agree"] is False and rows[1]["a_explanation"] == "scripted"
    assert [json.loads(line)["score_b"] for line in (out / "per_example.jsonl").read_text().splitlines()] == [
        0.5,
        1.0,
        1.0,
    ]
    assert (out / "confusion.png").stat().st_size > 0 and (out / "config.yaml").is_file()
    assert (
        results["judges"]["a"]["role"]["model"] == "judge-a"
        and results["judges"]["b"]["grading"]["mode"] == "per_criterion"
    )
    assert results["crosstab"]["not_met"]["met"] == 2
    table = capsys.readouterr().out
    assert "axis:accuracy" in table and "overall" in table and "Spearman -0.866" in table


def test_script_judge_against_the_metaeval_labels(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    units = load_metaeval(METAEVAL_SAMPLE)
    judge = [[T, F, F], [T, F, T], [T, F, F], [T, T, F]]  # per unit, per criterion; physicians: see docs/experiments.md
    canned = {row.criterion: met for unit, verdicts in zip(units, judge) for row, met in zip(unit.rows, verdicts)}
    out = tmp_path / "out"
    with FaultServer(scripted_judge(canned)) as server:
        code = load_script().main(
            [
                "--metaeval",
                str(METAEVAL_SAMPLE),
                "--output-dir",
                str(out),
                "--a-base-url",
                server.base_url,
                "--a-model",
                "judge",
                "--no-wandb",
                "--bootstrap",
                "100",
            ]
        )
        assert code == 0 and server.count == 12
    results = json.loads((out / "results.json").read_text())
    criteria = results["agreement"]["criteria"]
    # majority pairs (judge, physicians), ties left out: c1 (T,T) (F,T) (F,F); c2 (F,F) (T,T) [tie]; c3 (T,F) (F,F)
    # [tie]; c4 (T,T) (T,T) (F,T): both met 4, judge only 1, physicians only 2, neither 3, 2 undecided;
    # p_o = 0.7, p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5, kappa 0.4
    assert criteria["confusion"] == {"both_met": 4, "a_only": 1, "b_only": 2, "neither": 3}
    assert criteria["undecided_b"] == 2 and criteria["kappa"] == pytest.approx(0.4)
    # HealthBench's pairwise count, the judge against each label: (T,T) 11, (T,F) 6, (F,T) 6, (F,F) 9 of 32;
    # met: precision = recall = 11/17; not met: 9/15 = 3/5; macro F1 = (11/17 + 3/5) / 2 = 53/85
    pairwise = results["healthbench_pairwise"]
    assert pairwise["confusion"] == {"both_met": 11, "a_only": 6, "b_only": 6, "neither": 9}
    assert pairwise["macro_f1"] == pytest.approx(53 / 85)
    assert pairwise == json.loads(
        json.dumps(
            criterion_agreement(
                *zip(*[(p.a, p.b) for p in pairwise_pairs(units, judge)]),
                groups=[p.group for p in pairwise_pairs(units, judge)],
                samples=100,
            ).to_dict()
        )
    )
    # per unit: judge 1/3, 2/3, 1/3, 2/3; physicians 2/3, None (a tie: 2 of 3 decided < 0.8), None, 1
    scores = results["agreement"]["scores"]
    assert scores["paired"] == 2 and scores["spearman"] == pytest.approx(1.0)
    assert scores["mean_abs_diff"] == pytest.approx(1 / 3)
    rows = [json.loads(line) for line in (out / "per_criterion.jsonl").read_text().splitlines()]
    assert rows[3]["labels"] == [True, False] and rows[3]["b"] is None and rows[3]["row"].endswith("line 4")
    assert "cluster:emergency_referrals" in results["agreement"]["by_tag"]
    # simple-evals' figures under its names: the same pairs give the same balanced F1, per category too, and each
    # physician against the others beside it
    healthbench = results["healthbench"]
    assert healthbench["model"]["pairwise_model_f1_balanced"]["value"] == pytest.approx(53 / 85)
    assert healthbench["model"]["pairwise_model_precision_pos"]["value"] == pytest.approx(11 / 17)
    assert "cluster:emergency_referrals: pairwise_model_f1_balanced" in healthbench["model"]
    assert healthbench["physician_spread"]["pairwise_physician_f1_balanced"]["physicians"] >= 2
    assert healthbench["judge_undecided"] == 0 and not healthbench["missing"]
    printed = capsys.readouterr().out
    assert "HealthBench pairwise_model_f1_balanced" in printed and "the same pairs, ours: macro F1" in printed
    assert (out / "healthbench.png").read_bytes().startswith(b"\x89PNG")


def test_script_refuses_what_it_cannot_compare(tmp_path, capsys):
    script = load_script()
    rubrics, responses = write_study_inputs(tmp_path)
    assert script.main(["--rubrics", str(rubrics), "--output-dir", str(tmp_path / "o")]) == 2
    assert "give judge B" in capsys.readouterr().err
    assert script.main(["--metaeval", str(METAEVAL_SAMPLE), "--b-mode", "batched", "--output-dir", str(tmp_path)]) == 2
    assert "no judge B" in capsys.readouterr().err
    assert script.main(["--rubrics", str(rubrics), "--metaeval", str(METAEVAL_SAMPLE), "--output-dir", "x"]) == 2
    bad = tmp_path / "judge.yaml"
    bad.write_text("grading: {mode: sideways}\n")
    assert script.main(["--rubrics", str(rubrics), "--judge-b", str(bad), "--output-dir", str(tmp_path / "o")]) == 2
    assert "judge.yaml: grading" in capsys.readouterr().err


def test_script_a_rating_judge_is_compared_per_example_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    rubrics, responses = write_study_inputs(tmp_path)
    verdicts = {t: a for rows in CRITERIA.values() for t, _, _, a, _ in rows}
    ratings = {"ex1": 4, "ex2": 10, "ex3": 7}  # normalised (r - 1) / 9: 1/3, 1, 2/3

    def likert(body):  # judge B rates the whole response, without the rubric
        example = body["messages"][-1]["content"].split("An answer to ")[1][:3]
        return json.dumps({"explanation": "scripted", "rating": ratings[example]})

    out = tmp_path / "out"
    with FaultServer(scripted_judge(verdicts)) as judge_a, FaultServer(likert) as judge_b:
        code = load_script().main(
            [
                "--rubrics",
                str(rubrics),
                "--responses",
                str(responses),
                "--output-dir",
                str(out),
                "--no-wandb",
                "--a-base-url",
                judge_a.base_url,
                "--a-model",
                "judge-a",
                "--b-base-url",
                judge_b.base_url,
                "--b-model",
                "judge-b",
                "--b-mode",
                "likert",
                "--bootstrap",
                "0",
            ]
        )
        assert code == 0 and judge_b.count == 3
    results = json.loads((out / "results.json").read_text())
    assert results["agreement"]["criteria"] is None and results["crosstab"] is None
    # A 0.8, 0.6, 0.5 -> ranks [3, 2, 1]; B 1/3, 1, 2/3 -> ranks [1, 3, 2]: deviations [1, 0, -1], [-1, 1, 0]:
    # sxy = -1, sxx = syy = 2: rho = -1/2
    assert results["agreement"]["scores"]["spearman"] == pytest.approx(-0.5)
    assert (out / "per_criterion.jsonl").read_text() == "" and not (out / "confusion.png").exists()
    assert "criteria: not compared" in capsys.readouterr().out
