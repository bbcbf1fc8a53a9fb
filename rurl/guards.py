"""Stopping a RuRL run cleanly instead of optimising on noise: the judge-failure guard, and a stop asked for by the
trainer (dynamic sampling that found nothing to learn from). Both save a checkpoint at the step they stop at, so
`--resume_from_checkpoint true` continues once the cause is fixed."""

from collections import deque

from transformers import TrainerCallback

from grading.reward import BatchStats


class FailureMonitor:
    """The unscored share of the last `window` reward calls (generation batches), fed by the reward's on_batch."""

    def __init__(self, window: int):
        self.batches: deque[tuple[int, int]] = deque(maxlen=window)
        self.totals = {"completions": 0, "unscored": 0, "verdicts": 0, "failed_verdicts": 0, "judge_calls": 0}
        self.seconds = 0.0

    def record(self, stats: BatchStats) -> None:
        self.batches.append((stats.unscored, stats.completions))
        for name in self.totals:
            self.totals[name] += getattr(stats, name)
        self.seconds += stats.seconds

    @property
    def rate(self) -> float:
        total = sum(n for _, n in self.batches)
        return sum(u for u, _ in self.batches) / total if total else 0.0


class StopOnJudgeFailures(TrainerCallback):
    """At the end of a step: when the unscored rate over the window exceeds `max_rate`, save and stop."""

    def __init__(self, monitor: FailureMonitor, max_rate: float):
        self.monitor, self.max_rate = monitor, max_rate
        self.reason: str | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.max_rate < 1.0 and self.monitor.batches and self.monitor.rate > self.max_rate:
            batches = len(self.monitor.batches)
            self.reason = (f"judge-failure guard: {self.monitor.rate:.0%} of the completions of the last {batches} "
                           f"generation batch(es) got no score (limit grading.max_failure_rate = {self.max_rate:.0%}): "
                           "is the judge up and answering the verdict format? (rubric/judge_failure_rate in the "
                           "logs)")  # fmt: skip
            control.should_save = True
            control.should_training_stop = True
        return control


class StopOnRequest(TrainerCallback):
    """Save and stop when the trainer set `stop_reason` during the step."""

    def __init__(self, trainer):
        self.trainer = trainer

    @property
    def reason(self) -> str | None:
        return self.trainer.stop_reason

    def on_step_end(self, args, state, control, **kwargs):
        if self.trainer.stop_reason:
            control.should_save = True
            control.should_training_stop = True
        return control
