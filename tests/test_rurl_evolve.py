"""Rubrics evolving during RuRL (rurl/evolving/evolution.py, rurl/evolving/rubric_buffer.py): the buffer's rules by hand (validation,
retirement without variance, the cap by variance), then `rurl train --evolve true` with a scripted judge and a
scripted evolver: new criteria grade the query's later draws only, a malformed evolve reply adds nothing and is
counted, the buffer comes back on resume, and the evolved dataset is read by `grade` and by `rurl train`. Two gloo
processes holding one evolved rubric are checked in tests/test_rurl_alarms.py's two-process launch."""

import json
import threading

import pytest

from commands.main import main
from grading.dataset import load_rubric_rows
from rurl.config import RurlConfig
from rurl.data import load_rurl_data
from rurl.evolving.evolve_outputs import step_metrics
from rurl.evolving.rubric_buffer import RubricBuffer
from tests.fault_server import FaultServer
from tests.helpers import graded_parts, is_probe, tiny_rurl_train

ORIGINAL = [{"criterion": "Answers politely.", "points": 5}]


def test_the_buffer_validates_and_holds_its_cap_on_add_where_an_untested_criterion_never_displaces_a_splitting_one():
    buffer = RubricBuffer(max_active=2)
    written = [
        {"criterion": "Names a source.", "points": 3},
        {"criterion": "answers politely.", "points": 2},  # the original, in other case
        {"criterion": "", "points": 2},
        {"criterion": "Uses metric units.", "points": 50},  # beyond the original's ±5
        {"criterion": "Gives a number.", "points": -2},
        {"criterion": "Cites a date.", "points": 1},  # a third: over the cap of 2, refused at once
    ]
    added, refused = buffer.add("q", ORIGINAL, written, step=1, source={"situation": "saturated"})
    assert [e.criterion for e in added] == ["Names a source.", "Gives a number."]
    assert len(refused) == 4 and any("repeats" in r for r in refused) and refused[-1].endswith("over the cap of 2")
    assert [c["criterion"] for c in buffer.rubric("q", ORIGINAL)] == [
        "Answers politely.",
        "Names a source.",
        "Gives a number.",
    ]
    assert buffer.rubric("other", ORIGINAL) == ORIGINAL
    # "Names a source." splits its group; "Gives a number." is met by all three answers: no variance, retired
    group = [
        ("q", {"Names a source.": True, "Gives a number.": True}),
        ("q", {"Names a source.": False, "Gives a number.": True}),
        ("q", {"Names a source.": True, "Gives a number.": True}),
    ]
    gone = buffer.observe(group, step=2)
    assert [(e.criterion, e.retired) for e in gone] == [("Gives a number.", "no variance in its last group (step 2)")]
    # two new untested ones: one takes the free place, the other is refused, the splitting one stays
    added, refused = buffer.add(
        "q",
        ORIGINAL,
        [{"criterion": "Mentions a risk.", "points": 2}, {"criterion": "Says why.", "points": 1}],
        step=3,
        source={},
    )
    assert [e.criterion for e in buffer.active["q"]] == ["Names a source.", "Mentions a risk."]
    assert [e.criterion for e in added] == ["Mentions a risk."] and "over the cap" in refused[0]
    assert buffer.room("q") == 1  # one place holds a criterion that split groups
    # tested without splitting (window 1 retires it at once), so a newer untested one may take its place
    buffer.observe(
        [
            ("q", {"Names a source.": True, "Mentions a risk.": True}),
            ("q", {"Names a source.": False, "Mentions a risk.": True}),
        ],
        step=4,
    )
    assert [e.criterion for e in buffer.active["q"]] == ["Names a source."]
    again = RubricBuffer(max_active=2)
    again.load(json.loads(json.dumps(buffer.state())))
    assert again.state() == buffer.state() and again.rubric("q", ORIGINAL) == buffer.rubric("q", ORIGINAL)


def test_a_full_query_displaces_its_unsplitting_criteria_first_and_the_cap_holds_at_every_moment():
    buffer = RubricBuffer(max_active=2, window=2)
    buffer.add("q", ORIGINAL, [{"criterion": "A.", "points": 1}, {"criterion": "B.", "points": 1}], 1, {})
    split, flat = (
        [("q", {"A.": True, "B.": True}), ("q", {"A.": False, "B.": True})],
        [("q", {"A.": True, "D.": False})] * 2,
    )
    buffer.observe(split, step=2)  # A split its group, B did not (window 2: B not retired yet)
    assert [e.criterion for e in buffer.active["q"]] == ["A.", "B."]
    added, _ = buffer.add("q", ORIGINAL, [{"criterion": "C.", "points": 1}], 3, {})
    assert [e.criterion for e in buffer.active["q"]] == ["A.", "C."] and len(added) == 1  # B displaced, not A
    assert buffer.retired["q"][0].criterion == "B." and "displaced over the cap of 2" in buffer.retired["q"][0].retired
    added, refused = buffer.add("q", ORIGINAL, [{"criterion": "D.", "points": 1}], 4, {})
    assert [e.criterion for e in buffer.active["q"]] == ["A.", "D."]  # the newest untested one replaces C
    buffer.observe(flat, step=5)  # A's window: split, then flat: kept; D: flat once of two: kept
    assert [e.criterion for e in buffer.active["q"]] == ["A.", "D."]
    gone = buffer.observe(flat, step=6)  # A flat in both of its last 2 groups: retired, with the window named
    assert [(e.criterion, e.retired) for e in gone] == [
        ("A.", "no variance in its last 2 groups (step 6)"),
        ("D.", "no variance in its last 2 groups (step 6)"),
    ]


def test_the_evolved_criteria_never_hold_more_than_their_share_of_the_positive_points():
    buffer = RubricBuffer(max_active=5, max_share=0.5)  # the original: 5 positive points
    written = [{"criterion": f"New {i}.", "points": 3} for i in range(3)] + [{"criterion": "A fault.", "points": -5}]
    added, refused = buffer.add("q", ORIGINAL, written, step=1, source={})
    assert [e.criterion for e in added] == ["New 0.", "A fault."]  # 3 of 8 points; 6 of 11 would be over half
    assert len(refused) == 2 and "would hold 55% of the positive points" in refused[0]


def evolution_for(rows, client=None, **settings):
    """A RubricEvolution over hand-made rows, on a main process of one, its trainer a stand-in (no calls made without
    a `client`)."""
    from types import SimpleNamespace

    from grading.dataset import RubricRow
    from grading.grader import GradingConfig
    from grading.rubric import rubric_from_items
    from rurl.evolving.evolution import RubricEvolution

    data = SimpleNamespace(
        train=[RubricRow(q, [{"role": "user", "content": q}], rubric_from_items(r, q)) for q, r in rows]
    )
    evolution = RubricEvolution(RurlConfig(evolve=True, **settings), GradingConfig(), client=client, data=data)
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1)
    evolution.trainer = SimpleNamespace(accelerator=accelerator, sampler=SimpleNamespace(flat={"q0", "q9"}))
    evolution.cut = lambda text: text[:20]  # the policy's tokenizer cuts in the runs below
    return evolution


def test_a_step_asks_at_most_evolve_max_calls_over_its_sampling_rounds_with_a_prompt_for_each_situation():
    from rurl.evolving.evolution import by_query

    rows = [(f"q{i}", ORIGINAL) for i in range(6)]
    evolution = evolution_for(rows, evolve_max_calls=3, evolve_groups="all", evolve_answers=3)
    met = [("q", {"Answers politely.": True})] * 2
    verdicts = lambda q, mets: [(q, {"Answers politely.": m}) for m in mets]  # noqa: E731
    first_round = {
        "q0": [("<think>long thought</think>Hello there, kind person of the sea.", 1.0), ("Hi.", 1.0)],  # saturated
        "q1": [("No.", 0.0), ("Nope.", 0.0)],  # failed
    }
    answers = verdicts("q0", [True, True]) + verdicts("q1", [False, False])
    chosen = evolution._choose(3, first_round, by_query(answers))
    assert [(c.query, c.situation) for c in chosen] == [("q0", "saturated"), ("q1", "failed")]
    assert chosen[0].answers == [("Hello there, kind pe", 1.0), ("Hi.", 1.0)]  # reasoning gone, cut to the budget
    second_round = {
        q: [("A good one.", 1.0), ("A bad one.", 0.0), ("So-so.", 0.5), ("Meh.", 0.4)] for q in ("q2", "q3")
    }
    answers = verdicts("q2", [True, False, True, False]) + verdicts("q3", [True, False, True, False])
    chosen = evolution._choose(3, second_round, by_query(answers))  # the same step: one call left of its 3
    assert [(c.query, c.situation) for c in chosen] == [("q2", "mixed")]
    assert chosen[0].answers == [("A good one.", 1.0), ("Meh.", 0.4), ("A bad one.", 0.0)]  # best, ranks apart, worst
    assert len(evolution._choose(4, second_round, by_query(answers))) == 2  # a new step, a new budget
    assert len(evolution._choose(4, {"q4": [("x", 1.0), ("y", 1.0)]}, by_query(met))) == 1  # its third
    assert evolution._choose(4, {"q5": [("x", 1.0), ("y", 1.0)]}, by_query(met)) == []  # spent
    none = evolution_for(rows, evolve_on_failed="none", evolve_groups="flat")
    split = answers + verdicts("q0", [True, True]) + verdicts("q1", [False, False])
    chosen = none._choose(1, {**first_round, **second_round}, by_query(split))
    assert [c.query for c in chosen] == ["q0"]  # flat, not failed


def scripted(log: list[str], lock: threading.Lock, split: bool = False, loose: bool = False):
    """The judge: every original criterion met (groups flat), an evolved one met on every other request (a group's
    answers are asked about together, so its 4 split 2 to 2 and the criterion keeps a spread; with `split`: unmet for
    the first answer asked about, met for every other), never for an answer with no substance (a probe);
    the evolver (told by its prompt): a stricter criterion per query, garbage for the BROKEN query; with `loose`, a
    loose one too, which the judge meets whatever the answer (probes included): exploitable."""
    strict_seen: list[str] = []

    def reply(body: dict) -> str:
        content = body["messages"][-1]["content"]
        with lock:
            log.append(content)
        if "Evolve the rubric." in content:
            if "BROKEN" in content:
                return "no criteria today"
            topic = "sea" if "sea" in content else "sky"
            criteria = [{"title": "Strict", "description": f"STRICT: names one fact about the {topic}.", "weight": 3}]
            if loose:
                criteria.append({"title": "Loose", "description": f"LOOSE: mentions the {topic}.", "weight": 2})
            return json.dumps({"criteria": criteria})
        response, criterion = graded_parts(body)
        if criterion.startswith("LOOSE"):
            return json.dumps({"explanation": "scripted", "criteria_met": True})
        if criterion.startswith("STRICT"):
            if is_probe(response):
                return json.dumps({"explanation": "scripted", "criteria_met": False})
            with lock:
                strict_seen.append(content)
                met = content != strict_seen[0] if split else len(strict_seen) % 2 == 0
            return json.dumps({"explanation": "scripted", "criteria_met": met})
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
def test_next_draw_criteria_grade_later_draws_come_back_on_resume_and_are_read_back(tmp_path, quiet_env):
    """next_draw. Two steps with a checkpoint, then a resume to three: new criteria grade only later draws, the BROKEN query's
    malformed evolve replies add nothing and are counted, the buffer comes back from the checkpoint, no evolve request
    is sent twice, the loose criterion refused as exploitable stays refused after the resume, and the evolved dataset
    is read by `grade`, `rurl train` and `rubricrl report`."""
    prompts = ["Say one thing about the sea.", "BROKEN: say hi."]
    data = rubric_file(tmp_path / "rubrics.jsonl", prompts)
    log, lock = [], threading.Lock()
    out = tmp_path / "run"
    common = ["--rubrics", str(data), "--eval_size", "0", "--dynamic_sampling", "false", "--evolve", "true"]
    common += ["--per_device_train_batch_size", "8", "--max_completion_length", "8", "--overlong_buffer", "0"]
    common += ["--report_to", "none", "--save_steps", "2", "--merge_adapter", "false", "--evolve_apply", "next_draw"]
    with FaultServer(reply=scripted(log, lock, loose=True)) as server:
        assert main(tiny_rurl_train(out, *common, "--max_steps", "2", judge_url=server.base_url)) == 0
        saved = json.loads((out / "checkpoint-2" / "rurl_state.json").read_text())["evolve"]
        asked_before = sum("Evolve the rubric." in text for text in log)
        resumed = ["--max_steps", "3", "--resume_from_checkpoint", "true"]
        assert main(tiny_rurl_train(out, *common, *resumed, judge_url=server.base_url)) == 0
    first_evolve = next(i for i, text in enumerate(log) if "Evolve the rubric." in text)
    graded = [
        (i, graded_parts({"messages": [{"content": t}]})) for i, t in enumerate(log) if "Evolve the rubric." not in t
    ]
    graded_strict = [
        i for i, (response, criterion) in graded if criterion.startswith("STRICT") and not is_probe(response)
    ]
    assert graded_strict and min(graded_strict) > first_evolve  # never the batch that produced them
    assert not [i for i, (response, criterion) in graded if criterion.startswith("LOOSE") and not is_probe(response)]
    loose = "LOOSE: mentions the sea."
    assert loose in saved["vetting"]["refused"]["q0"]  # refused, with its test, in the checkpoint ...
    resumed_state = json.loads((out / "checkpoint-3" / "rurl_state.json").read_text())["evolve"]
    assert resumed_state["vetting"]["refused"]["q0"][loose] == saved["vetting"]["refused"]["q0"][loose]  # ... kept
    asked = [text for text in log if "Evolve the rubric." in text]
    answered = [text for text in asked if "BROKEN" not in text]  # a malformed reply is asked again, by design
    assert len(asked) > asked_before and len(set(answered)) == len(answered)  # the resumed run asked, nothing twice
    final = json.loads((out / "rubric_buffer.json").read_text())
    assert buffered(saved) and buffered(saved) <= buffered(final)  # the first run's came back with the checkpoint
    summary = json.loads((out / "manifest.json").read_text())["summary"]["evolve"]
    assert summary["failed"] >= 1  # the BROKEN query's replies: counted, nothing added
    # the counts came back with the checkpoint and went on: a call each, the BROKEN query's sent 3 times (the client
    # samples an unparsable answer twice more)
    assert summary["asked"] == len(answered) + sum("BROKEN" in text for text in asked) // 3
    state = json.loads((out / "checkpoint-3" / "rurl_state.json").read_text())
    assert state["monitor"]["synced"] == 3  # the grader-talk windows too: 2 batches before the resume, 1 after
    steps = [json.loads(x) for x in (out / "evolve_steps.jsonl").read_text().splitlines()]
    assert steps and all(line["step"] <= 2 for line in steps) and {"written", "added", "refused"} <= set(steps[0])
    rows = load_rubric_rows(out / "evolved_rubrics.jsonl")  # as `grade` reads it
    assert [c.text for c in rows["q1"].rubric.criteria] == ["Answers politely."]
    evolved = [c for c in rows["q0"].rubric.criteria if "evolved" in c.tags]
    assert evolved and all(c.text.startswith("STRICT") for c in evolved)  # never the loose one
    line = next(json.loads(x) for x in (out / "evolved_rubrics.jsonl").read_text().splitlines() if '"STRICT' in x)
    made = next(c for c in line["rubrics"] if c["criterion"].startswith("STRICT"))["evolved"]
    assert made["step"] >= 0 and made["apply"] == "next_draw" and made["situation"] == "saturated" and made["answers"]
    assert len(load_rurl_data(out / "evolved_rubrics.jsonl", RurlConfig(), seed=0).train) == 2  # as `rurl train`
    history = [e for e in json.loads((out / "log_history.json").read_text()) if "reward" in e]
    assert "evolve/flat_groups" in history[0] and "evolve/flat_groups_original" in history[-1]
    assert main(["report", str(out)]) == 0  # the report's section: each evolved criterion, where it came from
    page = (out / "report.md").read_text()
    assert "### Evolved criteria (rurl.evolve)" in page and "| STRICT: names one fact about the" in page


def test_next_draw_applies_a_finished_call_at_the_step_end_and_the_query_may_be_drawn_again():
    """next_draw: the main process applies a finished evolve call at a step's end; the query leaves the prompts
    dynamic sampling found flat this epoch, and its next draw is graded against the new criterion."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from rurl.evolving.evolution import Call

    evolution = evolution_for([("q0", ORIGINAL)], evolve_apply="next_draw")
    evolution.trainer.args = SimpleNamespace(output_dir=None)
    done = Future()
    written = {"criterion": "Names a fact about the sea.", "points": 3}
    done.set_result(([written], [{**written, "decision": "admitted"}]))  # the criteria written, their probe decisions
    evolution.pending["q0"] = Call("q0", 4, "saturated", [("Sea.", 1.0)], done)
    evolution.on_step_end(None, SimpleNamespace(global_step=5), None)
    assert evolution.trainer.sampler.flat == {"q9"}
    assert [c["criterion"] for c in evolution.rubric_for("q0", ORIGINAL)] == [
        "Answers politely.",
        "Names a fact about the sea.",
    ]
    assert evolution.new == [[4, "q0", "Names a fact about the sea.", 3]] and not evolution.pending


@pytest.mark.slow
@pytest.mark.parametrize("async_steps", [0, 1])
def test_same_step_criteria_grade_the_group_they_were_written_from_in_a_one_epoch_run(async_steps, tmp_path, quiet_env):
    """same_step, one step that draws both queries once (a whole epoch): the evolver's criterion for the sea query
    grades that query's 4 answers before their advantages, and each reward is the one the rubric gives by hand:
    the original (5 points, met by all) plus the new one (3 points) where the judge met it, over 8 points. The
    evolver saw each answer cut to 3 tokens of the policy's tokenizer, and dynamic sampling keeps the group the new
    criterion split, though every original criterion left it flat. The evolver's loose criterion, which the judge
    meets whatever the answer, was probed first and refused with its test: it grades nothing. The run's probe
    preflight is in its summary. With async_steps 1 the batch's grades are collected (and evolved) in the replay of
    its call: the same."""
    data = rubric_file(tmp_path / "rubrics.jsonl", ["Say one thing about the sea.", "BROKEN: say hi."])
    log, lock = [], threading.Lock()
    out = tmp_path / "run"
    flags = ["--rubrics", str(data), "--eval_size", "0", "--evolve", "true", "--evolve_answer_tokens", "3"]
    flags += ["--dynamic_sampling", "true", "--max_extra_rounds", "0", "--max_steps", "1", "--save_strategy", "no"]
    flags += ["--per_device_train_batch_size", "8", "--max_completion_length", "8", "--overlong_buffer", "0"]
    flags += ["--report_to", "none", "--merge_adapter", "false", "--probe_rows", "2"]
    flags += ["--async_steps", str(async_steps)]
    with FaultServer(reply=scripted(log, lock, split=True, loose=True)) as server:
        assert main(tiny_rurl_train(out, *flags, judge_url=server.base_url)) == 0
    asked = [text for text in log if "Evolve the rubric." in text]
    assert len(set(asked)) == 2 and all("it no longer tells them apart" in t for t in asked)  # saturated groups
    assert all("[... cut at 3 tokens of" in text for text in asked if "sea" in text)
    line = next(json.loads(x) for x in (out / "evolve_steps.jsonl").read_text().splitlines())
    assert (line["step"], line["query"], line["situation"], line["apply"]) == (0, "q0", "saturated", "same_step")
    assert line["added"] == ["STRICT: names one fact about the sea."]
    strict, loose = line["vetted"]  # each probed on its row before it could grade anything
    assert strict["decision"] == "admitted" and not strict["exploited_by"] and strict["kinds"]["keywords"] == [0, 4]
    assert loose["decision"] == "exploitable" and "keywords" in loose["exploited_by"]
    assert loose["kinds"]["keywords"] == [4, 4] and loose["test"].startswith("exploitable: ")
    assert [r for r in line["refused"] if r.startswith("'LOOSE: mentions the sea.': exploitable: ")]
    graded_loose = [t for t in log if "LOOSE" in t and "Evolve the rubric." not in t]
    assert len(graded_loose) == loose["probes"]  # its probes: it graded no answer of the policy
    met = line["verdicts"]["STRICT: names one fact about the sea."]
    assert met["decided"] == 4  # the whole group it was written from
    by_hand = sorted([(5 + 3) / 8] * met["met"] + [5 / 8] * (4 - met["met"]))
    assert sorted(line["scores_after"]) == pytest.approx(by_hand)
    history = [e for e in json.loads((out / "log_history.json").read_text()) if "reward" in e]
    assert 0 < met["met"] < 4  # the new criterion split a group every original criterion left flat ...
    assert history[0]["dynamic_sampling/groups_kept"] == 1  # ... which joins the batch; the BROKEN query's stays flat
    assert history[0]["rewards/rubric_reward/mean"] == pytest.approx((sum(by_hand) + 4 * 1.0) / 8)  # as TRL got them
    assert history[0]["evolve/flat_groups"] == 0.5 and history[0]["evolve/flat_groups_original"] == 1.0
    assert history[0].get("async/staleness") == (0.0 if async_steps else None)
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    evolve = summary["evolve"]
    assert (evolve["apply"], evolve["regraded"], evolve["added"], evolve["failed"]) == ("same_step", 4, 1, 1)
    assert (evolve["probed"], evolve["exploitable"], evolve["waited"]) == (2, 1, 0)
    assert evolve["probe_calls"] == strict["calls"] + loose["calls"] > 0
    assert history[0]["evolve/refused_exploitable"] == 1.0 and history[0]["evolve/waiting"] == 0.0
    # the probe preflight ran first (this judge meets every original criterion: every probe earns it all, a warning)
    assert summary["probe_preflight"]["rows"] == 2 and summary["probe_preflight"]["best_paid_share"] == 1.0
    # the criterion ledger counts each completion's first grading once, the regraded group not again
    from grading.ledger import read_table

    ledger = read_table(out / "ledger.parquet").to_pydict()
    assert sorted(ledger["query_id"]) == ["q0", "q1"] and ledger["graded"] == [4, 4]


def test_same_step_waits_at_most_the_deadline_and_grades_a_late_group_without_new_criteria(monkeypatch, capsys):
    """An evolve call still running at evolve_deadline is cancelled and counted; its group keeps its rubric. A call
    back in time is applied at once, by every process alike (here one)."""
    import asyncio
    import threading

    from synthesis import stages

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    cancelled = []

    async def evolve_group(client, config, messages, merged, answers, situation):
        if messages[0]["content"] == "q1":  # the slow one
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append("q1")
                raise
        return [
            {
                "title": "T",
                "description": f"New for {messages[0]['content']}.",
                "weight": 2,
                "stage": "evolve",
                "source": "m",
            }
        ]

    monkeypatch.setattr(stages, "evolve_group", evolve_group)
    evolution = evolution_for([("q0", ORIGINAL), ("q1", ORIGINAL)], evolve_deadline=0.5, evolve_vet=False)
    evolution.trainer.async_loop = loop
    flat = {q: [("Yes.", 1.0), ("Sure.", 1.0)] for q in ("q0", "q1")}
    answers = [(q, {"Answers politely.": True}) for q in ("q0", "q1") for _ in range(2)]
    try:
        changed = evolution.evolve_now(0, flat, answers)
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.1), loop).result()  # the loop has taken the cancellation
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert cancelled == ["q1"]
    assert changed == {"q0"} and [c["criterion"] for c in evolution.rubric_for("q0", ORIGINAL)][-1] == "New for q0."
    assert [c["criterion"] for c in evolution.rubric_for("q1", ORIGINAL)] == ["Answers politely."]
    assert (evolution.counts["asked"], evolution.counts["timed_out"], evolution.counts["added"]) == (2, 1, 1)
    assert "1 of 2 evolve call(s) not back within 0.5 s" in capsys.readouterr().err


def test_a_criterion_past_the_steps_probe_budget_waits_unadmitted_and_is_probed_at_a_later_step(tmp_path):
    """The evolver writes two honest criteria; the step's probe budget covers the probes of one (16: 4 texts of
    parrot, keywords, hedge and the polite non-answer). The first is probed and admitted, the second waits, graded by
    nothing; a checkpoint keeps it waiting; the next step probes and admits it, recorded as having waited."""
    import asyncio
    from types import SimpleNamespace

    from rubricrl.llm import LLMClient, Role

    def reply(body: dict) -> str:
        if "Evolve the rubric." in body["messages"][-1]["content"]:
            criteria = [
                {"title": "A", "description": "STRICT: names a fact about the sea.", "weight": 2},
                {"title": "B", "description": "STRICT: gives a date for the tide.", "weight": 2},
            ]
            return json.dumps({"criteria": criteria})
        return json.dumps({"explanation": "scripted", "criteria_met": False})  # a judge that pays no probe

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    try:
        with FaultServer(reply=reply) as server:
            roles = {name: Role(base_url=server.base_url, model="scripted") for name in ("judge", "evolver")}
            client = LLMClient(roles, max_retries=0)
            evolution = evolution_for([("q0", ORIGINAL)], client=client, evolve_probe_calls=16, evolve_groups="all")
            evolution.trainer.async_loop = loop
            flat = {"q0": [("Yes.", 1.0), ("Sure.", 1.0)]}
            answers = [("q0", {"Answers politely.": True})] * 2
            assert evolution.evolve_now(0, flat, answers) == {"q0"}
            rubric = [c["criterion"] for c in evolution.rubric_for("q0", ORIGINAL)]
            assert rubric == ["Answers politely.", "STRICT: names a fact about the sea."]
            (line,) = evolution.lines.values()
            assert [v["decision"] for v in line["vetted"]] == ["admitted", "waiting"]
            assert line["waiting"] == ["STRICT: gives a date for the tide."] and line["vetted"][0]["probes"] == 16
            assert step_metrics(evolution, flat, {})["evolve/waiting"] == 1.0
            saved = json.loads(json.dumps(evolution.state()))
            assert [w[1]["criterion"] for w in saved["waiting"]] == ["STRICT: gives a date for the tide."]
            resumed = evolution_for([("q0", ORIGINAL)], client=client, evolve_probe_calls=16)
            resumed.trainer.async_loop, resumed.trainer.args = loop, SimpleNamespace(output_dir=str(tmp_path))
            resumed.load(saved, step=1)
            assert [w[1]["criterion"] for w in resumed.waiting] == ["STRICT: gives a date for the tide."]
            evolution.lines = {}
            try:
                assert evolution.evolve_now(1, {}, []) == {"q0"}  # no group to ask about: the waiting one is probed
            finally:
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert [c["criterion"] for c in evolution.rubric_for("q0", ORIGINAL)][-1] == "STRICT: gives a date for the tide."
    (line,) = evolution.lines.values()
    assert line["waited_since"] == 0 and line["vetted"][0]["decision"] == "admitted" and not evolution.waiting
    assert (evolution.counts["probed"], evolution.counts["waited"], evolution.counts["added"]) == (2, 1, 2)
    assert evolution.counts["probe_calls"] == 32
