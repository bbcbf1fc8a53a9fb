"""Synthesis against a scripted endpoint (valid canned answers, exact request counts): outputs, schema, resume
after SIGKILL, failures. The embedded-model run is in test_synthesis_model.py."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from commands.main import main
from rubricrl.llm import ResponseCache
from synthesis.output import final_schema
from tests.fault_server import FaultServer, schema_reply

ROOT = Path(__file__).resolve().parents[1]


def queries(path: Path, n: int, start: int = 0) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i:04d}", "question": f"Question number {i}?"}) + "\n" for i in range(start, start + n)
        )
    )
    return path


def synth(server, tmp_path, input_path, *extra, env=None):
    return main(
        [
            "synth",
            "--input",
            str(input_path),
            "--output-dir",
            str(tmp_path / "out"),
            "--base-url",
            server.base_url,
            "--model",
            "fake",
            *extra,
        ]
    )


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_outputs_have_rubrichubs_exact_schema(tmp_path, home):
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 5)) == 0
        # 5 queries x (reference, responses A and B, 1 rubric, evolve). A and B come from the same model here, so
        # they are one call with n=2 (two identical requests would be one cache entry: B would repeat A); a
        # single candidate needs no aggregation call.
        assert server.count == 20
        assert sorted(r.get("n", 1) for r in server.requests).count(2) == 5
    out = tmp_path / "out"
    table = pq.read_table(out / "final.parquet")
    assert table.schema == final_schema() and table.num_rows == 5
    assert table.schema.field("rubrics").type == pa.list_(
        pa.struct([("criterion", pa.string()), ("points", pa.int32())])
    )
    from datasets import load_dataset

    loaded = load_dataset("parquet", data_files=str(out / "final.parquet"), split="train")
    by_id = {row["id"]: row for row in loaded}
    assert (
        by_id["q0000"]["rubrics"][0]["criterion"] == "canned text"
        and by_id["q0000"]["question"] == "Question number 0?"
    )
    final_jsonl = [json.loads(line) for line in (out / "final.jsonl").read_text().splitlines()]
    assert table.column("id").to_pylist() == [f"q{i:04d}" for i in range(5)]  # input order
    assert sorted(r["id"] for r in final_jsonl) == table.column("id").to_pylist()  # completion order, one row each
    details_table = pq.read_table(out / "final_details.parquet")
    assert details_table.column_names == ["id", "prompt", "reference_answer", "criteria", "fingerprint"]
    details = details_table.to_pylist()
    assert {c["stage"] for d in details for c in d["criteria"]} <= {"candidate", "evolve"}
    # the reference answer of each query, as the reference stage wrote it (grading's reference_likert reads it)
    lines = {d["id"]: d for d in map(json.loads, (out / "details.jsonl").read_text().splitlines())}
    assert all(d["reference_answer"] and d["reference_answer"] == lines[d["id"]]["reference_answer"] for d in details)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["rows_in_final"] == 5 and manifest["usage"]["reference"]["requests"] == 5
    assert set(manifest["prompts"]) >= {"synthesis/rubric.txt", "synthesis/evolve.txt"}


def test_rerun_makes_no_call_and_rows_are_not_duplicated(tmp_path, home):
    input_path = queries(tmp_path / "q.jsonl", 4)
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, input_path) == 0
        first = server.count
        assert synth(server, tmp_path, input_path) == 0
        assert server.count == first
    assert pq.read_table(tmp_path / "out" / "final.parquet").num_rows == 4


def test_failed_query_is_recorded_and_retried_on_the_next_run(tmp_path, home):
    input_path = queries(tmp_path / "q.jsonl", 3)
    with FaultServer(reply=schema_reply) as server:
        server.reply = lambda body: (
            "not json" if "Question number 1?" in json.dumps(body) and "response_format" in body else schema_reply(body)
        )
        assert synth(server, tmp_path, input_path) == 1
        errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
        assert [(e["id"], e["stage"]) for e in errors] == [("q0001", "candidates")]
        assert pq.read_table(tmp_path / "out" / "final.parquet").num_rows == 2
        server.reply = schema_reply
        assert synth(server, tmp_path, input_path) == 0
    assert sorted(pq.read_table(tmp_path / "out" / "final.parquet").column("id").to_pylist()) == [
        "q0000",
        "q0001",
        "q0002",
    ]


KILLED_RUN = """
import sys
from commands.main import main
sys.exit(main(["synth", "--input", sys.argv[1], "--output-dir", sys.argv[2], "--base-url", sys.argv[3],
               "--model", "fake", "--concurrency", "8"]))
"""


@pytest.mark.slow  # a subprocess SIGKILLed mid-run: out of make test-fast
def test_sigkill_then_rerun_finishes_without_repeating_a_finished_call(tmp_path, home):
    input_path = queries(tmp_path / "q.jsonl", 120)
    out = tmp_path / "out"
    with FaultServer(reply=schema_reply, latency=0.01) as server:
        env = {**os.environ, "RUBRICRL_HOME": str(home)}
        killed = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, str(input_path), str(out), server.base_url],
            cwd=ROOT,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while (
            time.monotonic() < deadline
            and len((out / "final.jsonl").read_text().splitlines() if (out / "final.jsonl").exists() else []) < 30
        ):
            time.sleep(0.05)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        server.wait_idle(timeout=30)  # every request the killed process had sent is read and answered
        done_before = len((out / "final.jsonl").read_text().splitlines())
        assert 30 <= done_before < 120 and not (out / "manifest.json").exists()

        cache = ResponseCache(home / "cache" / "responses")
        cached_before, sent_before = len(cache), server.count
        # The rerun reads the queries in another order: resume does not depend on row order.
        lines = input_path.read_text().splitlines()
        input_path.write_text("\n".join(reversed(lines)) + "\n")
        assert synth(server, tmp_path, input_path) == 0
        samples_asked = sum(r.get("n", 1) for r in server.requests[sent_before:])
        # every sample the rerun asked for became a new cache entry: none had been answered before
        assert samples_asked == len(cache) - cached_before and server.count > sent_before
        cache.close()
    ids = pq.read_table(out / "final.parquet").column("id").to_pylist()
    assert ids == [f"q{i:04d}" for i in reversed(range(120))]  # every id once, in the order of the rerun's input
    assert pq.read_table(out / "final_details.parquet").column("id").to_pylist() == ids
    assert json.loads((out / "manifest.json").read_text())["counts"]["already_done"] == done_before


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"id": "a", "question": "ok"}\n{"id": "b", "question": ""}\n', "line 2"),
        ('{"id": "a", "question": "ok"}\n{"id": "a", "question": "again"}\n', "duplicate id 'a'"),
        ('{"id": "a", "question": "ok"}\n{not json\n', "line 2"),
        ("", "empty|no rows|no valid"),
    ],
)
def test_invalid_input_fails_before_any_model_call(tmp_path, home, content, message, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, bad) == 2
        assert server.count == 0
    err = capsys.readouterr().err
    assert str(bad) in err and __import__("re").search(message, err)


def test_skip_bad_rows_keeps_every_valid_row(tmp_path, home):
    bad = tmp_path / "mixed.jsonl"
    bad.write_text('{"id": "a", "question": "First?"}\n{"id": "b", "question": 3}\n{"id": "c", "question": "Third?"}\n')
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, bad, "--skip-bad-rows") == 0
    rejected = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert len(rejected) == 1 and "line 2" in rejected[0]["location"]
    assert sorted(pq.read_table(tmp_path / "out" / "final.parquet").column("id").to_pylist()) == ["a", "c"]


def test_multiturn_query_keeps_its_messages(tmp_path, home):
    path = tmp_path / "mt.jsonl"
    messages = [
        {"role": "user", "content": "I cough."},
        {"role": "assistant", "content": "Since when?"},
        {"role": "user", "content": "Three weeks. Worried?"},
    ]
    path.write_text(json.dumps({"id": "mt", "prompt": messages}) + "\n")
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, path) == 0
        assert server.requests[0]["messages"][0]["content"].count("Three weeks. Worried?") == 1
    row = pq.read_table(tmp_path / "out" / "final.parquet").to_pylist()[0]
    assert "user: I cough." in row["question"] and "assistant: Since when?" in row["question"]
    assert pq.read_table(tmp_path / "out" / "final_details.parquet").to_pylist()[0]["prompt"] == messages


def test_a_multiturn_query_reaches_the_judge_with_each_turn_once_and_its_role(tmp_path, home):
    """synth writes RubricHub's schema (the question is a transcript); grade reads the messages back from the
    details file beside it, so the judge sees three turns, not one user message holding "user: ..." text."""
    path = tmp_path / "mt.jsonl"
    turns = [
        {"role": "user", "content": "I cough at night."},
        {"role": "assistant", "content": "Since when?"},
        {"role": "user", "content": "Three weeks now. Should I worry?"},
    ]
    path.write_text(json.dumps({"id": "mt", "prompt": turns}) + "\n")
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"id": "mt", "response": "See a doctor if it persists."}) + "\n")
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, path) == 0
        server.requests.clear()
        assert (
            main(
                [
                    "grade",
                    "--rubrics",
                    str(tmp_path / "out" / "final.parquet"),
                    "--responses",
                    str(responses),
                    "--output",
                    str(tmp_path / "graded.jsonl"),
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake",
                ]
            )
            == 0
        )
        judged = [r["messages"][-1]["content"] for r in server.requests]
    assert judged
    for prompt in judged:
        for turn in turns:
            assert prompt.count(turn["content"]) == 1 and f"{turn['role']}: {turn['content']}" in prompt
        assert "user: user:" not in prompt and "user: I cough" in prompt
    assert (tmp_path / "graded.config.yaml").exists()


def test_publish_dry_run_builds_a_folder_that_loads_back(tmp_path, home):
    from datasets import load_dataset

    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 3)) == 0
    folder = tmp_path / "hub"
    assert main(["publish", str(tmp_path / "out"), "--repo-id", "me/tiny-rubrics", "--dry-run", str(folder)]) == 0
    loaded = load_dataset(str(folder), split="train")
    assert loaded.num_rows == 3 and set(loaded.column_names) == {"id", "question", "rubrics"}
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "num_examples: 3" in card and "| queries | 3 |" in card
    assert "`fake`" in card and "synthesis/rubric.txt" in card


def test_publish_to_an_unreachable_hub_is_one_line(tmp_path, home, monkeypatch, capsys):
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 2)) == 0
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    assert main(["publish", str(tmp_path / "out"), "--repo-id", "me/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rubricrl: error: publish me/x: the Hub at http://127.0.0.1:9 did not take it (")
    assert "--dry-run OUT" in err and "hf_test" not in err


def test_publish_refuses_an_unfinished_folder(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    assert main(["publish", str(tmp_path / "half"), "--repo-id", "me/x", "--dry-run", str(tmp_path / "o")]) == 2
    assert "no final.parquet (or sft.parquet) and manifest.json" in capsys.readouterr().err


def config_file(tmp_path, synthesis: str) -> str:
    path = tmp_path / "synth.yaml"
    path.write_text("synthesis:\n" + synthesis)
    return str(path)


def test_two_rubric_writers_are_merged_by_the_aggregator(tmp_path, home):
    config = config_file(tmp_path, "  rubric_roles: [writer_1, writer_2]\n")
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 2), "--config", config) == 0
        prompts = [r["messages"][-1]["content"] for r in server.requests]
        assert sum("Merge them into one rubric" in p for p in prompts) == 2  # one aggregation per query
        # Same model and settings: the two writers share one call with n=2 per query (client.chat_each).
        assert sum(r.get("n") == 2 and "response_format" in r for r in server.requests) == 2
    details = [json.loads(line) for line in (tmp_path / "out" / "details.jsonl").read_text().splitlines()]
    assert all(len(d["candidates"]) == 2 and d["merged"][0]["stage"] == "aggregate" for d in details)


def test_aggregation_off_exports_the_union_deduplicated(tmp_path, home):
    config = config_file(tmp_path, "  rubric_roles: [writer_1, writer_2]\n  aggregate: false\n")
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 2), "--config", config) == 0
        assert not any("Merge them" in r["messages"][-1]["content"] for r in server.requests)
    rows = pq.read_table(tmp_path / "out" / "final.parquet").to_pylist()
    assert all(len(r["rubrics"]) == 1 for r in rows)  # identical canned criteria from both writers: one kept


def test_rar_is_a_single_pass_with_categories(tmp_path, home):
    config = config_file(tmp_path, "  method: rar\n  contrast: false\n  aggregate: false\n  evolve: false\n")
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 2), "--config", config) == 0
        assert server.count == 4  # reference + rubric per query
        rubric_request = next(r for r in server.requests if "response_format" in r)
        item = rubric_request["response_format"]["json_schema"]["schema"]["properties"]["criteria"]["items"]
        assert item["properties"]["category"]["enum"] == ["Essential", "Important", "Optional", "Pitfall"]
    details = pq.read_table(tmp_path / "out" / "final_details.parquet").to_pylist()
    assert all(c["category"] == "Essential" for d in details for c in d["criteria"])


def test_export_deduplicates_by_normalised_text_and_caps():
    from synthesis.criteria import export

    def made(text, weight, stage="candidate"):
        return {
            "title": "t",
            "description": text,
            "weight": weight,
            "stage": stage,
            "source": "m",
        }  # noqa: E731

    criteria = [
        made("Mentions the dose.", 3),
        made("  mentions THE dose ", 7, "evolve"),
        made("Cites a source.", 2),
        made("Recommends an unsafe dose.", -9),
    ]
    rows = export(criteria)
    assert [(r["criterion"], r["points"]) for r in rows] == [
        ("mentions THE dose", 7),
        ("Cites a source.", 2),
        ("Recommends an unsafe dose.", -9),
    ]
    assert rows[0]["stage"] == "evolve"  # the duplicate with the larger |points| is the one kept
    assert [r["points"] for r in export(criteria, cap=2)] == [-9, 7]  # highest |points| first


def test_criteria_without_content_or_copied_from_the_answer_template_are_dropped():
    from synthesis.criteria import usable

    made = lambda text, weight=3: {"title": "t", "description": text, "weight": weight}  # noqa: E731
    found = [
        made("Names the dose."),
        made("<the criterion, one sentence>"),
        made(" <criterion> "),
        made("..."),
        made("Skips the dose.", 0),
        made("Mentions <5 mg> as the upper bound."),
    ]
    assert [c["description"] for c in usable(found)] == ["Names the dose.", "Mentions <5 mg> as the upper bound."]


def test_a_rubric_answer_without_a_usable_criterion_is_sampled_again(tmp_path, home):
    """Seen with the embedded model: every criterion the template copied back. Failing at export would replay the
    same cached answer on every rerun; the client samples it again instead (bounded) and drops it from the cache."""
    echoed = json.dumps({"criteria": [{"title": "t", "description": "<the criterion, one sentence>", "weight": 5}]})
    answers = iter([echoed])

    def reply(body):
        if body.get("response_format", {}).get("json_schema", {}).get("name") == "rubric":
            return next(answers, None) or schema_reply(body)
        return schema_reply(body)

    with FaultServer(reply=reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 1)) == 0
        rubric_calls = [
            r for r in server.requests if r.get("response_format", {}).get("json_schema", {}).get("name") == "rubric"
        ]
        assert len(rubric_calls) == 2
    assert pq.read_table(tmp_path / "out" / "final.parquet").num_rows == 1


def test_an_unexpected_error_in_one_query_is_recorded_and_the_others_finish(tmp_path, home, monkeypatch):
    from synthesis import stages

    original = stages.evolve

    async def broken_for_one(client, config, messages, merged, responses):
        if "number 1?" in messages[-1]["content"]:
            raise KeyError("boom")
        return await original(client, config, messages, merged, responses)

    monkeypatch.setattr(stages, "evolve", broken_for_one)
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 3)) == 1
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert errors == [{"id": "q0001", "stage": "evolve", "error": "KeyError: 'boom'"}]
    assert sorted(pq.read_table(tmp_path / "out" / "final.parquet").column("id").to_pylist()) == ["q0000", "q0002"]


@pytest.mark.parametrize(
    "synthesis, message",
    [
        ("  attempts: 0\n", "attempts >= 1"),
        ("  cap: 0\n", "cap >= 1"),
        ("  evolve: true\n  contrast: false\n", "evolve needs"),
        ("  method: rar\n", "single pass"),
        ("  wieghts: signed\n", "unknown key"),
    ],
)
def test_bad_synthesis_config_is_refused_before_any_call(tmp_path, home, synthesis, message, capsys):
    config = config_file(tmp_path, synthesis)
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 1), "--config", config) == 2
        assert server.count == 0
    err = capsys.readouterr().err
    assert f"{config}: synthesis" in err and message in err


def test_flags_override_the_config_file_and_the_resolved_settings_are_written(tmp_path, home):
    config = config_file(tmp_path, "  max_criteria: 9\n  evolve: true\n")
    with FaultServer(reply=schema_reply) as server:
        assert (
            synth(
                server,
                tmp_path,
                queries(tmp_path / "q.jsonl", 1),
                "--config",
                config,
                "--max-criteria",
                "8",
                "--no-evolve",
                "--roles",
                "reference.temperature=0.3",
            )
            == 0
        )
        rubric_schema = next(
            r["response_format"]["json_schema"]["schema"] for r in server.requests if r.get("response_format")
        )
        assert rubric_schema["properties"]["criteria"]["maxItems"] == 8  # the flag, not the file's 9
        assert server.count == 3  # reference, A and B in one n=2 call, the rubric; no evolve call
        assert next(r for r in server.requests if "temperature" in r)["temperature"] == 0.3
    written = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert written["synthesis"]["max_criteria"] == 8 and written["synthesis"]["evolve"] is False
    assert written["input"] == str(tmp_path / "q.jsonl") and written["llm"]["roles"]["reference"]["temperature"] == 0.3
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["config"] == written
    # the written settings are a config: rerunning with them alone resumes the same run (nothing left to call)
    with FaultServer(reply=schema_reply) as server:
        written["llm"]["base_url"] = server.base_url
        (tmp_path / "again.yaml").write_text(yaml.safe_dump(written))
        assert main(["synth", "--config", str(tmp_path / "again.yaml")]) == 0
        assert server.count == 0


def test_output_folder_resumes_from_cut_off_lines_and_keeps_each_row_once(tmp_path):
    from synthesis.output import OutputFolder, json_line

    def record(i):
        return {
            "id": f"q{i}",
            "prompt": [{"role": "user", "content": f"Q{i}?"}],
            "reference": "long text",
            "criteria": [
                {
                    "criterion": f"C{i}",
                    "points": -i,
                    "title": "t",
                    "category": None,
                    "stage": "candidate",
                    "source": "m",
                }
            ],
        }

    def final_row(i):
        return {"id": f"q{i}", "question": f"Q{i}?", "rubrics": [{"criterion": f"C{i}", "points": -i}]}

    out = tmp_path / "out"
    out.mkdir()
    # An earlier run was killed: q0 and q1 finished; q2 had its details line written (twice, across two kills) but
    # not its final line; q3's details line was cut off mid-write.
    (out / "details.jsonl").write_bytes(
        b"".join(json_line(record(i)) for i in (0, 2, 1, 2)) + json_line(record(3))[:25]
    )
    (out / "final.jsonl").write_bytes(json_line(final_row(0)) + json_line(final_row(1)) + b'{"id": "q2", "quest')
    folder = OutputFolder(out, batch_rows=2)  # rows in batches of two: two row groups for three rows
    assert folder.done.keys() == {"q0", "q1"}
    assert (out / "final.jsonl").read_bytes().endswith(b"\n") and (out / "details.jsonl").read_bytes().endswith(b"\n")
    folder.add({**record(2), "fingerprint": "abc"}, final_row(2))
    assert folder.close(order=["q2", "q1", "q0"]) == 3  # the input's order, whatever the order they finished in
    final = pq.read_table(out / "final.parquet")
    assert final.schema == final_schema() and final.to_pylist() == [final_row(i) for i in (2, 1, 0)]
    assert pq.ParquetFile(out / "final.parquet").metadata.num_row_groups == 2
    details = pq.read_table(out / "final_details.parquet").to_pylist()
    # lines written before the key was `reference_answer` (and before fingerprints) still give the column
    assert details == [
        {
            "id": f"q{i}",
            "prompt": record(i)["prompt"],
            "reference_answer": "long text",
            "criteria": record(i)["criteria"],
            "fingerprint": "abc" if i == 2 else None,
        }
        for i in (2, 1, 0)
    ]
    assert folder.rows_by_fingerprint == {"abc": 1, "unknown": 2}
    assert not list(out.glob("*.tmp"))
    # Reopened: q2 is done now and has three details lines; its row is copied once.
    again = OutputFolder(out)
    assert again.done.keys() == {"q0", "q1", "q2"} and again.close(order=["q1"]) == 3
    # ids not in this run's input come after, in the order they finished
    assert pq.read_table(out / "final_details.parquet").column("id").to_pylist() == ["q1", "q0", "q2"]


def test_output_folder_of_a_run_that_did_not_finish_leaves_the_parquet_files_alone(tmp_path):
    from synthesis.output import OutputFolder

    out = tmp_path / "out"
    out.mkdir()
    for name in ("final.parquet", "final_details.parquet"):
        (out / name).write_bytes(b"from the last finished run")
    folder = OutputFolder(out, batch_rows=1)
    folder.add(
        {"id": "a", "prompt": [{"role": "user", "content": "Q?"}], "criteria": []},
        {"id": "a", "question": "Q?", "rubrics": []},
    )
    folder.close(finished=False)
    for name in ("final.parquet", "final_details.parquet"):
        assert (out / name).read_bytes() == b"from the last finished run"
    assert not list(out.glob("*.tmp"))


def test_parquet_batches_are_bounded_in_bytes(tmp_path):
    from rubricrl.runs.jsonl import ParquetTable, json_line

    table = ParquetTable(tmp_path / "t.parquet", final_schema, batch_rows=1000, batch_bytes=100)
    for i in range(3):  # each line is over 100 bytes: one batch, one row group, per line
        table.add(json_line({"id": f"q{i}", "question": "x" * 100, "rubrics": [{"criterion": "c", "points": 1}]}))
    table.finish()
    assert pq.ParquetFile(tmp_path / "t.parquet.tmp").metadata.num_row_groups == 3


def test_a_bad_line_before_the_last_is_an_error_naming_it_not_a_cut(tmp_path, home, capsys):
    out = tmp_path / "out"
    out.mkdir()
    row = lambda i: json.dumps({"id": f"q{i:04d}", "question": "Q?", "rubrics": []}) + "\n"  # noqa: E731
    (out / "final.jsonl").write_text(row(0) + "[1, 2]\n" + row(1))
    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 2)) == 2
        assert server.count == 0
    assert f"{out / 'final.jsonl'}: line 2: not a row" in capsys.readouterr().err
    assert (out / "final.jsonl").read_text() == row(0) + "[1, 2]\n" + row(1)  # nothing truncated


def test_an_interrupted_run_leaves_the_last_finished_outputs_alone(tmp_path, home, monkeypatch):
    from synthesis import stages

    with FaultServer(reply=schema_reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 2)) == 0
        before = {name: (tmp_path / "out" / name).read_bytes() for name in ("final.parquet", "final_details.parquet")}
        original = stages.evolve

        async def interrupted(client, config, messages, merged, responses):
            if "number 3?" in messages[-1]["content"]:
                raise asyncio.CancelledError  # what Ctrl-C does: asyncio.run cancels the run
            return await original(client, config, messages, merged, responses)

        monkeypatch.setattr(stages, "evolve", interrupted)
        with pytest.raises(asyncio.CancelledError):
            synth(server, tmp_path, queries(tmp_path / "q.jsonl", 4))
    for name, content in before.items():
        assert (tmp_path / "out" / name).read_bytes() == content
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_integer_weights_written_as_floats_become_int_points(tmp_path, home):
    def float_weights(body):
        reply = schema_reply(body)
        return reply.replace('"weight": 10', '"weight": 10.0') if "response_format" in body else reply

    with FaultServer(reply=float_weights) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 2)) == 0
        assert any('"weight": 10.0' in float_weights(r) for r in server.requests)
    rows = pq.read_table(tmp_path / "out" / "final.parquet").to_pylist()
    assert len(rows) == 2 and all(type(c["points"]) is int for r in rows for c in r["rubrics"])


def test_a_contrast_pool_evolves_against_the_two_best_responses_of_the_pool(tmp_path, home):
    """The paper's A and B by consensus: a pool of responses graded against the merged rubric (RuFT's
    sample-and-grade), the two best kept; the judge says a criterion is met when the response says 'good'."""
    pool = iter(["bad one", "good and long answer", "good", "meh"])

    def reply(body):
        name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if name == "verdict":
            response = body["messages"][-1]["content"].split("]]\n", 1)[1].rsplit("\n[[end of response", 1)[0]
            return json.dumps({"explanation": "s", "criteria_met": "good" in response})
        if name is None and body["messages"][-1]["content"].startswith(("I cough", "Question")):
            return next(pool)  # the pool answers the query itself
        return schema_reply(body)

    with FaultServer(reply=reply) as server:
        assert synth(server, tmp_path, queries(tmp_path / "q.jsonl", 1), "--contrast-pool", "4") == 0
        evolve = next(
            r
            for r in server.requests
            if (r.get("response_format") or {}).get("json_schema", {}).get("name") == "new_criteria"
        )
    details = json.loads((tmp_path / "out" / "details.jsonl").read_text())
    assert details["responses"] == ["good", "good and long answer"]  # best first; the tie goes to the shorter
    assert "good and long answer" in evolve["messages"][-1]["content"]
    with pytest.raises(ValueError, match="contrast_pool"):
        from synthesis.config import SynthesisConfig

        SynthesisConfig(contrast_pool=1)
