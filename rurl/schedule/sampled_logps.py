"""The log-probabilities of the tokens `generate` sampled, read from generation's own logits.

A batch trained one step after it was generated needs the generating weights' log-probabilities for the loss's
ratio. TRL would compute them with a second, no-grad forward over prompt and completion, once the batch is
generated; on a small policy that forward is a fifth of the step. With transformers' `generate` the same numbers pass
through the model while it samples: each decoding step's forward returns the logits of the next token and receives
the token sampled from the previous one. A forward hook on the model reads both, and keeps one vocabulary-sized row
per sequence at a time.

The numbers are TRL's: the model's logits (with its own scaling) divided by the sampling temperature, log-softmaxed
over the whole vocabulary, with no other processor (top-p, top-k, repetition penalty) applied; 0 after the end of a
sequence, as the loss's own are there. They differ from the loss's teacher-forced forward by the arithmetic of a
cached decode: in float32 at most 2e-6 per token (mean 4e-7), in bfloat16 up to 4e-3 (mean 1e-3; 2e-3 under the
loss's autocast), which is why the schedule reads them only from a float32 policy without mixed precision
(rurl/schedule/one_step_ahead.py, `_readable`). Dropout would add its own noise: the schedule runs with it off.
"""

from typing import Any

import torch


class SampledLogps:
    """`with SampledLogps(model, temperature) as sampled: model.generate(...)`, then
    `sampled.per_token(completion_ids)`."""

    def __init__(self, model: torch.nn.Module, temperature: float):
        self.model, self.temperature = model, temperature
        self.steps: list[torch.Tensor] = []  # per decoding step, the sampled token's log-probability per sequence
        self.last: torch.Tensor | None = None  # the log-softmax of the last step's logits, its token not seen yet
        self.handle = None

    def __enter__(self) -> "SampledLogps":
        self.handle = self.model.register_forward_hook(self._read, with_kwargs=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()

    def _read(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self.last is not None:  # this step's input ends with the token sampled from the last one's logits
            self.steps.append(self.last.gather(-1, ids[:, -1:].to(self.last.device)).squeeze(-1))
        logits = output.logits[:, -1, :].float() / self.temperature
        self.last = torch.log_softmax(logits, dim=-1)

    def per_token(self, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
        """(batch, length) log-probabilities of `completion_ids` (TRL's right-padded completions), 0 where
        `completion_mask` is: after a sequence's end `generate` fed pad tokens, whose log-probability (about -6 on a
        small model, below -88 at a low temperature) would make exp(new - old) overflow before the loss masks it."""
        steps = list(self.steps)
        if self.last is not None and len(steps) < completion_ids.size(1):
            steps.append(
                self.last.gather(-1, completion_ids[:, len(steps) : len(steps) + 1].to(self.last.device))[:, 0]
            )
        logps = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
        if steps:
            taken = torch.stack(steps, dim=1)[:, : completion_ids.size(1)]
            logps[:, : taken.size(1)] = taken.to(logps.device)
        return logps.masked_fill(completion_mask.to(logps.device) == 0, 0.0)
