"""`rubricrl audit`: hand-made graded sets whose saturated, dead, duplicate, unreliable and wrong-sign criteria are
known, their rates by hand; several files read as one; any order and any number of buckets; the pruned dataset in
its input's schema; bad input; the report's section. A real `ruft build` folder is audited in test_cli's newcomer
test (the embedded model)."""

import json

import pyarrow.parquet as pq
import pytest

from grading.audit import group_saturation
from grading.audit_input import Buckets
from grading.dataset import load_rubric_rows
from rubricrl.cli import main
from synthesis.output import OutputFolder, final_line, final_schema

pytestmark = pytest.mark.pure

# query "q": 4 answers; query "p": a positive criterion the best answers miss (simple-evals issue 77's kind)
Q = {
    "sat": (5, [True, True, True, True]),
    "dead": (3, [False, False, False, False]),
    "good": (5, [True, True, False, False]),
    "dup": (2, [True, True, False, False]),
    "shaky": (1, [None, True, False, False]),
}
P = {
    "P1": (5, [True, True, False, False]),
    "P2": (5, [True, True, True, False]),
    "herbal tea for a baby": (3, [False, False, True, True]),
}


def graded(query_id: str, criteria: dict, answer: int, response: str | None = None) -> dict:
    verdicts = [
        {"criterion": text, "points": points, "tags": ["axis:accuracy"], "met": mets[answer], "explanation": "x"}
        for text, (points, mets) in criteria.items()
    ]
    return {"id": query_id, "response": response or f"{query_id} answer {answer}", "verdicts": verdicts}


def write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def rubric_rows(path, *queries) -> str:
    return write(
        path,
        [
            {
                "id": qid,
                "prompt": f"Question {qid}?",
                "rubrics": [{"criterion": t, "points": p} for t, (p, _) in c.items()],
            }
            for qid, c in queries
        ],
    )


def audit(out, *argv) -> tuple[dict, dict]:
    assert main(["audit", *map(str, argv), "--output-dir", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "criteria.jsonl").read_text().splitlines()]
    return {(r["id"], r["criterion"]): r for r in rows}, json.loads((out / "summary.json").read_text())


def test_the_audit_finds_exactly_the_criteria_made_to_fail(tmp_path, capsys):
    answers = [graded("q", Q, a) for a in range(4)] + [graded("p", P, a) for a in range(4)]
    answers += [graded("few", {"lonely": (1, [True, False])}, a) for a in range(2)]  # 2 answers: reported only
    rows, summary = audit(tmp_path / "out", write(tmp_path / "g.jsonl", answers))
    flags = {key: row["flags"] for key, row in rows.items()}
    assert flags == {
        ("q", "sat"): ["saturated"],
        ("q", "dead"): ["dead"],
        ("q", "good"): [],
        ("q", "dup"): ["duplicate"],
        ("q", "shaky"): ["unreliable"],  # undecided on 1 of 4 answers > 20%
        ("p", "P1"): [],
        ("p", "P2"): [],
        ("p", "herbal tea for a baby"): ["suspect_sign"],
        ("few", "lonely"): [],
    }
    assert rows[("q", "dup")]["duplicate_of"] == "good"
    shaky = rows[("q", "shaky")]
    assert (shaky["met"], shaky["not_met"], shaky["undecided"]) == (1, 2, 1)
    assert shaky["pass_rate"] == pytest.approx(1 / 3) and shaky["undecided_rate"] == 0.25
    assert rows[("q", "good")]["pass_rate"] == 0.5 and rows[("q", "good")]["separates"]
    assert rows[("p", "herbal tea for a baby")]["sign_correlation"] == pytest.approx(-0.9045, abs=1e-3)
    assert summary["queries"] == 3 and summary["queries_with_too_few_answers"] == 1
    assert summary["criteria_flagged_on"] == 8 and summary["verdicts"] == 4 * 5 + 4 * 3 + 2
    assert summary["flag_counts"] == {"saturated": 1, "dead": 1, "duplicate": 1, "unreliable": 1, "suspect_sign": 1}
    assert summary["flag_shares"]["dead"] == 1 / 8
    assert summary["discriminating_per_query"] == {"3": 2}  # q: good, dup, shaky; p: all three
    assert summary["by_tag"]["axis:accuracy"]["criteria"] == 8
    queries = [json.loads(line) for line in (tmp_path / "out" / "queries.jsonl").read_text().splitlines()]
    assert {q["id"]: q["flagged"] for q in queries} == {"q": True, "p": True, "few": False}
    said = capsys.readouterr().out
    assert "audited 9 criteria of 3 queries from 10 answers (34 verdicts)" in said and "dead 12.5%" in said
    md = (tmp_path / "out" / "audit.md").read_text()
    assert "| dead | 1 | 12.5% |" in md.replace("---:", "---")


def test_several_files_are_one_audit_and_judges_that_disagree_make_a_criterion_unreliable(tmp_path):
    crit = {"X": (5, [True, True, False, False])}
    other = {"X": (5, [True, False, False, False])}  # a second judge: answer 1 disputed
    a = write(tmp_path / "a.jsonl", [graded("j", crit, i) for i in range(4)])
    b = write(tmp_path / "b.jsonl", [graded("j", other, i) for i in range(4)])
    rows, summary = audit(tmp_path / "out", a, b)
    x = rows[("j", "X")]
    assert x["answers"] == 4 and x["disagreement"] == 0.25 and x["undecided"] == 1  # a tie is undecided
    assert "unreliable" in x["flags"] and summary["graded_answers"] == 8


def test_order_and_bucket_count_do_not_change_the_audit(tmp_path, monkeypatch):
    answers = [graded("q", Q, a) for a in range(4)] + [graded("p", P, a) for a in range(4)]
    interleaved = [answers[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)]  # no query's answers together
    one, _ = audit(tmp_path / "one", write(tmp_path / "g.jsonl", answers))
    monkeypatch.setattr("grading.audit_input.BUCKET_INPUT_BYTES", 200)
    assert Buckets(4000).count == 20
    many, _ = audit(tmp_path / "many", write(tmp_path / "i.jsonl", interleaved))
    assert many == one


def test_prune_writes_the_rubric_file_in_its_own_schema_and_says_what_went(tmp_path):
    answers = [graded("q", Q, a) for a in range(4)] + [graded("p", P, a) for a in range(4)]
    graded_file = write(tmp_path / "g.jsonl", answers)
    rubrics = rubric_rows(tmp_path / "rubrics.jsonl", ("q", Q), ("p", P))
    audit(tmp_path / "out", graded_file, "--rubrics", rubrics, "--prune", "duplicate", "suspect_sign", "dead")
    pruned = load_rubric_rows(tmp_path / "out" / "rubrics.jsonl")
    assert [c.text for c in pruned["q"].rubric.criteria] == ["sat", "good", "shaky"]
    assert [c.text for c in pruned["p"].rubric.criteria] == ["P1", "P2"]
    why = [json.loads(line) for line in (tmp_path / "out" / "pruned.jsonl").read_text().splitlines()]
    assert [(w["id"], w["criterion"], w["flags"]) for w in why] == [
        ("q", "dead", ["dead"]),
        ("q", "dup", ["duplicate"]),
        ("p", "herbal tea for a baby", ["suspect_sign"]),
    ]
    # a synthesis output: final.parquet keeps RubricHub's schema and its companion, so the messages come back
    synth = tmp_path / "synth"
    folder = OutputFolder(synth)
    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yes?"},
        {"role": "user", "content": "Q?"},
    ]
    rubric = [{"criterion": t, "points": p} for t, (p, _) in Q.items()]
    folder.add({"id": "q", "prompt": chat, "criteria": []}, final_line("q", chat, rubric, "ref"))
    folder.close()
    audit(tmp_path / "out2", graded_file, "--rubrics", synth / "final.parquet", "--prune", "dead")
    assert pq.read_schema(tmp_path / "out2" / "final.parquet").equals(final_schema())
    rows = load_rubric_rows(tmp_path / "out2" / "final.parquet")
    assert rows["q"].conversation == chat and [c.text for c in rows["q"].rubric.criteria] == [
        "sat",
        "good",
        "dup",
        "shaky",
    ]


def test_bad_input_is_one_line_naming_the_file_and_line(tmp_path, capsys):
    bad = write(tmp_path / "g.jsonl", [graded("q", Q, 0), {"id": "q", "response": "x", "verdicts": [{"met": True}]}])
    assert main(["audit", bad, "--output-dir", str(tmp_path / "out")]) == 2
    assert f"{bad}: line 2: not a graded record" in capsys.readouterr().err
    assert main(["audit", str(tmp_path), "--output-dir", str(tmp_path / "out")]) == 2
    assert "no graded answers in this folder" in capsys.readouterr().err
    assert main(["audit", bad, "--output-dir", str(tmp_path / "o"), "--prune", "boring"]) == 2
    assert "unknown flag(s) ['boring']" in capsys.readouterr().err
    assert main(["audit", bad, "--output-dir", str(tmp_path / "o"), "--prune", "dead"]) == 2
    assert "--prune needs the rubric dataset" in capsys.readouterr().err


def test_the_report_shows_the_audit(tmp_path):
    answers = [graded("q", Q, a) for a in range(4)]
    audit(tmp_path / "out", write(tmp_path / "g.jsonl", answers))
    assert main(["report", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "rubric audit (`rubricrl audit`)" in md and "### Rubric audit: flags" in md
    assert "| saturated | 1 | 20.0% |" in md.replace("---:", "---")


def test_in_training_saturation_counts_a_group_criterion_met_by_all_or_none_of_its_answers():
    answers = [
        ("g1", {"a": True, "b": False, "c": True}),
        ("g1", {"a": True, "b": False, "c": False}),
        ("g2", {"a": True, "b": True}),
        ("g2", {"a": False}),  # b decided once in g2: not counted
    ]
    # g1: a saturated, b dead, c separates; g2: a separates
    assert group_saturation(answers) == (1, 1, 4)
    assert group_saturation([]) == (0, 0, 0)
