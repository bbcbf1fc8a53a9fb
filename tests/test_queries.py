import hashlib
import json
import re

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rubricrl.queries import Query, QueryFileError, generated_id, iter_queries, write_rejected
from tests.helpers import HEALTHBENCH_SAMPLE, read_queries

pytestmark = pytest.mark.pure

CHAT = [
    {"role": "system", "content": "You are a careful physician."},
    {"role": "user", "content": "I have a headache."},
    {"role": "assistant", "content": "How long has it lasted?"},
    {"role": "user", "content": "Three days."},
]


def write_jsonl(path, rows) -> str:
    """Rows as JSON lines; a str row is written verbatim (for malformed lines)."""
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


def write_parquet(path, rows) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def located(path, place: str) -> str:
    """The start of an error message: the file and the line or row."""
    return re.escape(f"{path}: {place}: ")


# --- formats and columns


def test_jsonl_question_file(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "What is 2+2?"}, {"id": "b", "question": "Why?"}])
    result = read_queries(path)
    assert result.queries == [
        Query(id="a", messages=[{"role": "user", "content": "What is 2+2?"}], question="What is 2+2?", extra={}),
        Query(id="b", messages=[{"role": "user", "content": "Why?"}], question="Why?", extra={}),
    ]
    assert result.rejected == []


def test_parquet_file(tmp_path):
    path = write_parquet(tmp_path / "q.parquet", [{"id": "a", "question": "One?"}, {"id": "b", "question": "Two?"}])
    assert [(q.id, q.question) for q in read_queries(path).queries] == [("a", "One?"), ("b", "Two?")]


def test_parquet_prompt_messages_and_prompt_id(tmp_path):
    rows = [{"prompt_id": "hb-1", "prompt": CHAT, "example_tags": ["theme:x"]}]
    (query,) = read_queries(write_parquet(tmp_path / "hb.parquet", rows)).queries
    assert query.id == "hb-1"
    assert query.messages == CHAT
    assert query.question == "Three days."
    assert query.extra == {"example_tags": ["theme:x"]}


def test_saved_dataset_folder(tmp_path):
    datasets.Dataset.from_list([{"id": "a", "question": "One?"}, {"id": "b", "question": "Two?"}]).save_to_disk(
        tmp_path / "ds"
    )
    assert [q.id for q in read_queries(tmp_path / "ds").queries] == ["a", "b"]


def test_saved_dataset_dict_takes_train_or_the_only_split(tmp_path):
    train = datasets.Dataset.from_list([{"question": "Train?"}])
    test = datasets.Dataset.from_list([{"question": "Test?"}])
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(tmp_path / "both")
    datasets.DatasetDict({"validation": test}).save_to_disk(tmp_path / "one")
    assert [q.question for q in read_queries(tmp_path / "both").queries] == ["Train?"]
    assert [q.question for q in read_queries(tmp_path / "one").queries] == ["Test?"]


def test_saved_dataset_dict_without_train_lists_splits(tmp_path):
    q = datasets.Dataset.from_list([{"question": "Q?"}])
    datasets.DatasetDict({"dev": q, "test": q}).save_to_disk(tmp_path / "ds")
    with pytest.raises(QueryFileError, match=r"ds: .*splits \['dev', 'test'\]"):
        read_queries(tmp_path / "ds")


def test_saved_dataset_bad_row_names_row_and_split(tmp_path):
    bad = datasets.Dataset.from_list([{"question": "Fine?"}, {"question": "  "}])
    bad.save_to_disk(tmp_path / "ds")
    datasets.DatasetDict({"train": bad}).save_to_disk(tmp_path / "dd")
    with pytest.raises(QueryFileError, match=located(tmp_path / "ds", "row 2") + "'question' is empty"):
        read_queries(tmp_path / "ds")
    with pytest.raises(QueryFileError, match=located(f"{tmp_path / 'dd'} (split 'train')", "row 2")):
        read_queries(tmp_path / "dd")


def test_default_column_is_prompt_when_present(tmp_path):
    """One precedence for every reader (rubricrl/records/reader.py): where both exist, `question` is the flattened
    form."""
    rows = [{"question": "system: ...\n\nuser: I have a headache. ...", "prompt": CHAT}]
    (query,) = read_queries(write_jsonl(tmp_path / "q.jsonl", rows)).queries
    assert query.messages == CHAT and query.question == "Three days."
    assert query.extra == {"question": rows[0]["question"]}


def test_default_column_is_question_without_prompt(tmp_path):
    rows = [{"question": "The question?"}]
    (query,) = read_queries(write_parquet(tmp_path / "q.parquet", rows)).queries
    assert query.messages == [{"role": "user", "content": "The question?"}]


def test_prompt_as_text_or_messages(tmp_path):
    rows = [{"prompt": "Plain text prompt"}, {"prompt": CHAT}]
    queries = read_queries(write_parquet(tmp_path / "q.parquet", rows[:1])).queries
    queries += read_queries(write_jsonl(tmp_path / "q.jsonl", rows)).queries
    assert [q.question for q in queries] == ["Plain text prompt", "Plain text prompt", "Three days."]
    assert queries[0].messages == [{"role": "user", "content": "Plain text prompt"}]


def test_custom_query_and_id_columns(tmp_path):
    rows = [{"key": "k1", "text": "Custom?", "question": "not this", "id": "not this either"}]
    (query,) = read_queries(write_jsonl(tmp_path / "q.jsonl", rows), query_column="text", id_column="key").queries
    assert (query.id, query.question) == ("k1", "Custom?")
    assert query.extra == {"question": "not this", "id": "not this either"}


def test_extra_columns_pass_through(tmp_path):
    rows = [{"id": "a", "question": "Q?", "reference_answer": "A.", "meta": {"source": "x", "n": [1, 2]}}]
    for path in (write_jsonl(tmp_path / "q.jsonl", rows), write_parquet(tmp_path / "q.parquet", rows)):
        (query,) = read_queries(path).queries
        assert query.extra == {"reference_answer": "A.", "meta": {"source": "x", "n": [1, 2]}}


def test_blank_lines_and_bom_are_skipped(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"question": "First?"}\n\n   \r\n{"question": "Second?"}\r\n')
    assert [q.question for q in read_queries(path).queries] == ["First?", "Second?"]


def test_real_healthbench_sample_reads(tmp_path):
    result = read_queries(HEALTHBENCH_SAMPLE)
    assert len(result.queries) == 30
    assert any(len(q.messages) > 1 for q in result.queries)
    assert all(q.id == q.extra.get("prompt_id", q.id) and "rubrics" in q.extra for q in result.queries)


# --- ids


def test_int_ids_become_strings(tmp_path):
    (query,) = read_queries(write_jsonl(tmp_path / "q.jsonl", [{"id": 7, "question": "Q?"}])).queries
    assert query.id == "7"


def test_generated_ids_are_stable_under_reordering(tmp_path):
    rows = [{"prompt": "Alpha?"}, {"prompt": "Beta?"}, {"prompt": CHAT}]
    forward = {q.question: q.id for q in read_queries(write_jsonl(tmp_path / "a.jsonl", rows)).queries}
    backward = {q.question: q.id for q in read_queries(write_jsonl(tmp_path / "b.jsonl", rows[::-1])).queries}
    assert forward == backward
    assert len(set(forward.values())) == 3
    assert all(re.fullmatch(r"q-[0-9a-f]{16}", i) for i in forward.values())


def test_generated_id_is_sha256_of_canonical_messages():
    # Canonical JSON: sorted keys, no spaces, UTF-8 kept as is.
    expected = hashlib.sha256('[{"content":"Héllo?","role":"user"}]'.encode()).hexdigest()[:16]
    assert generated_id([{"role": "user", "content": "Héllo?"}]) == "q-" + expected


def test_question_and_single_message_prompt_share_a_generated_id(tmp_path):
    (a,) = read_queries(write_jsonl(tmp_path / "a.jsonl", [{"question": "Same?"}])).queries
    (b,) = read_queries(write_jsonl(tmp_path / "b.jsonl", [{"prompt": [{"role": "user", "content": "Same?"}]}])).queries
    assert a.id == b.id


def test_duplicate_ids_name_both_rows(tmp_path):
    path = write_jsonl(
        tmp_path / "q.jsonl",
        [{"id": "a", "question": "1?"}, {"id": "b", "question": "2?"}, {"id": "a", "question": "3?"}],
    )
    with pytest.raises(QueryFileError, match=located(path, "line 3") + "duplicate id 'a': also at line 1"):
        read_queries(path)


def test_duplicate_int_and_string_ids_collide(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"id": "7", "question": "1?"}, {"id": 7, "question": "2?"}])
    with pytest.raises(QueryFileError, match=located(path, "line 2") + "duplicate id '7': also at line 1"):
        read_queries(path)


def test_identical_queries_without_ids_are_duplicates(tmp_path):
    path = write_parquet(tmp_path / "q.parquet", [{"question": "Same?"}, {"question": "Other?"}, {"question": "Same?"}])
    with pytest.raises(QueryFileError, match=located(path, "row 3") + r"duplicate query: the same content as row 1"):
        read_queries(path)


# --- invalid rows and files

BAD_JSONL_LINES = [
    ('{"question": "ok?"', r"invalid JSON: Expecting ',' delimiter at column 19"),
    ('["question"]', r"expected a JSON object, got list"),
    ('{"id": "x"}', r"no 'prompt' or 'question' key"),
    ('{"question": ""}', r"'question' is empty"),
    ('{"question": "  \\n\\t "}', r"'question' is empty \(whitespace only\)"),
    ('{"question": 42}', r"'question' must be text, got int"),
    ('{"question": null}', r"'question' is null"),
    ('{"question": [{"role": "user", "content": "hi"}]}', r"'question' must be text, got list"),
    ('{"prompt": []}', r"'prompt' is an empty message list"),
    ('{"prompt": {"role": "user"}}', r"'prompt' must be text or a list of \{role, content\} messages, got dict"),
    ('{"prompt": ["hi"]}', r"prompt\[0\]: a message must be an object with 'role' and 'content', got str"),
    ('{"prompt": [{"role": "bot", "content": "hi"}]}', r"prompt\[0\]: 'role' must be one of system, user, assistant"),
    ('{"prompt": [{"content": "hi"}]}', r"prompt\[0\]: 'role' must be one of .*got None"),
    ('{"prompt": [{"role": "user", "content": 3}]}', r"prompt\[0\]: 'content' must be text, got int"),
    ('{"prompt": [{"role": "user", "content": "x", "name": "n"}]}', r"prompt\[0\]: unexpected key\(s\) \['name'\]"),
    (
        '{"prompt": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}',
        r"prompt\[1\]: the last message is from 'assistant'; a query ends with 'user'",
    ),
    (
        '{"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": " "}]}',
        r"prompt\[1\]: the last user message is empty",
    ),
    ('{"id": "", "question": "q?"}', r"'id' is empty"),
    ('{"id": 1.5, "question": "q?"}', r"'id' must be a non-empty string or an integer, got float"),
    ('{"id": true, "question": "q?"}', r"'id' must be a non-empty string or an integer, got bool"),
]


@pytest.mark.parametrize("line, problem", BAD_JSONL_LINES)
def test_bad_jsonl_line_names_file_line_and_problem(tmp_path, line, problem):
    # The first line decides the default query column: the same key as the bad line's.
    key = "prompt" if '"prompt"' in line else "question"
    path = write_jsonl(tmp_path / "q.jsonl", [{"id": "first", key: "Fine?"}, "", line])
    with pytest.raises(QueryFileError, match=located(path, "line 3") + problem):
        read_queries(path)


@pytest.mark.parametrize(
    "value, problem",
    [
        ("   ", r"'question' is empty"),
        (None, r"'question' is null"),
    ],
)
def test_bad_parquet_row_names_file_row_and_problem(tmp_path, value, problem):
    path = write_parquet(
        tmp_path / "q.parquet", [{"question": "Fine?"}, {"question": "Fine too?"}, {"question": value}]
    )
    with pytest.raises(QueryFileError, match=located(path, "row 3") + problem):
        read_queries(path)


def test_bad_parquet_message_list(tmp_path):
    rows = [{"prompt": CHAT}, {"prompt": CHAT[:3]}]
    path = write_parquet(tmp_path / "q.parquet", rows)
    with pytest.raises(
        QueryFileError, match=located(path, "row 2") + r"prompt\[2\]: the last message is from 'assistant'"
    ):
        read_queries(path)


def test_first_jsonl_object_without_a_query_key(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "text": "Q?"}])
    with pytest.raises(QueryFileError, match=located(path, "line 1") + "no 'prompt' or 'question' key; name the query"):
        read_queries(path)


def test_each_row_takes_prompt_else_question(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"prompt": "P?"}, {"question": "Q?"}, {"prompt": None, "question": "R?"}])
    assert [q.question for q in read_queries(path).queries] == ["P?", "Q?", "R?"]
    path = write_jsonl(tmp_path / "q.jsonl", [{"prompt": "P?"}, {"text": "Q?"}])
    with pytest.raises(QueryFileError, match=located(path, "line 2") + "no 'prompt' or 'question' key"):
        read_queries(path)


def test_a_named_query_column_is_required_in_every_row(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"text": "P?"}, {"question": "Q?"}])
    with pytest.raises(QueryFileError, match=located(path, "line 2") + "missing query column 'text'"):
        read_queries(path, query_column="text")


def test_a_named_id_column_must_exist(tmp_path):
    """--id-column names a column: absent, it is an error (it was silently ignored and ids were generated)."""
    path = write_jsonl(tmp_path / "ok.jsonl", [{"key": "a", "prompt": "P?"}, {"key": None, "prompt": "Q?"}])
    assert [q.id for q in read_queries(path, id_column="key").queries] == [
        "a",
        generated_id([{"role": "user", "content": "Q?"}]),
    ]
    path = write_jsonl(tmp_path / "q.jsonl", [{"key": "a", "prompt": "P?"}, {"prompt": "Q?"}])
    with pytest.raises(QueryFileError, match=located(path, "line 2") + r"missing id column 'key' \(--id-column\)"):
        read_queries(path, id_column="key")
    parquet = write_parquet(tmp_path / "q.parquet", [{"id": "a", "prompt": "Q?"}])
    with pytest.raises(
        QueryFileError, match=re.escape(f"{parquet}: no id column 'nope' (--id-column); columns: id, prompt")
    ):
        read_queries(parquet, id_column="nope")


@pytest.mark.parametrize("column, expected", [(None, "'prompt' or 'question'"), ("text", "'text' (--query-column)")])
def test_parquet_without_the_query_column(tmp_path, column, expected):
    path = write_parquet(tmp_path / "q.parquet", [{"id": "a", "body": "Q?"}])
    with pytest.raises(QueryFileError, match=re.escape(f"{path}: no query column {expected}; columns: id, body")):
        read_queries(path, query_column=column)


def test_invalid_utf8_names_line_3(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'{"question": "one"}\n{"question": "two"}\n{"question": "caf\xe9"}\n{"question": "four"}\n')
    with pytest.raises(QueryFileError, match=located(path, "line 3") + "invalid UTF-8 at byte 17"):
        read_queries(path)


@pytest.mark.parametrize(
    "name, content, problem",
    [
        ("empty.jsonl", b"", "no rows"),
        ("blank.jsonl", b"\n  \n\n", "no rows"),
        ("broken.parquet", b"not parquet at all", "cannot read as Parquet"),
        ("queries.csv", b"question\nQ?\n", "unknown file type '.csv'"),
        ("notes", b"question\n", "unknown file type '(no extension)'"),
    ],
)
def test_bad_files_are_fatal_even_when_skipping(tmp_path, name, content, problem):
    path = tmp_path / name
    path.write_bytes(content)
    for skip in (False, True):
        with pytest.raises(QueryFileError, match=re.escape(f"{path}: {problem}")):
            read_queries(path, skip_bad_rows=skip)


def test_empty_parquet_and_missing_and_non_dataset_paths(tmp_path):
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string())}), empty)
    (tmp_path / "folder").mkdir()
    with pytest.raises(QueryFileError, match=re.escape(f"{empty}: no rows")):
        read_queries(empty)
    with pytest.raises(QueryFileError, match=re.escape(f"{tmp_path / 'nope.jsonl'}: no such file")):
        read_queries(tmp_path / "nope.jsonl")
    with pytest.raises(QueryFileError, match=re.escape(f"{tmp_path / 'folder'}: not a saved Hugging Face dataset")):
        read_queries(tmp_path / "folder")


# --- skipping bad rows


def test_skip_bad_rows_keeps_every_valid_row_and_writes_rejected(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(
        b'{"id": "a", "question": "A?"}\n'
        b'{"id": "b", "question": "  "}\n'
        b"not json\n"
        b'{"id": "c", "question": "C?"}\n'
        b'{"id": "a", "question": "again"}\n'
        b'{"question": "caf\xe9"}\n'
        b'{"question": "D?"}\n'
    )
    result = read_queries(path, skip_bad_rows=True)
    assert [q.question for q in result.queries] == ["A?", "C?", "D?"]
    out = write_rejected(result.rejected, tmp_path / "rejected.jsonl")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["location"], r["reason"].split(":")[0]) for r in lines] == [
        (f"{path}: line 2", "'question' is empty (whitespace only)"),
        (f"{path}: line 3", "invalid JSON"),
        (f"{path}: line 5", "duplicate id 'a'"),
        (f"{path}: line 6", "invalid UTF-8 at byte 17"),
    ]
    assert lines[0]["row"] == {"id": "b", "question": "  "}
    assert lines[1]["row"] == "not json"
    assert lines[3]["row"] == '{"question": "caf\\xe9"}'


def test_streaming_rejects_go_to_a_callback(tmp_path):
    path = write_parquet(tmp_path / "q.parquet", [{"question": "A?"}, {"question": ""}, {"question": "B?"}])
    with open(tmp_path / "rejected.jsonl", "w") as f:
        queries = list(iter_queries(path, on_reject=lambda r: f.write(r.to_json() + "\n")))
    assert [q.question for q in queries] == ["A?", "B?"]
    (line,) = (tmp_path / "rejected.jsonl").read_text().splitlines()
    assert json.loads(line) == {"location": f"{path}: row 2", "reason": "'question' is empty", "row": {"question": ""}}


def test_no_valid_rows_is_fatal_when_skipping(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"question": ""}, {"question": 3}])
    with pytest.raises(
        QueryFileError, match=re.escape(f"{path}: no valid rows; all 2 rejected (first: {path}: line 1")
    ):
        read_queries(path, skip_bad_rows=True)


# --- scale


def test_50k_line_jsonl_streams(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "w") as f:
        for i in range(50_000):
            f.write(json.dumps({"question": f"Question number {i}?", "n": i}) + "\n")
    extras = [query.extra for query in iter_queries(path)]
    assert len(extras) == 50_000 and extras[-1] == {"n": 49_999}
