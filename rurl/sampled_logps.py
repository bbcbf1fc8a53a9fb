"""The log-probabilities of the tokens `generate` sampled, read from generation's own logits.

A batch trained one step after it was generated needs the generating weights' log-probabilities for the loss's
ratio. TRL would compute them with a second, no-grad forward over prompt and completion, once the batch is
generated; on a small policy that forward is a fifth of the step. With transformers' `generate` the same numbers pass
through the model while it samples: each decoding step's forward returns the logits of the next token and receives
the token sampled from the previous one. A forward hook on the model reads both, and keeps one vocabulary-sized row
per sequence at a time.

The numbers are TRL's: the model's logits (with its own scaling) divided by the sampling temperature, log-softmaxed
over the whole vocabulary, with no other processor (top-p, top-k, repetition penalty) applied. They differ from a
teacher-forced forward only by the arithmetic of a cached decode (about 1e-6 in float32).
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

    def per_token(self, completion_ids: torch.Tensor) -> torch.Tensor:
        """(batch, length) log-probabilities of `completion_ids` (TRL's right-padded completions; positions past a
        sequence's end are zero, as the loss masks them)."""
        steps = list(self.steps)
        if self.last is not None and len(steps) < completion_ids.size(1):
            steps.append(
                self.last.gather(-1, completion_ids[:, len(steps) : len(steps) + 1].to(self.last.device))[:, 0]
            )
        logps = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
        if steps:
            taken = torch.stack(steps, dim=1)[:, : completion_ids.size(1)]
            logps[:, : taken.size(1)] = taken.to(logps.device)
        return logps
