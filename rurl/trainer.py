"""GRPOTrainer with DAPO's dynamic sampling (which TRL 1.16 does not have, huggingface/trl#3708), the judge-failure
counts summed over processes, and no weight update from a step without any learning signal.

Where it sits: GRPOTrainer._prepare_inputs calls `_generate_and_score_completions(generation_batch)` once per
generation batch, then shuffles the result and splits it into `steps_per_generation` slices. We override that call:
score the batch, keep the groups whose reward std is above `std_threshold`, generate more groups from other prompts
until the kept groups of all processes fill the batch (at most `max_extra_rounds` extra rounds), and hand TRL a
batch of the same size made of kept groups only. As verl does, kept groups are pooled over the processes: a process
whose groups were flat takes surplus groups of another (sent with one all_gather_object), so the batch is full once
the processes together kept enough, not once the unluckiest one did. The rewards are read where TRL computes them
(`_calculate_rewards`, which returns them gathered over all processes): every process sees every group's spread and
takes the same decisions, and every process takes part in every collective, whatever it kept.

Extra rounds draw prompts not yet seen this step and not found flat this epoch (the flat ones, known to every
process, are saved in each checkpoint as rurl_state.json, so a resumed run draws the same prompts). When the
rounds run out, `on_exhausted` decides: "repeat" fills the batch by repeating kept groups (logged as
repeated_groups), "stop" (verl's choice) makes the step a no-update step and stops the run with a checkpoint. With no
group kept at all, the run always stops that way (`stop_reason`, which rurl.guards.StopOnRequest turns into a saved
checkpoint and a stop on every process).

A step whose batch carries no advantage at all on any process (every group flat, every completion unscored) leaves
the weights where they are: the learning rate is 0 for that optimizer step, so neither AdamW's momentum nor its
weight decay moves them (its moment estimates still decay, as after any zero gradient). Logged as no_update
(the share of held optimizer steps per logged step) and counted in the run's summary. The scheduler still advances
(a held warm-up step is used up), a KL term (beta > 0) is held with the rest, and an optimizer that ignores the
learning rate (Adafactor with relative_step) is not held. Under DeepSpeed the rate is set before the backward pass
of the step's last micro-batch, inside which the engine steps.

The overridden methods are private: TRL_RANGE pins the versions this was read against (1.16.0, grpo_trainer.py),
the trainer refuses others, and tests/test_rurl.py fails when their contract changes (the output keys, the rewards'
shape). Multimodal batches are refused.
"""

import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from accelerate.utils import gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import nanstd, pad

from rurl.groups import LEFT_PADDED, PER_ROW, RIGHT_PADDED, assign, by_process, group_rows, trimmed
from rurl.rewards import unscored_rows
from rurl.vllm_cpu import patch_cpu_colocate

TRL_RANGE = ((1, 16), (1, 17))
"""TRL versions [from, to) whose private GRPOTrainer methods this subclass was checked against."""
STATE_FILE = "rurl_state.json"
"""In each checkpoint: the prompts found flat in the current epoch (extra rounds do not draw them again) and the
criteria table so far (a resumed run goes on counting)."""


@dataclass(frozen=True)
class DynamicSampling:
    std_threshold: float
    max_extra_rounds: int
    on_exhausted: Literal["repeat", "stop"] = "repeat"


def check_trl_version() -> None:
    import trl

    version = tuple(int(part) for part in trl.__version__.split(".")[:2])
    if not TRL_RANGE[0] <= version < TRL_RANGE[1]:
        low, high = (".".join(map(str, v)) for v in TRL_RANGE)
        raise RuntimeError(
            f"rurl's trainer overrides private GRPOTrainer methods, checked on TRL >={low},<{high}; "
            f"this is TRL {trl.__version__}: install a TRL in that range"
        )


class RubricGRPOTrainer(GRPOTrainer):
    """GRPOTrainer plus dynamic sampling (when `dynamic` is given), the failure monitor's counts summed over the
    processes once per generation batch (when `failure_monitor` is given), and no update from signal-free steps."""

    def __init__(self, *args: Any, dynamic: DynamicSampling | None = None, failure_monitor=None, **kwargs: Any):
        check_trl_version()
        super().__init__(*args, **kwargs)
        patch_cpu_colocate(self)  # TRL's colocated weight push fails on vLLM's CPU build: rurl/vllm_cpu.py
        self.dynamic = dynamic
        self.failure_monitor = failure_monitor
        self.stop_reason: str | None = None
        self._last_rewards: torch.Tensor | None = None
        self._flat: set[str] = set()  # prompts found flat this epoch, the same on every process
        self._criteria_before: list[dict[str, Any]] = []  # the criteria table of the run resumed from
        self._flat_epoch = 0
        self._keys: list[str] | None = None  # the train dataset's prompt keys, read on the first extra round
        self._signal = False  # this process: a nonzero advantage since the last optimizer step
        self._held_lrs: list[float] | None = None
        self.no_update_steps = 0  # this run's optimizer steps held at learning rate 0
        self.add_callback(_UpdateGate(self))
        if dynamic is not None:
            local = self.args.per_device_train_batch_size * self.args.steps_per_generation
            if local % self.num_generations:
                raise ValueError(
                    f"dynamic sampling needs whole groups on each process: per_device_train_batch_size "
                    f"x steps_per_generation = {local} is not a multiple of num_generations = "
                    f"{self.num_generations}"
                )

    # --- the seams -------------------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any):
        if isinstance(resume_from_checkpoint, str):
            self._load_state(Path(resume_from_checkpoint) / STATE_FILE)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """Trainer._save_checkpoint calls this on every process first, before trainer_state.json marks the
        checkpoint complete: the run's own state goes in with the weights."""
        super().save_model(output_dir, _internal_call)
        if _internal_call and output_dir is not None:
            criteria = self.criteria_table()  # every process: it gathers
            if self.args.should_save:
                state = {"epoch": self._flat_epoch, "flat": sorted(self._flat), "criteria": criteria}
                (Path(output_dir) / STATE_FILE).write_text(json.dumps(state, ensure_ascii=False))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = unscored_rows(super()._calculate_rewards(inputs, prompts, completions, completion_ids_list))
        self._last_rewards = rewards  # (rows of all processes, reward functions)
        if self.failure_monitor is not None:  # every process is here, once per generation batch
            self.failure_monitor.sync(self._sum_over_processes)
            if self.model.training:
                metrics = self._metrics["train"]
                metrics["guard/unscored_rate"].append(self.failure_monitor.rate)
                metrics["guard/failed_verdict_rate"].append(self.failure_monitor.verdict_rate)
        return rewards

    def _generate_and_score_completions(self, inputs):
        if self.dynamic is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        return self._dynamic_batch(inputs)

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:  # once per micro-batch, on every process: hold the weights while no one has signal
            self._signal |= bool(inputs["advantages"].abs().sum() > 0)
            anyone = self._sum_over_processes([float(self._signal)])[0] > 0
            self._hold_weights(not anyone)
        return inputs

    # --- dynamic sampling ------------------------------------------------------------------------------------

    def _dynamic_batch(self, inputs: list[dict]) -> dict[str, Any]:
        size, processes, rank = self.num_generations, self.accelerator.num_processes, self.accelerator.process_index
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
            output = super()._generate_and_score_completions(batch)
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
                self._flat.update(k for g, k in enumerate(keys) if scored[process, g] and not spread[process, g])
            if len(order) >= needed or rounds == self.dynamic.max_extra_rounds:
                break
            rounds += 1
            rate = len(order) / generated
            per_process = wanted if rate == 0 else min(wanted, math.ceil((needed - len(order)) / (processes * rate)))
            batch = self._more_prompts(per_process, rounds, seen)
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/groups_generated"].append(generated)
        metrics["dynamic_sampling/groups_kept"].append(len(order))
        metrics["dynamic_sampling/extra_rounds"].append(rounds)
        metrics["dynamic_sampling/flat_prompts_this_epoch"].append(len(self._flat))
        short = len(order) < needed
        if not order or (short and self.dynamic.on_exhausted == "stop"):
            self.stop_reason = self._exhausted_reason(len(order), needed, rounds)
            first["advantages"] = torch.zeros_like(
                first["advantages"]
            )  # no update from this step (see _prepare_inputs)
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
        rank, device = self.accelerator.process_index, self.accelerator.device
        wanted_elsewhere = {s for process, ids in enumerate(assignment) if process != rank for s in ids if s[1] == rank}
        outgoing = {s: trimmed(kept[s]) for s in wanted_elsewhere}
        parts: list[dict] = [{} for _ in range(self.accelerator.num_processes)]
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
        if getattr(self, "_gloo", None) is None:
            dist = torch.distributed
            self._gloo = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        return self._gloo

    def _exhausted_reason(self, kept: int, needed: int, rounds: int) -> str:
        what = "no group" if not kept else f"only {kept} of the {needed} groups needed (rurl.on_exhausted: stop)"
        return (
            f"dynamic sampling: after {rounds} extra generation rounds {what} of step {self.state.global_step + 1} "
            f"had a reward std above {self.dynamic.std_threshold} (the data is too easy or too hard for the "
            "policy, or the judge gives everything the same score): lower rurl.dynamic_std_threshold, raise "
            "rurl.max_extra_rounds, or check the rewards"
        )

    def _group_spread(self) -> torch.Tensor:
        """Per group of the last scored batch (all processes): True when its reward std is above the threshold.
        The reward is TRL's: the weighted sum of the reward functions, NaN where every one returned None."""
        per_func = self._last_rewards
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        std = nanstd(rewards.view(-1, self.num_generations), dim=1)
        return torch.nan_to_num(std, nan=0.0) > self.dynamic.std_threshold

    def _group_scored(self) -> torch.Tensor:
        """Per group of the last scored batch (all processes): True when at least one completion got a reward."""
        return ~torch.isnan(self._last_rewards).all(dim=1).view(-1, self.num_generations).all(dim=1)

    def _more_prompts(self, groups: int, round_: int, seen: set[str]) -> list[dict]:
        """`groups` prompts for this process's part of an extra round, each repeated num_generations times (as TRL's
        sampler lays a generation batch out). One draw for all processes (they hold the same flat and seen sets),
        seeded with (seed, step, round): reproducible, and the same after a resume. Prompts found flat this epoch or
        already generated this step are drawn only when nothing else is left."""
        keys = self._dataset_keys()
        fresh = [i for i, key in enumerate(keys) if key not in self._flat and key not in seen]
        pool = fresh or [i for i, key in enumerate(keys) if key not in self._flat] or list(range(len(keys)))
        rng = random.Random(f"{self.args.seed}/{self.state.global_step}/{round_}")
        total = groups * self.accelerator.num_processes
        draw = rng.sample(pool, min(total, len(pool)))
        draw = (draw * total)[:total]  # fewer prompts than the round needs: they repeat
        rank = self.accelerator.process_index
        return [
            self.train_dataset[i]
            for i in draw[rank * groups : (rank + 1) * groups]
            for _ in range(self.num_generations)
        ]

    def _dataset_keys(self) -> list[str]:
        if self._keys is None:
            dataset = self.train_dataset
            if "id" in dataset.column_names:
                self._keys = [str(value) for value in dataset["id"]]
            else:
                self._keys = [self._key(row) for row in dataset]
        return self._keys

    @staticmethod
    def _key(row: dict) -> str:
        """A prompt's identity: its row id, else the prompt itself."""
        return str(row["id"]) if "id" in row else json.dumps(row["prompt"], sort_keys=True, ensure_ascii=False)

    def _new_epoch_check(self) -> None:
        epoch = int(self.state.epoch or 0)
        if epoch != self._flat_epoch:
            self._flat, self._flat_epoch = set(), epoch

    def _load_state(self, path: Path) -> None:
        if not path.is_file():  # a checkpoint of another trainer, or of a version before this file
            print(
                f"rurl: {path} is missing: the extra rounds may draw prompts found flat before the resume, and the "
                "criteria table starts anew",
                file=sys.stderr,
            )
            return
        state = json.loads(path.read_text())
        self._flat, self._flat_epoch = set(state["flat"]), state["epoch"]
        self._criteria_before = state.get("criteria", [])

    def criteria_table(self) -> list[dict[str, Any]]:
        """Every criterion decided during the run (the run resumed from included), over all processes: pass rate
        and counts, the hardest first. A collective: every process calls it."""
        from accelerate.utils import gather_object

        totals: dict[str, list[int]] = {row["criterion"]: [row["met"], row["decided"]] for row in self._criteria_before}
        local = dict(self.failure_monitor.criteria) if self.failure_monitor is not None else {}
        for part in gather_object([local]):
            for text, (met, decided) in part.items():
                counts = totals.setdefault(text, [0, 0])
                counts[0], counts[1] = counts[0] + met, counts[1] + decided
        rows = [
            {"criterion": text, "pass_rate": met / decided, "met": met, "decided": decided}
            for text, (met, decided) in totals.items()
            if decided
        ]
        return sorted(rows, key=lambda row: (row["pass_rate"], -row["decided"], row["criterion"]))

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
        pad_id = self._tokenizer.pad_token_id
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
                pad_to_multiple_of=self.pad_to_multiple_of,
            )
        mask = joined["completion_mask"] * joined.get("tool_mask", 1)
        joined["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        return joined

    # --- collectives and the update gate ---------------------------------------------------------------------

    def _sum_over_processes(self, values: list[float]) -> list[float]:
        if self.accelerator.num_processes == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.accelerator.device)
        return self.accelerator.reduce(tensor, reduction="sum").tolist()

    def _hold_weights(self, hold: bool) -> None:
        groups = self.optimizer.param_groups
        if hold and self._held_lrs is None:
            self._held_lrs = [group["lr"] for group in groups]
            for group in groups:
                group["lr"] = 0.0
        elif not hold and self._held_lrs is not None:
            self._release_weights()

    def _release_weights(self) -> bool:
        held = self._held_lrs is not None
        if held:  # a group the scheduler moved meanwhile (DeepSpeed steps it inside backward) keeps its new rate
            for group, lr in zip(self.optimizer.param_groups, self._held_lrs):
                if group["lr"] == 0.0:
                    group["lr"] = lr
            self._held_lrs = None
        self._signal = False
        return held


class _UpdateGate(TrainerCallback):
    """After each optimizer step: the learning rate back (the scheduler steps next), the signal reset, a held step
    counted."""

    def __init__(self, trainer: RubricGRPOTrainer):
        self.trainer = trainer

    def on_optimizer_step(self, args, state, control, **kwargs):
        held = self.trainer._release_weights()
        self.trainer.no_update_steps += held
        self.trainer._metrics["train"]["no_update"].append(float(held))
        return control
