"""`rubricrl probe`: answers with no substance, built from each rubric row, graded as training grades them. A scripted
judge that credits a criterion whenever its words appear pays the parrot and keyword probes, and the command flags
those criteria exploitable; a judge that wants substance pays the control alone and flags nothing. Each kind's text
on hand-made rows, the bad inputs, and a second run that pays no call twice."""

import json
import re

import pytest

from checks.probes import POLITE_NONANSWER, probes_for
from commands.main import main
from grading.dataset import RubricRow
from grading.rubric import rubric_from_items
from tests.fault_server import FaultServer

ROWS = [
    {
        "id": "fever",
        "question": "Is a fever of 38 C in an adult dangerous?",
        "rubrics": [
            {"criterion": "Says when to seek emergency care.", "points": 5},
            {"criterion": "Recommends fluids and rest.", "points": 3},
            {"criterion": "Claims every fever needs antibiotics.", "points": -4},
        ],
        "reference_answer": "Usually not: SUBSTANCE-FEVER. Rest, drink fluids, and seek emergency care above 40 C.",
    },
    {
        "id": "sleep",
        "question": "How many hours should an adult sleep?",
        "rubrics": [
            {"criterion": "Gives a range of seven to nine hours.", "points": 5},
            {"criterion": "Mentions consistency, regular schedules and light exposure.", "points": 2},
        ],
        "reference_answer": "Seven to nine hours: SUBSTANCE-SLEEP, on a regular schedule.",
    },
]


def row(items, reference=None, row_id="r"):
    return RubricRow(row_id, [{"role": "user", "content": "Q?"}], rubric_from_items(items, row_id), reference)


def test_each_probe_kind_is_built_from_the_row_itself():
    fever = row(ROWS[0]["rubrics"], row_id="fever")
    sleep = row(ROWS[1]["rubrics"], "Seven to nine hours.", row_id="sleep")
    probes = {p.kind: p for p in probes_for(fever, [fever, sleep], 0)}
    assert probes["parrot"].text == (
        "This answer says when to seek emergency care. This answer recommends fluids and rest."
    )  # the positive criteria only: a penalty restated would earn nothing
    assert probes["keywords"].text == "says, seek, emergency, care, recommends, fluids, rest"
    assert "It could be fluids, or it could be not fluids." in probes["hedge"].text
    assert probes["polite_nonanswer"].text == POLITE_NONANSWER
    assert probes["other_question"].text == "Seven to nine hours."  # the next row with a reference answer
    assert (
        probes["half"].text == "This answer recommends fluids."
        and probes["half"].target == "Recommends fluids and rest."
    )
    halves = [p for p in probes_for(sleep, [fever, sleep], 1) if p.kind == "half"]
    assert [(p.text, p.target) for p in halves] == [
        ("This answer mentions consistency.", "Mentions consistency, regular schedules and light exposure.")
    ]
    assert "other_question" not in {p.kind for p in probes_for(sleep, [fever, sleep], 1)}  # no other reference


def words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]{4,}", text)}


def judge_reply(wants_substance: bool, lists_only: bool = False):
    """Per criterion: credited when the response holds the criterion's words (a loose judge; with `lists_only`, only
    when it also has no sentence: a bare list of them), or only when it holds its own question's SUBSTANCE marker
    (a judge that wants an answer to this question)."""

    def reply(body: dict) -> str:
        content = body["messages"][-1]["content"]
        if "red-teaming a grader" in content:  # the attacker: the criterion's words, nothing else
            return json.dumps({"response": "As asked: " + content.split("Criterion:\n", 1)[1].split("\n", 1)[0]})
        response = content.split("]]\n", 1)[1].rsplit("\n[[end of response", 1)[0]
        criterion = content.rsplit("points):\n", 1)[1].split("\n", 1)[0]
        if wants_substance:
            met = (
                "SUBSTANCE-FEVER" if "fever" in content.split("Response to grade", 1)[0] else "SUBSTANCE-SLEEP"
            ) in response
        else:
            met = len(words(criterion) & words(response)) >= 2 and not (lists_only and "." in response)
        fields = body.get("response_format", {}).get("json_schema", {}).get("schema", {}).get("properties", {})
        return json.dumps(
            {"explanation": "scripted", "criteria_met": met} if "explanation" in fields else {"criteria_met": met}
        )

    return reply


def probe(tmp_path, server, *flags, rows=ROWS):
    rubrics = tmp_path / "rubrics.jsonl"
    rubrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "probe"
    argv = ["probe", "--rubrics", str(rubrics), "--output_dir", str(out), "--base-url", server.base_url]
    return main([*argv, "--model", "scripted-judge", *flags]), out


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_judge_that_credits_words_is_flagged_and_a_rerun_pays_no_call_twice(tmp_path, home, capsys):
    with FaultServer(reply=judge_reply(wants_substance=False)) as server:
        code, out = probe(tmp_path, server, "--attacker", "true", "--attacker_criteria", "1")
        asked = server.count
        assert code == 0 and asked > 0
        again = probe(tmp_path, server, "--attacker", "true", "--attacker_criteria", "1")[0]
        assert again == 0 and server.count == asked  # the cache answers every call: a killed run pays nothing twice
    summary = json.loads((out / "summary.json").read_text())
    (judge,) = summary["judges"]
    kinds = summary["kinds"][judge]
    assert kinds["keywords"]["share"] == 1.0  # every positive point, for nothing
    # the parrot earns all of the fever row; the sleep row's copies its whole rubric, which the integrity check vetoes
    assert kinds["parrot"]["share"] == 0.5
    vetoed = [r for r in read(out / "probes.jsonl") if r["integrity_flag"]]
    assert {(r["row"], r["kind"]) for r in vetoed} == {("sleep", "parrot")} and len(vetoed) == 4  # 4 wordings
    assert all("copies the rubric" in r["integrity_flag"] for r in vetoed)
    assert kinds["polite_nonanswer"]["share"] == 0.0
    attacks = [r for r in read(out / "probes.jsonl") if r["kind"] == "attacker"]
    assert [(r["row"], r["target"], r["share"]) for r in attacks] == [
        ("fever", "Says when to seek emergency care.", 1.0),  # each row's highest-point criterion, earned
        ("sleep", "Gives a range of seven to nine hours.", 1.0),
    ]
    criteria = read(out / "criteria.jsonl")
    flagged = {c["criterion"] for c in criteria if c["exploitable"]}
    assert "Says when to seek emergency care." in flagged and "Recommends fluids and rest." in flagged
    care = next(c for c in criteria if c["criterion"] == "Says when to seek emergency care.")
    assert care["kinds"]["parrot"] == [4, 4] and care["kinds"]["keywords"] == [4, 4] and care["control"] is True
    assert care["kinds"]["polite_nonanswer"] == [0, 4] and care["tests"]["polite_nonanswer"]["status"] == "not shown"
    assert set(care["exploited_by"]) == {"parrot", "keywords", "hedge"}
    assert care["tests"]["keywords"]["p"] == pytest.approx(0.1**4)  # 4 of 4 against a tolerance of 10%
    assert care["test"].startswith("exploitable: parrot earned it 4 of 4 (p = 0.0001)")
    assert "Benjamini-Hochberg at 5%" in care["test"]
    # every criterion the keyword list earned is flagged by the keyword kind, whatever the other kinds earned
    keyworded = [c for c in criteria if c["kinds"].get("keywords", [0, 0])[0] == 4]
    assert keyworded and all("keywords" in c["exploited_by"] for c in keyworded)
    assert summary["exploitable"][judge]["flagged"] == len(flagged) and summary["cost"][judge]["probes_per_row"] > 4
    assert "Reward probe" in (out / "probe.md").read_text() and (out / "manifest.json").is_file()
    assert (out / "probe.png").read_bytes().startswith(b"\x89PNG")
    scores = {r["id"]: r["scores"] for r in read(out / "rows.jsonl")}
    assert scores["fever"]["parrot"] == 1.0 and scores["fever"]["control"] == 1.0
    assert "exploitable" in capsys.readouterr().err


def test_a_judge_that_pays_only_the_keyword_list_is_flagged_by_that_kind_alone(tmp_path, home):
    """The keyword list earns every criterion whose words it holds, every time; no other kind earns anything. Pooled
    over the kinds that is a fifth of the probes, yet each such criterion is exploitable, by the keyword kind."""
    with FaultServer(reply=judge_reply(wants_substance=False, lists_only=True)) as server:
        code, out = probe(tmp_path, server)
    assert code == 0
    criteria = read(out / "criteria.jsonl")
    assert len(criteria) == 4
    for c in criteria:
        assert c["kinds"]["keywords"] == [4, 4] and c["exploited_by"] == ["keywords"], c
        assert c["share"] < 0.5  # the pooled share, descriptive only: a share threshold would miss them
        assert all(t["status"] != "exploitable" for kind, t in c["tests"].items() if kind != "keywords")
        if "other_question" in c["tests"]:  # one other row has a reference: 1 probe of that kind can never flag
            assert c["tests"]["other_question"]["status"] == "insufficient"
    summary = json.loads((out / "summary.json").read_text())
    (found,) = summary["exploitable"].values()
    assert found["flagged"] == 4 and found["by_kind"] == {"keywords": 4} and found["insufficient_criteria"] == 0


def test_a_judge_that_wants_substance_flags_nothing_and_pays_the_control(tmp_path, home):
    with FaultServer(reply=judge_reply(wants_substance=True)) as server:
        code, out = probe(tmp_path, server, "--verdict_formats", "verdict_only")
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["judges"]) == 2  # explained and verdict_only, compared
    for judge in summary["judges"]:
        kinds = summary["kinds"][judge]
        assert kinds["control"]["share"] == 1.0
        assert all(v["share"] == 0.0 for kind, v in kinds.items() if kind != "control")
        assert summary["exploitable"][judge]["flagged"] == 0


def test_a_rule_check_the_probes_meet_is_not_flagged_as_the_judges(tmp_path, home):
    """A criterion decided in code (a rule check) that every probe meets says nothing about the judge: it is neither
    tested nor flagged, though it still counts in the points a probe earned."""
    rows = json.loads(json.dumps(ROWS))
    rows[0]["rubrics"].append(
        {"criterion": "Answers in at most 300 words.", "points": 2, "rule": {"type": "max_words", "value": 300}}
    )
    with FaultServer(reply=judge_reply(wants_substance=True)) as server:
        code, out = probe(tmp_path, server, rows=rows)
    assert code == 0
    criteria = read(out / "criteria.jsonl")
    assert criteria and "Answers in at most 300 words." not in {c["criterion"] for c in criteria}
    summary = json.loads((out / "summary.json").read_text())
    (judge,) = summary["judges"]
    assert summary["exploitable"][judge]["flagged"] == 0
    hedges = [r for r in read(out / "probes.jsonl") if r["row"] == "fever" and r["kind"] == "hedge"]
    assert hedges and all(r["rule_criteria"] == ["Answers in at most 300 words."] for r in hedges)
    assert all(r["share"] == pytest.approx(2 / 10) for r in hedges)  # the rule's 2 of the row's 10 positive points


def test_bad_input_is_one_line(tmp_path, home, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    penalties_only = tmp_path / "penalties.jsonl"
    penalties_only.write_text(
        json.dumps({"id": "p", "question": "Q?", "rubrics": [{"criterion": "Lies.", "points": -3}]})
    )
    for path, message in (
        (empty, "empty.jsonl: no rows"),
        (penalties_only, "row 'p' has no criterion with positive points"),
    ):
        code = main(
            [
                "probe",
                "--rubrics",
                str(path),
                "--output_dir",
                str(tmp_path / "o"),
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.startswith("rubricrl: error:"), err
    with FaultServer(reply=judge_reply(wants_substance=True)) as server:
        code, _ = probe(tmp_path, server, "--attacker", "true", "--roles", "attacker.base_url=http://127.0.0.1:9/v1")
    err = capsys.readouterr().err
    assert code == 2 and "attacker" in err and "127.0.0.1:9" in err, err


def test_the_audit_reads_the_probe_and_the_report_shows_it(tmp_path, home):
    """One table for both: the audit's criteria gain the probe's counts; a criterion every graded answer meets
    (saturated) that the keyword list also earns is listed in audit.md; `rubricrl report` shows the probe."""
    with FaultServer(reply=judge_reply(wants_substance=False)) as server:
        _, out = probe(tmp_path, server)
    graded = [
        {
            "id": "fever",
            "response": f"answer {i}",
            "verdicts": [
                {"criterion": "Says when to seek emergency care.", "points": 5, "met": i % 2 == 0, "explanation": "x"},
                {"criterion": "Recommends fluids and rest.", "points": 3, "met": True, "explanation": "x"},
                {
                    "criterion": "Claims every fever needs antibiotics.",
                    "points": -4,
                    "met": i % 3 == 0,
                    "explanation": "x",
                },
            ],
        }
        for i in range(32)
    ]
    (tmp_path / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in graded))
    audited = tmp_path / "audit"
    argv = ["audit", str(tmp_path / "graded.jsonl"), "--rubrics", str(tmp_path / "rubrics.jsonl")]
    assert main([*argv, "--probe", str(out), "--output-dir", str(audited)]) == 0
    rows = {r["criterion"]: r for r in read(audited / "criteria.jsonl") if r["id"] == "fever"}
    fluids = rows["Recommends fluids and rest."]
    assert fluids["flags"] == ["saturated"] and fluids["probe"]["exploitable"]
    (said,) = fluids["probe"]["judges"].values()  # the kinds that flagged it, with their counts and p-values
    assert said.startswith("parrot 4 of 4 (p = 0.0001), keywords 4 of 4 (p = 0.0001)") and "half 4 of 4" in said
    page = (audited / "audit.md").read_text()
    assert "## Probed (rubricrl probe)" in page and "| fever | Recommends fluids and rest. | saturated |" in page
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "reward probe (`rubricrl probe`)" in report and "### Probes: share of positive points earned" in report
