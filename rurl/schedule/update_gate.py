"""No weight update from a step without any learning signal (every group flat, every completion unscored, on every
process): the learning rate is 0 for that optimizer step, so neither AdamW's momentum nor its weight decay moves the
weights (its moment estimates still decay, as after any zero gradient). The scheduler still advances (a held warm-up
step is used up), a KL term (beta > 0) is held with the rest, and an optimizer that ignores the learning rate
(Adafactor with relative_step) is not held. Under DeepSpeed the rate is set before the backward pass of the step's
last micro-batch, inside which the engine steps. Logged as `no_update` (the share of held optimizer steps)."""

from typing import Any

from transformers import TrainerCallback


class UpdateGate(TrainerCallback):
    """`observe` each micro-batch's inputs (every process: it sums over them); after each optimizer step the learning
    rate comes back (the scheduler steps next) and a held step is counted in `no_update_steps`."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.signal = False  # this process: a nonzero advantage since the last optimizer step
        self.held_lrs: list[float] | None = None
        self.no_update_steps = 0

    def observe(self, inputs: dict[str, Any]) -> None:
        self.signal |= bool(inputs["advantages"].abs().sum() > 0)
        anyone = self.trainer.sum_over_processes([float(self.signal)])[0] > 0
        groups = self.trainer.optimizer.param_groups
        if not anyone and self.held_lrs is None:
            self.held_lrs = [group["lr"] for group in groups]
            for group in groups:
                group["lr"] = 0.0
        elif anyone and self.held_lrs is not None:
            self._release()

    def on_optimizer_step(self, args, state, control, **kwargs):
        held = self._release()
        self.no_update_steps += held
        self.trainer._metrics["train"]["no_update"].append(float(held))
        return control

    def _release(self) -> bool:
        held = self.held_lrs is not None
        if held:  # a group the scheduler moved meanwhile (DeepSpeed steps it inside backward) keeps its new rate
            for group, lr in zip(self.trainer.optimizer.param_groups, self.held_lrs):
                if group["lr"] == 0.0:
                    group["lr"] = lr
            self.held_lrs = None
        self.signal = False
        return held
