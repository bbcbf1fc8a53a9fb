"""The criterion ledger's counts and shares (grading/ledger.py) and a run's tests on them (rurl/watch/ledger.py), on
verdicts planted with known roles: always met, never met, a coin independent of the answer, one that follows the
answer, and a penalty never triggered."""

import random

import pytest

from grading.ledger import (
    ABSENT,
    DECIDED,
    FAILED,
    UNDECIDED,
    Ledger,
    LedgerAnswer,
    LedgerCriterion,
    answer_from_record,
    headline,
    headline_lines,
    ledger_of_records,
    read_table,
    write_table,
)
from rurl.watch.ledger import assess

RUBRIC = (
    LedgerCriterion("Always met.", 5),
    LedgerCriterion("Never met.", 5),
    LedgerCriterion("A coin.", 5),
    LedgerCriterion("Follows the answer.", 5),
    LedgerCriterion("A penalty never triggered.", -3, ("axis:safety",)),
)


def planted(rng: random.Random, query: str, good: bool, reask: bool = False) -> LedgerAnswer:
    coin = rng.random() < 0.5
    credits = (1.0, 0.0, float(coin), float(good), 0.0)
    reasks = ((2, coin, rng.random() < 0.5), (3, good, good)) if reask else ()
    return LedgerAnswer(query, RUBRIC, credits, DECIDED * 5, reasks=reasks)


def planted_run(steps: int = 10, queries: int = 4, group: int = 8, reask: bool = False, seed: int = 0) -> Ledger:
    rng = random.Random(seed)
    ledger = Ledger(planned_steps=steps)
    for step in range(steps):
        ledger.add(
            [planted(rng, f"q{q}", rng.random() < 0.5, reask) for q in range(queries) for _ in range(group)], step
        )
    return ledger


def by_text(table, query: str = "q0") -> dict[str, dict]:
    table = table if isinstance(table, dict) else table.to_pydict()
    rows = [dict(zip(table, values)) for values in zip(*table.values())]
    return {row["criterion"]: row for row in rows if row["query_id"] == query}


def test_flat_criteria_carry_nothing_and_the_shares_of_a_rubric_sum_to_one():
    table = planted_run().table()
    rows = by_text(table)
    for flat in ("Always met.", "Never met.", "A penalty never triggered."):
        assert rows[flat]["flat_groups"] == rows[flat]["groups"] == 10
        assert rows[flat]["signal"] == 0 and rows[flat]["carries"] == "nothing"
    for moving in ("A coin.", "Follows the answer."):
        assert rows[moving]["carries"] == "signal" and rows[moving]["rubric_signal_share"] > 0.3
    assert sum(row["rubric_signal_share"] for row in rows.values()) == pytest.approx(1.0)
    assert sum(table["signal_share"]) == pytest.approx(1.0)  # over the whole run's rows
    assert rows["Always met."]["graded"] == rows["Always met."]["decided"] == 80 and rows["Always met."]["met"] == 80
    figures = headline(planted_run().arrow())
    # 3 flat criteria of 5 in every query's groups: 60% of the judge verdicts were spent flat, and a little more where
    # all 8 coins of a group fell alike (1 group in 128)
    flat = sum(table["flat_verdicts"])
    assert figures["flat_verdict_share"] == flat / 1600 and 0.6 <= flat / 1600 < 0.62
    assert figures["no_signal"]["criteria"] == 12
    assert figures["no_signal"]["judge_verdicts"] == 12 * 80
    assert figures["tags"]["axis:safety"] == {
        "criteria": 4, "signal_share": 0.0, "group_verdicts": 320, "flat_verdicts": 320, "no_signal": 4,
        "flat_verdict_share": 1.0,
    }  # fmt: skip
    lines = headline_lines(figures)
    assert f"of the judge verdicts in groups ({flat} of 1600)" in lines[0]
    assert "axis:safety 0.0%, 100.0%, 4 of 4" in lines[-1]


def test_a_groups_signal_splits_its_sum_of_squares_exactly():
    """Three answers, points 2 and 1 (positive 3): scores 1, 2/3, 0 (mean 5/9, deviations 4/9, 1/9, -5/9; sum of
    squares 42/81). A's weighted verdicts 2/3, 2/3, 0 deviate 2/9, 2/9, -4/9 from their mean: its part is
    (8 + 2 + 20)/81; B's 1/3, 0, 0 deviate 2/9, -1/9, -1/9: (8 - 1 + 5)/81. The two parts sum to 42/81."""
    rubric = (LedgerCriterion("A.", 2), LedgerCriterion("B.", 1))
    answers = [
        LedgerAnswer("q", rubric, (1.0, 1.0), "dd"),
        LedgerAnswer("q", rubric, (1.0, 0.0), "dd"),
        LedgerAnswer("q", rubric, (0.0, 0.0), "dd"),
    ]
    ledger = Ledger()
    ledger.add(answers)
    table = ledger.table()
    assert table["signal"] == pytest.approx([30 / 81, 12 / 81])
    assert table["rubric_signal_share"] == pytest.approx([30 / 42, 12 / 42])
    assert table["query_ss"] == pytest.approx([42 / 81, 42 / 81])


def test_dropped_undecided_failed_and_vetoed_answers_are_counted_apart():
    rubric = (LedgerCriterion("A.", 2), LedgerCriterion("B.", 1), LedgerCriterion("Rule.", 1, rule=True))
    answers = [
        LedgerAnswer("q", rubric, (1.0, None, 1.0), DECIDED + ABSENT + DECIDED, dropped=frozenset({1})),
        LedgerAnswer("q", rubric, (0.0, None, 1.0), DECIDED + UNDECIDED + DECIDED),
        LedgerAnswer("q", rubric, (None, None, 0.0), FAILED + FAILED + DECIDED),
        LedgerAnswer("q", rubric, (1.0, 1.0, 1.0), DECIDED * 3, scored=False),  # vetoed: out of groups and signal
    ]
    ledger = Ledger()
    ledger.add(answers)
    rows = by_text(ledger.table(), "q")
    a, b, rule = rows["A."], rows["B."], rows["Rule."]
    assert (a["graded"], a["decided"], a["failed"], a["met"]) == (4, 3, 1, 2.0)
    assert (b["graded"], b["dropped"], b["undecided"], b["failed"], b["decided"]) == (3, 1, 1, 1, 1)
    assert (rule["source"], rule["judge_verdicts"], rule["graded"]) == ("rule", 0, 4)
    assert a["groups"] == 1 and a["flat_groups"] == 0 and a["judge_verdicts"] == 4 and a["group_verdicts"] == 3
    assert b["groups"] == 0  # one decided verdict among the scored answers: nothing to compare
    assert rule["groups"] == 1 and rule["flat_groups"] == 0  # 1, 1, 0 among the scored answers


def test_a_saved_ledger_goes_on_counting_as_if_never_stopped(tmp_path):
    whole = planted_run(steps=10, reask=True)
    rng = random.Random(0)
    first = Ledger(planned_steps=10)
    for step in range(10):
        batch = [planted(rng, f"q{q}", rng.random() < 0.5, True) for q in range(4) for _ in range(8)]
        first.add(batch, step)
        if step == 4:  # saved at a checkpoint, read back by the resumed run
            write_table(first.arrow(), tmp_path / "ledger.parquet")
            first = Ledger.from_table(read_table(tmp_path / "ledger.parquet"), planned_steps=10)
    resumed, once = first.table(), whole.table()
    assert resumed.keys() == once.keys()
    for column in once:
        assert same(resumed[column], once[column]), column


def same(a, b) -> bool:
    """Equal, floats to rounding (a sum in another order)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, abs=1e-12)
    return a == b


def test_a_run_tells_the_coin_from_the_criterion_that_follows_the_answer_by_its_re_asks():
    table = assess(planted_run(steps=10, queries=2, group=8, reask=True).arrow())
    rows = by_text(table)
    coin, follows = rows["A coin."], rows["Follows the answer."]
    assert coin["reasked"] == follows["reasked"] == 80
    assert follows["self_agreement"] == 1.0 and follows["judge_consistent"] and follows["carries"] == "signal"
    assert coin["self_agreement"] < 0.65 and coin["judge_consistent"] is False and coin["carries"] == "noise"
    assert rows["Always met."]["carries"] == "nothing"  # flat: never tested for consistency
    assert "judged at random? 2 criteria whose verdicts asked again afresh" in "\n".join(
        headline_lines(headline(table))
    )


def test_the_first_and_last_fifths_test_a_criterion_that_moved():
    rubric = (LedgerCriterion("Learned.", 5), LedgerCriterion("Steady.", 5))
    rng = random.Random(1)
    ledger = Ledger(planned_steps=20)
    for step in range(20):
        learned = step / 19  # from never to always met
        ledger.add(
            [
                LedgerAnswer(f"q{q}", rubric, (float(rng.random() < learned), float(rng.random() < 0.5)), "dd")
                for q in range(4)
                for _ in range(8)
            ],
            step,
        )
    table = assess(ledger.arrow()).to_pydict()
    rows = {
        row["criterion"]: row for row in (dict(zip(table, v)) for v in zip(*table.values())) if row["query_id"] == "q0"
    }
    assert rows["Learned."]["first_decided"] == 32 and rows["Learned."]["moved"] > 0.6
    assert rows["Learned."]["moved_significant"] is True
    assert rows["Steady."]["moved_significant"] is False


def test_a_monitor_counts_each_criterions_over_and_underclaim():
    ledger = Ledger()
    verdict = {"criterion": "Cites a source.", "points": 3, "source": "judge", "tags": []}
    judged = [{"id": "e1", "verdicts": [{**verdict, "met": True}]}, {"id": "e1", "verdicts": [{**verdict, "met": True}]},
              {"id": "e1", "verdicts": [{**verdict, "met": False}]}]  # fmt: skip
    monitored = [{"id": "e1", "verdicts": [{**verdict, "met": m}]} for m in (False, True, True)]
    ledger.add_monitor(judged, monitored)
    row = by_text(ledger.table(), "e1")["Cites a source."]
    assert (row["overclaimed"], row["judge_credited"], row["underclaimed"], row["monitor_credited"]) == (1, 2, 1, 2)
    assert row["overclaim"] == row["underclaim"] == 0.5 and row["graded"] == 0
    assert headline(ledger.arrow())["overclaimed"][0]["criterion"] == "Cites a source."


def test_graded_records_make_a_ledger_only_where_a_query_has_several_answers():
    def record(query: str, met: list, **extra) -> dict:
        verdicts = [
            {"criterion": f"C{k}.", "points": 1, "tags": [], "met": m, "source": "judge", "explanation": ""}
            for k, m in enumerate(met)
        ]
        return {"id": query, "reward": 0.5, "verdicts": verdicts, **extra}

    assert ledger_of_records([record("a", [True, False]), record("b", [True, True])]) is None
    records = [record("a", [True, False]), record("a", [True, True]), record("a", [None, True], integrity_flag="x")]
    assert answer_from_record(records[2]).scored is False
    table = ledger_of_records(records).table()
    assert table["groups"] == [1, 1] and table["flat_groups"] == [1, 0] and table["carries"] == ["nothing", "signal"]


def test_re_asks_that_cannot_be_tested_leave_a_criterion_carrying_signal():
    """Re-asked 20 times, but always where the first verdict was met: nothing to compare the unmet ones with, so
    neither consistent nor noise."""
    rubric = (LedgerCriterion("Varies.", 5), LedgerCriterion("Other.", 5))
    answers = [
        LedgerAnswer("q", rubric, (float(i % 2), 1.0), "dd", reasks=((0, True, i % 3 == 0),) if i % 2 else ())
        for i in range(40)
    ]
    ledger = Ledger()
    ledger.add(answers)
    row = by_text(assess(ledger.arrow()), "q")["Varies."]
    assert row["reasked"] == 20 and row["judge_consistent"] is None and row["carries"] == "signal"


def test_a_query_drawn_twice_in_one_batch_is_two_groups_where_the_batch_says_its_group_size():
    """A GRPO batch groups consecutive rows: a query whose two groups each agree among themselves, but not with each
    other, is flat in both; read by query id alone it would be one group that varies."""
    rubric = (LedgerCriterion("A.", 1),)
    answers = [LedgerAnswer("q", rubric, (1.0,), "d")] * 4 + [None] + [LedgerAnswer("q", rubric, (0.0,), "d")] * 3
    by_rows, by_query = Ledger(), Ledger()
    by_rows.add(answers, group_size=4)
    by_query.add(answers)
    assert (by_rows.table()["groups"], by_rows.table()["flat_groups"]) == ([2], [2])
    assert (by_query.table()["groups"], by_query.table()["flat_groups"]) == ([1], [0])


def test_a_criterion_flat_among_its_decided_verdicts_carries_nothing_beside_an_undecided_one():
    """Another criterion left undecided in one answer changes no one's share: every answer is scored over the
    points decided in the group, an undecided verdict at its criterion's mean."""
    rubric = (LedgerCriterion("Always.", 5), LedgerCriterion("Varies.", 5))
    answers = [
        LedgerAnswer("q", rubric, (1.0, 1.0), "dd"),
        LedgerAnswer("q", rubric, (1.0, None), "du"),
        LedgerAnswer("q", rubric, (1.0, 0.0), "dd"),
        LedgerAnswer("q", rubric, (None, 0.0), "fd"),
    ]
    ledger = Ledger()
    ledger.add(answers)
    rows = by_text(ledger.table(), "q")
    assert rows["Always."]["carries"] == "nothing" and rows["Always."]["signal"] == 0.0
    assert rows["Varies."]["rubric_signal_share"] == pytest.approx(1.0)
    assert (rows["Varies."]["undecided"], rows["Always."]["failed"]) == (1, 1)


def test_a_verdict_is_asked_afresh_at_a_sample_no_grading_used_and_per_criterion_in_the_batched_mode():
    """The sample after `samples` and every `reask_undecided` round (a tie-breaker takes one more), so the re-ask is
    never the grading's own answer read back; under `batched` the per-criterion prompt asks it."""
    from grading.asking import ask_afresh
    from grading.grader import GradingConfig, judge_prompt
    from grading.rubric import Criterion
    from tests.helpers import run

    asked = []

    class Recording:  # records what would be sent; the answer it gives back is not under test
        async def chat(self, role, messages, *, n, schema, schema_name):
            asked.append((n, messages[-1]["content"]))
            return type("Result", (), {"parsed": [{"criteria_met": True}] * n})()

    criterion = Criterion("Names the capital.", 3)
    for config in (GradingConfig(samples=3, reask_undecided=2), GradingConfig(mode="batched")):
        again = run(
            ask_afresh(Recording(), config, judge_prompt(config), [{"role": "user", "content": "Q?"}], "A.", criterion)
        )
        assert again is True
    (n_first, first), (n_second, second) = asked
    assert n_first == 3 + 2 + 1 and n_second == 1 + 0 + 1  # samples 0..5 and 0..1: the last one is new
    assert "Names the capital." in first and "Names the capital." in second  # one criterion asked, in both modes


def test_a_run_ledger_saved_at_a_checkpoint_is_loaded_back_whole(tmp_path):
    from rurl.watch.ledger import RunLedger

    saved = RunLedger(tmp_path / "run")
    rng = random.Random(0)
    saved.add([planted(rng, "q0", rng.random() < 0.5, True) for _ in range(8)], step=0, planned_steps=10)
    saved.save(tmp_path / "run" / "checkpoint-1")
    assert (tmp_path / "run" / "ledger.parquet").is_file()  # the run folder's copy, with the run's tests
    assert "moved_p" in read_table(tmp_path / "run" / "ledger.parquet").column_names
    loaded = RunLedger(tmp_path / "resumed")
    loaded.load(tmp_path / "run" / "checkpoint-1")
    assert loaded.ledger.table() == {**saved.ledger.table()}


def test_a_tag_whose_criteria_moved_is_found_where_each_query_is_drawn_once():
    """One epoch of a large set: every query drawn at one step only, so no criterion of its own reaches the moved
    test; its tags pool them, and the tag whose criteria the policy learned moved, the steady one did not."""
    from rurl.watch.ledger import run_headline, tag_moves

    rng = random.Random(0)
    rubric = (LedgerCriterion("Learned.", 5, ("axis:learned",)), LedgerCriterion("Steady.", 5, ("axis:steady",)))
    ledger = Ledger(planned_steps=20)
    for step in range(20):
        answers = [
            LedgerAnswer(
                f"q{step}-{q}", rubric, (float(rng.random() < 0.2 + 0.6 * step / 19), float(rng.random() < 0.5)), "dd"
            )
            for q in range(4)
            for _ in range(8)
        ]
        ledger.add(answers, step, group_size=8)
    table = assess(ledger.arrow())
    assert not any(table.column("moved_significant").to_pylist())  # no row has both fifths
    moves = {row["tag"]: row for row in tag_moves(table)}
    assert moves["axis:learned"]["significant"] and moves["axis:learned"]["first_decided"] == 128
    assert not moves["axis:steady"]["significant"]
    assert "tags that moved" in "\n".join(headline_lines(run_headline(table)))
