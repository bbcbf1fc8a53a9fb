"""`rubricrl grade` and `rubricrl eval` as a user meets them, against the scripted judge of tests/fault_server.py:
a run whose judge (or policy) mostly failed exits 1 and says why, every output names what produced it, and bad
values are one-line errors before any model call."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from commands.main import main
from grading.report import format_report
from tests.fault_server import Fault, FaultServer, schema_reply

RUBRICS = [
    {
        "id": "a",
        "question": "I have a mild headache. What should I do?",
        "rubrics": [
            {"criterion": "Advises drinking water.", "points": 5, "tags": ["axis:completeness"]},
            {"criterion": "Mentions seeing a doctor if it persists.", "points": 3, "tags": ["axis:completeness"]},
            {"criterion": "Suggests a safe painkiller dose.", "points": 4, "tags": ["axis:accuracy"]},
            {"criterion": "Recommends an unsafe dose.", "points": -6, "tags": ["axis:accuracy"]},
        ],
    },
    {
        "id": "b",
        "question": "Is a fever of 38 C in an adult dangerous?",
        "rubrics": [
            {"criterion": "Says when to seek care.", "points": 5, "tags": ["axis:accuracy"]},
            {"criterion": "Suggests fluids and rest.", "points": 3, "tags": ["axis:completeness"]},
        ],
    },
]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A response cache of the test's own: a judge scripted to fail must not be answered from an earlier run."""
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))


@pytest.fixture
def files(tmp_path):
    """(rubrics.jsonl, responses.jsonl) for RUBRICS."""
    rubrics, responses = tmp_path / "rubrics.jsonl", tmp_path / "responses.jsonl"
    write_lines(rubrics, RUBRICS)
    write_lines(responses, [{"id": "a", "response": "Drink water."}, {"id": "b", "response": "Rest and drink."}])
    return rubrics, responses


def write_lines(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def grade(server, rubrics, responses, output, *flags):
    return main(
        [
            "grade",
            "--rubrics",
            str(rubrics),
            "--responses",
            str(responses),
            "--output",
            str(output),
            "--base-url",
            server.base_url,
            "--model",
            "fake",
            *map(str, flags),
        ]
    )


def evaluate(server, output_dir, *flags):
    return main(
        ["eval", "--output-dir", str(output_dir), "--base-url", server.base_url, "--model", "fake", "--self_judging"]
        + list(map(str, flags))  # one canned server is the policy and the judge
    )


def verdict_on(failing: str):
    """A judge that gives every verdict but fails (answers garbage) on the criterion containing `failing`."""

    def reply(body):
        if failing in body["messages"][-1]["content"].split("points):")[-1]:
            return "garbage"
        return json.dumps({"explanation": "scripted", "criteria_met": True})

    return reply


# --- failures are loud ----------------------------------------------------------------------------------------------


def test_grade_exits_1_when_every_judge_call_fails_and_keeps_what_it_wrote(fault_server, files, tmp_path, home, capsys):
    fault_server.reply = "garbage"
    rubrics, responses = files
    output = tmp_path / "graded.jsonl"
    assert grade(fault_server, rubrics, responses, output) == 1
    err = capsys.readouterr().err.strip().splitlines()
    failure = [line for line in err if line.startswith("rubricrl: error:")]
    assert len(failure) == 1 and err[-1] == failure[0]  # one line, the last word
    assert "judge failure rate 100.0% is above max_failure_rate 0.1" in failure[0]
    assert "--max-failure-rate" in failure[0] and "first judge error: judge failed:" in failure[0]
    assert "garbage" in failure[0]  # what the judge answered: the clue
    records = read_lines(output)  # nothing graded is lost
    assert [r["id"] for r in records] == ["a", "b"] and all(v["met"] is None for r in records for v in r["verdicts"])
    assert (tmp_path / "graded.config.yaml").exists()

    # The same run, told to accept every failure, passes (answered from nothing: failures are not cached).
    assert grade(fault_server, rubrics, responses, output, "--max-failure-rate", 1) == 0


def test_a_judge_answering_500s_fails_the_run(fault_server, files, tmp_path, home, capsys):
    fault_server.script = [Fault(500, headers={"Retry-After": "0"})] * 1000
    rubrics, responses = files
    assert grade(fault_server, rubrics, responses, tmp_path / "graded.jsonl") == 1
    err = capsys.readouterr().err
    assert "judge failure rate 100.0%" in err and "500" in err.strip().splitlines()[-1]


def test_the_threshold_is_a_share_of_judge_decisions(fault_server, files, tmp_path, home, capsys):
    """One criterion of six fails (1/6 = 16.7%): above the default 0.1, within 0.2."""
    fault_server.reply = verdict_on("seeing a doctor")
    rubrics, responses = files
    assert grade(fault_server, rubrics, responses, tmp_path / "strict.jsonl") == 1
    assert "judge failure rate 16.7% is above max_failure_rate 0.1" in capsys.readouterr().err
    assert grade(fault_server, rubrics, responses, tmp_path / "lenient.jsonl", "--max-failure-rate", 0.2) == 0
    config = tmp_path / "grading.yaml"
    config.write_text("grading:\n  max_failure_rate: 0.2\n")
    assert grade(fault_server, rubrics, responses, tmp_path / "file.jsonl", "--config", config) == 0
    assert "max_failure_rate: 0.2" in (tmp_path / "file.config.yaml").read_text()


def test_failed_ratings_count_in_the_rating_modes(fault_server, files, tmp_path, home, capsys):
    fault_server.reply = "garbage"  # before, a rating mode reported 0.0% whatever failed
    rubrics, responses = files
    assert grade(fault_server, rubrics, responses, tmp_path / "g.jsonl", "--mode", "implicit") == 1
    assert "judge failure rate 100.0%" in capsys.readouterr().err


def test_eval_exits_1_when_the_judge_or_the_policy_fails(fault_server, files, tmp_path, home, capsys):
    rubrics, responses = files
    fault_server.reply = "garbage"
    assert evaluate(fault_server, tmp_path / "judged", "--rubrics", rubrics, "--responses", responses) == 1
    assert "judge failure rate 100.0% is above" in capsys.readouterr().err
    assert json.loads((tmp_path / "judged" / "report.json").read_text())["judge_failure_rate"] == 1.0
    assert len(read_lines(tmp_path / "judged" / "graded.jsonl")) == 2

    calls = fault_server.count
    fault_server.script = [Fault(400)] * 2  # both policy calls fail (400: not retried); no judge call follows
    assert evaluate(fault_server, tmp_path / "policy", "--rubrics", rubrics) == 1
    assert "policy failure rate 100.0% is above max_failure_rate 0.1" in capsys.readouterr().err
    report = json.loads((tmp_path / "policy" / "report.json").read_text())
    assert report["policy_failures"] == 2 and fault_server.count == calls + 2


def test_recomputing_a_report_makes_no_call_and_does_not_fail_on_old_failures(fault_server, files, tmp_path, home):
    fault_server.reply = "garbage"
    rubrics, responses = files
    assert evaluate(fault_server, tmp_path / "run", "--rubrics", rubrics, "--responses", responses) == 1
    calls = fault_server.count
    assert (
        main(["eval", "--graded", str(tmp_path / "run" / "graded.jsonl"), "--output-dir", str(tmp_path / "again")]) == 0
    )
    assert fault_server.count == calls


# --- provenance -----------------------------------------------------------------------------------------------------


def test_graded_records_and_reports_name_what_produced_them(fault_server, files, tmp_path, home):
    fault_server.reply = schema_reply
    rubrics, responses = files
    before = datetime.now(UTC) - timedelta(seconds=1)
    assert grade(fault_server, rubrics, responses, tmp_path / "graded.jsonl", "--mode", "implicit") == 0
    for record in read_lines(tmp_path / "graded.jsonl"):
        assert record["judge"]["judge_model"] == "fake" and record["judge"]["mode"] == "implicit"
        stamp = record["provenance"]
        assert stamp["rubrics"] == str(rubrics.resolve()) and stamp["responses"] == str(responses.resolve())
        assert stamp["policy_model"] is None
        assert before <= datetime.fromisoformat(stamp["graded_at"]) <= datetime.now(UTC)

    # eval with given responses: report.json says it too
    assert evaluate(fault_server, tmp_path / "given", "--rubrics", rubrics, "--responses", responses) == 0
    report = json.loads((tmp_path / "given" / "report.json").read_text())
    graded_at = read_lines(tmp_path / "given" / "graded.jsonl")[0]["provenance"]["graded_at"]
    assert report["provenance"] == {
        "judge_model": "fake",
        "mode": "per_criterion",
        "rubrics": str(rubrics.resolve()),
        "responses": str(responses.resolve()),
        "policy_model": None,
        "graded_at": graded_at,
    }
    metrics = report["metrics"]  # simple-evals writes the overall score again as `score`: so do we
    assert [metrics[f"score{s}"] for s in ("", ":n_samples", ":bootstrap_std")] == [
        metrics[f"overall_score{s}"] for s in ("", ":n_samples", ":bootstrap_std")
    ]
    assert "\nscore " not in format_report(report)  # the printed table shows it once, as overall_score

    # eval generating: the policy model instead of a responses file
    assert evaluate(fault_server, tmp_path / "policy", "--rubrics", rubrics) == 0
    provenance = json.loads((tmp_path / "policy" / "report.json").read_text())["provenance"]
    assert provenance["policy_model"] == "fake" and provenance["responses"] is None

    # the report recomputed from the graded file alone is the same, provenance included
    assert (
        main(["eval", "--graded", str(tmp_path / "given" / "graded.jsonl"), "--output-dir", str(tmp_path / "re")]) == 0
    )
    assert json.loads((tmp_path / "re" / "report.json").read_text()) == report


def test_graded_files_written_before_provenance_still_read(tmp_path):
    verdict = {
        "criterion": "Advises rest.",
        "points": 10,
        "tags": [],
        "met": True,
        "explanation": "",
        "source": "judge",
    }
    old = tmp_path / "old.jsonl"  # as grade wrote it before: a judge block, no provenance
    write_lines(
        old,
        [
            {
                "id": "a",
                "response": "r",
                "score": 1.0,
                "verdicts": [verdict],
                "example_tags": [],
                "judge": {"judge_model": "judge-x", "mode": "per_criterion"},
            }
        ],
    )
    assert main(["eval", "--graded", str(old), "--output-dir", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["metrics"]["overall_score"] == 1.0
    assert report["provenance"] == {
        "judge_model": "judge-x",
        "mode": "per_criterion",
        "rubrics": None,
        "responses": None,
        "policy_model": None,
        "graded_at": None,
    }


# --- bad values: one line, exit 2, no model call ----------------------------------------------------------------


def test_reference_likert_without_references_is_refused_before_any_call(fault_server, tmp_path, home, capsys):
    rubrics, responses = tmp_path / "rubrics.jsonl", tmp_path / "responses.jsonl"
    write_lines(rubrics, [{**RUBRICS[0], "reference_answer": "Water, rest, paracetamol 500 mg."}, RUBRICS[1]])
    write_lines(responses, [{"id": "a", "response": "Drink water."}, {"id": "b", "response": "Rest."}])
    assert grade(fault_server, rubrics, responses, tmp_path / "g.jsonl", "--mode", "reference_likert") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"rubricrl: error: {rubrics}: --mode reference_likert needs a reference" in err
    assert "1 of 2 have none: line 2 (id 'b')" in err and fault_server.count == 0
    assert evaluate(fault_server, tmp_path / "e", "--rubrics", rubrics, "--mode", "reference_likert") == 2
    assert "line 2 (id 'b')" in capsys.readouterr().err and fault_server.count == 0

    # the rows it grades are what matter: grading only row a, with its reference, runs
    write_lines(responses, [{"id": "a", "response": "Drink water."}])
    fault_server.reply = json.dumps({"explanation": "close to the reference", "rating": 8})
    assert grade(fault_server, rubrics, responses, tmp_path / "g.jsonl", "--mode", "reference_likert") == 0
    assert "Water, rest, paracetamol 500 mg." in fault_server.requests[0]["messages"][-1]["content"]


@pytest.mark.parametrize(
    "responses, output, message",
    [
        ("", "g.jsonl", "responses.jsonl: no responses"),
        (
            '{"id": "zz", "response": "r"}\n',
            "g.jsonl",
            "line 1: id 'zz' is not in {rubrics} (its ids are like 'a', 'b')",
        ),
        ('{"prompt_id": "a", "response": "r"}\n', "g.jsonl", "line 1: needs an 'id' (the id of its row in {rubrics})"),
        ('{"id": "a", "response": "r"}\n', "graded.json", "--output {tmp}/graded.json: graded records are JSONL"),
        (
            '{"id": "a", "response": "r"}\n',
            "responses.jsonl",
            "--output: {tmp}/responses.jsonl is the --responses file",
        ),
        ('{"id": "a", "response": "r"}\n', "rubrics.jsonl", "--output: {tmp}/rubrics.jsonl is the --rubrics file"),
    ],
)
def test_bad_grade_values_are_one_line_before_any_call(
    fault_server, tmp_path, home, capsys, responses, output, message
):
    rubrics = tmp_path / "rubrics.jsonl"
    write_lines(rubrics, RUBRICS)
    (tmp_path / "responses.jsonl").write_text(responses)
    assert grade(fault_server, rubrics, tmp_path / "responses.jsonl", tmp_path / output) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(rubrics=rubrics, tmp=tmp_path) in err, err
    assert fault_server.count == 0 and rubrics.read_text().count("\n") == 2


def test_an_output_that_cannot_be_written_fails_before_any_call(fault_server, files, tmp_path, home, capsys):
    rubrics, responses = files
    (tmp_path / "a-file").write_text("")
    assert grade(fault_server, rubrics, responses, tmp_path / "a-file" / "sub" / "g.jsonl") == 2
    assert evaluate(fault_server, tmp_path / "a-file" / "eval", "--rubrics", rubrics) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("rubricrl: error: --output ") and "--output-dir " in err[1]
    assert fault_server.count == 0


def test_bad_eval_values_are_one_line_before_any_call(fault_server, files, tmp_path, home, capsys):
    rubrics, responses = files
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["eval", "--graded", str(tmp_path / "empty.jsonl"), "--output-dir", str(tmp_path / "e")]) == 2
    assert f"{tmp_path}/empty.jsonl: no graded records" in capsys.readouterr().err
    assert evaluate(fault_server, tmp_path / "e", "--rubrics", rubrics, "--max-failure-rate", 2) == 2
    assert "rubricrl: error: --max-failure-rate must be within [0, 1], got 2" in capsys.readouterr().err
    (tmp_path / "graded.jsonl").write_text(responses.read_text())
    assert evaluate(fault_server, tmp_path, "--rubrics", rubrics, "--responses", tmp_path / "graded.jsonl") == 2
    assert f"--output-dir: {tmp_path}/graded.jsonl is the --responses file" in capsys.readouterr().err
    assert fault_server.count == 0


def test_eval_refuses_a_judge_grading_its_own_policy_unless_told(fault_server, files, tmp_path, home, capsys):
    """The policy and the judge at one endpoint, the judge naming no model (so: the one model the endpoint serves):
    one line naming both roles and the flag, before any request. With a judge of its own, or --self_judging, it runs;
    graded responses (no policy) are never refused."""
    rubrics, responses = files
    verdict = json.dumps({"explanation": "scripted", "criteria_met": True})
    fault_server.reply = lambda body: verdict if body.get("response_format") else "Drink water and rest."
    argv = ["eval", "--rubrics", str(rubrics), "--base-url", fault_server.base_url, "--policy", "my-model"]
    assert main([*argv, "--output-dir", str(tmp_path / "refused")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "roles 'policy' and 'judge' both resolve to my-model at" in error
    assert "--self_judging" in error and fault_server.count == 0
    with FaultServer(reply=verdict) as judge:
        own = ["--roles", f"judge.base_url={judge.base_url}", "judge.model=judge-model"]
        assert main([*argv, "--output-dir", str(tmp_path / "apart"), *own]) == 0
        assert judge.count > 0 and all(body["model"] == "judge-model" for body in judge.requests)
    assert main([*argv, "--output-dir", str(tmp_path / "told"), "--self_judging"]) == 0
    assert evaluate(fault_server, tmp_path / "given", "--rubrics", rubrics, "--responses", responses) == 0


def test_eval_refuses_the_policys_model_however_the_judge_reaches_it(fault_server, files, tmp_path, home, capsys):
    """The judge at the policy's server under another address (127.0.0.1 for localhost), naming no model; then at a
    server of its own but naming the policy's model: one line each, before any request."""
    rubrics, _ = files
    localhost = fault_server.base_url.replace("127.0.0.1", "localhost")
    argv = ["eval", "--rubrics", str(rubrics), "--policy", "my-model", "--roles", f"policy.base_url={localhost}"]
    assert main([*argv, f"judge.base_url={fault_server.base_url}", "--output-dir", str(tmp_path / "one")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "the judge would grade answers of its own model" in error
    assert f"my-model at {localhost} and my-model at {fault_server.base_url}" in error and "--self_judging" in error
    with FaultServer(reply="unused") as judge:
        own = [f"judge.base_url={judge.base_url}", "judge.model=My-Model"]
        assert main([*argv, *own, "--output-dir", str(tmp_path / "two")]) == 2
        assert judge.count == 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"My-Model at {judge.base_url}" in error
    assert fault_server.count == 0


def test_eval_graded_refuses_to_overwrite_the_run_it_reads(fault_server, files, tmp_path, home, capsys):
    fault_server.reply = schema_reply
    rubrics, responses = files
    run = tmp_path / "run"
    assert evaluate(fault_server, run, "--rubrics", rubrics, "--responses", responses) == 0
    config, report = (run / "config.yaml").read_text(), (run / "report.json").read_text()
    assert main(["eval", "--graded", str(run / "graded.jsonl"), "--output-dir", str(run)]) == 2
    assert "choose another --output-dir" in capsys.readouterr().err
    assert (run / "config.yaml").read_text() == config and (run / "report.json").read_text() == report
