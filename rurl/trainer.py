"""GRPOTrainer where TRL must be overridden: dynamic sampling around the generation of a batch
(rurl/schedule/dynamic_sampling.py), the next batch generated while this one is graded
(rurl/schedule/one_step_ahead.py), the judge-failure counts summed over processes where the rewards are computed, no
weight update from a step without any learning signal (rurl/schedule/update_gate.py), and the run's own state saved with
each checkpoint's weights.

The overridden methods are private: TRL_RANGE pins the versions this was read against (1.16.0, grpo_trainer.py),
the trainer refuses others, and tests/test_rurl.py fails when their contract changes (the output keys, the rewards'
shape). Multimodal batches are refused.
"""

import asyncio
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.trainer.utils import is_async_callable

from checks.audit import group_saturation
from rurl.reward.criterion_advantage import advantages as criterion_advantages
from rurl.reward.criterion_advantage import criterion_scores, flat_groups, scaling
from rurl.reward.extra import unscored_rows
from rurl.reward.rubric_reward import Rewards
from rurl.schedule.dynamic_sampling import DynamicSampler, DynamicSampling
from rurl.schedule.one_step_ahead import AheadSchedule
from rurl.schedule.update_gate import UpdateGate
from rurl.watch.ledger import SO_FAR, RunLedger

TRL_RANGE = ((1, 16), (1, 17))
"""TRL versions [from, to) whose private GRPOTrainer methods this subclass was checked against."""
STATE_FILE = "rurl_state.json"
"""In each checkpoint: the prompts found flat in the current epoch (extra rounds do not draw them again), the
criteria table so far (a resumed run goes on counting), the grader-talk alarm's windows and the evolving rubrics'
state (rurl/evolving/evolution.py). The criterion ledger is saved beside it (rurl/watch/ledger.py)."""


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
    """GRPOTrainer plus dynamic sampling (when `dynamic` is given), the next batch generated while this one is graded
    (`async_steps` 1), the failure monitor's counts summed over the processes once per generation batch (when
    `failure_monitor` is given), and no update from signal-free steps."""

    def __init__(
        self,
        *args: Any,
        dynamic: DynamicSampling | None = None,
        failure_monitor=None,
        evolution=None,
        async_steps: int = 0,
        criterion_advantage: str = "none",
        **kwargs: Any,
    ):
        check_trl_version()
        if async_steps not in (0, 1):
            raise ValueError(f"async_steps must be 0 or 1, got {async_steps}")
        super().__init__(*args, **kwargs)
        if async_steps and not self.args.disable_dropout:
            raise ValueError(
                "async_steps 1 needs disable_dropout=True: a batch's log-probabilities are taken when it is generated, "
                "and with dropout the loss's forward would draw another mask (a noisy ratio at staleness 0)"
            )
        self.failure_monitor = failure_monitor
        self.evolution = evolution  # rurl/evolving/evolution.py: rubrics evolving during the run, or None
        self.stop_reason: str | None = None  # set alike on every process; rurl.watch.guards.StopOnRequest stops the run
        self.judge_error: str | None = None  # why the judge could not be asked, when that stopped the run
        self.last_rewards: torch.Tensor | None = None  # (rows of all processes, reward functions)
        self.criterion_advantage = criterion_advantage  # rurl/reward/criterion_advantage.py
        self._criterion_advantages: list[float] | None = None  # of all processes' rows, for the batch being scored
        self.criterion_flat: list[bool] | None = None  # per group of the last scored batch: advantages all zero
        self.sampler = None if dynamic is None else DynamicSampler(self, dynamic, self._scored_round)
        self.ahead = (
            None
            if not async_steps
            else AheadSchedule(self, self._trl_scored, None if self.sampler is None else self.sampler.batch)
        )
        self._graded: list = []  # the batch statistics the reward calls returned since the last _calculate_rewards
        self.reward_funcs = [returning_stats(f, self._graded) if is_async_callable(f) else f for f in self.reward_funcs]
        self.update_gate = UpdateGate(self)
        self.add_callback(self.update_gate)
        self._criteria_before: list[dict[str, Any]] = []  # the criteria table of the run resumed from
        self.run_ledger = None if failure_monitor is None else RunLedger(Path(self.args.output_dir))
        """The criterion ledger (rurl/watch/ledger.py), counted on the main process."""

    @property
    def no_update_steps(self) -> int:
        """This run's optimizer steps held at learning rate 0."""
        return self.update_gate.no_update_steps

    # --- the seams -------------------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any):
        if isinstance(resume_from_checkpoint, str):
            self._load_state(Path(resume_from_checkpoint) / STATE_FILE)
        try:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        finally:
            if self.ahead is not None:  # the batch generated ahead is not trained: its calls are cancelled
                self.ahead.close()

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        if self.ahead is None:
            return super().get_batch_samples(epoch_iterator, num_batches, device)
        return self.ahead.fetch(epoch_iterator, num_batches, device, super().get_batch_samples)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """Trainer._save_checkpoint calls this on every process first, before trainer_state.json marks the
        checkpoint complete: the run's own state goes in with the weights."""
        super().save_model(output_dir, _internal_call)
        if _internal_call and output_dir is not None:
            criteria = self.criteria_table()  # every process: it gathers
            evolved = None
            if self.evolution is not None:  # every process grades with its own copy: they must be one
                copies = gather_object([json.dumps(self.evolution.buffer.state(), sort_keys=True)])
                if len(set(copies)) > 1:
                    raise RuntimeError("rurl evolve: the processes' evolved rubrics differ; please report this")
                evolved = self.evolution.state()
            if self.args.should_save:
                if self.run_ledger is not None:
                    self.run_ledger.save(Path(output_dir))
                flat = {"epoch": 0, "flat": []} if self.sampler is None else self.sampler.state()
                monitor = None if self.failure_monitor is None else self.failure_monitor.state()
                state = {**flat, "criteria": criteria, "evolve": evolved, "monitor": monitor}
                (Path(output_dir) / STATE_FILE).write_text(json.dumps(state, ensure_ascii=False))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self.ahead is not None and self.ahead.phase == "start":  # the grading starts: nothing to count yet
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        try:
            raw = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        finally:  # this call's, returned by the rubric reward (rurl/reward/rubric_reward.py Rewards); none left over
            graded = self._graded[:]
            self._graded.clear()
        rewards = unscored_rows(raw.clone())
        self.last_rewards = rewards
        if self.failure_monitor is not None:  # every process is here, once per generation batch
            for stats in graded:
                self.failure_monitor.record(stats)
            batch_of = self._gather_graded(graded)  # this batch's, from every process
            answers, penalties = batch_of["answers"], set(batch_of["penalties"])
            if self.model.training:
                self._stop_on_judge_errors(batch_of["errors"])
            if self.evolution is not None and self.model.training:
                batch = (inputs, prompts, completions, completion_ids_list, raw)
                rewards, answers, penalties = self._evolve(batch, rewards, answers, penalties)
                self.last_rewards = rewards
            self.failure_monitor.sync(self.sum_over_processes)  # after a same-step grading's counts are in
            if self.model.training:
                metrics = self._metrics["train"]
                if self.failure_monitor.dropout:  # rubric dropout: the verdicts the batch saved, all processes
                    metrics["rubric/dropped_judge_verdicts"].append(
                        self.failure_monitor.batches[-1]["dropped_verdicts"]
                    )
                metrics["guard/unscored_rate"].append(self.failure_monitor.rate)
                metrics["guard/failed_verdict_rate"].append(self.failure_monitor.verdict_rate)
                # groups may span processes: all of them; dead counts positive criteria, penalties apart
                saturated, dead, untriggered, counted = group_saturation(answers, penalties)
                if counted:
                    metrics["rubric/saturated_criteria"].append(saturated / counted)
                    metrics["rubric/dead_criteria"].append(dead / counted)
                    metrics["rubric/untriggered_penalties"].append(untriggered / counted)
                self._criterion_step(rewards, metrics, batch_of["rows"], batch_of["ledger"])
        return rewards

    def _gather_graded(self, graded: list) -> dict[str, list]:
        """What this process's rubric reward calls returned (`graded`: their batch statistics), gathered from every
        process in row order: judged answers, penalty criteria, the errors that left a batch unasked, verdict rows
        and ledger answers. A collective: every process calls it."""
        names = ("answers", "penalties", "rows", "ledger")
        mine = {name: [item for stats in graded for item in getattr(stats, name)] for name in names}
        mine["errors"] = [stats.error for stats in graded if stats.error]
        parts = gather_object([mine])
        return {name: [item for part in parts for item in part[name]] for name in mine}

    def _stop_on_judge_errors(self, errors: list[str]) -> None:
        """Stop the run (with a checkpoint) on the first reason a reward call could not ask its judge; `errors` were
        gathered, so every process decides alike."""
        if errors and not self.judge_error:
            self.judge_error = f"the rubric reward could not ask its judge: {errors[0]}"
            self.stop_reason = self.stop_reason or self.judge_error

    def _criterion_step(self, rewards: torch.Tensor, metrics, rows: list, answers: list) -> None:
        """The batch's criterion-level advantages (kept for `_trl_scored`) and, whatever the mode, the share of flat
        (group, criterion) pairs and of groups with all-zero advantages, from every process's verdicts in row order
        (`rows`); the criterion ledger counts the batch's `answers`."""
        if self.run_ledger is not None and self.accelerator.is_main_process:
            size = self.num_generations if len(answers) == rewards.size(0) else None  # else by query (never expected)
            counted = self.run_ledger.add(answers, self.state.global_step, self.state.max_steps, size)
            for name, value in counted.items():
                if name in SO_FAR:  # the run so far: the step's last round says it
                    metrics[name].clear()
                metrics[name].append(value)
        self._criterion_advantages = self.criterion_flat = None
        if len(rows) != rewards.size(0):  # not every row's verdicts came with this batch (never expected)
            metrics["rubric/criterion_rows_missing"].append(float(rewards.size(0) - len(rows)))
            if self.criterion_advantage != "none":
                print(
                    f"rurl train: step {self.state.global_step}: verdicts of {len(rows)} of {rewards.size(0)} "
                    "completions: this batch trains on TRL's advantages",
                    file=sys.stderr,
                )
            return
        scores, flat = criterion_scores(rows, self.num_generations, self.criterion_advantage)
        if self.criterion_advantage == "none":
            scores = [None if math.isnan(r) else r for r in rewards[:, 0].tolist()]
        scale = scaling(self.criterion_advantage, self.scale_rewards)
        values, zero_groups = criterion_advantages(scores, self.num_generations, scale)
        metrics["rubric/flat_criteria"].append(flat["rubric/flat_criteria"])
        metrics["rubric/zero_advantage_groups"].append(zero_groups)
        if self.criterion_advantage != "none":
            self._criterion_advantages = values
            self.criterion_flat = flat_groups(values, self.num_generations)  # what dynamic sampling leaves out

    def _trl_scored(self, inputs):
        """TRL's generation and scoring of a batch, its advantages replaced by the criterion-level ones when
        rurl.criterion_advantage asks for them (this process's rows of the batch's)."""
        output = super()._generate_and_score_completions(inputs)
        values, self._criterion_advantages = self._criterion_advantages, None
        starting = self.ahead is not None and self.ahead.phase == "start"  # graded later: replayed at collect
        if values is not None and not starting:
            local = output["advantages"].size(0)
            mine = values[self.accelerator.process_index * local : (self.accelerator.process_index + 1) * local]
            output["advantages"] = torch.tensor(
                mine, dtype=output["advantages"].dtype, device=output["advantages"].device
            )
            logged = self._logs["advantages"]  # the completions table shows the advantages trained on
            for _ in range(min(len(values), len(logged))):
                logged.pop()
            logged.extend(values)
        return output

    def _evolve(self, batch, rewards, answers, penalties):
        """The evolution round of a scored batch (rurl/evolving/evolution.py); with evolve_apply same_step, the groups
        whose rubric changed are graded again, on every process, before TRL computes their advantages. `batch` is what
        _calculate_rewards was given, and TRL's rewards per function. Returns (rewards, answers, penalties) as they
        stand after the round."""
        inputs, _, _, completion_ids, _ = batch
        evolution, step, metrics = self.evolution, self.state.global_step, self._metrics["train"]
        # each completion as the rubric reward read it: decoded from its ids, its reasoning where the model wrote it
        decoded = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        texts = gather_object([(str(row["id"]), text) for row, text in zip(inputs, decoded)])
        if evolution.same_step:
            started = time.monotonic()
            changed = evolution.evolve_now(step, grouped(texts, rewards), answers)
            metrics["evolve/wait_s"].append(time.monotonic() - started)
            if changed:
                started = time.monotonic()
                again, regraded, more = self._grade_again(changed, *batch)
                rewards = unscored_rows(again)
                answers = [a for a in answers if a[0] not in changed] + regraded
                penalties = penalties | more
                evolution.counts["regraded"] += sum(query_id in changed for query_id, _ in texts)
                metrics["evolve/regrade_s"].append(time.monotonic() - started)
        for name, value in evolution.observe(step, grouped(texts, rewards), answers).items():
            metrics[name].append(value)
        return rewards, answers, penalties

    def _grade_again(self, changed: set[str], inputs, prompts, completions, completion_ids_list, raw):
        """Every process grades its completions of the `changed` queries again with the rubric reward (as TRL calls
        it, under the rubrics as they stand now; the response cache answers the criteria asked before), and the
        rubric column is gathered anew; a judge that could not be asked stops the run, as in a first grading. Returns
        (rewards per function, the regraded answers and penalties of every process)."""
        local = len(prompts)
        rank = self.accelerator.process_index
        column = raw[rank * local : (rank + 1) * local, 0].clone()
        mine = [i for i, row in enumerate(inputs) if str(row["id"]) in changed]
        seen: list = []
        if mine:
            columns = [key for key in inputs[0] if key not in ("prompt", "completion", "completion_ids")]
            reward = getattr(self.reward_funcs[0], "inner", self.reward_funcs[0])  # as it is, outside the schedule
            call = reward(  # the rubric reward; its failures and metrics were counted the first time
                prompts=[prompts[i] for i in mine],
                completions=[completions[i] for i in mine],
                completion_ids=[completion_ids_list[i] for i in mine],
                trainer_state=self.state,
                **{key: [inputs[i][key] for i in mine] for key in columns},
            )
            values = asyncio.run_coroutine_threadsafe(call, self.async_loop).result()
            seen = [values.stats] if isinstance(values, Rewards) else []
            scored = [torch.nan if v is None else v for v in values]
            column[mine] = torch.tensor(scored, dtype=column.dtype, device=column.device)
        if self.failure_monitor is not None and seen:  # what the first count could not see: new failures, new criteria
            before = raw[rank * local : (rank + 1) * local, 0]
            original = {c["criterion"] for q in changed for c in self.evolution.original.get(q, [])}
            self.failure_monitor.record(
                replace(
                    seen[0],
                    completions=0,
                    flagged=0,
                    noted=0,
                    no_answer=0,
                    verdicts=0,
                    failed_verdicts=0,
                    dropped_verdicts=None,
                    unscored=int((torch.isnan(column) & ~torch.isnan(before)).sum()),
                    criteria={t: c for t, c in seen[0].criteria.items() if t not in original},
                    pass_rates={},
                )
            )
        again = raw.clone()
        again[:, 0] = self.accelerator.gather(column.to(raw.device))
        regraded = self._gather_graded(seen)
        self._stop_on_judge_errors(regraded["errors"])
        return again, regraded["answers"], set(regraded["penalties"])

    def _generate_and_score_completions(self, inputs):
        if not self.model.training or (self.sampler is None and self.ahead is None):
            return self._trl_scored(inputs)
        if self.ahead is not None:
            return self.ahead.step(inputs)
        return self.sampler.batch(inputs)

    def _scored_round(self, inputs):
        """A generation batch generated and scored now (dynamic sampling's rounds). Under the async schedule it
        carries the weights' log-probabilities, as the batch generated a step earlier that it joins does."""
        output = self._trl_scored(inputs)
        if self.ahead is not None:
            if "old_per_token_logps" not in output:
                output["old_per_token_logps"] = self.ahead.old_logps(output)
            self.ahead.generated_at(output, self.state.global_step)
        return output

    def _generate(self, prompts):
        if self.ahead is None:
            return super()._generate(prompts)
        return self.ahead.generated(prompts, super()._generate)

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        if self.ahead is None:
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        return self.ahead.logps(super()._get_per_token_logps_and_entropies, model, *args, **kwargs)

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:  # once per micro-batch, on every process: hold the weights while no one has signal
            self.update_gate.observe(inputs)
            if "generated_at" in inputs:  # one step ahead: updates since each completion's weights generated it
                stale = (self.state.global_step - inputs["generated_at"]).float().mean()
                self._metrics["train"]["async/staleness"].append(stale.item())
        return inputs

    # --- the run's state -------------------------------------------------------------------------------------

    def _load_state(self, path: Path) -> None:
        if not path.is_file():  # a checkpoint of another trainer, or of a version before this file
            print(
                f"rurl: {path} is missing: the extra rounds may draw prompts found flat before the resume, and the "
                "criteria table starts anew",
                file=sys.stderr,
            )
            return
        state = json.loads(path.read_text())
        if self.sampler is not None:
            self.sampler.flat, self.sampler.epoch = set(state["flat"]), state["epoch"]
        self._criteria_before = state.get("criteria", [])
        if self.run_ledger is not None and self.accelerator.is_main_process:
            self.run_ledger.load(path.parent)
        if self.failure_monitor is not None and state.get("monitor"):
            self.failure_monitor.load(state["monitor"])
        if self.evolution is not None and state.get("evolve"):
            saved = json.loads((path.parent / "trainer_state.json").read_text())["global_step"]
            self.evolution.load(state["evolve"], step=saved)

    def criteria_table(self) -> list[dict[str, Any]]:
        """Every criterion decided during the run (the run resumed from included), over all processes: pass rate
        and counts, and its pass rate over the run's first and latest windows of generation batches (`moved`: last
        minus first), the hardest first. A collective: every process calls it."""
        before = {row["criterion"]: row for row in self._criteria_before}
        totals = {text: {"all": [row["met"], row["decided"]]} for text, row in before.items()}
        for text, row in before.items():
            for window in ("first", "last"):
                if row.get(f"{window}_decided"):
                    totals[text][window] = [row[f"{window}_met"], row[f"{window}_decided"]]
        monitor = self.failure_monitor
        local = {"all": dict(monitor.criteria), **monitor.windows()} if monitor is not None else {}
        this_run: dict[str, dict[str, list[int]]] = {}
        for part in gather_object([local]):
            for window, counts in part.items():
                for text, (met, decided) in counts.items():
                    summed = this_run.setdefault(text, {}).setdefault(window, [0, 0])
                    summed[0], summed[1] = summed[0] + met, summed[1] + decided
        for text, windows in this_run.items():
            row = totals.setdefault(text, {})
            previous = row.get("all", [0, 0])
            row["all"] = [previous[0] + windows.get("all", [0, 0])[0], previous[1] + windows.get("all", [0, 0])[1]]
            row.setdefault("first", windows.get("first"))  # the first window is the first run's
            if windows.get("last"):
                row["last"] = windows["last"]
        return sorted(
            (criterion_row(text, windows) for text, windows in totals.items() if windows["all"][1]),
            key=lambda row: (row["pass_rate"], -row["decided"], row["criterion"]),
        )

    def sum_over_processes(self, values: list[float]) -> list[float]:
        if self.accelerator.num_processes == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.accelerator.device)
        return self.accelerator.reduce(tensor, reduction="sum").tolist()


def returning_stats(function, into: list):
    """`function` (an async reward function, as TRL calls it) with the batch statistics its result carries (the rubric
    reward's `Rewards.stats`) appended to `into`, call by call. Wrapped outside the one-step-ahead schedule, it sees
    each batch's real result when the batch is collected, in training order, never the zeros of its start."""

    async def reward(**kwargs: Any) -> list:
        result = await function(**kwargs)
        if isinstance(result, Rewards):
            into.append(result.stats)
        return result

    reward.__name__ = getattr(function, "__name__", type(function).__name__)
    reward.inner = getattr(function, "inner", function)  # the function itself: for calls outside the schedule
    return reward


def criterion_row(text: str, windows: dict[str, list[int] | None]) -> dict[str, Any]:
    """A line of criteria.json: pass rate over the run, and over its first and latest windows (None: undecided)."""
    row: dict[str, Any] = {"criterion": text, "pass_rate": windows["all"][0] / windows["all"][1]}
    row["met"], row["decided"] = windows["all"]
    for window in ("first", "last"):
        met, decided = windows.get(window) or (0, 0)
        row[f"{window}_met"], row[f"{window}_decided"] = met, decided
        row[f"{window}_pass_rate"] = met / decided if decided else None
    first, last = row["first_pass_rate"], row["last_pass_rate"]
    row["moved"] = None if first is None or last is None else last - first
    return row


def grouped(texts: list[tuple[str, str]], rewards: torch.Tensor) -> dict[str, list[tuple[str, float]]]:
    """Per query id, its completions' (text, rubric reward) over all processes, in the gathered order."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for (query_id, text), reward in zip(texts, rewards[:, 0].tolist()):
        groups.setdefault(query_id, []).append((text, reward))
    return groups
