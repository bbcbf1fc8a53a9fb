"""The one record reader: every stage reads queries, rubric rows and responses the same way (precedence, ids,
locations), and a synthesis output brings back the chat messages that RubricHub's schema flattens."""

import json
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grading.dataset import load_responses, load_rubric_rows
from grading.rubric import RubricError
from rubricrl.records import RecordFileError, generated_id, iter_rows
from synthesis.output import OutputFolder, final_line, final_schema
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
    """A synthesis output folder written by synthesis's own writer: final.parquet in RubricHub's schema (a
    multi-turn question is its transcript), final.jsonl, and the details files; `details=False` keeps final.parquet
    alone, as a copy of it would be."""
    output = OutputFolder(folder)
    for query_id, prompt, reference in (
        ("chat", CHAT, "Ask about fever and duration."),
        ("single", [{"role": "user", "content": "What is a fever?"}], "A body temperature above 38 C."),
    ):
        record = {"id": query_id, "prompt": prompt, "reference_answer": reference, "criteria": []}
        output.add(record, final_line(query_id, prompt, RUBRIC, reference))
    output.close()
    if not details:
        (folder / "final_details.parquet").unlink()
    return folder


@pytest.mark.parametrize("name", ["final.parquet", "final.jsonl"])
def test_a_synthesis_output_is_read_with_its_messages(tmp_path, name):
    path = synthesis_output(tmp_path / "out") / name
    assert pq.read_schema(path.with_name("final.parquet")).equals(final_schema())  # RubricHub's fields, exactly
    rows = load_rubric_rows(path)
    assert rows["chat"].conversation == CHAT  # not one user message holding "user: ..." text
    assert rows["single"].conversation == [{"role": "user", "content": "What is a fever?"}]
    queries = {q.id: q for q in read_queries(path).queries}
    assert queries["chat"].messages == CHAT and queries["single"].question == "What is a fever?"
    # the reference stage's answer comes back too: reference-based judging works on synthesis output
    assert rows["single"].reference == "A body temperature above 38 C."


def test_a_folder_from_before_the_companion_is_whole_again_once_rewritten(tmp_path):
    """Older runs wrote final.jsonl with RubricHub's three keys only and the reference as `reference`; closing the
    folder again (what a rerun of synth does when every query is done) writes a final.parquet every reader reads
    whole."""
    out = synthesis_output(tmp_path / "out")
    finals = [json.loads(line) for line in (out / "final.jsonl").read_text().splitlines()]
    three_keys = [{k: r[k] for k in ("id", "question", "rubrics")} for r in finals]
    (out / "final.jsonl").write_text("".join(json.dumps(r) + "\n" for r in three_keys))
    details = [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()]
    old = [{**{k: v for k, v in r.items() if k != "reference_answer"}, "reference": "old key"} for r in details]
    (out / "details.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    OutputFolder(out).close()
    rows = load_rubric_rows(out / "final.parquet")
    assert rows["chat"].conversation == CHAT and rows["chat"].reference == "old key"


def test_a_run_cut_short_reads_final_jsonl_whole(tmp_path):
    """After a kill, final.jsonl holds queries the Parquet files (written when a run ends) lack; its lines are whole."""
    out = synthesis_output(tmp_path / "out")
    late = CHAT[:2] + [{"role": "user", "content": "And now?"}]
    OutputFolder(out).add({"id": "late", "prompt": late, "criteria": []}, final_line("late", late, RUBRIC, None))
    assert load_rubric_rows(out / "final.jsonl")["late"].conversation == late
    assert "late" not in load_rubric_rows(out / "final.parquet")


def test_a_row_its_companion_lacks_is_an_error_never_the_transcript(tmp_path):
    out = synthesis_output(tmp_path / "out")
    details = pq.read_table(out / "final_details.parquet")
    pq.write_table(details.slice(1), out / "final_details.parquet")  # the "chat" row gone: a folder mixed by hand
    with pytest.raises(RecordFileError, match=r"final_details.parquet: no row for id 'chat' of row 1 beside it"):
        load_rubric_rows(out / "final.parquet")


def test_without_details_the_question_is_the_conversation(tmp_path):
    rows = load_rubric_rows(synthesis_output(tmp_path / "out", details=False) / "final.parquet")
    assert rows["chat"].conversation[0]["content"].startswith("system: Be brief.")
    assert len(rows["chat"].conversation) == 1


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


PROFESSIONAL = {
    "id": "pro-1",
    "conversation": {"messages": CHAT},
    "rubric_items": [
        {"criterion_text": "Asks about fever.", "points": 5},
        {"criterion_text": "Prescribes antibiotics without an exam.", "points": -4},
    ],
    "use_case": "consult",
    "type": "red_teaming",
    "difficulty": "difficult",
    "specialty": "pulmonology",
    "physician_response": "How high has the fever been?",
}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_healthbench_professional_reads_as_the_healthbench_rows_it_stands_for(tmp_path, suffix):
    """Professional's layout as it ships (conversation.messages, rubric_items[].criterion_text) gives the records
    its HealthBench-layout equivalent gives: same id, conversation, criteria, ideal answer, and its use case, type,
    difficulty and specialty as example tags, which the report scores apart."""
    regular = {
        "prompt_id": "pro-1",
        "prompt": CHAT,
        "rubrics": [
            {"criterion": "Asks about fever.", "points": 5, "tags": []},
            {"criterion": "Prescribes antibiotics without an exam.", "points": -4, "tags": []},
        ],
        "example_tags": ["use_case:consult", "type:red_teaming", "difficulty:difficult", "specialty:pulmonology"],
        "ideal_completions_data": {"ideal_completion": "How high has the fever been?"},
    }
    paths = {}
    for name, row in {"professional": PROFESSIONAL, "regular": regular}.items():
        paths[name] = tmp_path / f"{name}{suffix}"
        if suffix == ".jsonl":
            paths[name].write_text(json.dumps(row) + "\n")
        else:
            pq.write_table(pa.Table.from_pylist([row]), paths[name])
    professional, healthbench = (load_rubric_rows(paths[name])["pro-1"] for name in ("professional", "regular"))
    assert professional == replace(healthbench, where=professional.where)
    assert professional.rubric.criteria[1].points == -4 and "use_case:consult" in professional.rubric.example_tags


@pytest.mark.parametrize(
    "change, said",
    [
        ({"conversation": CHAT}, "line 1: HealthBench Professional's 'conversation' must hold 'messages'"),
        ({"rubric_items": [{"criterion": "Asks.", "points": 5}]}, "line 1: rubric item 0: 'criterion_text' must be"),
        ({"rubric_items": [{"criterion_text": "Asks.", "points": 0}]}, "line 1: criterion 0: 'points' is 0"),
    ],
)
def test_a_bad_professional_row_names_the_file_line_and_problem(tmp_path, change, said):
    path = tmp_path / "professional.jsonl"
    path.write_text(json.dumps({**PROFESSIONAL, **change}) + "\n")
    with pytest.raises(RubricError, match=f"{path}: {said}"):
        load_rubric_rows(path)
