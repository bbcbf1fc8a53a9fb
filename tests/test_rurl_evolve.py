"""Rubrics evolving during RuRL (rurl/evolution.py, rurl/rubric_buffer.py): the buffer's rules by hand (validation,
retirement without variance, the cap by variance), then `rurl train --evolve true` with a scripted judge and a
scripted evolver: new criteria grade the query's later draws only, a malformed evolve reply adds nothing and is
counted, the buffer comes back on resume, and the evolved dataset is read by `grade` and by `rurl train`. Two gloo
processes holding one evolved rubric are checked in tests/test_rurl_alarms.py's two-process launch."""

import json
import threading

import pytest

from grading.dataset import load_rubric_rows
from rubricrl.cli import main
from rurl.config import RurlConfig
from rurl.data import load_rurl_data
from rurl.rubric_buffer import RubricBuffer
from tests.fault_server import FaultServer
from tests.helpers import hashed_verdict, tiny_rurl_train

ORIGINAL = [{"criterion": "Answers politely.", "points": 5}]


def test_the_buffer_validates_retires_without_variance_and_caps_by_variance():
    buffer = RubricBuffer(max_active=2)
    written = [
        {"criterion": "Names a source.", "points": 3},
        {"criterion": "answers politely.", "points": 2},  # the original, in other case
        {"criterion": "", "points": 2},
        {"criterion": "Uses metric units.", "points": 50},  # beyond the original's ±5
        {"criterion": "Gives a number.", "points": -2},
        {"criterion": "Cites a date.", "points": 1},
    ]
    added, refused = buffer.add("q", ORIGINAL, written, step=1, source={"model": "m"})
    assert added == 3 and len(refused) == 3 and any("repeats" in r for r in refused)
    assert [c["criterion"] for c in buffer.rubric("q", ORIGINAL)] == [
        "Answers politely.",
        "Names a source.",
        "Gives a number.",
        "Cites a date.",
    ]
    assert buffer.rubric("other", ORIGINAL) == ORIGINAL
    # a group of 3 answers: "Names a source." splits them, "Gives a number." is met by all, "Cites a date." by one
    group = [
        ("q", {"Names a source.": True, "Gives a number.": True, "Cites a date.": True}),
        ("q", {"Names a source.": False, "Gives a number.": True, "Cites a date.": False}),
        ("q", {"Names a source.": True, "Gives a number.": True, "Cites a date.": False}),
    ]
    gone = buffer.observe(group, step=2)
    assert [(e.criterion, e.retired) for e in gone] == [("Gives a number.", "no variance (step 2)")]
    assert [e.criterion for e in buffer.active["q"]] == ["Names a source.", "Cites a date."]
    buffer.add("q", ORIGINAL, [{"criterion": "Mentions a risk.", "points": 2}], step=3, source={})
    buffer.observe([], step=3)  # three active, the cap is two: the newest untested one stays, the older varied
    assert [e.criterion for e in buffer.active["q"]] == ["Names a source.", "Mentions a risk."]
    assert buffer.retired["q"][-1].retired == "over the cap of 2 (step 3)"
    again = RubricBuffer(max_active=2)
    again.load(json.loads(json.dumps(buffer.state())))
    assert again.state() == buffer.state() and again.rubric("q", ORIGINAL) == buffer.rubric("q", ORIGINAL)


def scripted(log: list[str], lock: threading.Lock):
    """The judge: every original criterion met (groups flat), an evolved one by a hash of the request; the evolver
    (told by its prompt): a stricter criterion per query, garbage for the BROKEN query."""

    def reply(body: dict) -> str:
        content = body["messages"][-1]["content"]
        with lock:
            log.append(content)
        if "Make the rubric harder" in content:
            if "BROKEN" in content:
                return "no criteria today"
            topic = "sea" if "sea" in content else "sky"
            description = f"STRICT: names one fact about the {topic}."
            return json.dumps({"criteria": [{"title": "Strict", "description": description, "weight": 3}]})
        if "STRICT" in content.rsplit("points):", 1)[-1]:
            return hashed_verdict(body)
        return json.dumps({"explanation": "scripted", "criteria_met": True})

    return reply


def buffered(buffer: dict) -> set[str]:
    """Every criterion a rubric_buffer.json (or a checkpoint's `evolve`) holds, active or retired."""
    return {e["criterion"] for kind in ("active", "retired") for items in buffer[kind].values() for e in items}


def rubric_file(path, prompts):
    rows = [{"id": f"q{i}", "prompt": p, "rubrics": ORIGINAL} for i, p in enumerate(prompts)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_evolved_criteria_grade_later_draws_come_back_on_resume_and_are_read_back(tmp_path, quiet_env):
    """Two steps with a checkpoint, then a resume to three: new criteria grade only later draws, the BROKEN query's
    malformed evolve replies add nothing and are counted, the buffer comes back from the checkpoint, no evolve request
    is sent twice, and the evolved dataset is read by `grade`, `rurl train` and `rubricrl report`."""
    prompts = ["Say one thing about the sea.", "BROKEN: say hi."]
    data = rubric_file(tmp_path / "rubrics.jsonl", prompts)
    log, lock = [], threading.Lock()
    out = tmp_path / "run"
    common = ["--rubrics", str(data), "--eval_size", "0", "--dynamic_sampling", "false", "--evolve", "true"]
    common += ["--per_device_train_batch_size", "8", "--max_completion_length", "8", "--overlong_buffer", "0"]
    common += ["--report_to", "none", "--save_steps", "2", "--merge_adapter", "false"]
    with FaultServer(reply=scripted(log, lock)) as server:
        assert main(tiny_rurl_train(out, *common, "--max_steps", "2", judge_url=server.base_url)) == 0
        saved = json.loads((out / "checkpoint-2" / "rurl_state.json").read_text())["evolve"]
        asked_before = sum("Make the rubric harder" in text for text in log)
        resumed = ["--max_steps", "3", "--resume_from_checkpoint", "true"]
        assert main(tiny_rurl_train(out, *common, *resumed, judge_url=server.base_url)) == 0
    first_evolve = next(i for i, text in enumerate(log) if "Make the rubric harder" in text)
    graded_strict = [
        i for i, text in enumerate(log) if "STRICT" in text.rsplit("points):", 1)[-1] and "harder" not in text
    ]
    assert graded_strict and min(graded_strict) > first_evolve  # never the batch that produced them
    asked = [text for text in log if "Make the rubric harder" in text]
    answered = [text for text in asked if "BROKEN" not in text]  # a malformed reply is asked again, by design
    assert len(asked) > asked_before and len(set(answered)) == len(answered)  # the resumed run asked, nothing twice
    final = json.loads((out / "rubric_buffer.json").read_text())
    assert buffered(saved) and buffered(saved) <= buffered(final)  # the first run's came back with the checkpoint
    summary = json.loads((out / "manifest.json").read_text())["summary"]["evolve"]
    assert summary["failed"] >= 1  # the BROKEN query's replies: counted, nothing added
    rows = load_rubric_rows(out / "evolved_rubrics.jsonl")  # as `grade` reads it
    assert [c.text for c in rows["q1"].rubric.criteria] == ["Answers politely."]
    evolved = [c for c in rows["q0"].rubric.criteria if "evolved" in c.tags]
    assert all(c.text.startswith("STRICT") for c in evolved)
    line = next(json.loads(x) for x in (out / "evolved_rubrics.jsonl").read_text().splitlines() if '"STRICT' in x)
    made = next(c for c in line["rubrics"] if c["criterion"].startswith("STRICT"))["evolved"]
    assert made["step"] >= 0 and {"best", "worst"} <= set(made)
    assert len(load_rurl_data(out / "evolved_rubrics.jsonl", RurlConfig(), seed=0).train) == 2  # as `rurl train`
    history = [e for e in json.loads((out / "log_history.json").read_text()) if "reward" in e]
    assert "evolve/flat_groups" in history[0] and "evolve/flat_groups_original" in history[-1]
    assert main(["report", str(out)]) == 0  # the report's section: each evolved criterion, where it came from
    page = (out / "report.md").read_text()
    assert "### Evolved criteria (rurl.evolve)" in page and "| STRICT: names one fact about the" in page


def test_a_query_whose_rubric_changed_may_be_drawn_again_by_dynamic_sampling():
    """The main process applies a finished evolve call at a step's end; the query leaves the prompts dynamic
    sampling found flat this epoch, and its next draw is graded against the new criterion."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from grading.dataset import RubricRow
    from grading.rubric import rubric_from_items
    from rurl.evolution import RubricEvolution

    row = RubricRow("q0", [{"role": "user", "content": "Sea?"}], rubric_from_items(ORIGINAL, "test"))
    evolution = RubricEvolution(RurlConfig(evolve=True), client=None, data=SimpleNamespace(train=[row]))
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1)
    evolution.trainer = SimpleNamespace(accelerator=accelerator, sampler=SimpleNamespace(flat={"q0", "q9"}))
    done = Future()
    written = {"title": "Fact", "description": "Names a fact about the sea.", "weight": 3, "stage": "evolve"}
    done.set_result([{**written, "source": "scripted"}])  # as synthesis.stages.evolve returns them
    evolution.pending["q0"] = (done, 4, {"best": {}, "worst": {}})
    evolution.on_step_end(None, SimpleNamespace(global_step=5), None)
    assert evolution.trainer.sampler.flat == {"q9"}
    assert [c["criterion"] for c in evolution.rubric_for("q0", ORIGINAL)] == [
        "Answers politely.",
        "Names a fact about the sea.",
    ]
    assert evolution.new == [[4, "q0", "Names a fact about the sea.", 3]] and not evolution.pending
