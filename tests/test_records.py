"""The one record reader: every stage reads queries, rubric rows and responses the same way (precedence, ids,
locations), and a synthesis output brings back the chat messages that RubricHub's schema flattens."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grading.dataset import load_responses, load_rubric_rows
from grading.rubric import RubricError
from rubricrl.records import RecordFileError, generated_id, iter_rows
from synthesis.output import details_schema, final_schema
from tests.helpers import read_queries

pytestmark = pytest.mark.pure

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "I cough."},
    {"role": "assistant", "content": "Since when?"},
    {"role": "user", "content": "Three weeks."},
]
RUBRIC = [{"criterion": "Asks about fever.", "points": 5}]


def synthesis_output(folder, details: bool = True):
    """final.parquet in RubricHub's schema (a multi-turn question is its transcript) and final_details beside it."""
    folder.mkdir()
    final = [
        {"id": "chat", "question": "system: Be brief.\n\nuser: I cough.\n\n...", "rubrics": RUBRIC},
        {"id": "single", "question": "What is a fever?", "rubrics": RUBRIC},
    ]
    pq.write_table(pa.Table.from_pylist(final, schema=final_schema()), folder / "final.parquet")
    (folder / "final.jsonl").write_text("".join(json.dumps(r) + "\n" for r in final))
    if details:
        rows = [
            {"id": "chat", "prompt": CHAT, "criteria": [], "reference_answer": "Ask about fever and duration."},
            {
                "id": "single",
                "prompt": [{"role": "user", "content": "What is a fever?"}],
                "criteria": [],
                "reference_answer": "A body temperature above 38 C.",
            },
        ]
        pq.write_table(pa.Table.from_pylist(rows, schema=details_schema()), folder / "final_details.parquet")
        (folder / "details.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize("name", ["final.parquet", "final.jsonl"])
def test_a_synthesis_output_is_read_with_its_messages(tmp_path, name):
    path = synthesis_output(tmp_path / "out") / name
    rows = load_rubric_rows(path)
    assert rows["chat"].conversation == CHAT  # not one user message holding "user: ..." text
    assert rows["single"].conversation == [{"role": "user", "content": "What is a fever?"}]
    queries = {q.id: q for q in read_queries(path).queries}
    assert queries["chat"].messages == CHAT and queries["single"].question == "What is a fever?"
    # the reference stage's answer comes back too: reference-based judging works on synthesis output
    assert rows["single"].reference == "A body temperature above 38 C."


def test_details_written_before_reference_answer_was_the_key_still_give_the_reference(tmp_path):
    out = synthesis_output(tmp_path / "out")
    lines = [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()]
    (out / "details.jsonl").write_text(
        "".join(
            json.dumps({**{k: v for k, v in r.items() if k != "reference_answer"}, "reference": "old key"}) + "\n"
            for r in lines
        )
    )
    assert load_rubric_rows(out / "final.jsonl")["chat"].reference == "old key"


def test_a_run_cut_short_reads_final_jsonl_with_the_details_written_in_step(tmp_path):
    """After a kill, final.jsonl and details.jsonl hold queries the Parquet files (written when a run ends) lack."""
    out = synthesis_output(tmp_path / "out")
    late = {"id": "late", "prompt": CHAT[:2] + [{"role": "user", "content": "And now?"}], "criteria": []}
    with open(out / "details.jsonl", "a") as f:
        f.write(json.dumps(late) + "\n")
    with open(out / "final.jsonl", "a") as f:
        f.write(json.dumps({"id": "late", "question": "transcript", "rubrics": RUBRIC}) + "\n")
    assert load_rubric_rows(out / "final.jsonl")["late"].conversation == late["prompt"]
    with open(out / "final.jsonl", "a") as f:  # a row no details file knows: an error, never the transcript
        f.write(json.dumps({"id": "stray", "question": "transcript", "rubrics": RUBRIC}) + "\n")
    with pytest.raises(RecordFileError, match=r"details.jsonl: no messages for id 'stray' of line 4"):
        load_rubric_rows(out / "final.jsonl")


def test_without_details_the_question_is_the_conversation(tmp_path):
    rows = load_rubric_rows(synthesis_output(tmp_path / "out", details=False) / "final.parquet")
    assert rows["chat"].conversation == [{"role": "user", "content": "system: Be brief.\n\nuser: I cough.\n\n..."}]


def test_rubric_rows_and_queries_agree_on_precedence_and_ids(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [
        {"prompt": CHAT, "question": "flattened", "rubrics": RUBRIC},  # prompt first, everywhere
        {"id": 7, "question": "Seven?", "rubrics": RUBRIC},
    ]  # an integer id is the string "7", everywhere
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_grading = load_rubric_rows(path)
    by_queries = {q.id: q for q in read_queries(path).queries}
    assert set(by_grading) == set(by_queries) == {generated_id(CHAT), "7"}
    assert by_grading[generated_id(CHAT)].conversation == by_queries[generated_id(CHAT)].messages == CHAT
    responses = tmp_path / "responses.jsonl"
    responses.write_text('{"id": 7, "response": "Yes."}\n')
    assert load_responses(responses, set(by_grading)) == [("7", "Yes.")]


def test_errors_name_the_file_and_line_or_row(tmp_path):
    bad = tmp_path / "rubrics.jsonl"
    bad.write_text(json.dumps({"id": "a", "question": "q", "rubrics": RUBRIC}) + '\n{"id": "b"\n')
    with pytest.raises(RecordFileError, match=f"{bad}: line 2: invalid JSON"):
        load_rubric_rows(bad)
    parquet = tmp_path / "rubrics.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"id": "a", "prompt": [{"role": "assistant", "content": "hi"}], "rubrics": RUBRIC}]),
        parquet,
    )
    with pytest.raises(RubricError, match=f"{parquet}: row 1: prompt\\[0\\]: the last message is from 'assistant'"):
        load_rubric_rows(parquet)
    assert [where for where, _ in iter_rows(tmp_path / "rubrics.parquet")] == [f"{parquet}: row 1"]
