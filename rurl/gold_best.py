"""The gold-best checkpoint: with a monitor judge (rurl.monitor_judge, ideally a stronger or gold one), the run keeps
the model of the evaluation where the monitor's held-out score peaked, in output_dir/gold-best (one folder, replaced
at each new peak: the disk of one more model; a LoRA run keeps the adapter, which `rubricrl eval --policy` merges).
Under reward hacking the training judge's score keeps rising after the monitor's has turned (Rubric Dropout, arXiv
2608.11669: the gold score peaked near step 240 of 400 and fell): the last checkpoint is then not the best model.

"Peak" is the highest monitor overall score among the evaluations, the earliest of equals; with tens of held-out
examples two evaluations' scores differ by noise, so the summary also says how sure the peak is above the final
evaluation: a one-sided studentized paired bootstrap over the examples both scored (checks/evidence.py), its
p-value and count. Every process takes the same decision from the broadcast scores (a ZeRO-3 save is collective)."""

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
            common = sorted(set(self.best["paired"]) & set(self.last["paired"]))
            differences = [self.best["paired"][i][1] - self.last["paired"][i][1] for i in common]
            out["last"] = {key: self.last[key] for key in ("step", "monitor", "judge")}
            out["peak_above_last"] = {
                "p": paired_bootstrap(differences, seed=self.best["step"]) if len(differences) > 1 else None,
                "examples": len(differences),
                "test": "one-sided studentized paired bootstrap over the held-out examples both evaluations scored",
            }
        return out


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
            f"p = {p} over {peak['examples']} examples"
        )
    return text + f" ({found['folder']})"
