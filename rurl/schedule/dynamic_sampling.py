"""DAPO's dynamic sampling (arXiv 2503.14476; not in TRL 1.16, huggingface/trl#3708) for RubricGRPOTrainer, which
calls `DynamicSampler.batch` where GRPOTrainer._prepare_inputs generates and scores a generation batch.

Score the batch, keep the groups whose reward std is above `std_threshold` (under criterion-level advantages: whose
advantages are not all zero), generate more groups from other prompts until the kept groups of all processes fill
the batch (at most `max_extra_rounds` extra rounds), and hand TRL a batch of the same size made of kept groups
only. As verl does, kept groups are pooled over the processes: a process whose groups were flat takes surplus groups
of another (one all_gather_object), so the batch is full once the processes together kept enough. The rewards are
TRL's, gathered over all processes: every process sees every group's spread, takes the same decisions and joins
every collective.

Extra rounds draw prompts not yet seen this step and not found flat this epoch (saved in each checkpoint, so a
resumed run draws the same). When the rounds run out, `on_exhausted` decides: "repeat" fills the batch with repeats
of kept groups, "stop" (verl's choice) makes the step a no-update step and stops the run with a checkpoint, as does a
step with no group kept at all.
"""

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from accelerate.utils import gather_object
from trl.trainer.utils import nanstd, pad

from rurl.schedule.groups import LEFT_PADDED, PER_ROW, RIGHT_PADDED, assign, by_process, group_rows, trimmed


@dataclass(frozen=True)
class DynamicSampling:
    std_threshold: float
    max_extra_rounds: int
    on_exhausted: Literal["repeat", "stop"] = "repeat"


class DynamicSampler:
    """The sampler of one trainer: `generate` generates and scores a batch now (RubricGRPOTrainer._scored_round); the
    prompts found flat this epoch (`flat`, `epoch`) are the state a checkpoint keeps."""

    def __init__(self, trainer: Any, config: DynamicSampling, generate: Callable[[list[dict]], dict[str, Any]]):
        self.trainer, self.config, self.generate = trainer, config, generate
        self.flat: set[str] = set()  # prompts found flat this epoch, the same on every process
        self.epoch = 0
        self._keys: list[str] | None = None  # the train dataset's prompt keys, read on the first extra round
        self._gloo = None
        local = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
        if local % trainer.num_generations:
            raise ValueError(
                f"dynamic sampling needs whole groups on each process: per_device_train_batch_size "
                f"x steps_per_generation = {local} is not a multiple of num_generations = {trainer.num_generations}"
            )

    def batch(self, inputs: list[dict], scored: dict[str, Any] | None = None) -> dict[str, Any]:
        """The batch TRL trains on for the generation batch `inputs`; `scored`: its first round, already generated and
        scored (rurl/schedule/one_step_ahead.py: a step earlier), whose rewards are the trainer's `last_rewards`."""
        size, processes, rank = (
            self.trainer.num_generations,
            self.trainer.accelerator.num_processes,
            self.trainer.accelerator.process_index,
        )
        wanted = len(inputs) // size  # groups per process
        needed = wanted * processes
        self._new_epoch_check()
        first = None
        kept: dict[tuple[int, int, int], dict[str, Any]] = {}  # this process's kept groups by (round, process, g)
        order: list[tuple[int, int, int]] = []  # every process's kept groups, in one order known to all
        seen: set[str] = set()  # prompts generated this step, all processes
        generated = rounds = 0
        batch = inputs
        while True:
            output = scored if first is None and scored is not None else self.generate(batch)
            self._check_keys(output)
            if first is None:
                first = output
            groups = len(batch) // size
            spread = self._group_spread().view(processes, groups)  # every process sees every process's groups
            generated += spread.numel()
            for process in range(processes):
                order += [(rounds, process, g) for g in range(groups) if spread[process, g]]
            kept |= {
                (rounds, rank, g): group_rows(output, slice(g * size, (g + 1) * size))
                for g in range(groups)
                if spread[rank, g]
            }
            scored = self._group_scored().view(processes, groups)  # an unscored group says nothing of its prompt
            local_keys = [self._key(batch[g * size]) for g in range(groups)]
            for process, keys in enumerate(by_process(gather_object(local_keys), processes)):
                seen.update(keys)
                self.flat.update(k for g, k in enumerate(keys) if scored[process, g] and not spread[process, g])
            if len(order) >= needed or rounds == self.config.max_extra_rounds or self.trainer.stop_reason:
                break  # (a stop already asked for: more rounds would not be trained)
            rounds += 1
            rate = len(order) / generated
            per_process = wanted if rate == 0 else min(wanted, math.ceil((needed - len(order)) / (processes * rate)))
            batch = self._more_prompts(per_process, rounds, seen)
        metrics = self.trainer._metrics["train"]
        metrics["dynamic_sampling/groups_generated"].append(generated)
        metrics["dynamic_sampling/groups_kept"].append(len(order))
        metrics["dynamic_sampling/extra_rounds"].append(rounds)
        metrics["dynamic_sampling/flat_prompts_this_epoch"].append(len(self.flat))
        short = len(order) < needed
        if not order or (short and self.config.on_exhausted == "stop"):
            self.trainer.stop_reason = self.trainer.stop_reason or self._exhausted_reason(len(order), needed, rounds)
            first["advantages"] = torch.zeros_like(first["advantages"])  # no update (rurl/schedule/update_gate.py)
            metrics["dynamic_sampling/repeated_groups"].append(0)
            metrics["dynamic_sampling/moved_groups"].append(0)
            return first
        assignment = assign(order, wanted, processes)
        metrics["dynamic_sampling/repeated_groups"].append(max(0, needed - len(order)))
        moved = sum(source[1] != process for process, ids in enumerate(assignment) for source in ids)
        metrics["dynamic_sampling/moved_groups"].append(moved)
        if moved:
            kept = self._exchange(kept, assignment)
        return self._joined([kept[source] for source in assignment[rank]])

    def _exchange(self, kept: dict, assignment: list[list[tuple[int, int, int]]]) -> dict:
        """Groups other processes take from this one, sent over (trimmed of their padding, pickled through a gloo
        group); returns this process's own kept groups plus the ones it takes from others."""
        rank, device = self.trainer.accelerator.process_index, self.trainer.accelerator.device
        wanted_elsewhere = {s for process, ids in enumerate(assignment) if process != rank for s in ids if s[1] == rank}
        outgoing = {s: trimmed(kept[s]) for s in wanted_elsewhere}
        parts: list[dict] = [{} for _ in range(self.trainer.accelerator.num_processes)]
        torch.distributed.all_gather_object(parts, outgoing, group=self._cpu_group())
        received = {}
        for part in parts:
            received |= part
        mine = set(assignment[rank])
        return {
            **kept,
            **{
                s: {k: v.to(device) if torch.is_tensor(v) else v for k, v in group.items()}
                for s, group in received.items()
                if s in mine and s not in kept
            },
        }

    def _cpu_group(self):
        """A gloo group over all processes for the exchange: pickled groups travel through host memory, not as
        world-size buffers on every GPU (NCCL's all_gather_object). Created on first use, by every process at once
        (the exchange is decided alike everywhere)."""
        if self._gloo is None:
            dist = torch.distributed
            self._gloo = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        return self._gloo

    def _exhausted_reason(self, kept: int, needed: int, rounds: int) -> str:
        what = "no group" if not kept else f"only {kept} of the {needed} groups needed (rurl.on_exhausted: stop)"
        if getattr(self.trainer, "criterion_flat", None) is not None:  # criterion-level advantages: no threshold
            spread, lower = "advantages not all zero", ""
        else:
            spread, lower = f"a reward std above {self.config.std_threshold}", "lower rurl.dynamic_std_threshold, "
        return (
            f"dynamic sampling: after {rounds} extra generation rounds {what} of step "
            f"{self.trainer.state.global_step + 1} had {spread} (the data is too easy or too hard for the "
            f"policy, or the judge gives everything the same score): {lower}raise rurl.max_extra_rounds, or check "
            "the rewards"
        )

    def _group_spread(self) -> torch.Tensor:
        """Per group of the last scored batch (all processes): True when its reward std is above the threshold.
        The reward is TRL's: the weighted sum of the reward functions, NaN where every one returned None. Under
        criterion-level advantages (rurl/reward/criterion_advantage.py), True when the advantages it trains on are not
        all zero: a group whose rewards tie may still differ criterion by criterion, and one that differs only by a
        vetoed completion is not flat."""
        flat = getattr(self.trainer, "criterion_flat", None)
        if flat is not None:
            return torch.tensor([not f for f in flat], device=self.trainer.last_rewards.device)
        per_func = self.trainer.last_rewards
        weights = self.trainer.reward_weights.to(per_func.device).unsqueeze(0)
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        std = nanstd(rewards.view(-1, self.trainer.num_generations), dim=1)
        return torch.nan_to_num(std, nan=0.0) > self.config.std_threshold

    def _group_scored(self) -> torch.Tensor:
        """Per group of the last scored batch (all processes): True when at least one completion got a reward."""
        return ~torch.isnan(self.trainer.last_rewards).all(dim=1).view(-1, self.trainer.num_generations).all(dim=1)

    def _more_prompts(self, groups: int, round_: int, seen: set[str]) -> list[dict]:
        """`groups` prompts for this process's part of an extra round, each repeated num_generations times (as TRL's
        sampler lays a generation batch out). One draw for all processes (they hold the same flat and seen sets),
        seeded with (seed, step, round): reproducible, and the same after a resume. Prompts found flat this epoch or
        already generated this step are drawn only when nothing else is left."""
        keys = self._dataset_keys()
        fresh = [i for i, key in enumerate(keys) if key not in self.flat and key not in seen]
        pool = fresh or [i for i, key in enumerate(keys) if key not in self.flat] or list(range(len(keys)))
        rng = random.Random(f"{self.trainer.args.seed}/{self.trainer.state.global_step}/{round_}")
        total = groups * self.trainer.accelerator.num_processes
        draw = rng.sample(pool, min(total, len(pool)))
        draw = (draw * total)[:total]  # fewer prompts than the round needs: they repeat
        rank = self.trainer.accelerator.process_index
        return [
            self.trainer.train_dataset[i]
            for i in draw[rank * groups : (rank + 1) * groups]
            for _ in range(self.trainer.num_generations)
        ]

    def _dataset_keys(self) -> list[str]:
        if self._keys is None:
            dataset = self.trainer.train_dataset
            if "id" in dataset.column_names:
                self._keys = [str(value) for value in dataset["id"]]
            else:
                self._keys = [self._key(row) for row in dataset]
        return self._keys

    @staticmethod
    def _key(row: dict) -> str:
        """A prompt's identity: its row id, else the prompt itself."""
        return str(row["id"]) if "id" in row else json.dumps(row["prompt"], sort_keys=True, ensure_ascii=False)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps: the prompts found flat this epoch."""
        return {"epoch": self.epoch, "flat": sorted(self.flat)}

    def _new_epoch_check(self) -> None:
        epoch = int(self.trainer.state.epoch or 0)
        if epoch != self.epoch:
            self.flat, self.epoch = set(), epoch

    def _check_keys(self, output: dict[str, Any]) -> None:
        unknown = set(output) - set(LEFT_PADDED) - set(RIGHT_PADDED) - PER_ROW - {"num_items_in_batch"}
        if unknown:
            raise RuntimeError(
                f"dynamic sampling cannot cut batches holding {sorted(unknown)} (multimodal or a TRL "
                "change): turn rurl.dynamic_sampling off"
            )

    def _joined(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """Row slices of several outputs as one output: 2-D tensors re-padded (prompts on the left, completions on
        the right, as TRL pads them); the token count recomputed over the processes, as TRL does."""
        pad_id = self.trainer._tokenizer.pad_token_id
        joined: dict[str, Any] = {}
        for key in sorted(set(parts[0]) - {"num_items_in_batch"}):
            values = [part[key] for part in parts]
            if key in PER_ROW:
                joined[key] = torch.cat(values)
                continue
            value = (LEFT_PADDED | RIGHT_PADDED)[key]
            rows = [row for tensor in values for row in tensor]
            joined[key] = pad(
                rows,
                padding_value=pad_id if value == "pad" else value,
                padding_side="left" if key in LEFT_PADDED else "right",
                pad_to_multiple_of=self.trainer.pad_to_multiple_of,
            )
        mask = joined["completion_mask"] * joined.get("tool_mask", 1)
        joined["num_items_in_batch"] = self.trainer.accelerator.gather(mask.sum()).sum()
        return joined
