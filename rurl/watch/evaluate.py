"""HealthBench-style evaluation of the policy during training: every `eval_every` steps (and at the end), the policy
answers the held-out rows (greedy, up to max_completion_length tokens), the grader grades the answers against their
rubrics, and grading.report builds the report (overall, per axis and theme, bootstrap std), logged as `eval/...` at
the step and appended to output_dir/eval.jsonl (rurl/watch/eval_log.py); the graded answers
(`grading.grader.Graded.to_record` plus `step`, the records `rubricrl eval` writes to graded.jsonl) are appended to
output_dir/eval_answers.jsonl, where `rubricrl report` shows them.

Cost on N processes: each answers its share of the rows (1/N, padded so that every process runs the same number of
generation calls: under ZeRO-3 or FSDP a generation is a collective), with the engine training uses (TRL's vLLM
engine when `use_vllm`, transformers `generate` otherwise); the answers are gathered in row order and the main
process grades them."""

import asyncio
import json
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from checks.overclaim import overclaim
from grading.dataset import RubricRow
from grading.grader import Graded, GradeItem, Grader
from grading.report import build_report, example_metrics
from rurl.watch.eval_log import EVAL_FILE, append_evaluation

ANSWERS_FILE = "eval_answers.jsonl"
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
"""trl.generation.vllm_generation.VLLMGeneration's sampling attributes, set for greedy answers (vLLM: temperature 0
is greedy; top_k 0 is no limit, TRL's default)."""


class PolicyEvaluation(TrainerCallback):
    def __init__(
        self,
        trainer,
        grader: Grader,
        rows: list[RubricRow],
        every: int,
        output_dir: Path,
        deadline: float | None = None,
        monitor: Grader | None = None,
        alarms=None,
    ):
        self.trainer, self.grader, self.rows, self.every = trainer, grader, rows, every
        self.monitor = monitor
        """The second judge (rurl.monitor_judge), grading the same answers after the training judge."""
        self.alarms = alarms
        self.gold_best = None
        """rurl/watch/gold_best.py: the model of the monitor's peak, kept (set by add_evaluation)."""
        self.monitor_failures = 0
        self.deadline = deadline
        """Seconds the grading may take: the other processes wait for the main one at the next collective."""
        self.path = Path(output_dir) / EVAL_FILE
        self.answers_path = Path(output_dir) / ANSWERS_FILE
        self.last: dict | None = None
        self.last_records: list[dict] = []
        """The training judge's graded records of the last evaluation (the monitor's overclaim is against them)."""
        self._done_at: int | None = None
        self.seconds = 0.0
        """Wall time spent evaluating (answers and grading), which the run's step times leave out."""

    def on_step_end(self, args, state, control, **kwargs):
        if self.every and state.global_step % self.every == 0:
            self.evaluate(state.global_step)
        return control

    def on_train_begin(self, args, state, control, **kwargs):
        """With a monitor, the held-out rows before any update: the alarms' baseline (rurl/watch/alarms.py)."""
        if self.monitor is not None and state.global_step == 0:
            self.evaluate(0)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._done_at != state.global_step:
            self.evaluate(state.global_step)
        return control

    def evaluate(self, step: int) -> None:
        """Every process answers its share (ZeRO-3 needs them all); the main one grades, reports and writes. Every
        process calls trainer.log, so that GRPOTrainer's per-process metric buffers stay in step (a main-only call
        desynchronised gloo's collectives under torchrun); the overall scores reach every process's alarms."""
        started = time.monotonic()
        try:
            self._evaluate(step)
        finally:
            self.seconds += time.monotonic() - started

    def _evaluate(self, step: int) -> None:
        answers = self.answer()
        self._done_at = step
        scores = self._grade(step, answers) if self.trainer.accelerator.is_main_process else None
        if not self.trainer.accelerator.is_main_process:
            self.trainer.log({})
        if self.alarms is not None or self.gold_best is not None:
            main = self.trainer.accelerator.is_main_process
            alarms = self.alarms
            saved = alarms.saved_baseline(step) if alarms is not None and main and alarms.baseline is None else None
            if self.trainer.accelerator.num_processes > 1:
                from accelerate.utils import broadcast_object_list

                scores, saved = broadcast_object_list([scores, saved])
            if alarms is not None:
                alarms.observe_eval(step, *(scores or (None, None, {})), saved=saved)
            if self.gold_best is not None:
                self.gold_best.observe(step, *(scores or (None, None, {})))

    def _grade(self, step: int, answers: list[str]) -> tuple[float | None, float | None, dict]:
        """Main process: the report of the training judge (and of the monitor), logged and written; returns both
        overall scores (None: not scored) and, per example both scored, [judge's, monitor's] score (`paired`, also
        in eval.jsonl: the divergence alarm's evidence)."""
        items = [
            GradeItem(row.conversation, answer, row.rubric, row.reference) for row, answer in zip(self.rows, answers)
        ]
        try:
            records = self._records(self.grader, items, answers)
        except Exception as error:  # the judge went away: the run goes on (the guard judges the training reward)
            print(f"rurl eval: step {step}: not graded: {error}", file=sys.stderr)
            self.trainer.log({"eval/failed": 1.0})  # every process logs at an eval, the others an empty dict
            return None, None, {}
        self.last_records = records
        report = build_report(records, **self.grader.config.rule())
        metrics = {f"eval/{name}": value for name, value in report["metrics"].items()}
        metrics["eval/judge_failure_rate"] = report["judge_failure_rate"]
        metrics["eval/unscored_examples"] = report["unscored_examples"]
        self.last = {"step": step, **report}
        overall, watched, paired = report["metrics"].get("overall_score"), None, {}
        if self.monitor is not None:
            watched, monitor_metrics, monitored = self._monitor(step, items, answers)
            metrics.update(monitor_metrics)
            self.last["monitor"] = monitor_metrics
            paired = paired_scores(records, monitored, self.grader.config.rule())
            self.last["paired"] = paired
        self.trainer.log(metrics)
        with open(self.answers_path, "a") as f:
            f.write("".join(json.dumps({"step": step, **record}) + "\n" for record in records))
        append_evaluation(self.path, self.last)
        shown = "unscored" if overall is None else f"{overall:.3f}"
        also = "" if self.monitor is None else f", monitor {'unscored' if watched is None else f'{watched:.3f}'}"
        print(f"rurl eval: step {step}: overall {shown}{also} on {len(self.rows)} held-out rows", file=sys.stderr)
        return overall, watched, paired

    def _monitor(self, step: int, items: list[GradeItem], answers: list[str]) -> tuple[float | None, dict, list]:
        """The monitor's overall score, its monitor/... metrics and its records; a failure is counted, never
        raised."""
        try:
            records = self._records(self.monitor, items, answers)
        except Exception as error:  # noqa: BLE001 - the monitor watches; it never stops training
            self.monitor_failures += 1
            print(f"rurl eval: step {step}: the monitor did not grade: {error}", file=sys.stderr)
            return None, {"monitor/failed": float(self.monitor_failures)}, []
        report = build_report(records, **self.monitor.config.rule())
        metrics = {f"monitor/{name}": value for name, value in report["metrics"].items()}
        metrics["monitor/judge_failure_rate"] = report["judge_failure_rate"]
        metrics["monitor/failed"] = float(self.monitor_failures)
        overall, trained = report["metrics"].get("overall_score"), self.last["metrics"].get("overall_score")
        if overall is not None and trained is not None:
            metrics["monitor/gap"] = trained - overall
        disagreement = overclaim(self.last_records, records)
        for name in ("overclaim", "underclaim"):
            if disagreement[name] is not None:
                metrics[f"monitor/{name}"] = disagreement[name]
        self.last["overclaim"] = disagreement
        ledger = getattr(self.trainer, "run_ledger", None)
        if ledger is not None:  # each criterion's over- and underclaim (rurl/watch/ledger.py)
            ledger.ledger.add_monitor(self.last_records, records)
        return overall, metrics, records

    def _records(self, grader: Grader, items: list[GradeItem], answers: list[str]) -> list[dict]:
        grading = grader.grade_many(items) if self.deadline is None else grader.grade_within(items, self.deadline)
        graded = asyncio.run_coroutine_threadsafe(grading, self.trainer.async_loop).result()
        graded = [
            g or Graded(score=None, reward=None, explanation="not judged within rurl.judge_deadline") for g in graded
        ]
        return [
            g.to_record(row.rubric.example_tags, id=row.id, response=answer)
            for row, answer, g in zip(self.rows, answers, graded)
        ]

    def answer(self) -> list[str]:
        """Greedy answers of the current policy to every row, in row order, on every process: each process answers
        its share (`share`), then all gather."""
        from accelerate.utils import gather_object

        trainer = self.trainer
        accelerator = trainer.accelerator
        mine, real = share(len(self.rows), accelerator.num_processes, accelerator.process_index)
        conversations = [self.rows[i].conversation for i in mine]
        if getattr(trainer, "use_vllm", False):
            texts = vllm_greedy_answers(trainer, conversations, trainer.args.max_completion_length)
        else:
            texts = self._transformers_answers(conversations)
        gathered = dict(gather_object(list(zip(mine[:real], texts[:real]))))  # the padding's answers stay here
        if sorted(gathered) != list(range(len(self.rows))):
            raise RuntimeError(f"eval: the gathered answers cover rows {sorted(gathered)}, not 0..{len(self.rows) - 1}")
        return [gathered[i] for i in range(len(self.rows))]

    def _transformers_answers(self, conversations: list[list[dict[str, str]]]) -> list[str]:
        """transformers `generate`, the model unwrapped as GRPOTrainer's own generation does it (ZeRO-3 weights
        gathered unless ds3_gather_for_generation is false, FSDP1 parameters summoned)."""
        from trl.models.utils import unwrap_model_for_generation

        trainer = self.trainer
        was_training = trainer.model.training
        trainer.model.eval()
        try:
            gather = trainer.args.ds3_gather_for_generation
            with (
                unwrap_model_for_generation(
                    trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=gather
                ) as model,
                _summon_full_params(trainer),
            ):
                return greedy_answers(
                    model, trainer.processing_class, conversations, trainer.args.max_completion_length
                )
        finally:
            trainer.model.train(was_training)


def paired_scores(judged: list[dict], monitored: list[dict], rule: dict) -> dict[str, list[float]]:
    """{example id: [training judge's score, monitor's score]} for the examples both scored (per-example overall
    scores, unclipped, as the reports compute them)."""
    paired = {}
    for by_judge, by_monitor in zip(judged, monitored):
        scores = [example_metrics(record, **rule).get("overall_score") for record in (by_judge, by_monitor)]
        if None not in scores:
            paired[str(by_judge["id"])] = scores
    return paired


def share(rows: int, processes: int, index: int) -> tuple[list[int], int]:
    """The row indices process `index` of `processes` answers, and how many of them are its own: a contiguous slice
    of ceil(rows / processes), padded with row 0 to that length, so that every process runs the same generation
    calls (the padding's answers are dropped)."""
    size = -(-rows // processes)
    own = list(range(min(rows, index * size), min(rows, (index + 1) * size)))
    return own + [0] * (size - len(own)), len(own)


@contextmanager
def _summon_full_params(trainer):
    dist = getattr(trainer, "_dist", None)  # trl.distributed.DistributedBackend (TRL 1.16): FSDP1 only, else no-op
    if dist is None:
        yield
        return
    with dist.summon_full_params(trainer.model_wrapped, recurse=False):
        yield


def vllm_greedy_answers(trainer, conversations: list[list[dict[str, str]]], max_tokens: int) -> list[str]:
    """Greedy answers from the vLLM engine GRPOTrainer trains with (TRL 1.16: `trainer.vllm_generation`, colocated
    or a server), with the current weights: pushed as GRPOTrainer._generate_single_turn pushes them (once per
    step: `_last_loaded_step`). Every process calls this with as many conversations as the others (server mode
    gathers them to the main process and hands each its slice back)."""
    tokenizer = trainer.processing_class
    prompt_ids = [
        tokenizer(
            tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True), add_special_tokens=False
        )["input_ids"]
        for c in conversations
    ]
    generation = trainer.vllm_generation
    if trainer.state.global_step != trainer._last_loaded_step:
        generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step
    with greedy_sampling(generation, max_tokens):
        _, completion_ids, _, _ = generation.generate(prompts=prompt_ids, images=None, num_generations=1)
    return tokenizer.batch_decode([list(ids) for ids in completion_ids], skip_special_tokens=True)


@contextmanager
def greedy_sampling(generation: Any, max_tokens: int):
    """VLLMGeneration's sampling settings made greedy for the block, then given back. The `generation_kwargs` a run
    sets (applied over them by TRL) lose their sampling keys for the block; the rest (stop strings, ...) stay."""
    names = [*GREEDY, "max_completion_length", "generation_kwargs"]
    saved = {name: getattr(generation, name) for name in names}
    try:
        for name, value in GREEDY.items():
            setattr(generation, name, value)
        generation.max_completion_length = max_tokens
        generation.generation_kwargs = {
            k: v
            for k, v in (saved["generation_kwargs"] or {}).items()
            if k not in GREEDY and k not in ("seed", "n", "best_of")
        }
        yield generation
    finally:
        for name, value in saved.items():
            setattr(generation, name, value)


@torch.no_grad()
def greedy_answers(
    model, tokenizer, conversations: list[list[dict[str, str]]], max_new_tokens: int, batch_size: int = 8
) -> list[str]:
    """The model's greedy answer to each conversation (chat template, left padding), a few at a time."""
    answers = []
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        for start in range(0, len(conversations), batch_size):
            texts = [
                tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
                for c in conversations[start : start + batch_size]
            ]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            out = model.generate(
                **batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
            answers += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
    return answers


def add_evaluation(
    trainer, grader: Grader, data, rurl, output_dir: Path, alarms: Any = None, resumed_from: str | None = None
) -> Any:
    """The in-training evaluation of the held-out rows, as a callback (with the monitor's grades when
    rurl.monitor_judge); None without held-out rows."""
    if not data.evaluation:
        return None
    evaluation = PolicyEvaluation(
        trainer,
        grader,
        data.evaluation[: rurl.eval_max_examples],
        rurl.eval_every,
        output_dir,
        deadline=rurl.judge_deadline,
        monitor=Grader(grader.client, replace(grader.config, judge_role="monitor")) if rurl.monitor_judge else None,
        alarms=alarms,
    )
    if rurl.monitor_judge and rurl.gold_best is not False:
        from rurl.watch.gold_best import GoldBest

        evaluation.gold_best = GoldBest(trainer, output_dir, resumed_from)
    trainer.add_callback(evaluation)
    return evaluation
