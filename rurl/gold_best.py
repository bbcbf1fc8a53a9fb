"""The gold-best checkpoint: with a monitor judge (rurl.monitor_judge, ideally a stronger or gold one), the run keeps
the model of the evaluation where the monitor's held-out score peaked, in output_dir/gold-best (one folder, replaced
at each new peak: the disk of one more model; a LoRA run keeps the adapter, which `rubricrl eval --policy` merges).
Under reward hacking the training judge's score keeps rising after the monitor's has turned (Rubric Dropout, arXiv
2608.11669: the gold score peaked near step 240 of 400 and fell): the last checkpoint is then not the best model.

"Peak" is the highest monitor overall score among the evaluations, the earliest of equals; with tens of held-out
examples two evaluations' scores differ by noise, so the summary also says how sure the peak is above the final
evaluation: a one-sided studentized paired bootstrap over the examples both scored (checks/evidence.py), corrected
for having picked the peak among the earlier evaluations (peak_test), its p-value and counts. Every process takes
the same decision from the broadcast scores (a ZeRO-3 save is collective)."""

import json
from pathlib import Path
from typing import Any

from checks.evidence import paired_bootstrap

FOLDER = "gold-best"
RECORD = "gold_best.json"


class GoldBest:
    def __init__(self, trainer, output_dir: Path, resumed_from: str | None = None):
        self.trainer, self.folder = trainer, Path(output_dir) / FOLDER
        self.best: dict[str, Any] | None = None
        """{step, monitor, judge, paired}: the peak so far. A run resumed from a checkpoint reads it back when it was
        saved at or before that checkpoint's step (a later one came from the steps abandoned); a fresh run starts
        anew, whatever an earlier run left in the folder."""
        self.last: dict[str, Any] | None = None
        if resumed_from is not None:
            try:
                saved = json.loads((self.folder / RECORD).read_text())
                resumed_at = json.loads((Path(resumed_from) / "trainer_state.json").read_text())["global_step"]
            except (OSError, ValueError, KeyError):
                return
            if saved["step"] <= resumed_at:
                self.best = saved

    def observe(self, step: int, judge: float | None, monitor: float | None, paired: dict | None) -> None:
        """Every process, at every evaluation, with the same scores; a new peak saves the model."""
        if monitor is None:
            return
        self.last = {"step": step, "monitor": monitor, "judge": judge, "paired": paired or {}}
        if self.best is not None and monitor <= self.best["monitor"]:
            return
        self.best = dict(self.last)
        self.trainer.save_model(str(self.folder))  # every process: it gathers sharded weights
        if self.trainer.accelerator.is_main_process:
            (self.folder / RECORD).write_text(json.dumps(self.best))

    def summary(self) -> dict[str, Any] | None:
        """The peak's step and both judges' scores there, the last evaluation's, and the test of peak against last."""
        if self.best is None:
            return None
        out = {key: self.best[key] for key in ("step", "monitor", "judge")}
        out["folder"] = str(self.folder)
        if self.last is not None and self.last["step"] != self.best["step"]:
            out["last"] = {key: self.last[key] for key in ("step", "monitor", "judge")}
            looks = len(_monitored_steps(self.folder.parent / "eval.jsonl", below=self.last["step"])) or 1
            out["peak_above_last"] = peak_test(self.best["paired"], self.last["paired"], looks, seed=self.best["step"])
        return out


def peak_test(peak: dict, last: dict, looks: int, seed: int) -> dict[str, Any]:
    """How sure the peak is above the last evaluation: the one-sided studentized paired bootstrap over the examples
    both scored (`paired`: id -> [judge's, monitor's] score), times the `looks` (evaluations before the last, the
    peak's candidates): the peak is the highest of them, so its own p-value alone is too small (Bonferroni;
    benches/gold_best_null.py measures both at no change)."""
    common = sorted(set(peak) & set(last))
    differences = [peak[i][1] - last[i][1] for i in common]
    p = min(1.0, paired_bootstrap(differences, seed=seed) * looks) if len(differences) > 1 else None
    return {
        "p": p,
        "examples": len(differences),
        "looks": looks,
        "test": "one-sided studentized paired bootstrap over the held-out examples both evaluations scored, "
        "Bonferroni over the evaluations before the last",
    }


def _monitored_steps(path: Path, below: int) -> set[int]:
    """The steps below `below` that eval.jsonl holds a monitor score for (a resumed run's earlier ones included)."""
    steps = set()
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return steps
    for text in lines:
        try:
            found = json.loads(text)
        except ValueError:
            continue
        if found.get("step", below) < below and (found.get("monitor") or {}).get("monitor/overall_score") is not None:
            steps.add(found["step"])
    return steps


def line(found: dict[str, Any]) -> str:
    """The summary's line of a GoldBest.summary()."""
    text = f"gold-best checkpoint: step {found['step']}, monitor {found['monitor']:.3f}"
    text += f", training judge {found['judge']:.3f}" if found["judge"] is not None else ""
    peak = found.get("peak_above_last")
    if peak:
        last = found["last"]
        p = "n/a" if peak["p"] is None else f"{peak['p']:.3g}"
        text += (
            f"; last evaluation (step {last['step']}) monitor {last['monitor']:.3f}: the peak above it with "
            f"p = {p} over {peak['examples']} examples and {peak['looks']} earlier evaluations"
        )
    return text + f" ({found['folder']})"
