"""The gold-best checkpoint kept at the monitor's peak: a scripted monitor whose score peaks at a known step, a run
resumed after a later peak, a save killed at every point, and a run that pushes to the Hub. The run with real
trainers, two processes and a monitor that diverges is tests/test_rurl_alarms.py."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import rurl.watch.gold_best
from rurl.watch.gold_best import FOLDER, RECORD, RETIRED, STAGING, GoldBest, line


class FakeTrainer:
    """What GoldBest reads of a trainer on one process; `weights` names the model it holds now."""

    def __init__(self, weights: str = ""):
        self.args = SimpleNamespace(should_save=True)
        self.accelerator = SimpleNamespace(is_main_process=True, num_processes=1, wait_for_everyone=lambda: None)
        self.weights = weights
        self.saved: list[str] = []


@pytest.fixture
def fake_save(monkeypatch):
    """GoldBest's model save as a file naming the weights saved."""

    def save(trainer, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.txt").write_text(trainer.weights)
        trainer.saved.append(trainer.weights)

    monkeypatch.setattr(rurl.watch.gold_best, "save_policy", save)


def scores(step: int, monitor: list[float]) -> tuple[float, float, dict]:
    judge = [0.1 * step] * len(monitor)  # the training judge rises all along
    return (
        sum(judge) / len(judge),
        sum(monitor) / len(monitor),
        {f"e{i}": [j, m] for i, (j, m) in enumerate(zip(judge, monitor))},
    )


def checkpoint(output_dir: Path, step: int) -> str:
    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir(exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return str(folder)


def kept(output_dir: Path) -> tuple[str, dict]:
    """The kept model and its record."""
    return (output_dir / FOLDER / "model.txt").read_text(), json.loads((output_dir / FOLDER / RECORD).read_text())


@pytest.mark.pure
def test_the_gold_best_checkpoint_is_the_monitors_peak_and_says_how_sure_it_is(tmp_path, fake_save):
    trainer = FakeTrainer()
    gold = GoldBest(trainer, tmp_path)
    monitors = {0: 0.2, 10: 0.5, 20: 0.9, 30: 0.9, 40: 0.4, 50: 0.3}  # peaks at step 20 (30 only equals it)
    for step, level in monitors.items():
        trainer.weights = f"step {step}"
        gold.observe(step, *scores(step, [level + d for d in (-0.05, 0.0, 0.05, 0.02, -0.02, 0.01)]))
        with (tmp_path / "eval.jsonl").open("a") as log:  # as rurl/watch/evaluate.py writes it
            log.write(json.dumps({"step": step, "monitor": {"monitor/overall_score": level}}) + "\n")
    assert trainer.saved == ["step 0", "step 10", "step 20"]  # each new peak; an equal score is no new peak
    model, record = kept(tmp_path)
    assert model == "step 20" and record["step"] == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.jsonl", FOLDER]  # nothing left beside it
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
        and "earlier attempt" not in text
    )
    # a run resumed from a later checkpoint reads the peak back and keeps it unless a later evaluation beats it
    again = GoldBest(FakeTrainer("step 60"), tmp_path, checkpoint(tmp_path, 50))
    again.observe(60, *scores(60, [0.8] * 6))
    assert again.summary()["step"] == 20 and "before_resume_from" not in again.summary()
    assert kept(tmp_path)[0] == "step 20"


@pytest.mark.pure
def test_gold_best_without_a_monitor_is_refused():
    from rurl.config import RurlConfig

    with pytest.raises(ValueError, match="gold_best keeps the model of the monitor's peak: it needs monitor_judge"):
        RurlConfig(gold_best=True)
    assert RurlConfig(gold_best=True, monitor_judge=True).gold_best


@pytest.mark.pure
def test_a_resumed_run_keeps_a_higher_peak_of_the_steps_it_abandoned_and_says_so(tmp_path, fake_save):
    # the first attempt peaks at step 30 (0.65 over step 10's 0.60), is killed at step 35 and resumed from step 20
    first = FakeTrainer()
    gold = GoldBest(first, tmp_path)
    for step, level in ((10, 0.60), (20, 0.55), (30, 0.65)):
        first.weights = f"first attempt, step {step}"
        gold.observe(step, *scores(step, [level] * 6))
    second = FakeTrainer("second attempt, step 30")
    gold = GoldBest(second, tmp_path, checkpoint(tmp_path, 20))
    gold.observe(30, *scores(30, [0.52] * 6))
    assert second.saved == [] and kept(tmp_path)[0] == "first attempt, step 30"  # 0.52 < 0.65: the better stays
    found = gold.summary()
    assert found["step"] == 30 and found["monitor"] == pytest.approx(0.65)
    assert found["last"] == {"step": 30, "monitor": pytest.approx(0.52), "judge": pytest.approx(3.0)}
    assert ", from an earlier attempt of this run, before the resume from checkpoint-20; last evaluation (step 30)" in (
        line(found)
    )
    # resumed again, from a checkpoint the second attempt saved after step 30: still the first attempt's model
    second.weights = "second attempt, step 40"
    gold.observe(40, *scores(40, [0.64] * 6))
    third = GoldBest(FakeTrainer(), tmp_path, checkpoint(tmp_path, 40))
    assert third.summary()["before_resume_from"] == "checkpoint-20"
    assert kept(tmp_path) == ("first attempt, step 30", third.best)
    # a higher score replaces it: the peak is then this attempt's own
    third.trainer.weights = "third attempt, step 50"
    third.observe(50, *scores(50, [0.7] * 6))
    assert kept(tmp_path)[0] == "third attempt, step 50"
    assert "before_resume_from" not in third.summary() and "earlier attempt" not in line(third.summary())


@pytest.mark.pure
def test_a_fresh_run_starts_anew_over_an_earlier_runs_peak(tmp_path, fake_save):
    GoldBest(FakeTrainer("earlier run"), tmp_path).observe(30, *scores(30, [0.9] * 6))
    trainer = FakeTrainer("this run")
    gold = GoldBest(trainer, tmp_path)
    assert gold.best is None and gold.summary() is None
    gold.observe(0, *scores(0, [0.1] * 6))
    assert kept(tmp_path)[0] == "this run" and gold.summary()["step"] == 0


@pytest.mark.pure
def test_a_run_killed_between_the_swaps_renames_starts_from_one_whole_model(tmp_path, fake_save):
    trainer = FakeTrainer("old")
    GoldBest(trainer, tmp_path).observe(10, *scores(10, [0.6] * 6))
    # killed after the old folder moved aside, before the new one took its place
    (tmp_path / FOLDER).rename(tmp_path / RETIRED)
    (tmp_path / STAGING).mkdir()
    (tmp_path / STAGING / "model.txt").write_text("new")
    gold = GoldBest(FakeTrainer(), tmp_path, checkpoint(tmp_path, 20))
    assert kept(tmp_path) == ("old", gold.best) and gold.best["step"] == 10
    assert not (tmp_path / RETIRED).exists() and not (tmp_path / STAGING).exists()
    # killed after the new one took its place, while the old one was being removed
    (tmp_path / RETIRED).mkdir()
    (tmp_path / RETIRED / "model.txt").write_text("old")
    GoldBest(FakeTrainer(), tmp_path, checkpoint(tmp_path, 20))
    assert kept(tmp_path)[0] == "old" and not (tmp_path / RETIRED).exists()


def tiny_trainer(output_dir: Path):
    """A real transformers Trainer over a tiny random Llama on the CPU (what GoldBest saves with)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    shape = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, num_hidden_layers=1, **shape))
    return Trainer(model=model, args=TrainingArguments(str(output_dir), use_cpu=True, report_to="none"))


@pytest.mark.slow
def test_a_new_peak_is_saved_without_a_push_to_the_hub(tmp_path, monkeypatch):
    """With push_to_hub, a new peak mid-training pushes nothing: a user's Trainer.save_model call would upload the
    whole output folder at each one."""
    from transformers import AutoModelForCausalLM

    trainer = tiny_trainer(tmp_path)
    trainer.args.push_to_hub = True  # set after the Trainer is built: building it would create the Hub repository
    pushes = []
    monkeypatch.setattr(trainer, "push_to_hub", lambda *args, **kwargs: pushes.append(kwargs))
    gold = GoldBest(trainer, tmp_path)
    gold.observe(10, *scores(10, [0.6] * 6))
    gold.observe(20, *scores(20, [0.7] * 6))
    assert pushes == []
    assert json.loads((tmp_path / FOLDER / RECORD).read_text())["step"] == 20
    AutoModelForCausalLM.from_pretrained(tmp_path / FOLDER)
    assert sorted(p.name for p in tmp_path.iterdir()) == [FOLDER]


KILLED_SAVES = r"""
import json, os, shutil, signal, sys
from pathlib import Path

import torch

from transformers.utils import logging

torch.set_num_threads(1)  # forked below: no thread pool to inherit
logging.disable_progress_bar()  # nor tqdm's lock, shared with the forks: a fork killed holding it would hang us
import rurl.watch.gold_best
from rurl.watch.gold_best import FOLDER, RECORD, GoldBest
from tests.test_gold_best import scores, tiny_trainer  # run from the repository's root

out = Path(sys.argv[1]) / "run"
trainer = tiny_trainer(out)
parameters = list(trainer.model.parameters())


def weights(value):
    with torch.no_grad():
        for parameter in parameters:
            parameter.fill_(value)


weights(1.0)
GoldBest(trainer, out).observe(10, *scores(10, [0.6] * 6))  # the old peak: every weight 1.0
pristine = Path(sys.argv[1]) / "pristine"
shutil.copytree(out / FOLDER, pristine)
weights(2.0)  # the new peak's model
source = rurl.watch.gold_best.__file__


def save_new_peak(kill_at_line=None, kill_at_call=None):
    # A fresh process's start, then step 30's new peak (0.65), killed at the kill_at_line-th line run in
    # rurl/watch/gold_best.py or at the kill_at_call-th Python call anywhere (inside the weights' writes too).
    counts = {"line": 0, "call": 0}

    def local(frame, event, arg):
        if event == "line":
            counts["line"] += 1
            if counts["line"] == kill_at_line:
                os.kill(os.getpid(), signal.SIGKILL)
        return local

    def tracer(frame, event, arg):
        counts["call"] += 1
        if counts["call"] == kill_at_call:
            os.kill(os.getpid(), signal.SIGKILL)
        return local if frame.f_code.co_filename == source else None

    gold = GoldBest(trainer, out)
    sys.settrace(tracer)
    gold.observe(30, *scores(30, [0.65] * 6))
    sys.settrace(None)
    return counts


def attempt(**kill):
    # What a save killed there leaves, read by the next run's start.
    for leftover in out.iterdir():
        shutil.rmtree(leftover)
    shutil.copytree(pristine, out / FOLDER)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        counts = save_new_peak(**kill)
        os.write(write, json.dumps(counts).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    counts = os.read(read, 1000)
    os.close(read)
    found = {"kill": kill, "killed": os.WIFSIGNALED(status), "counts": json.loads(counts) if counts else None}
    try:
        GoldBest(trainer, out, resumed_from=None)  # the next run's start
        found["left"] = sorted(p.name for p in out.iterdir())
        found["step"] = json.loads((out / FOLDER / RECORD).read_text())["step"]
        model = type(trainer.model).from_pretrained(out / FOLDER)
        found["weights"] = sorted({float(v) for p in model.parameters() for v in p.detach().flatten()})
        found["files"] = sorted(p.name for p in (out / FOLDER).iterdir())
    except Exception as error:
        found["error"] = repr(error)
    return found


whole = attempt()
found = [whole]
found += [attempt(kill_at_line=k) for k in range(1, whole["counts"]["line"] + 1)]
calls = whole["counts"]["call"]
found += [attempt(kill_at_call=1 + calls * k // 40) for k in range(40)]
found += [attempt(kill_at_call=k) for k in range(calls - 30, calls + 1)]  # the old folder's removal
print(json.dumps(found))
"""


@pytest.mark.slow
def test_a_save_killed_at_any_point_leaves_the_old_peak_or_the_new_whole(tmp_path):
    """A process saving a new peak (a real model's weights) is SIGKILLed at each line of the save in
    rurl/watch/gold_best.py and at points inside the weights' writes; the next start finds the old peak (step 10, every
    weight 1.0) or the new one (step 30, every weight 2.0), loadable, its record matching its weights."""
    result = subprocess.run(
        [sys.executable, "-c", KILLED_SAVES, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    whole, killed = found[0], found[1:]
    assert not whole["killed"] and whole["step"] == 30 and whole["counts"]["line"] > 0
    assert all(attempt["killed"] for attempt in killed), [a for a in killed if not a["killed"]]
    expected = {10: [1.0], 30: [2.0]}
    wrong = [a for a in found if "error" in a or a["weights"] != expected[a["step"]] or a["left"] != [FOLDER]]
    assert wrong == [], [(a["kill"], a.get("step"), a.get("weights"), a.get("left"), a.get("error")) for a in wrong][:5]
    assert all({"model.safetensors", "config.json", RECORD} <= set(a["files"]) for a in found)
    assert {a["step"] for a in killed} == {10, 30}  # the kills fell before and after the swap


@pytest.mark.pure
def test_a_sharded_fsdp_state_dict_is_refused_in_one_line(tmp_path):
    """Transformers saves no model from FSDP's sharded state dict: gold-best would keep a record and no weights."""
    from rubricrl.config import ConfigError

    trainer = FakeTrainer()
    trainer.is_fsdp_enabled = True
    trainer.accelerator.state = SimpleNamespace(fsdp_plugin=SimpleNamespace(state_dict_type="SHARDED_STATE_DICT"))
    with pytest.raises(ConfigError, match="fsdp_state_dict_type FULL_STATE_DICT"):
        GoldBest(trainer, tmp_path)
    trainer.accelerator.state.fsdp_plugin.state_dict_type = "StateDictType.FULL_STATE_DICT"
    GoldBest(trainer, tmp_path)
