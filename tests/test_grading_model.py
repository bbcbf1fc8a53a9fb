"""Grading HealthBench examples with the embedded model as judge, end to end through the CLI."""

import json
from pathlib import Path

import pytest

from commands.main import main
from tests.helpers import HEALTHBENCH_SAMPLE as SAMPLE
from tests.helpers import count_posts

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def ideal_subset(tmp_path_factory):
    """The two examples with an ideal completion and the fewest criteria: rubrics and responses files."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    chosen = sorted((r for r in rows if r.get("ideal_completions_data")), key=lambda r: len(r["rubrics"]))[:2]
    folder = tmp_path_factory.mktemp("ideal")
    (folder / "rubrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chosen))
    (folder / "responses.jsonl").write_text(
        "".join(
            json.dumps({"id": r["prompt_id"], "response": r["ideal_completions_data"]["ideal_completion"]}) + "\n"
            for r in chosen
        )
    )
    return folder, chosen


def llm_flags(local_server):
    return [
        "--base-url",
        local_server.base_url,
        "--model",
        local_server.model,
        "--config",
        str(Path(__file__).resolve().parents[1] / "configs" / "tiny-cpu.yaml"),
    ]


def test_eval_of_ideal_completions_gives_a_verdict_for_every_criterion(
    local_server, ideal_subset, tmp_path, capsys, monkeypatch
):
    folder, chosen = ideal_subset
    code = main(
        [
            "eval",
            "--rubrics",
            str(folder / "rubrics.jsonl"),
            "--responses",
            str(folder / "responses.jsonl"),
            "--output-dir",
            str(tmp_path),
            *llm_flags(local_server),
        ]
    )
    assert code == 0
    graded = [json.loads(line) for line in (tmp_path / "graded.jsonl").read_text().splitlines()]
    assert [g["id"] for g in graded] == [r["prompt_id"] for r in chosen]
    for record, row in zip(graded, chosen):
        assert [v["criterion"] for v in record["verdicts"]] == [c["criterion"] for c in row["rubrics"]]
        assert all(isinstance(v["met"], bool) for v in record["verdicts"])
        assert record["judge"]["mode"] == "per_criterion" and record["judge"]["judge_model"] == local_server.model
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["metrics"]["overall_score:n_samples"] == 2 and report["judge_failure_rate"] == 0.0
    assert any(name.startswith("axis:") for name in report["metrics"])
    assert "overall_score" in capsys.readouterr().out

    # The report comes back from the graded file alone, identical, without one model call.
    posted = count_posts(monkeypatch)
    assert (
        main(
            [
                "eval",
                "--rubrics",
                str(folder / "rubrics.jsonl"),
                "--graded",
                str(tmp_path / "graded.jsonl"),
                "--output-dir",
                str(tmp_path / "again"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "again" / "report.json").read_text()) == report
    assert posted == []


def test_grade_writes_the_criterion_ledger_where_a_query_has_several_answers(
    local_server, ideal_subset, tmp_path, capsys
):
    """Three answers per query (the ideal one, a refusal, its first sentence): the ledger counts each criterion's
    three verdicts in one group, under the rubric dataset's ids and positions, and its shares split each rubric's
    signal whole."""
    from grading.ledger import read_table

    folder, chosen = ideal_subset
    chosen = chosen[:1]  # the example with the fewest criteria
    responses = tmp_path / "responses.jsonl"
    with responses.open("w") as out:
        for row in chosen:
            ideal = row["ideal_completions_data"]["ideal_completion"]
            for answer in (ideal, "I cannot help with that.", ideal.split(". ")[0] + "."):
                out.write(json.dumps({"id": row["prompt_id"], "response": answer}) + "\n")
    output = tmp_path / "graded.jsonl"
    flags = ["--rubrics", str(folder / "rubrics.jsonl"), "--responses", str(responses), "--output", str(output)]
    flags += ["--verdict-format", "verdict_only", "--max-failure-rate", "1"]
    assert main(["grade", *flags, *llm_flags(local_server)]) == 0
    table = read_table(tmp_path / "graded.ledger.parquet").to_pydict()
    expected = [(row["prompt_id"], k, c["criterion"]) for row in chosen for k, c in enumerate(row["rubrics"])]
    assert sorted(zip(table["query_id"], table["position"], table["criterion"])) == sorted(expected)
    assert all(graded == 3 for graded in table["graded"])
    assert all(row_groups <= 1 for row_groups in table["groups"]) and sum(table["groups"]) > 0
    for row in chosen:
        shares = [s for q, s in zip(table["query_id"], table["rubric_signal_share"]) if q == row["prompt_id"]]
        if any(s is not None for s in shares):  # a query whose three answers scored alike has no signal to split
            assert sum(shares) == pytest.approx(1.0)
    err = capsys.readouterr().err
    assert "criterion ledger:" in err and "graded.ledger.parquet" in err


def test_batched_mode_never_pads_or_truncates(local_server, ideal_subset, tmp_path):
    folder, chosen = ideal_subset
    output = tmp_path / "graded.jsonl"
    code = main(
        [
            "grade",
            "--rubrics",
            str(folder / "rubrics.jsonl"),
            "--responses",
            str(folder / "responses.jsonl"),
            "--output",
            str(output),
            "--mode",
            "batched",
            "--chunk-size",
            "4",
            *llm_flags(local_server),
            "--max-failure-rate",
            "1",
        ]
    )  # the 135M judge often misses ids: what matters here is what it leaves
    assert code == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert any(v["met"] is not None for r in records for v in r["verdicts"])  # the embedded judge manages batches
    for record, row in zip(records, chosen):
        assert len(record["verdicts"]) == len(row["rubrics"])
        decided = [v for v in record["verdicts"] if v["met"] is not None]
        # a chunk whose verdicts never matched its ids is undecided as a whole, never filled in
        assert all(v["explanation"].startswith("judge failed") for v in record["verdicts"] if v["met"] is None)
        if len(decided) == len(record["verdicts"]):
            assert record["score"] is not None


def test_the_cheaper_verdict_formats_grade_with_the_embedded_judge_and_reach_the_rurl_reward(
    local_server, ideal_subset, tmp_path
):
    import asyncio

    from grading.grader import Grader, GradingConfig
    from rubricrl.llm import LLMClient, Role
    from rurl.reward.rubric_reward import make_rubric_reward

    folder, chosen = ideal_subset
    for verdict_format in ("verdict_only", "probability"):
        out = tmp_path / verdict_format
        flags = ["--verdict-format", verdict_format, *llm_flags(local_server)]
        # the 135M judge's first token is mostly some other word (yes and no held under half the probability on 71%
        # of these verdicts, which the default probability_min_mass leaves undecided): the mechanics, at any mass
        flags += ["--probability-min-mass", "0"] if verdict_format == "probability" else []
        inputs = ["--rubrics", str(folder / "rubrics.jsonl"), "--responses", str(folder / "responses.jsonl")]
        assert main(["eval", *inputs, "--output-dir", str(out), *flags]) == 0
        records = [json.loads(line) for line in (out / "graded.jsonl").read_text().splitlines()]
        verdicts = [v for r in records for v in r["verdicts"]]
        assert len(verdicts) == sum(len(row["rubrics"]) for row in chosen) and records[0]["judge"]["verdict_format"]
        assert all(isinstance(v["met"], bool) for v in verdicts)  # the 135M judge decides every one in both formats
        if verdict_format == "verdict_only":
            assert all(v["explanation"] == "" and "probability" not in v for v in verdicts)
        else:
            assert all(0.0 <= v["probability"] <= 1.0 and v["met"] == (v["probability"] >= 0.5) for v in verdicts)
            assert all(0.0 < v["mass"] <= 1.0 + 1e-9 for v in verdicts)
            assert len({round(v["probability"], 6) for v in verdicts}) > 2  # real log-probabilities, not 0/1

    grading = GradingConfig(verdict_format="probability", integrity_check=False, probability_min_mass=0.0)
    role = Role(base_url=local_server.base_url, model=local_server.model, temperature=0.0)
    row = chosen[0]
    answers = [row["ideal_completions_data"]["ideal_completion"], "I cannot help with that."]

    async def rurl_rewards():
        async with LLMClient({"judge": role}) as client:
            reward = make_rubric_reward(Grader(client, grading))
            completions = [[{"role": "assistant", "content": answer}] for answer in answers]
            return await reward(prompts=[row["prompt"]] * 2, completions=completions, rubrics=[row["rubrics"]] * 2)

    rewards = asyncio.run(rurl_rewards())
    assert all(isinstance(r, float) and 0.0 <= r <= 1.0 for r in rewards) and rewards[0] != rewards[1]


def test_bad_rubric_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "rubrics.jsonl"
    bad.write_text('{"id": "a", "question": "q", "rubrics": [{"criterion": "x", "points": 5}]}\n{"id": "b"\n')
    responses = tmp_path / "responses.jsonl"
    responses.write_text('{"id": "a", "response": "r"}\n')
    assert main(["grade", "--rubrics", str(bad), "--responses", str(responses), "--output", str(tmp_path / "o")]) == 2
    assert f"{bad}: line 2: invalid JSON" in capsys.readouterr().err
