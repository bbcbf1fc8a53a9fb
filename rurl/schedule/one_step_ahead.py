"""The judge off the critical path (`rurl.async_steps: 1`): batch t+1 is generated while batch t is graded.

A synchronous GRPO step generates, waits for every verdict, then updates. With one step ahead, the step that trains
batch t first generates batch t+1 with the current weights and starts grading it in the background; only then does
it collect batch t's grades (started one step earlier, graded while t's own step generated and the last update ran),
compute t's advantages and update. The judge's time hides behind generation and the update; what is left is logged
as `async/wait_s`. As open-instruct's `grpo_fast.py` (async_steps) and verl's one-step-off-policy recipe do, the
trained batch comes from weights one update old, and the loss's ratio is taken against the log-probabilities of the
weights that generated it (computed when they generated it), so PPO's clipping bounds the off-policy step.

How it sits in TRL 1.16's GRPOTrainer, whose `_generate_and_score_completions` generates, scores and computes the
advantages in one call:
- **start**: that call runs once at generation time. The rubric reward (an `async def`, as TRL runs it on its own
  event loop) is wrapped (`deferred`): the call starts as a task and TRL gets zeros meanwhile; the metrics and tables
  TRL writes from those zeros go to scratch containers and are dropped, except the generation's own (lengths,
  tokens). Every log-probability TRL computes there is kept. Where TRL computed none of the generating weights'
  own, they are read from generation's logits as it samples (transformers' `generate`:
  `rurl/schedule/sampled_logps.py`), or computed by one more forward pass (other generation paths).
- **collect**: when the batch trains, the same call runs again, replayed: generation and log-probabilities are
  handed back as they were computed, the wrapped reward awaits its task, and TRL computes advantages, metrics and
  tables from the real rewards, as in a synchronous step. Whatever the reward function reported while it ran in the
  background (TRL's `log_metric` and `log_extra`) is replayed then, and the call's result returned (with the rubric
  reward's batch statistics, which the trainer takes from it: rurl/trainer.py), so the failure guard, the alarms
  and the completions table see each batch whole, in training order.

The ratio at staleness 0 is 1: the schedule runs with dropout off (TRL's `disable_dropout`; `rurl train` sets it),
and positions after a sequence's end hold 0, as the loss's own do. Each batch's grading starts once the batch before
it is graded (the reward's `grade_after`, rurl/reward/rubric_reward.py), so a step's `async/wait_s` is the wait for its
own calls and the judge calls, failures and latency each batch logs are its own. `async/staleness` is logged per
optimizer step, as the mean over its completions of the updates since their weights generated them (a batch joined by
dynamic sampling's on-policy rounds: the share generated ahead, at its first update).

The next generation batch is read one item ahead of the trainer's own loop (`fetch`, `peek`): the step trains the
same prompts as a synchronous step would. Where no batch was generated ahead (the first step, the first after a
resume or after an epoch's end) the step generates its own batch first. At the end of training the batch generated
ahead is not trained: its calls are cancelled and counted. A checkpoint holds no batch in flight: a resumed run
generates the next one again, with the checkpoint's weights.
"""

import asyncio
import functools
import inspect
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback

from rurl.schedule.sampled_logps import SampledLogps

SCHEDULED = ("grade_after", "trains_at")
"""What the schedule tells a reward function that takes them (rurl/reward/rubric_reward.py): what to await before its
first judge call, and the optimizer step its batch trains at."""
REPORTS = ("log_metric", "log_extra")
"""The callbacks a reward function reports through while it runs: recorded in the background, replayed at collect."""


@dataclass
class Pending:
    """A generation batch started ahead: what `collect` needs to replay its call."""

    inputs: list[dict]
    step: int  # the global step whose weights generated it
    trains_at: int = 0  # the global step that trains it: `step`, or the next one for a batch generated ahead
    generation: tuple | None = None  # TRL's _generate result
    logps: list = field(default_factory=list)  # TRL's _get_per_token_logps_and_entropies results, in call order
    old_logps: torch.Tensor | None = None  # the generating weights' log-probabilities, where TRL computed none
    metrics: dict[str, list] = field(default_factory=dict)  # what the generation logged
    tasks: dict[int, asyncio.Task] = field(default_factory=dict)  # reward function index -> its running call
    reports: dict[int, list[tuple[str, tuple]]] = field(default_factory=dict)  # index -> callbacks to replay
    started: float = 0.0  # when the first call started
    done: float = 0.0  # when the last call ended (set on TRL's event loop)
    waits_for: list = field(default_factory=list)  # the grading tasks of the batch before, awaited before its own


class Lookahead:
    """An iterator that can be read ahead without losing what it read."""

    def __init__(self, source: Iterator):
        self.source, self.buffer, self.ended = source, deque(), False

    def __iter__(self):
        return self

    def __next__(self):
        if self.buffer:
            return self.buffer.popleft()
        if self.ended:
            raise StopIteration
        return next(self.source)

    def peek(self, index: int) -> Any:
        """The item `index` places ahead (0: the next one), or None past the end."""
        while len(self.buffer) <= index and not self.ended:
            try:
                self.buffer.append(next(self.source))
            except StopIteration:
                self.ended = True
        return self.buffer[index] if index < len(self.buffer) else None


def deferred(function: Callable, index: int, schedule: "AheadSchedule") -> Callable:
    """`function` (an async reward function) as TRL calls it under the schedule."""

    async def reward(**kwargs: Any) -> list:
        return await schedule.reward_call(index, function, kwargs)

    reward.__name__ = function.__name__
    reward.inner = function  # the function itself: for calls outside the schedule
    return reward


def _emptied(container: Any) -> Any:
    """An empty container of the same shape (TRL's `_logs`: dicts of deques with a maximum length)."""
    if isinstance(container, defaultdict):
        return defaultdict(container.default_factory)
    if isinstance(container, dict):
        return {key: _emptied(value) for key, value in container.items()}
    if isinstance(container, deque):
        return deque(maxlen=container.maxlen)
    return type(container)()


class AheadSchedule:
    """One trainer's schedule: `step(inputs)` is its `_generate_and_score_completions` in training. `generate` is
    GRPOTrainer's own `_generate_and_score_completions`; `after` continues a collected batch (dynamic sampling's
    extra rounds), or None."""

    def __init__(self, trainer: Any, generate: Callable[[list[dict]], dict], after: Callable | None = None):
        self.trainer, self.generate, self.after = trainer, generate, after
        self.phase: str | None = None  # "start" or "collect" while TRL's call runs for `current`
        self.current: Pending | None = None
        self.pending: Pending | None = None  # the batch generated ahead
        self.lookahead: Lookahead | None = None
        self.fetched: tuple[int, list] = (0, [])  # TRL's micro-step at the last fetch, and the batches fetched
        self.totals = {"grading_s": 0.0, "hidden_s": 0.0, "waited_s": 0.0, "batches": 0}
        self.untrained = {"batches": 0, "completions": 0, "cancelled_completions": 0}
        self.sampled: SampledLogps | None = None  # the last generation's sampled-token log-probabilities
        self.boundary = StepBoundary(trainer)  # a callback: TRL's micro-step count at the last optimizer step's end
        trainer.add_callback(self.boundary)
        trainer.reward_funcs = [
            deferred(f, i, self) if inspect.iscoroutinefunction(f) else f  # as TRL tells them (partials unwrapped)
            for i, f in enumerate(trainer.reward_funcs)
        ]

    # --- the trainer's loop --------------------------------------------------------------------------------------

    def fetch(self, epoch_iterator: Iterator, num_batches: int, device, fetch: Callable) -> tuple[list, Any]:
        """Trainer.get_batch_samples through a Lookahead kept over the epoch's iterator."""
        if self.lookahead is None or self.lookahead.source is not epoch_iterator:
            self.lookahead = Lookahead(epoch_iterator)
        batches, count = fetch(self.lookahead, num_batches, device)
        self.fetched = (self.trainer._step, batches)
        return batches, count

    def peek(self) -> list[dict] | None:
        """The generation batch the trainer will hand over next, or None when the epoch ends first."""
        trainer = self.trainer
        every = trainer.args.steps_per_generation * trainer.num_iterations
        fetched_at, batches = self.fetched
        ahead = trainer._step + every - fetched_at  # places after the first batch of this optimizer step
        if ahead < len(batches):
            return batches[ahead]
        return None if self.lookahead is None else self.lookahead.peek(ahead - len(batches))

    def step(self, inputs: list[dict]) -> dict[str, Any]:
        current, self.pending = self.pending, None
        if current is not None and current.inputs is not inputs:  # not the batch read ahead: never expected
            self._cancel(current)
            current = None
        if current is None:  # nothing generated ahead: the first step, a resumed run, a new epoch
            current = self.start(inputs)
        upcoming = self.peek()
        if upcoming is not None:
            self.pending = self.start(upcoming, after=current)  # with the weights this step starts from
        output = self.collect(current)
        return output if self.after is None else self.after(current.inputs, output)

    def close(self) -> None:
        """The end of training: the batch generated ahead is not trained; its calls are cancelled, not awaited."""
        if self.pending is not None:
            self._cancel(self.pending)
            self.pending = None

    def summary(self) -> dict[str, Any]:
        return {
            "async_steps": 1,
            "batches": self.totals["batches"],
            "grading_seconds": round(self.totals["grading_s"], 1),
            "hidden_seconds": round(self.totals["hidden_s"], 1),
            "waited_seconds": round(self.totals["waited_s"], 1),
            "untrained_batches": self.untrained["batches"],
            "untrained_completions": self.untrained["completions"],
            "cancelled_completions": self.untrained["cancelled_completions"],
        }

    # --- the two halves of a batch -------------------------------------------------------------------------------

    def start(self, inputs: list[dict], after: Pending | None = None) -> Pending:
        """Generate `inputs`' completions and start grading them once `after`'s grading is done; TRL's metrics of
        this call are kept apart."""
        trainer = self.trainer
        step, args = trainer.state.global_step, trainer.args
        trains_at = step
        if after is not None:  # read one generation batch ahead of TRL's micro-step counter
            every = args.steps_per_generation * args.num_iterations
            taken = trainer._step - self.boundary.micro_step  # micro-steps of the current optimizer step so far
            trains_at = step_trained_at(step, taken, every, args.gradient_accumulation_steps)
        pending = Pending(inputs=inputs, step=step, trains_at=trains_at)
        if after is not None:
            pending.waits_for = list(after.tasks.values())
        saved = trainer._metrics, trainer._logs, trainer._pending_metrics, trainer._pending_extra_logs
        trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        trainer._logs = _emptied(trainer._logs)
        trainer._pending_metrics, trainer._pending_extra_logs = defaultdict(list), defaultdict(list)
        self.phase, self.current = "start", pending
        try:
            output = self.generate(inputs)
        finally:
            scratch = trainer._metrics["train"]
            trainer._metrics, trainer._logs, trainer._pending_metrics, trainer._pending_extra_logs = saved
            self.phase, self.current = None, None
        pending.metrics = dict(scratch)
        if "old_per_token_logps" not in output:
            pending.old_logps = self.old_logps(output)
        return pending

    def generated_at(self, output: dict[str, Any], step: int) -> None:
        """Mark each row of `output` with the global step whose weights generated it (the trainer logs staleness
        per optimizer step from it)."""
        ids = output["completion_ids"]
        output["generated_at"] = torch.full((ids.size(0),), step, dtype=torch.long, device=ids.device)

    def collect(self, pending: Pending) -> dict[str, Any]:
        """Wait for `pending`'s grades, then replay its call with them: TRL's output for the batch, as a synchronous
        step would have made it from the same completions."""
        trainer = self.trainer
        began = time.monotonic()
        tasks = list(pending.tasks.values())
        if tasks:
            asyncio.run_coroutine_threadsafe(asyncio.wait(tasks), trainer.async_loop).result()
        waited = time.monotonic() - began
        metrics = trainer._metrics["train"]
        before = {key: len(values) for key, values in metrics.items()}
        self.phase, self.current = "collect", pending
        try:
            output = self.generate(pending.inputs)
        finally:
            self.phase, self.current = None, None
        if pending.logps:
            raise RuntimeError("rurl async_steps: TRL computed fewer log-probabilities than at generation; report it")
        for key, values in pending.metrics.items():  # the generation's metrics, which the replay did not log
            if key == "num_tokens":
                metrics[key] = values
            elif len(metrics.get(key, ())) == before.get(key, 0):
                metrics[key].extend(values)
        if pending.old_logps is not None:
            output["old_per_token_logps"] = pending.old_logps
        self.generated_at(output, pending.step)
        grading = (pending.done - pending.started) if tasks else 0.0
        hidden = max(0.0, min(pending.done, began) - pending.started) if tasks else 0.0
        metrics["async/wait_s"].append(waited)
        metrics["async/overlap_s"].append(hidden)
        self.totals["grading_s"] += grading
        self.totals["hidden_s"] += hidden
        self.totals["waited_s"] += waited
        self.totals["batches"] += 1
        return output

    def old_logps(self, output: dict[str, Any]) -> torch.Tensor:
        """The generating weights' per-token log-probabilities of `output`'s completions, as TRL computes its
        `old_per_token_logps` (text batches): read while `generate` sampled them where it could, else computed by
        a forward of the current weights (the generating ones: no update has run since)."""
        from trl.models.utils import disable_gradient_checkpointing

        trainer = self.trainer
        sampled, self.sampled = self.sampled, None
        if sampled is not None:
            return sampled.per_token(output["completion_ids"], output["completion_mask"])
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                ids,
                mask,
                output["completion_ids"].size(1),
                batch_size=trainer.args.per_device_train_batch_size,
            )
        return logps

    # --- what TRL calls inside the two halves --------------------------------------------------------------------

    def generated(self, prompts: list, generate: Callable) -> tuple:
        """TRL's `_generate`: run and kept at start, handed back at collect."""
        if self.phase == "collect":
            return self.current.generation
        self.sampled = None
        if self._readable():
            with SampledLogps(self._generating_model(), self.trainer.temperature) as self.sampled:
                result = generate(prompts)
        else:
            result = generate(prompts)
        if self.phase == "start":
            self.current.generation = result
        return result

    def _readable(self) -> bool:
        """Whether the sampled tokens' log-probabilities can be read during generation: transformers' `generate`,
        one turn per prompt (vLLM's path has TRL compute them; continuous batching interleaves sequences), from a
        float32 policy without mixed precision. In bfloat16 a cached decode's arithmetic differs from the loss's
        forward by up to 4e-3 per token, so the forward computes them there, as the loss will
        (rurl/schedule/sampled_logps.py)."""
        trainer = self.trainer
        args = trainer.args
        return not (
            trainer.use_vllm
            or trainer.use_transformers_continuous_batching
            or trainer.tools
            or trainer._is_vlm
            or args.bf16
            or args.fp16
            or self._generating_model().dtype != torch.float32
        )

    def _generating_model(self) -> torch.nn.Module:
        """The model whose forward `generate` calls (under PEFT, the base model)."""
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        return model.get_base_model() if hasattr(model, "get_base_model") else model

    def logps(self, compute: Callable, *args: Any, **kwargs: Any) -> tuple:
        """TRL's `_get_per_token_logps_and_entropies`: computed and kept at start, handed back at collect."""
        if self.phase == "collect":
            if not self.current.logps:
                raise RuntimeError("rurl async_steps: TRL asked for more log-probabilities than at generation")
            return self.current.logps.pop(0)
        result = compute(*args, **kwargs)
        if self.phase == "start":
            self.current.logps.append(result)
        return result

    async def reward_call(self, index: int, function: Callable, kwargs: dict[str, Any]) -> list:
        """A wrapped reward function's call, on TRL's event loop: started (zeros for now) at start, awaited and its
        reports replayed at collect, passed through otherwise (evaluation, dynamic sampling's extra rounds)."""
        pending = self.current
        if self.phase == "start":
            reports: list[tuple[str, tuple]] = []
            for name in REPORTS:
                if kwargs.get(name) is not None:
                    kwargs[name] = functools.partial(_record, reports, name)
            if _takes(function, SCHEDULED):  # the rubric reward: its turn at the judge, and the step it trains at
                kwargs.update(grade_after=self._turn(pending), trains_at=pending.trains_at)  # (dropout's masks)
            task = asyncio.ensure_future(function(**kwargs))
            if not pending.tasks:
                pending.started = time.monotonic()
            pending.tasks[index], pending.reports[index] = task, reports
            task.add_done_callback(lambda _: setattr(pending, "done", max(pending.done, time.monotonic())))
            await asyncio.sleep(0)  # the call reads its rubric now, while the trainer's thread waits
            return [0.0] * len(kwargs["prompts"])
        if self.phase == "collect":
            result = await pending.tasks[index]
            for name, args in pending.reports[index]:
                kwargs[name](*args)
            return result
        return await function(**kwargs)

    def _turn(self, pending: Pending) -> Callable | None:
        """What `pending`'s grading awaits before its first judge call: the end of the grading of the batch before
        it, if that still runs (its start then counts from there)."""
        before = [task for task in pending.waits_for if not task.done()]
        if not before:
            return None

        async def turn() -> None:
            await asyncio.wait(before)
            pending.started = max(pending.started, time.monotonic())

        return turn

    def _cancel(self, pending: Pending) -> None:
        """Cancel `pending`'s calls still running (without waiting for them) and count the batch as untrained."""
        self.untrained["batches"] += 1
        self.untrained["completions"] += len(pending.inputs)
        running = [task for task in pending.tasks.values() if not task.done()]
        if running:
            self.untrained["cancelled_completions"] += len(pending.inputs)
        for task in pending.tasks.values():
            self.trainer.async_loop.call_soon_threadsafe(_cancel_quietly, task)


def step_trained_at(global_step: int, taken: int, every: int, accumulation: int) -> int:
    """The optimizer step a generation batch read `every` micro-steps ahead (steps_per_generation x num_iterations)
    trains at, `taken` micro-steps into optimizer step `global_step`: the global step a synchronous run is at when it
    generates that batch (the batch's micro-step lies in the same epoch: the schedule reads no batch across an
    epoch's end, where an optimizer step may be short)."""
    return global_step + (taken + every) // accumulation


class StepBoundary(TrainerCallback):
    """TRL's micro-step counter (`_step`, which starts at 0 at the start and at a resume) at the end of the last
    optimizer step: the micro-steps taken of the current one are counted from it, whatever short steps epochs ended
    with."""

    def __init__(self, trainer: Any):
        self.trainer, self.micro_step = trainer, 0

    def on_step_end(self, args, state, control, **kwargs):
        self.micro_step = self.trainer._step
        return control


def _record(reports: list, name: str, *args: Any) -> None:
    reports.append((name, args))


def _cancel_quietly(task: asyncio.Task) -> None:
    """Cancel a task and retrieve its outcome, so that an untrained batch's failure is never reported as unhandled."""
    task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _takes(function: Callable, names: tuple[str, ...]) -> bool:
    """Whether `function` (a partial's own signature: what it still takes) declares every one of `names`."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin or C callable: it declares none
        return False
    return all(name in parameters for name in names)
