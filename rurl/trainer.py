"""GRPOTrainer with DAPO's dynamic sampling, which TRL 1.16 does not have (huggingface/trl#3708).

Where it sits: GRPOTrainer._prepare_inputs calls `_generate_and_score_completions(generation_batch)` once per
generation batch, then shuffles the result and splits it into `steps_per_generation` slices. We override that call:
score the batch, keep the groups whose reward std is above `std_threshold`, generate more groups from other prompts
until the batch is full again (at most `max_extra_rounds` extra rounds), and hand TRL a batch of the same size made
of kept groups only. The rewards are read where TRL computes them (`_calculate_rewards`, which returns them gathered
over all processes, so every process takes the same decisions).

Both are private methods: TRL_RANGE pins the versions this was read against (1.16.0, grpo_trainer.py), the trainer
refuses others, and tests/test_rurl_dynamic.py fails when their contract changes (the output keys, the rewards'
shape). Multimodal batches are refused.

When the extra rounds run out: the kept groups are repeated to fill the batch (logged as repeated_groups); when no
group at all was kept, the batch goes through with every advantage 0 (no update) and `stop_reason` is set, which
rurl.guards.StopOnRequest turns into a saved checkpoint and a stop.
"""

import random
from dataclasses import dataclass
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanstd, pad

TRL_RANGE = ((1, 16), (1, 17))
"""TRL versions [from, to) whose private GRPOTrainer methods this subclass was checked against."""
LEFT_PADDED = {"prompt_ids": "pad", "prompt_mask": 0}
RIGHT_PADDED = {"completion_ids": "pad", "completion_mask": 0, "old_per_token_logps": 0.0,
                "ref_per_token_logps": 0.0, "sampling_per_token_logps": 0.0, "importance_sampling_ratio": 1.0,
                "tool_mask": 1}  # fmt: skip
PER_ROW = {"advantages"}
"""The keys of `_generate_and_score_completions`' output that dynamic sampling knows how to cut and join."""


@dataclass(frozen=True)
class DynamicSampling:
    std_threshold: float
    max_extra_rounds: int


def check_trl_version() -> None:
    import trl

    version = tuple(int(part) for part in trl.__version__.split(".")[:2])
    if not TRL_RANGE[0] <= version < TRL_RANGE[1]:
        low, high = (".".join(map(str, v)) for v in TRL_RANGE)
        raise RuntimeError(f"rurl's dynamic sampling overrides private GRPOTrainer methods, checked on TRL >={low},"
                           f"<{high}; this is TRL {trl.__version__}: install a TRL in that range, or turn "
                           "rurl.dynamic_sampling off")  # fmt: skip


class RubricGRPOTrainer(GRPOTrainer):
    """GRPOTrainer plus dynamic sampling (when `dynamic` is given); otherwise GRPOTrainer unchanged."""

    def __init__(self, *args: Any, dynamic: DynamicSampling | None = None, **kwargs: Any):
        if dynamic is not None:
            check_trl_version()
        super().__init__(*args, **kwargs)
        self.dynamic = dynamic
        self.stop_reason: str | None = None
        self._last_rewards: torch.Tensor | None = None
        if dynamic is not None:
            local = self.args.per_device_train_batch_size * self.args.steps_per_generation
            if local % self.num_generations:
                raise ValueError(f"dynamic sampling needs whole groups on each process: per_device_train_batch_size "
                                 f"x steps_per_generation = {local} is not a multiple of num_generations = "
                                 f"{self.num_generations}")  # fmt: skip

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards = rewards  # (rows of all processes, reward functions)
        return rewards

    def _generate_and_score_completions(self, inputs):
        if self.dynamic is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        return self._dynamic_batch(inputs)

    def _group_spread(self) -> torch.Tensor:
        """Per group of the last scored batch (all processes): True when its reward std is above the threshold.
        The reward is TRL's: the weighted sum of the reward functions, NaN where every one returned None."""
        per_func = self._last_rewards
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        std = nanstd(rewards.view(-1, self.num_generations), dim=1)
        return torch.nan_to_num(std, nan=0.0) > self.dynamic.std_threshold

    def _dynamic_batch(self, inputs: list[dict]) -> dict[str, Any]:
        generations, processes, rank = self.num_generations, self.accelerator.num_processes, self.accelerator.process_index
        wanted = len(inputs) // generations  # groups per process
        kept: list[dict[str, Any]] = []  # one output per kept group of this process
        kept_per_process = [0] * processes
        generated = rounds = 0
        batch = inputs
        while True:
            output = super()._generate_and_score_completions(batch)
            self._check_keys(output)
            spread = self._group_spread().view(processes, wanted)  # every process sees every process's groups
            generated += spread.numel()
            for process in range(processes):
                kept_per_process[process] += int(spread[process].sum())
            kept += [_rows(output, slice(g * generations, (g + 1) * generations))
                     for g in range(wanted) if spread[rank, g]]  # fmt: skip
            if min(kept_per_process) >= wanted or rounds == self.dynamic.max_extra_rounds:
                break
            rounds += 1
            batch = self._more_prompts(wanted, rounds, rank)
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/groups_generated"].append(generated)
        metrics["dynamic_sampling/groups_kept"].append(sum(kept_per_process))
        metrics["dynamic_sampling/extra_rounds"].append(rounds)
        if not kept:  # nothing with a spread on this process: no update from this batch
            self.stop_reason = (f"dynamic sampling: after {rounds} extra generation rounds no group of step "
                                f"{self.state.global_step + 1} had a reward std above "
                                f"{self.dynamic.std_threshold} (the data is too easy or too hard for the policy, or "
                                "the judge gives everything the same score): lower rurl.dynamic_std_threshold, raise "
                                "rurl.max_extra_rounds, or check the rewards")  # fmt: skip
            output["advantages"] = torch.zeros_like(output["advantages"])
            metrics["dynamic_sampling/repeated_groups"].append(0)
            return output
        repeated = max(0, wanted - len(kept))
        groups = [kept[i % len(kept)] for i in range(wanted)]  # repeats kept groups only when the rounds ran out
        metrics["dynamic_sampling/repeated_groups"].append(repeated)
        return self._joined(groups)

    def _more_prompts(self, groups: int, round_: int, rank: int) -> list[dict]:
        """`groups` prompts drawn for an extra round, each repeated num_generations times (as TRL's sampler lays a
        generation batch out). Drawn from the whole train dataset by a generator seeded with (seed, step, round,
        process): reproducible, and the same after a resume."""
        rng = random.Random(f"{self.args.seed}/{self.state.global_step}/{round_}/{rank}")
        indices = rng.sample(range(len(self.train_dataset)), min(groups, len(self.train_dataset)))
        indices = (indices * groups)[:groups]  # a dataset smaller than a batch: prompts repeat
        return [self.train_dataset[i] for i in indices for _ in range(self.num_generations)]

    def _check_keys(self, output: dict[str, Any]) -> None:
        unknown = set(output) - set(LEFT_PADDED) - set(RIGHT_PADDED) - PER_ROW - {"num_items_in_batch"}
        if unknown:
            raise RuntimeError(f"dynamic sampling cannot cut batches holding {sorted(unknown)} (multimodal or a TRL "
                               "change): turn rurl.dynamic_sampling off")  # fmt: skip

    def _joined(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """Row slices of several outputs as one output: 2-D tensors re-padded (prompts on the left, completions on
        the right, as TRL pads them); the token count recomputed over the processes, as TRL does."""
        pad_id = self._tokenizer.pad_token_id
        joined: dict[str, Any] = {}
        for key in set(parts[0]) - {"num_items_in_batch"}:
            values = [part[key] for part in parts]
            if key in PER_ROW:
                joined[key] = torch.cat(values)
                continue
            value = (LEFT_PADDED | RIGHT_PADDED)[key]
            rows = [row for tensor in values for row in tensor]
            joined[key] = pad(rows, padding_value=pad_id if value == "pad" else value,
                              padding_side="left" if key in LEFT_PADDED else "right",
                              pad_to_multiple_of=self.pad_to_multiple_of)  # fmt: skip
        mask = joined["completion_mask"] * joined.get("tool_mask", 1)
        joined["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        return joined


def _rows(output: dict[str, Any], rows: slice) -> dict[str, Any]:
    return {key: value if key == "num_items_in_batch" else value[rows] for key, value in output.items()}
