"""Alarms that a policy is pleasing its judge rather than getting better (Rubric Dropout, arXiv 2608.11669: the
training judge's score kept rising while a stronger judge's fell):

- divergence: since the first in-training evaluation, the training judge's overall score rose by `monitor_rise` while
  the monitor's fell by `monitor_fall`, or their gap widened by more than `monitor_gap_growth` of the first gap (and
  at least `monitor_rise`);
- grader talk: the share of training completions the integrity check noted or vetoed (talk aimed at the grader)
  rose by `note_rate_rise` between the run's first and latest windows of generation batches.

Each fires once: a line on stderr, a wandb alert, a record in the summary; `on_alarm: stop` also saves a checkpoint
and ends the run. Every process decides alike: the scores are broadcast from the main process, and the note counts
are summed over the processes (rurl/guards.py), before anyone decides.
"""

import sys
from typing import Any

from transformers import TrainerCallback


class RewardAlarms(TrainerCallback):
    def __init__(self, trainer, rurl, failure_monitor):
        self.trainer, self.rurl, self.failure_monitor = trainer, rurl, failure_monitor
        self.first: tuple[float, float] | None = None
        """(training judge, monitor) overall scores at the first evaluation both scored."""
        self.fired: list[dict[str, Any]] = []
        self._stop = False

    def observe_eval(self, step: int, judge: float | None, monitor: float | None) -> None:
        """Every process, at every evaluation, with the same scores."""
        if judge is None or monitor is None or self._has_fired("divergence"):
            return
        if self.first is None:
            self.first = (judge, monitor)
            return
        rurl, (judge0, monitor0) = self.rurl, self.first
        gap0, gap = judge0 - monitor0, judge - monitor
        widened = gap - gap0 > max(abs(gap0) * rurl.monitor_gap_growth, rurl.monitor_rise)
        if (judge - judge0 >= rurl.monitor_rise and monitor0 - monitor >= rurl.monitor_fall) or widened:
            self._fire(
                step,
                "divergence",
                f"the training judge's overall score went {judge0:.3f} -> {judge:.3f} while the monitor's went "
                f"{monitor0:.3f} -> {monitor:.3f} (gap {gap0:+.3f} -> {gap:+.3f}) since the first evaluation: the "
                "policy may be pleasing its judge",
            )

    def on_step_end(self, args, state, control, **kwargs):
        rates = self.failure_monitor.note_rates()
        if rates is not None and not self._has_fired("grader_talk"):
            first, latest = rates
            if latest - first >= self.rurl.note_rate_rise:
                self._fire(
                    state.global_step,
                    "grader_talk",
                    f"the share of completions the integrity check noted or vetoed as talk aimed at the grader went "
                    f"{first:.1%} -> {latest:.1%} (first -> latest {self.rurl.criteria_window} generation batches): "
                    "the policy may be learning to talk to its grader",
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
