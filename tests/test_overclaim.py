"""Overclaim and underclaim between a training judge and a monitor, on graded records whose verdicts are known, and
the gold-best checkpoint kept at the monitor's peak (a scripted monitor whose score peaks at a known step). The run
with real trainers, two processes and a monitor that diverges is tests/test_rurl_alarms.py."""

import json
from types import SimpleNamespace

import pytest

from checks.overclaim import overclaim
from rurl.gold_best import GoldBest, line

pytestmark = pytest.mark.pure


def record(id_: str, verdicts: list[tuple[str, int, bool | None, str]]) -> dict:
    return {
        "id": id_,
        "verdicts": [{"criterion": c, "points": p, "met": m, "source": s} for c, p, m, s in verdicts],
    }


def test_overclaim_counts_what_the_training_judge_credits_and_the_monitor_rejects():
    judge = [
        record(
            "a", [("Names a drug.", 5, True, "judge"), ("Gives a dose.", 3, True, "judge"), ("Short.", 2, True, "rule")]
        ),
        record(
            "b",
            [("Names a drug.", 5, True, "judge"), ("Gives a dose.", 3, False, "judge"), ("Harms.", -4, True, "judge")],
        ),
        record("c", [("Names a drug.", 5, None, "judge")]),  # undecided by the judge: left out
    ]
    monitor = [
        record(
            "a",
            [("Names a drug.", 5, False, "judge"), ("Gives a dose.", 3, True, "judge"), ("Short.", 2, False, "rule")],
        ),
        record(
            "b",
            [("Names a drug.", 5, False, "judge"), ("Gives a dose.", 3, True, "judge"), ("Harms.", -4, False, "judge")],
        ),
        record("c", [("Names a drug.", 5, True, "judge")]),
    ]
    found = overclaim(judge, monitor)
    # positive, judged, decided by both: a's two, b's two; rule checks and penalties are not counted
    assert found["decided_by_both"] == 4 and found["judge_credited"] == 3 and found["monitor_credited"] == 2
    assert found["overclaim"] == pytest.approx(2 / 3) and found["underclaim"] == pytest.approx(1 / 2)
    assert found["top"][0] == {"criterion": "Names a drug.", "overclaims": 2, "judge_credited": 2}
    assert overclaim(judge, [])["overclaim"] is None  # nothing paired: nothing to say


class FakeTrainer:
    """What GoldBest calls: save_model (here, a file naming the step saved) and the main-process flag."""

    def __init__(self):
        self.accelerator = SimpleNamespace(is_main_process=True)
        self.saved: list[int] = []
        self.step = 0

    def save_model(self, folder: str) -> None:
        from pathlib import Path

        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.txt").write_text(str(self.step))
        self.saved.append(self.step)


def scores(step: int, monitor: list[float]) -> tuple[float, float, dict]:
    judge = [0.1 * step] * len(monitor)  # the training judge rises all along
    return (
        sum(judge) / len(judge),
        sum(monitor) / len(monitor),
        {f"e{i}": [j, m] for i, (j, m) in enumerate(zip(judge, monitor))},
    )


def test_the_gold_best_checkpoint_is_the_monitors_peak_and_says_how_sure_it_is(tmp_path):
    trainer = FakeTrainer()
    gold = GoldBest(trainer, tmp_path)
    monitors = {0: 0.2, 10: 0.5, 20: 0.9, 30: 0.9, 40: 0.4, 50: 0.3}  # peaks at step 20 (30 only equals it)
    for step, level in monitors.items():
        trainer.step = step
        gold.observe(step, *scores(step, [level + d for d in (-0.05, 0.0, 0.05, 0.02, -0.02, 0.01)]))
        with (tmp_path / "eval.jsonl").open("a") as log:  # as rurl/evaluate.py writes it
            log.write(json.dumps({"step": step, "monitor": {"monitor/overall_score": level}}) + "\n")
    assert trainer.saved == [0, 10, 20]  # each new peak, replacing the folder; an equal score is no new peak
    assert (tmp_path / "gold-best" / "model.txt").read_text() == "20"
    assert json.loads((tmp_path / "gold-best" / "gold_best.json").read_text())["step"] == 20
    found = gold.summary()
    assert (
        found["step"] == 20
        and found["monitor"] == pytest.approx(0.9, abs=0.01)
        and found["judge"] == pytest.approx(2.0)
    )
    assert found["last"]["step"] == 50 and found["peak_above_last"]["examples"] == 6
    # every example 0.6 higher at the peak; picked among the 5 evaluations before the last, its p-value counts them
    assert found["peak_above_last"]["looks"] == 5 and found["peak_above_last"]["p"] == pytest.approx(5 / 4001)
    text = line(found)
    assert (
        text.startswith("gold-best checkpoint: step 20, monitor 0.902, training judge 2.000; last evaluation (step 50)")
        and "p = 0.00125 over 6 examples and 5 earlier evaluations" in text
    )
    # a run resumed from a later checkpoint reads the peak back and keeps it unless a later evaluation beats it
    checkpoint = tmp_path / "checkpoint-50"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 50}))
    again = GoldBest(FakeTrainer(), tmp_path, str(checkpoint))
    again.observe(60, *scores(60, [0.8] * 6))
    assert again.summary()["step"] == 20


def test_gold_best_without_a_monitor_is_refused():
    from rurl.config import RurlConfig

    with pytest.raises(ValueError, match="gold_best keeps the model of the monitor's peak: it needs monitor_judge"):
        RurlConfig(gold_best=True)
    assert RurlConfig(gold_best=True, monitor_judge=True).gold_best


def test_a_fresh_run_ignores_an_earlier_runs_peak_and_a_resumed_one_keeps_it_only_from_before_its_checkpoint(tmp_path):
    gold = GoldBest(FakeTrainer(), tmp_path)
    gold.observe(30, *scores(30, [0.9] * 6))  # an earlier run's peak at step 30
    assert GoldBest(FakeTrainer(), tmp_path).best is None  # a fresh run in the same folder starts anew
    checkpoint = tmp_path / "checkpoint-20"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 20}))
    assert GoldBest(FakeTrainer(), tmp_path, str(checkpoint)).best is None  # saved after the checkpoint: abandoned
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 40}))
    assert GoldBest(FakeTrainer(), tmp_path, str(checkpoint)).best["step"] == 30
