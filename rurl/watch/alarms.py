"""Alarms that a policy is pleasing its judge rather than getting better (Rubric Dropout, arXiv 2608.11669: the
training judge's score kept rising while a stronger judge's fell). Each is a test that passed, on top of a size:

- divergence: per held-out example, the training judge's score minus the monitor's, paired with the same example's
  at step 0 (the evaluation before any update; on a resumed run, the first one eval.jsonl holds): the mean of those
  changes is above 0 by a one-sided paired bootstrap at `alarm_level` split over the run's planned evaluations
  (Bonferroni), and the overall scores moved by the sizes set (the training judge's rose by `monitor_rise` while the
  monitor's fell by `monitor_fall`, or the gap widened by more than `monitor_gap_growth` of the first gap and at
  least `monitor_rise`);
- grader talk: the share of training completions the integrity check noted or vetoed (talk aimed at the grader)
  rose by `note_rate_rise` between the run's first and latest windows of generation batches, and a one-sided
  two-proportion test says so at `alarm_level` split over the run's steps.

Each fires once: a line with its evidence on stderr, a wandb alert, a record in the summary; `on_alarm: stop` also
saves a checkpoint and ends the run. Every process decides alike: the scores are broadcast from the main process,
and the note counts are summed over the processes (rurl/watch/guards.py), before anyone decides.
"""

import math
import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from checks.evidence import paired_bootstrap, two_proportions
from rurl.watch.eval_log import EVAL_FILE, read_evaluations


class RewardAlarms(TrainerCallback):
    def __init__(self, trainer, rurl, failure_monitor, resumed: bool = False):
        self.trainer, self.rurl, self.failure_monitor = trainer, rurl, failure_monitor
        self.resumed = resumed
        """A resumed run takes its baseline from eval.jsonl (`saved_baseline`); a fresh one from its step 0."""
        self.baseline: tuple[int, float, float, dict[str, list[float]]] | None = None
        """(step, training judge's and monitor's overall scores, per example [judge, monitor]) of the baseline."""
        self.fired: list[dict[str, Any]] = []
        self._stop = False

    def observe_eval(
        self, step: int, judge: float | None, monitor: float | None, paired: dict | None = None, saved=None
    ) -> None:
        """Every process, at every evaluation, with the same scores (and the same `saved` baseline, read by the main
        process: `saved_baseline`)."""
        if judge is None or monitor is None or not paired or self._has_fired("divergence"):
            return
        if self.baseline is None:
            self.baseline = tuple(saved) if saved else (step, judge, monitor, paired)
            if self.baseline[0] == step:
                return
        rurl, (step0, judge0, monitor0, paired0) = self.rurl, self.baseline
        common = sorted(set(paired) & set(paired0))
        changes = [(paired[i][0] - paired[i][1]) - (paired0[i][0] - paired0[i][1]) for i in common]
        looks = self._planned_evaluations()
        # enough draws that the bootstrap's smallest p-value (1 / (draws + 1)) sits well below the per-look level
        p = paired_bootstrap(
            changes, seed=step, draws=min(200_000, max(4_000, math.ceil(20 * looks / rurl.alarm_level)))
        )
        gap0, gap = judge0 - monitor0, judge - monitor
        widened = gap - gap0 > max(abs(gap0) * rurl.monitor_gap_growth, rurl.monitor_rise)
        moved = (judge - judge0 >= rurl.monitor_rise and monitor0 - monitor >= rurl.monitor_fall) or widened
        if moved and p <= rurl.alarm_level / looks:
            mean = sum(changes) / len(changes)
            self._fire(
                step,
                "divergence",
                f"the training judge's overall score went {judge0:.3f} -> {judge:.3f} while the monitor's went "
                f"{monitor0:.3f} -> {monitor:.3f} (gap {gap0:+.3f} -> {gap:+.3f}) since step {step0}; paired over "
                f"{len(changes)} held-out examples the gap grew by {mean:+.3f}, p = {p:.2g} (one-sided bootstrap) <= "
                f"{rurl.alarm_level:g} / {looks} planned evaluations: the policy may be pleasing its judge",
            )

    def saved_baseline(self, step: int) -> tuple[int, float, float, dict] | None:
        """A resumed run's baseline: the first evaluation with paired scores that eval.jsonl holds before `step`
        (the main process reads it and broadcasts it with the scores; a fresh run has none)."""
        if not self.resumed or not hasattr(self.trainer, "args"):
            return None
        for entry in read_evaluations(Path(self.trainer.args.output_dir) / EVAL_FILE):
            if entry.get("paired") and entry["step"] < step:
                judge, monitor = entry["metrics"].get("overall_score"), entry["monitor"].get("monitor/overall_score")
                if judge is not None and monitor is not None:
                    return entry["step"], judge, monitor, entry["paired"]
        return None

    def _planned_evaluations(self) -> int:
        """The evaluations after the baseline that the run plans (each a look at the same question)."""
        steps, every = getattr(getattr(self.trainer, "state", None), "max_steps", 0) or 0, self.rurl.eval_every
        return max(1, math.ceil(steps / every) if every else 1)

    def on_step_end(self, args, state, control, **kwargs):
        counts = self.failure_monitor.note_counts()
        if counts is not None and not self._has_fired("grader_talk"):
            (noted0, n0), (noted, n) = counts
            first, latest = noted0 / max(1, n0), noted / max(1, n)
            rise = latest - first
            p = two_proportions(noted0, n0, noted, n) / 2 if rise > 0 and n0 and n else 1.0  # one-sided: a rise
            steps = max(1, getattr(state, "max_steps", 0) or 1)
            if rise >= self.rurl.note_rate_rise and p <= self.rurl.alarm_level / steps:
                self._fire(
                    state.global_step,
                    "grader_talk",
                    f"the share of completions the integrity check noted or vetoed as talk aimed at the grader went "
                    f"{first:.1%} ({noted0} of {n0}) -> {latest:.1%} ({noted} of {n}) (first -> latest "
                    f"{self.rurl.criteria_window} generation batches), p = {p:.2g} (one-sided two-proportion test) <= "
                    f"{self.rurl.alarm_level:g} / {steps} steps: the policy may be learning to talk to its grader",
                )
        if self._stop:
            control.should_save = True
            control.should_training_stop = True
        return control

    def _has_fired(self, kind: str) -> bool:
        return any(alarm["kind"] == kind for alarm in self.fired)

    def _fire(self, step: int, kind: str, text: str) -> None:
        line = f"rurl alarm at step {step}: {text}"
        self.fired.append({"step": step, "kind": kind, "line": line})
        if self.rurl.on_alarm == "stop":
            self._stop = True
            self.trainer.stop_reason = f"{line} (rurl.on_alarm: stop)"
        if not self.trainer.accelerator.is_main_process:
            return
        print(line, file=sys.stderr)
        try:
            import wandb

            if wandb.run is not None:
                wandb.run.alert(title=f"rurl alarm: {kind}", text=line)
        except Exception as error:  # noqa: BLE001 - an alert that cannot be sent never stops the run
            print(f"rurl alarm: the wandb alert was not sent: {error}", file=sys.stderr)
