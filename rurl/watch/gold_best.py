"""The gold-best checkpoint: with a monitor judge (rurl.monitor_judge, ideally a stronger or gold one), the run keeps
the model of the evaluation where the monitor's held-out score peaked, in output_dir/gold-best (one folder, replaced
at each new peak: the disk of one more model; a LoRA run keeps the adapter, which `rubricrl eval --policy` merges).
Under reward hacking the training judge's score keeps rising after the monitor's has turned (Rubric Dropout, arXiv
2608.11669: the gold score peaked near step 240 of 400 and fell): the last checkpoint is then not the best model.

"Peak" is the highest monitor overall score among the evaluations, the earliest of equals; with tens of held-out
examples two evaluations' scores differ by noise, so the summary also says how sure the peak is above the final
evaluation: a one-sided studentized paired bootstrap over the examples both scored (checks/evidence.py), corrected
for having picked the peak among the earlier evaluations (peak_test), its p-value and counts. Every process takes
the same decision from the broadcast scores (a ZeRO-3 save is collective).

A new peak is saved whole or not at all: the model and its record (gold_best.json, inside the folder) are written
into a sibling folder, which then takes the place of the old one by renames; a run killed at any moment leaves the
old peak or the new one, and the next run's start finishes or undoes the swap. The save never pushes to the Hub:
with push_to_hub, gold-best/ goes up with the output folder when the Trainer pushes it (at the end of the run, and
at each checkpoint with hub_strategy every_save); the sibling folders' names start with "_", which those pushes
skip."""

import json
import os
import shutil
from pathlib import Path
from typing import Any

from checks.evidence import paired_bootstrap
from rubricrl.config import ConfigError
from rurl.watch.eval_log import EVAL_FILE, read_evaluations

FOLDER = "gold-best"
RECORD = "gold_best.json"
STAGING = "_gold-best.new"
"""Where a new peak is written before it takes gold-best's place."""
RETIRED = "_gold-best.old"
"""Where the replaced peak waits, between the two renames, to be removed."""


class GoldBest:
    def __init__(self, trainer, output_dir: Path, resumed_from: str | None = None):
        self.trainer, self.folder = trainer, Path(output_dir) / FOLDER
        self.best: dict[str, Any] | None = None
        """{step, monitor, judge, paired}: the peak so far, whose model is in the folder. A run resumed from a
        checkpoint reads it back and replaces it only with a higher monitor score, even when it was saved after the
        checkpoint, by steps the resume abandoned (`before_resume_from` then names the checkpoint: the summary says
        so). A fresh run starts anew, whatever an earlier run left in the folder: its first monitored evaluation
        replaces it."""
        self.last: dict[str, Any] | None = None
        if getattr(trainer, "is_fsdp_enabled", False):  # transformers saves no model from a sharded state dict
            kind = trainer.accelerator.state.fsdp_plugin.state_dict_type
            if "FULL_STATE_DICT" not in str(kind):
                raise ConfigError(
                    f"rurl.gold_best keeps a whole model: FSDP's state dict type is {kind}; set fsdp_state_dict_type "
                    "FULL_STATE_DICT, or gold_best false"
                )
        if trainer.args.should_save:
            recover(self.folder)
        if resumed_from is not None:
            accelerator = trainer.accelerator
            kept = self._saved(Path(resumed_from)) if accelerator.is_main_process else None
            if accelerator.num_processes > 1:  # one decision everywhere: each new peak's save is collective
                from accelerate.utils import broadcast_object_list

                kept = broadcast_object_list([kept])[0]
            self.best = kept
        trainer.accelerator.wait_for_everyone()  # the folder recovered before any process saves into its sibling

    def _saved(self, checkpoint: Path) -> dict[str, Any] | None:
        """The saved peak's record; one saved after the checkpoint is marked, on disk too, as from the steps the
        resume abandoned (a later resume from a later checkpoint could not tell by the step)."""
        try:
            saved = json.loads((self.folder / RECORD).read_text())
            resumed_at = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
        except (OSError, ValueError, KeyError):
            return None
        if saved["step"] > resumed_at and not saved.get("before_resume_from"):
            saved["before_resume_from"] = checkpoint.name
            written = self.folder / f".{RECORD}.new"
            written.write_text(json.dumps(saved))
            os.replace(written, self.folder / RECORD)
        return saved

    def observe(self, step: int, judge: float | None, monitor: float | None, paired: dict | None) -> None:
        """Every process, at every evaluation, with the same scores; a new peak saves the model."""
        if monitor is None:
            return
        self.last = {"step": step, "monitor": monitor, "judge": judge, "paired": paired or {}}
        if self.best is not None and monitor <= self.best["monitor"]:
            return
        self.best = self.last
        self._replace()

    def _replace(self) -> None:
        """The model and its record written beside the folder, then swapped in (`swap`)."""
        trainer, staging = self.trainer, self.folder.with_name(STAGING)
        save_policy(trainer, staging)  # every process: it gathers sharded weights
        if trainer.args.should_save:
            (staging / RECORD).write_text(json.dumps(self.best))
        trainer.accelerator.wait_for_everyone()  # every process's part written before the folder moves
        if trainer.args.should_save:
            swap(staging, self.folder)

    def summary(self) -> dict[str, Any] | None:
        """The peak's step and both judges' scores there, the last evaluation's, and the test of peak against last."""
        if self.best is None:
            return None
        out = {key: self.best[key] for key in ("step", "monitor", "judge")}
        if self.best.get("before_resume_from"):
            out["before_resume_from"] = self.best["before_resume_from"]
        out["folder"] = str(self.folder)
        if self.last is not None and self.last is not self.best:  # a resumed run may evaluate the peak's step again
            out["last"] = {key: self.last[key] for key in ("step", "monitor", "judge")}
            looks = len(_monitored_steps(self.folder.parent / EVAL_FILE, below=self.last["step"])) or 1
            out["peak_above_last"] = peak_test(self.best["paired"], self.last["paired"], looks, seed=self.best["step"])
        return out


def save_policy(trainer, folder: Path) -> None:
    """The policy saved into `folder` by every process (ZeRO-3, and FSDP with a full state dict, gather it), as
    Trainer saves a checkpoint's model: never pushed to the Hub (Trainer.save_model pushes the whole output folder
    when push_to_hub is set and the call is not its own), and without RubricGRPOTrainer's training state, which only
    a checkpoint needs."""
    from transformers import Trainer

    Trainer.save_model(trainer, str(folder), _internal_call=True)


def swap(staging: Path, folder: Path) -> None:
    """`staging` (a whole model and its record) in `folder`'s place, by renames: a kill at any point leaves the old
    folder or the new one whole, or the old one moved aside, which `recover` puts back."""
    retired = folder.with_name(RETIRED)
    if folder.exists():
        shutil.rmtree(retired, ignore_errors=True)  # a leftover of an earlier removal, cut short
        folder.rename(retired)
    staging.rename(folder)
    shutil.rmtree(retired, ignore_errors=True)


def recover(folder: Path) -> None:
    """What a run killed during a save left beside the folder, cleared: the old peak put back when the kill fell
    between swap's two renames; a partly written new one, or the old one being removed, deleted."""
    retired = folder.with_name(RETIRED)
    if retired.exists() and not folder.exists():
        retired.rename(folder)
    shutil.rmtree(folder.with_name(STAGING), ignore_errors=True)
    shutil.rmtree(retired, ignore_errors=True)


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
    return {
        found["step"]
        for found in read_evaluations(path, strict=False)
        if found.get("step", below) < below and (found.get("monitor") or {}).get("monitor/overall_score") is not None
    }


def line(found: dict[str, Any]) -> str:
    """The summary's line of a GoldBest.summary()."""
    text = f"gold-best checkpoint: step {found['step']}, monitor {found['monitor']:.3f}"
    text += f", training judge {found['judge']:.3f}" if found["judge"] is not None else ""
    if found.get("before_resume_from"):
        text += f", from an earlier attempt of this run, before the resume from {found['before_resume_from']}"
    peak = found.get("peak_above_last")
    if peak:
        last = found["last"]
        p = "n/a" if peak["p"] is None else f"{peak['p']:.3g}"
        text += (
            f"; last evaluation (step {last['step']}) monitor {last['monitor']:.3f}: the peak above it with "
            f"p = {p} over {peak['examples']} examples and {peak['looks']} earlier evaluations"
        )
    return text + f" ({found['folder']})"
