"""HealthBench-style evaluation of the policy during training: every `eval_every` steps (and at the end), the policy
answers the held-out rows (greedy, up to max_completion_length tokens), the grader grades the answers against their
rubrics, and grading.report builds the report (overall, per axis and theme, bootstrap std), logged as `eval/...` at
the step and appended to output_dir/eval.jsonl."""

import asyncio
import json
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback

from grading.dataset import RubricRow
from grading.grader import GradeItem, Grader
from grading.report import build_report


class PolicyEvaluation(TrainerCallback):
    def __init__(self, trainer, grader: Grader, rows: list[RubricRow], every: int, output_dir: Path):
        self.trainer, self.grader, self.rows, self.every = trainer, grader, rows, every
        self.path = Path(output_dir) / "eval.jsonl"
        self.last: dict | None = None
        self._done_at: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.every and state.global_step % self.every == 0:
            self.evaluate(state.global_step)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._done_at != state.global_step:
            self.evaluate(state.global_step)
        return control

    def evaluate(self, step: int) -> None:
        """Every process answers (ZeRO-3 needs them all); the main one grades, reports and writes. Every process
        calls trainer.log, so that GRPOTrainer's per-process metric buffers stay in step (a main-only call
        desynchronised gloo's collectives under torchrun)."""
        answers = self.answer()
        self._done_at = step
        if not self.trainer.accelerator.is_main_process:
            self.trainer.log({})
            return
        items = [GradeItem(row.conversation, answer, row.rubric, row.reference) for row, answer in zip(self.rows, answers)]
        future = asyncio.run_coroutine_threadsafe(self.grader.grade_many(items), self.trainer.async_loop)
        graded = future.result()
        records = [g.to_record(row.rubric.example_tags, id=row.id, response=answer)
                   for row, answer, g in zip(self.rows, answers, graded)]  # fmt: skip
        report = build_report(records, min_coverage=self.grader.config.min_coverage,
                              undecided_penalty=self.grader.config.undecided_penalty)  # fmt: skip
        metrics = {f"eval/{name}": value for name, value in report["metrics"].items()}
        metrics["eval/judge_failure_rate"] = report["judge_failure_rate"]
        metrics["eval/unscored_examples"] = report["unscored_examples"]
        self.last = {"step": step, **report}
        self.trainer.log(metrics)
        with open(self.path, "a") as f:
            f.write(json.dumps(self.last) + "\n")
        overall = report["metrics"].get("overall_score")
        shown = "unscored" if overall is None else f"{overall:.3f}"
        print(f"rurl eval: step {step}: overall {shown} on {len(self.rows)} held-out rows", file=sys.stderr)

    def answer(self) -> list[str]:
        """Greedy answers of the current policy (every process takes part: ZeRO-3 gathers the weights)."""
        from trl.models.utils import unwrap_model_for_generation

        trainer = self.trainer
        was_training = trainer.model.training
        trainer.model.eval()
        try:
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
                return greedy_answers(model, trainer.processing_class, [row.conversation for row in self.rows],
                                      trainer.args.max_completion_length)  # fmt: skip
        finally:
            trainer.model.train(was_training)


@torch.no_grad()
def greedy_answers(model, tokenizer, conversations: list[list[dict[str, str]]], max_new_tokens: int,
                   batch_size: int = 8) -> list[str]:  # fmt: skip
    """The model's greedy answer to each conversation (chat template, left padding), a few at a time."""
    answers = []
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        for start in range(0, len(conversations), batch_size):
            texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
                     for c in conversations[start:start + batch_size]]  # fmt: skip
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)  # fmt: skip
            answers += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
    return answers


def answer_with(model_path: str | Path, conversations: list[list[dict[str, str]]], max_new_tokens: int,
                base_model: str | None = None) -> list[str]:  # fmt: skip
    """Greedy answers of a saved model folder (or Hub id), e.g. a `ruft train` or `rurl train` output. A folder that
    holds only a LoRA adapter (a checkpoint) is merged into `base_model` (default: the base its adapter_config
    names) first."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, device = Path(model_path), "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "auto" if device == "cuda" else torch.float32  # fp32 on a CPU (no bf16 there)
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        from peft import PeftModel

        base = base_model or json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=dtype), path).merge_and_unload()
        tokenizer = AutoTokenizer.from_pretrained(path if (path / "tokenizer_config.json").is_file() else base)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        return greedy_answers(model.to(device).eval(), tokenizer, conversations, max_new_tokens)
    finally:
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
