"""The rubric dataset as GRPOTrainer takes it: one row per query with `prompt` (chat messages, every turn kept),
`rubrics` (the criteria the reward grades against), `reference_answer` (for reference_likert), `example_tags` and
`id`. GRPOTrainer hands every column to the reward function (its `remove_unused_columns` is False).

Checked first, before the policy loads: rows that can never train (a rubric with nothing to earn, a prompt over the
policy's prompt budget) are refused or left out (`rurl.bad_rows`). Optionally held out: rows for evaluation (seeded
split). Optionally dropped: rows whose RuFT candidate scores (of one role) do not vary (`rurl.prefilter`, the offline
form of dynamic sampling)."""

import random
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grading.dataset import RubricRow, iter_rubric_rows
from grading.grader import EXPLICIT_MODES
from grading.rubric import Rubric, RubricError
from rubricrl.config import ConfigError
from rubricrl.queries import Rejected
from rubricrl.records.hub import describe_input
from rubricrl.runs.jsonl import complete_rows
from rurl.config import RurlConfig

if TYPE_CHECKING:
    from datasets import Dataset


@dataclass
class RurlData:
    train: list[RubricRow]
    evaluation: list[RubricRow]
    source: str
    prefiltered: dict[str, int] = field(default_factory=dict)
    """Counts of the RuFT prefilter, when one ran: rows kept, dropped as flat, dropped out of the band, not built."""
    prefilter_role: str | None = None
    """The candidate role whose scores the prefilter measured."""
    bad_rows: dict[str, int] = field(default_factory=dict)
    """Rows left out as unable to train (`rurl.bad_rows: skip`), by reason: no_positive_points, prompt_too_long."""
    rejected: list[Rejected] = field(default_factory=list)
    """Those rows, each with its place (file: line N), reason and id (rubricrl.queries.write_rejected writes them)."""

    def train_dataset(self) -> "Dataset":
        from datasets import Dataset

        return Dataset.from_list([trainer_row(row) for row in self.train])


def trainer_row(row: RubricRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "prompt": row.conversation,
        "rubrics": rubric_items(row.rubric),
        "reference_answer": row.reference,
        "example_tags": list(row.rubric.example_tags),
    }


def rubric_items(rubric: Rubric) -> list[dict[str, Any]]:
    """The rubric as the `rubrics` column holds it (grading.rubric.rubric_from_items reads it back). Rules are kept
    as given; Arrow fills the keys one rule lacks with None, which the reader drops."""
    return [
        {"criterion": c.text, "points": c.points, "tags": list(c.tags), "category": c.category, "rule": c.rule}
        for c in rubric.criteria
    ]


"""Grading modes that score Σ met points / Σ positive points: a rubric without positive points has no score."""


@dataclass(frozen=True)
class PromptBudget:
    """The longest prompt the policy can take (`tokens`), where that number comes from (`source`), and the
    policy's tokenizer to count with: its chat template with the generation prompt, as TRL renders prompts."""

    tokens: int
    source: str
    tokenizer: Any
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    def lengths(self, conversations: list[list[dict[str, str]]], batch: int = 512) -> list[int]:
        lengths = []
        for start in range(0, len(conversations), batch):  # batched: the fast tokenizer counts a batch at once
            texts = self.tokenizer.apply_chat_template(
                conversations[start : start + batch], tokenize=False, add_generation_prompt=True, **self.template_kwargs
            )
            # the rendered template holds its special tokens already (apply_chat_template adds none either)
            lengths += [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        return lengths


def prompt_budget(grpo, model) -> PromptBudget | None:
    """The policy's prompt budget: its context minus max_completion_length. TRL 1.16 has no max_prompt_length and
    cuts no prompt: the context is vllm_max_model_length when use_vllm sets it (vLLM refuses a longer input), else
    the model config's max_position_embeddings (what vLLM and TRL fall back to). None when the config has neither.
    Prepares the embedded model when model_name_or_path is unset (rubricrl.runs.training.base_model)."""
    from transformers import AutoConfig, AutoTokenizer

    from rubricrl.runs.training import base_model

    path = base_model(model)
    load = {"revision": model.model_revision, "trust_remote_code": grpo.trust_remote_code}
    try:
        if grpo.use_vllm and grpo.vllm_max_model_length:
            context, source = grpo.vllm_max_model_length, "vllm_max_model_length"
        else:
            config = AutoConfig.from_pretrained(path, **load)
            context = getattr(config.get_text_config(), "max_position_embeddings", None)
            source = f"{path}'s max_position_embeddings"
            if not context:
                return None
        tokenizer = AutoTokenizer.from_pretrained(path, **load)
    except OSError as error:  # transformers: not on the Hub, offline, no tokenizer files
        raise ConfigError(f"model_name_or_path {path}: cannot load its config or tokenizer: {error}") from None
    tokens = context - grpo.max_completion_length
    if tokens < 1:
        raise ConfigError(
            f"max_completion_length {grpo.max_completion_length} leaves no room for a prompt within {source} {context}"
        )
    kwargs = grpo.chat_template_kwargs if isinstance(grpo.chat_template_kwargs, dict) else {}
    return PromptBudget(
        tokens, f"{source} {context} - max_completion_length {grpo.max_completion_length}", tokenizer, kwargs
    )


def load_rurl_data(
    path: Path,
    config: RurlConfig,
    seed: int,
    *,
    mode: str = "per_criterion",
    budget: PromptBudget | None = None,
    grpo=None,
    model=None,
) -> RurlData:
    """Every row checked (RubricError names the file and row), the rows that can never train refused or left out
    (`config.bad_rows`; `mode`: the grading mode; the prompt budget given, or found from GRPOConfig `grpo` and
    ModelConfig `model` once the rows have read well, else not checked), split, prefiltered. Raises ConfigError
    when nothing is left to train on."""
    rows = list(iter_rubric_rows(path))
    bad = next((row for row in rows if not row.conversation or row.conversation[-1]["role"] != "user"), None)
    if bad is not None:
        raise RubricError(f"{path}: row {bad.id!r}: the prompt must end with the user's turn (the policy answers it)")
    if budget is None and grpo is not None and model is not None:
        budget = prompt_budget(grpo, model)
    main_process = grpo is None or grpo.process_index == 0  # every rank loads the data; one says what it left out
    rows, rejected, bad_counts = untrainable(rows, mode, budget, config.bad_rows, path, announce=main_process)
    if config.rubric_dropout:
        short = [row for row in rows if sum(c.points > 0 for c in row.rubric.criteria) < config.rubric_dropout_min]
        if short:
            first = short[0]
            positives = sum(c.points > 0 for c in first.rubric.criteria)
            raise ConfigError(
                f"rurl.rubric_dropout_min {config.rubric_dropout_min}: above the {positives} positive criteria of "
                f"{first.where or path} (id {first.id!r}) and {len(short) - 1} more rubric(s); lower it"
            )
    train, evaluation = split_rows(rows, config.eval_size, seed)
    if config.eval_rubrics is not None:  # another dataset held out whole, its rows checked as the training rows
        evaluation = list(iter_rubric_rows(config.eval_rubrics))
        odd = next((row for row in evaluation if not row.conversation or row.conversation[-1]["role"] != "user"), None)
        if odd is not None:
            raise RubricError(f"{config.eval_rubrics}: row {odd.id!r}: the prompt must end with the user's turn")
        evaluation, _, _ = untrainable(
            evaluation, mode, budget, config.bad_rows, config.eval_rubrics, announce=main_process
        )
    counts: dict[str, int] = {}
    role = None
    if config.prefilter is not None:
        train, counts, role = prefilter(train, config)
    if not train:
        raise ConfigError(
            f"{path}: no row left to train on ({len(rows)} rows, {len(evaluation)} held out"
            + (f", {sum(bad_counts.values())} left out as bad rows" if bad_counts else "")
            + (f", prefilter: {counts}" if counts else "")
            + ")"
        )
    return RurlData(train, evaluation, describe_input(path), counts, role, bad_counts, rejected)


def untrainable(
    rows: list[RubricRow], mode: str, budget: PromptBudget | None, action: str, path: Path, *, announce: bool = True
) -> tuple[list[RubricRow], list[Rejected], dict[str, int]]:
    """The rows that can never train: in an explicit mode, a rubric without positive points (its score is always
    None: grading/scores.py); a prompt over the budget (it would fail inside generation, mid-run, as verl's
    filter_overlong_prompts guards against). action "refuse" raises one line naming them; "skip" leaves them out,
    returning the kept rows, the rejected ones and their counts by reason."""
    lengths = budget.lengths([row.conversation for row in rows]) if budget is not None else [0] * len(rows)
    kept, rejected, counts = [], [], {}
    for row, length in zip(rows, lengths):
        reasons = []
        if mode in EXPLICIT_MODES and row.rubric.positive_points == 0:
            reasons.append(
                (
                    "no_positive_points",
                    "no criterion with positive points (all penalties): its reward is always None, nothing to earn",
                )
            )
        if budget is not None and length > budget.tokens:
            reasons.append(
                (
                    "prompt_too_long",
                    f"prompt of {length} tokens over the prompt budget of {budget.tokens} ({budget.source})",
                )
            )
        if not reasons:
            kept.append(row)
            continue
        for reason, _ in reasons:
            counts[reason] = counts.get(reason, 0) + 1
        rejected.append(Rejected(row.where or str(path), "; ".join(text for _, text in reasons), {"id": row.id}))
    if rejected:
        listed = "; ".join(f"{r.location} (id {r.row['id']!r}): {r.reason}" for r in rejected[:3])
        more = f"; and {len(rejected) - 3} more" if len(rejected) > 3 else ""
        if action == "refuse":
            raise ConfigError(
                f"{len(rejected)} of {len(rows)} rows can never train: {listed}{more}. Fix or remove "
                "them, or set rurl.bad_rows: skip to leave them out"
            )
        if announce:
            print(
                f"rurl train: left out {len(rejected)} of {len(rows)} rows that can never train ({counts}): "
                f"{listed}{more}",
                file=sys.stderr,
            )
    return kept, rejected, counts


def split_rows(rows: list[Any], eval_size: float, seed: int) -> tuple[list[Any], list[Any]]:
    """(train, held out), each in input order: `eval_size` is a share (0 < x < 1, at least one row) or a count
    (>= 1), 0 holds out none; which rows, seeded. ConfigError when it would leave none to train on."""
    if eval_size <= 0:
        return list(rows), []
    held = round(len(rows) * eval_size) if eval_size < 1 else int(eval_size)
    if held >= len(rows):
        raise ConfigError(f"eval_size {eval_size}: holds out {held} of {len(rows)} rows, leaving none to train on")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held_out = set(order[: max(1, held)])
    return [r for i, r in enumerate(rows) if i not in held_out], [r for i, r in enumerate(rows) if i in held_out]


def prefilter(rows: list[RubricRow], config: RurlConfig) -> tuple[list[RubricRow], dict[str, int], str | None]:
    """The rows whose RuFT candidates' scores, those of one role (`prefilter_role`), have std > prefilter_min_std
    and a mean inside prefilter_mean_range; read from the build's candidates.jsonl (complete lines only). Returns
    the kept rows, the counts and the role measured."""
    path = Path(config.prefilter) / "candidates.jsonl"
    if not path.is_file():
        raise ConfigError(f"rurl.prefilter {config.prefilter}: no candidates.jsonl (is it a `ruft build` folder?)")
    scores: dict[str | None, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    per_role: dict[str | None, int] = defaultdict(int)
    for _, candidate in complete_rows(path):
        per_role[candidate.get("role")] += 1
        if candidate.get("score") is not None:
            scores[candidate.get("role")][str(candidate["id"])].append(candidate["score"])
    role = _prefilter_role(config, per_role, path)
    low, high = config.prefilter_mean_range
    kept, counts = [], {"kept": 0, "flat": 0, "outside_band": 0, "not_built": 0}
    for row in rows:
        values = scores[role].get(row.id, [])
        if len(values) < 2:
            counts["not_built"] += 1
        elif statistics.pstdev(values) <= config.prefilter_min_std:
            counts["flat"] += 1
        elif not low <= statistics.fmean(values) <= high:
            counts["outside_band"] += 1
        else:
            counts["kept"] += 1
            kept.append(row)
    return kept, counts, role


def _prefilter_role(config: RurlConfig, per_role: dict[str | None, int], path: Path) -> str | None:
    """config.prefilter_role, checked against the build's roles; else `policy` when the build has it, else the role
    with the most candidates. None: a build whose lines name no role (one role)."""
    named = sorted(str(role) for role in per_role if role is not None)
    if config.prefilter_role is not None:
        if config.prefilter_role not in per_role:
            raise ConfigError(
                f"rurl.prefilter_role {config.prefilter_role!r}: no candidate of that role in {path} "
                f"(its roles: {', '.join(named) or 'none named'})"
            )
        return config.prefilter_role
    if "policy" in per_role or not per_role:
        return "policy" if per_role else None
    most = max(per_role.values())
    top = [role for role, count in per_role.items() if count == most]
    if len(top) > 1:
        raise ConfigError(
            f"rurl.prefilter: {path} has {most} candidates from each of the roles "
            f"{', '.join(sorted(map(str, top)))}: set rurl.prefilter_role to one"
        )
    return top[0]
