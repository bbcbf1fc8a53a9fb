"""Stopping a RuRL run cleanly instead of optimising on noise: the judge-failure guard, and a stop asked for by the
trainer (dynamic sampling that found nothing to learn from). Both save a checkpoint at the step they stop at, so
`--resume_from_checkpoint true` continues once the cause is fixed.

Under several processes every process must take the same decision at the same step: transformers does not
synchronise `should_save` / `should_training_stop`, and a save is collective (one process saving and leaving while
the others generate hangs until the process group's timeout). So the guard decides only on counts summed over all
processes: each process records its own reward calls, and the trainer (rurl/trainer.py) sums them, once per
generation batch, at a point every process reaches together."""

from collections import defaultdict, deque
from collections.abc import Callable

from transformers import TrainerCallback

from grading.batch import BatchStats

COUNTS = (
    "completions",
    "unscored",
    "verdicts",
    "failed_verdicts",
    "timed_out",
    "judge_calls",
    "failed_requests",
    "noted",
    "flagged",
    "dropped_verdicts",
)


class FailureMonitor:
    """The unscored and failed-verdict shares of the last `window` generation batches, over all processes.

    `record` (the trainer, with the statistics each rubric reward call returned) adds this process's counts to a
    pending batch; `sync(reduce)` sums the pending counts over the processes (`reduce`: a list of numbers -> their
    sums over the processes) and appends them to the window. One process: reduce is the identity."""

    def __init__(self, window: int, criteria_window: int = 10):
        self.batches: deque[dict[str, int]] = deque(maxlen=window)
        self.totals = dict.fromkeys(COUNTS, 0)
        self.seconds = 0.0
        self.criteria: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        """This process's criterion -> [times met, times decided] over the run; the trainer gathers them at each save
        and at the end (RubricGRPOTrainer.criteria_table)."""
        self.criteria_window = criteria_window
        self.first: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        """The same over this run's first `criteria_window` generation batches; `last` over its latest ones."""
        self.last: deque[dict[str, list[int]]] = deque(maxlen=criteria_window)
        self.first_counts = dict.fromkeys(COUNTS, 0)
        """The summed counts of the run's first `criteria_window` batches; `recent` holds the latest ones."""
        self.recent: deque[dict[str, int]] = deque(maxlen=criteria_window)
        self.synced = 0
        self._pending = dict.fromkeys(COUNTS, 0)
        self._pending_criteria: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.dropout = False
        """Whether the reward drops criteria (rubric dropout): the verdicts it saved are then logged per batch."""

    def record(self, stats: BatchStats) -> None:
        for name in COUNTS:
            self._pending[name] += getattr(stats, name) or 0
        self.dropout = self.dropout or stats.dropped_verdicts is not None
        self.seconds += stats.seconds
        for text, (met, total) in stats.criteria.items():
            for counts in (self.criteria[text], self._pending_criteria[text]):
                counts[0] += met
                counts[1] += total

    def sync(self, reduce: Callable[[list[float]], list[float]] = lambda values: values) -> None:
        summed = dict(zip(COUNTS, (int(v) for v in reduce([float(self._pending[n]) for n in COUNTS]))))
        self._pending = dict.fromkeys(COUNTS, 0)
        self.batches.append(summed)
        for name in COUNTS:
            self.totals[name] += summed[name]
        batch, self._pending_criteria = self._pending_criteria, defaultdict(lambda: [0, 0])
        if self.synced < self.criteria_window:
            for text, (met, decided) in batch.items():
                self.first[text][0] += met
                self.first[text][1] += decided
            for name in COUNTS:
                self.first_counts[name] += summed[name]
        self.recent.append(summed)
        self.last.append(dict(batch))
        self.synced += 1

    def note_counts(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """(completions the integrity check noted or vetoed as talk aimed at the grader, completions) over the first
        and the latest `criteria_window` batches of all processes, once the two windows no longer overlap."""
        if self.synced < 2 * self.criteria_window:
            return None
        first = self.first_counts
        latest = {name: sum(batch[name] for batch in self.recent) for name in ("noted", "flagged", "completions")}
        return tuple((counts["noted"] + counts["flagged"], counts["completions"]) for counts in (first, latest))

    def state(self) -> dict:
        """What the grader-talk alarm compares, for a checkpoint: the first window's counts and the latest window."""
        return {"first_counts": self.first_counts, "synced": self.synced, "recent": list(self.recent)}

    def load(self, state: dict) -> None:
        """A resumed run goes on from the saved windows: its first window stays the first run's."""
        self.first_counts = {**dict.fromkeys(COUNTS, 0), **state["first_counts"]}  # counts added since: 0
        self.synced = int(state["synced"])
        self.recent.extend(state["recent"])

    def windows(self) -> dict[str, dict[str, list[int]]]:
        """This process's per-criterion [met, decided] over the first and the latest `criteria_window` batches."""
        last: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for batch in self.last:
            for text, (met, decided) in batch.items():
                last[text][0] += met
                last[text][1] += decided
        return {"first": dict(self.first), "last": dict(last)}

    def _share(self, part: str, whole: str) -> float:
        total = sum(batch[whole] for batch in self.batches)
        return sum(batch[part] for batch in self.batches) / total if total else 0.0

    @property
    def rate(self) -> float:
        """Unscored completions over the window."""
        return self._share("unscored", "completions")

    @property
    def verdict_rate(self) -> float:
        """Failed judge verdicts over the window."""
        return self._share("failed_verdicts", "verdicts")


class StopOnJudgeFailures(TrainerCallback):
    """At the end of a step: when the unscored share or the failed-verdict share over the window exceeds
    `max_rate`, save and stop (the window is the same on every process, so is the decision)."""

    def __init__(self, monitor: FailureMonitor, max_rate: float):
        self.monitor, self.max_rate = monitor, max_rate
        self.reason: str | None = None

    def on_step_end(self, args, state, control, **kwargs):
        monitor = self.monitor
        if self.max_rate >= 1.0 or not monitor.batches:
            return control
        unscored, failed = monitor.rate, monitor.verdict_rate
        if unscored > self.max_rate or failed > self.max_rate:
            batches = len(monitor.batches)
            self.reason = (
                f"judge-failure guard: over the last {batches} generation batch(es) of all processes, "
                f"{unscored:.0%} of the completions got no score and {failed:.0%} of the judge's verdicts "
                f"failed (limit grading.max_failure_rate = {self.max_rate:.0%}): is the judge up and "
                "answering the verdict format? (rubric/judge_failure_rate, rubric/unscored_rate and "
                "rubric/timed_out_rate in the logs)"
            )
            control.should_save = True
            control.should_training_stop = True
        return control


class StopOnRequest(TrainerCallback):
    """Save and stop when the trainer set `stop_reason` during the step (it sets it on every process alike)."""

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
