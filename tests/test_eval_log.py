"""eval.jsonl (rurl/watch/eval_log.py), which a kill may cut mid-line: the cut last line is left out and dropped
before the next append, so a resumed run's file reads whole; a bad line before the last is an error naming the file
and line, except to the end-of-run summary, which leaves it out."""

import json

import pytest

from rurl.watch.eval_log import append_evaluation, read_evaluations

pytestmark = pytest.mark.pure


def test_a_line_cut_by_a_kill_is_left_out_and_dropped_before_the_next_append(tmp_path):
    path = tmp_path / "eval.jsonl"
    assert read_evaluations(path) == []  # no evaluation yet
    append_evaluation(path, {"step": 2})
    with path.open("a") as f:
        f.write('{"step": 4, "metr')  # killed while appending
    assert read_evaluations(path) == [{"step": 2}]
    append_evaluation(path, {"step": 4})  # the resumed run evaluates step 4 again
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"step": 2}, {"step": 4}]


def test_a_bad_line_before_the_last_is_an_error_naming_it_except_to_the_summary(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text('{"step": 2}\n{"step": 4, "me{"step": 4}\n{"step": 6}\n')  # an older version's resume
    with pytest.raises(ValueError, match=rf"{path}: line 2: not an evaluation"):
        read_evaluations(path)
    assert read_evaluations(path, strict=False) == [{"step": 2}, {"step": 6}]
