"""Rubric dropout (rurl/reward/dropout.py, rurl.rubric_dropout): the mask is one per prompt group and step, the same in
any process and after a resume (a function of the query's id and the step alone), never drops a penalty or a
protected criterion, keeps the minimum, and the dropped criteria are never asked of the judge; at share 0 the reward
is today's, bit for bit. Bad settings are one line before any model loads."""

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from commands.main import main
from grading.grader import Grader, GradingConfig
from grading.rubric import rubric_from_items
from rubricrl.llm import LLMClient, Role
from rurl.reward.dropout import RubricDropout
from rurl.reward.rubric_reward import rubric_reward
from tests.fault_server import FaultServer
from tests.helpers import run

ROOT = Path(__file__).resolve().parents[1]
ITEMS = [
    {"criterion": f"Mentions point {i}.", "points": 1 + i % 3, "tags": ["axis:completeness"]} for i in range(8)
] + [
    {"criterion": "Is unsafe.", "points": -5, "tags": ["axis:accuracy"]},
    {"criterion": "Warns about an overdose.", "points": 4, "tags": ["protected"]},
    {"criterion": "At most 50 words.", "points": 2, "rule": {"type": "max_words", "value": 50}},
]
RUBRIC = rubric_from_items(ITEMS, "test")


class State:
    def __init__(self, step: int):
        self.global_step = step


def test_the_mask_is_a_function_of_the_query_and_the_step_alone():
    dropout = RubricDropout(0.5)
    masks = {step: dropout.dropped(RUBRIC, "q7", step) for step in range(20)}
    assert masks == {step: dropout.dropped(RUBRIC, "q7", step) for step in range(20)}  # drawn again: the same
    assert len(set(masks.values())) > 10  # it changes from step to step
    assert dropout.dropped(RUBRIC, "q8", 3) != masks[3] or dropout.dropped(RUBRIC, "q9", 3) != masks[3]
    # another process (another hash seed, another rank, a resumed run) draws the same
    code = "from tests.test_dropout import RUBRIC; from rurl.reward.dropout import RubricDropout; "
    code += "print([sorted(RubricDropout(0.5).dropped(RUBRIC, 'q7', s)) for s in range(20)])"
    other = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
        check=True,
    )
    assert json.loads(other.stdout) == [sorted(masks[s]) for s in range(20)]


def test_penalties_and_protected_criteria_are_never_dropped_and_the_minimum_is_kept():
    droppable = [i for i, c in enumerate(RUBRIC.criteria) if c.points > 0 and "protected" not in c.tags]
    for step in range(50):
        dropped = RubricDropout(0.5).dropped(RUBRIC, "q", step)
        assert len(dropped) in (4, 5) and dropped <= set(droppable)  # 0.5 of 9, rounded either way
        kept = RubricDropout(0.5).kept(RUBRIC, "q", step)
        assert [c.text for c in kept.criteria if c.points < 0] == ["Is unsafe."]
        assert "Warns about an overdose." in [c.text for c in kept.criteria]
    # 10 positive criteria, 9 droppable: a share of 0.9 would drop 8, the minimum of 5 keeps 5 positive
    kept = RubricDropout(0.9, minimum=5).kept(RUBRIC, "q", 0)
    assert sum(c.points > 0 for c in kept.criteria) == 5
    assert RubricDropout(0.0).kept(RUBRIC, "q", 0) is RUBRIC


@pytest.mark.pure
@pytest.mark.parametrize("share", [0.3, 0.5])
@pytest.mark.parametrize("positives", [3, 7, 10])
def test_the_share_dropped_is_the_setting_on_average_at_any_rubric_size(share, positives):
    """Rounded down, 0.3 dropped nothing from 3 positive criteria and 29% of 7: rounded up or down at random, the
    average over steps and queries is the setting (the minimum kept permitting)."""
    rubric = rubric_from_items([{"criterion": f"Point {i}.", "points": 1} for i in range(positives)], "test")
    counts = [len(RubricDropout(share).dropped(rubric, f"q{q}", step)) for q in range(20) for step in range(100)]
    assert statistics.fmean(counts) / positives == pytest.approx(share, abs=0.01)
    assert set(counts) == {math.floor(share * positives), math.ceil(share * positives)}
    # the minimum still binds: 0.5 of 3 with 2 kept drops at most 1
    assert max(len(RubricDropout(0.5, minimum=2).dropped(rubric, "q", s)) for s in range(100)) <= positives - 2


def reward(server, step: int | None, dropout: RubricDropout | None, trains_at: int | None = None):
    """The rubric reward of one group of 4 answers to query q1 and one of 2 to q2, per criterion."""

    async def go():
        role = Role(base_url=server.base_url, model="judge", temperature=0.0)
        async with LLMClient({"judge": role}) as client:
            rewards = await rubric_reward(
                prompts=["Q1"] * 4 + ["Q2"] * 2,
                completions=[f"Answer {i}." for i in range(6)],
                rubrics=[ITEMS] * 6,
                grader=Grader(client, GradingConfig(integrity_check=False)),
                dropout=dropout,
                trainer_state=None if step is None else State(step),
                trains_at=trains_at,
                id=["q1"] * 4 + ["q2"] * 2,
                log_metric=metrics.__setitem__,
            )
            metrics["dropped_verdicts"] = rewards.stats.dropped_verdicts
            return rewards

    metrics: dict[str, float] = {}
    return run(go()), metrics


def asked(server) -> list[tuple[str, str]]:
    """(answer, criterion) of every judge call."""
    out = []
    for body in server.requests:
        text = " ".join(m["content"] for m in body["messages"])
        answer = next(f"Answer {i}." for i in range(6) if f"Answer {i}." in text)
        criterion = next(item["criterion"] for item in ITEMS if item["criterion"] in text)
        out.append((answer, criterion))
    return out


def verdict(body) -> str:
    return json.dumps({"explanation": "scripted", "criteria_met": "Answer 0." in json.dumps(body)})


def test_the_dropped_criteria_are_never_asked_and_a_group_shares_its_mask():
    dropout = RubricDropout(0.5)
    with FaultServer(reply=verdict) as server:
        rewards, metrics = reward(server, 3, dropout)
        calls = asked(server)
    kept = {q: {c.text for c in dropout.kept(RUBRIC, q, 3).criteria if c.rule is None} for q in ("q1", "q2")}
    for i in range(6):
        query = "q1" if i < 4 else "q2"
        assert {c for a, c in calls if a == f"Answer {i}."} == kept[query]  # the group's mask, each of its answers
    judged = sum(item.get("rule") is None for item in ITEMS)
    assert len(calls) == 4 * len(kept["q1"]) + 2 * len(kept["q2"]) < 6 * judged
    assert metrics["dropped_verdicts"] == 6 * judged - len(calls)  # the batch's, summed over processes by rurl
    dropped = {q: len(dropout.dropped(RUBRIC, q, 3)) for q in ("q1", "q2")}
    assert metrics["rubric/dropped_criteria"] == (4 * dropped["q1"] + 2 * dropped["q2"]) / 6  # per answer
    assert metrics["rubric/dropped_share"] == pytest.approx((4 * dropped["q1"] + 2 * dropped["q2"]) / (6 * 9))
    # the reward is normalized over the kept criteria: answer 0 meets every judged one (the penalty too) and the
    # rule when kept; answer 1 only the rule
    rubric = dropout.kept(RUBRIC, "q1", 3)
    positive = sum(c.points for c in rubric.criteria if c.points > 0)
    rule = sum(c.points for c in rubric.criteria if c.rule is not None)
    assert rewards[0] == pytest.approx((positive - 5) / positive) and rewards[1] == pytest.approx(rule / positive)


def test_a_batch_graded_ahead_draws_the_masks_of_the_step_that_trains_it():
    """The schedule that grades a batch a step early passes `trains_at`: the masks are that step's, not the trainer's
    step at the call (which a resumed run, grading the same batch synchronously, would not share)."""
    dropout = RubricDropout(0.5)
    with FaultServer(reply=verdict) as ahead, FaultServer(reply=verdict) as now:
        reward(ahead, 4, dropout, trains_at=5)
        reward(now, 5, dropout)
        assert sorted(asked(ahead)) == sorted(asked(now))


def test_share_zero_is_the_reward_without_dropout_bit_for_bit():
    with FaultServer(reply=verdict) as off, FaultServer(reply=verdict) as zero:
        without, _ = reward(off, 3, None)
        with_zero, metrics = reward(zero, 3, RubricDropout(0.0))
        assert without == with_zero and off.count == zero.count == 6 * 10
    assert "rubric/dropped_criteria" not in metrics


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--rubric_dropout", "1"], "--rubric-dropout must be within [0, 1)"),
        (["--rubric_dropout", "-0.1"], "--rubric-dropout must be within [0, 1)"),
        (["--rubric_dropout", "0.3", "--rubric_dropout_min", "0"], "--rubric-dropout-min must be at least 1"),
        (["--rubric_dropout", "0.3", "--rubric_dropout_min", "4"], "rurl.rubric_dropout_min 4: above the 3 positive"),
    ],
)
def test_bad_dropout_settings_are_one_line_before_any_model_loads(flags, message, tmp_path, capsys, monkeypatch):
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))
    config = ROOT / "configs" / "rurl" / "tiny-cpu.yaml"
    assert main(["rurl", "train", "--config", str(config), "--output_dir", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


DRAWN: list[tuple[str, int]] = []


class Recorded(RubricDropout):
    """Rubric dropout that records each mask drawn: (query id, step)."""

    def kept(self, rubric, query_id, step, fresh=frozenset()):
        DRAWN.append((query_id, step))
        return super().kept(rubric, query_id, step, fresh)


@pytest.mark.slow
def test_one_step_ahead_draws_each_mask_at_the_step_a_synchronous_run_draws_it(tmp_path):
    """gradient_accumulation_steps 2, steps_per_generation 1: a generation batch every micro-step, two per optimizer
    step. Graded a step ahead, each batch's masks are drawn at the optimizer step a synchronous run is at when it
    grades that batch (the batch generated ahead of the last step, never trained, aside)."""
    from tests.test_rurl_async import trainer_on

    drawn = {}
    prompts = ["Say hello.", "Name a colour.", "Name a fruit.", "Describe the rain."]
    for async_steps in (0, 1):
        DRAWN.clear()
        with FaultServer(reply=verdict) as judge:
            settings = {"gradient_accumulation_steps": 2, "steps_per_generation": 1, "max_steps": 3}
            with trainer_on(
                tmp_path / str(async_steps), judge, prompts, async_steps, dropout=Recorded(0.5), **settings
            ) as trainer:
                trainer.train()
        drawn[async_steps] = list(DRAWN)
    steps = [step for _, step in drawn[0]]
    assert steps == sorted(steps) and steps[-1] == 2 and len(set(steps)) == 3  # two batches a step, steps 0-2
    assert drawn[1][: len(drawn[0])] == drawn[0]


def test_a_criterion_written_at_this_step_is_graded_and_leaves_the_others_mask_as_it_was():
    """Evolving rubrics, evolve_apply same_step: the criteria written from a group's answers regrade that group at
    the same step. They are never dropped then (dropping one would waste the call that wrote it), and the other
    criteria keep the mask they were graded under before it was written; at later steps it is droppable."""
    dropout = RubricDropout(0.5)
    written = {"criterion": "Names a source.", "points": 3, "tags": ["evolved"], "evolved": {"step": 3}}
    rubric = rubric_from_items([*ITEMS, written], "test")
    fresh = frozenset({len(ITEMS)})
    assert dropout.dropped(rubric, "q1", 3, fresh) == dropout.dropped(RUBRIC, "q1", 3)
    with FaultServer(reply=verdict) as server:

        async def go():
            role = Role(base_url=server.base_url, model="judge", temperature=0.0)
            async with LLMClient({"judge": role}) as client:
                return await rubric_reward(
                    prompts=["Q1"] * 2,
                    completions=["Answer 0.", "Answer 1."],
                    rubrics=[[*ITEMS, written]] * 2,
                    grader=Grader(client, GradingConfig(integrity_check=False)),
                    dropout=dropout,
                    trainer_state=State(3),
                    id=["q1"] * 2,
                )

        run(go())
        asked_texts = [" ".join(m["content"] for m in body["messages"]) for body in server.requests]
    assert sum("Names a source." in text for text in asked_texts) == 2  # both answers, at the step it was written
    later = [len(ITEMS) in dropout.dropped(rubric, "q1", step) for step in range(4, 60)]
    assert any(later) and not all(later)
