"""`rubricrl ruft train`: supervised fine-tuning on the answers a `ruft build` kept, with TRL's SFTTrainer.

    rubricrl ruft train --config configs/ruft/tiny-cpu.yaml --dataset runs/ruft --output_dir runs/ruft-sft

All a user can get wrong is checked before a model loads. Settings: `TrainArgs`, then TRL's `SFTConfig` and
`ModelConfig` as `trl sft --config` reads them (flat keys, flags win), over `CPU_DEFAULTS` without CUDA (SFTConfig's
bf16 default fails on a CPU). Dataset: a `ruft build` folder's `sft/`, a saved HF dataset, or a .parquet or .jsonl
in TRL's conversational prompt-completion format, read by `rubricrl.records`, each row checked; provenance columns
(id, score, judge, ...) ride along and SFTTrainer drops them. `model_name_or_path` defaults to the embedded model;
LoRA when `use_peft`; loss on the completion only (TRL's default for prompt-completion data,
`completion_only_loss=None`). wandb when `report_to` names it (offline without WANDB_API_KEY unless WANDB_MODE is
set), with config.yaml and the build's manifest.json as its config. `output_dir`
gets `config.yaml` first (loadable with --config), the model and tokenizer (LoRA merged unless `merge_adapter` is
false) and a model card naming dataset and base model. `resume_from_checkpoint` (a folder, or true: the latest) goes
to `trainer.train`. TRL, transformers, torch and datasets load only inside the functions: `rubricrl --help` imports
this module.
"""

import itertools
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricrl.config import ConfigError, parse_settings, resolved
from rubricrl.records import InvalidRecord, RecordFileError, conversation, open_records
from rubricrl.runs.card import ModelCard
from rubricrl.runs.training import (
    base_model,
    begin_run,
    end_trainer,
    is_main_process,
    model_init_kwargs,
    push_finished,
    require_output_dir,
    resume_target,
    save_model,
    train,
    trl_defaults,
    trl_settings,
    wandb_run,
)

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import ModelConfig, SFTConfig, SFTTrainer

COMMAND = "ruft train"
PROVENANCE = {
    "threshold": "threshold tau",
    "k": "K candidates per query",
    "model": "candidate models",
    "judge_model": "judge",
    "grading_mode": "grading mode",
}
"""Provenance columns of a `ruft build` dataset whose distinct values the model card lists, with their names."""
BUILD_FILES = ("manifest.json", "sft", "sft.jsonl", "queries.jsonl", "candidates.jsonl")
"""What marks a `ruft build` output folder (finished when manifest.json, written last, is there)."""


@dataclass
class TrainArgs:
    dataset: Path
    """The training data: a `ruft build` output folder (its sft/ dataset is read, its manifest.json goes into the
    run's config), a saved Hugging Face dataset folder, a .parquet or a .jsonl file, in TRL's conversational
    prompt-completion format: `prompt` (chat messages ending with the user's turn), `completion` ([{role:
    assistant, content}]). Set --output_dir (TRL's) too."""
    merge_adapter: bool = True
    """With --use_peft: save the model with the LoRA weights merged in (a plain model folder for vLLM, `rubricrl
    eval` and `rurl train`) and the adapter alone in output_dir/adapter; false: output_dir holds only the adapter
    (transformers loads it onto the base model through peft)."""


@dataclass
class SFTData:
    dataset: "Dataset"
    source: str
    """Where the rows were read (the sft/ folder of a build folder), for messages and the model card."""
    manifest: dict[str, Any] | None
    """The `ruft build` manifest.json of the dataset, when there is one."""
    manifest_path: Path | None = None
    """Where that manifest is."""


def run_train(args) -> int:
    train_args, sft_config, model_config = parse_settings(args, command=COMMAND, trl_defaults=trl_defaults())
    output_dir = require_output_dir(sft_config, COMMAND)
    data = load_sft_data(train_args.dataset)
    resume = resume_target(sft_config)
    base_model(model_config)

    config = run_config(train_args, sft_config, model_config)
    merge = model_config.use_peft and train_args.merge_adapter
    run_settings = {**config, "dataset_manifest": data.manifest}

    begin_run(
        sft_config,
        config,
        f"{COMMAND}: {model_config.model_name_or_path} on {len(data.dataset)} examples from {data.source}"
        f"{' (LoRA)' if model_config.use_peft else ''} -> {output_dir}",
    )
    with wandb_run(sft_config, run_settings, COMMAND) as wandb:
        trainer = build_trainer(sft_config, model_config, data)
        trained = train(trainer, resume, wandb, run_settings)
        save_model(trainer, output_dir, merge)
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        final_loss = losses[-1] if losses else trained.training_loss
        if is_main_process(sft_config):
            write_model_card(trainer, output_dir, data, model_config.model_name_or_path, config, final_loss, merge)
            push_finished(trainer, output_dir, COMMAND)
        end_trainer(trainer)
    if is_main_process(sft_config):
        steps = trainer.state.global_step
        run_steps = steps - trained.first_step
        resumed = f", resumed from {Path(resume).name}" if resume else ""
        print(
            f"{COMMAND}: {steps} steps ({run_steps} this run{resumed}) in {trained.seconds:.1f} s "
            f"({run_steps / trained.seconds:.2f} steps/s), final loss {final_loss:.4f}; model: {output_dir}"
        )
    return 0


# --- the dataset ----------------------------------------------------------------------------------------------------


def load_sft_data(path: Path) -> SFTData:
    """The prompt-completion rows of `path`, checked one by one, in memory (so that SFTTrainer's tokenization writes
    no cache files into the build folder). Raises RecordFileError naming the file, the row and the problem."""
    from datasets import Dataset

    path = Path(path)
    manifest_path = _manifest_path(path)
    if path.is_dir() and any((path / name).exists() for name in BUILD_FILES):  # a `ruft build` output folder
        if manifest_path is None or not (path / "sft").is_dir():
            raise RecordFileError(
                f"{path}: a `ruft build` folder without manifest.json and sft/, which the build "
                "writes when it ends: rerun the same `rubricrl ruft build` to finish it"
            )
        path = path / "sft"
    manifest = _read_manifest(manifest_path)
    opened = open_records(path)
    records = iter(opened.records)
    first = next(records, None)
    if first is None:
        raise RecordFileError(f"{opened.source}: the dataset is empty (0 rows): {_empty_hint(manifest)}")
    missing = [c for c in ("prompt", "completion") if opened.columns is not None and c not in opened.columns]
    if missing:
        raise RecordFileError(
            f"{opened.source}: no {' or '.join(map(repr, missing))} column (it has "
            f"{opened.columns}); `ruft train` takes TRL's conversational prompt-completion format: "
            "prompt = chat messages, completion = [{role: assistant, content}]"
        )
    rows = []
    for record in itertools.chain([first], records):
        where = f"{opened.source}: {record.location}"
        if record.problem is not None:
            raise RecordFileError(f"{where}: {record.problem}")
        try:
            rows.append(_sft_row(record.row))
        except InvalidRecord as error:
            raise RecordFileError(f"{where}: {error}") from None
    return SFTData(Dataset.from_list(rows), opened.source, manifest, manifest_path)


def _manifest_path(path: Path) -> Path | None:
    """The build's manifest.json: in the folder given, or beside its sft/ or sft.parquet when one of those is given."""
    if (path / "manifest.json").is_file():
        return path / "manifest.json"
    if path.name in ("sft", "sft.parquet") and (path.parent / "manifest.json").is_file():
        return path.parent / "manifest.json"
    return None


def _read_manifest(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise RecordFileError(f"{path}: cannot read the build manifest: {error}") from None


def _empty_hint(manifest: dict[str, Any] | None) -> str:
    if manifest is None:
        return "nothing to train on"
    counts = manifest.get("counts") or {}
    tau = ((manifest.get("config") or {}).get("ruft") or {}).get("threshold")
    below = counts.get("queries_below_threshold")
    return (
        f"no candidate reached the threshold tau = {tau} in the build ({below} of {counts.get('finished_queries')} "
        "queries below it, listed in below_threshold.jsonl): lower ruft.threshold or sample more candidates "
        "(ruft.candidates)"
    )


def _sft_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row with `prompt` as chat messages ending with the user's turn and `completion` as assistant messages
    (a text is read as one message); the other columns unchanged. Raises InvalidRecord."""
    for key in ("prompt", "completion"):
        if key not in row:
            raise InvalidRecord(
                f"no {key!r} key; a row holds prompt (chat messages) and completion ([{{role: assistant, content}}])"
            )
    return {**row, "prompt": conversation(row["prompt"], "prompt"), "completion": _completion(row["completion"])}


def _completion(value: Any) -> list[dict[str, str]]:
    if isinstance(value, str):
        value = [{"role": "assistant", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidRecord(f"'completion' must be a non-empty list of assistant messages, got {value!r:.80}")
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            raise InvalidRecord(f"completion[{i}]: expected {{role: assistant, content}}, got {message!r:.80}")
        if not isinstance(message.get("content"), str) or not message["content"].strip():
            raise InvalidRecord(
                f"completion[{i}]: 'content' must be a non-empty text, got {message.get('content')!r:.80}"
            )
    return [{"role": "assistant", "content": m["content"]} for m in value]


# --- the run --------------------------------------------------------------------------------------------------------


def run_config(train_args: TrainArgs, sft_config: "SFTConfig", model_config: "ModelConfig") -> dict[str, Any]:
    """The resolved settings, flat as `--config` takes them back: ours, then SFTConfig's and ModelConfig's fields."""
    return {**resolved([train_args]), **trl_settings(sft_config), **asdict(model_config)}


def build_trainer(sft_config: "SFTConfig", model_config: "ModelConfig", data: SFTData) -> "SFTTrainer":
    """SFTTrainer as `trl sft` builds it (trl/scripts/sft.py): the model's load settings from ModelConfig, the
    user's model_init_kwargs on top."""
    from trl import SFTTrainer, get_peft_config, get_quantization_config

    sft_config.model_init_kwargs = model_init_kwargs(sft_config, model_config)
    try:
        trainer = SFTTrainer(
            model=model_config.model_name_or_path,
            args=sft_config,
            train_dataset=data.dataset,
            peft_config=get_peft_config(model_config),
            quantization_config=get_quantization_config(model_config),
        )
    except OSError as error:  # transformers: not on the Hub, offline, no weights in the folder
        raise ConfigError(f"model_name_or_path {model_config.model_name_or_path}: cannot load: {error}") from None
    if len(trainer.train_dataset) == 0:  # TRL drops the rows truncation left without a completion token
        raise ConfigError(
            f"{data.source}: no example keeps a completion token within max_length "
            f"{sft_config.max_length}: raise --max_length"
        )
    note = truncation_note(trainer.train_dataset, len(data.dataset), sft_config)
    if note:
        print(f"{COMMAND}: {note}", file=sys.stderr)
    return trainer


def truncation_note(prepared: "Dataset", total: int, sft_config: "SFTConfig") -> str | None:
    """What max_length did to the examples, or None: TRL drops an example whose prompt fills it, and cuts the end of
    the others silently (a cut answer loses its end-of-turn token, so the model is not taught to stop there)."""
    if sft_config.max_length is None or sft_config.packing:
        return None
    import pyarrow.compute as pc

    lengths = pc.list_value_length(prepared.with_format("arrow")["input_ids"])
    cut = pc.sum(pc.greater_equal(lengths, sft_config.max_length)).as_py() or 0
    dropped = total - len(prepared)
    if not cut and not dropped:
        return None
    return (
        f"max_length {sft_config.max_length}: {dropped} of {total} examples dropped (the prompt fills it), "
        f"{cut} cut short (their answers lose the end); raise --max_length to keep them whole"
    )


def write_model_card(
    trainer: "SFTTrainer",
    output_dir: Path,
    data: SFTData,
    base_model: str,
    config: dict[str, Any],
    final_loss: float,
    merged: bool,
) -> None:
    """README.md in output_dir: what the model was trained from, on what, how, and how to load it."""
    provenance = {
        c: sorted({v for v in data.dataset[c] if v is not None}) for c in PROVENANCE if c in data.dataset.column_names
    }
    rubrics = (data.manifest or {}).get("config", {}).get("rubrics")
    ModelCard(
        command=COMMAND,
        base_model=base_model,
        method="fine-tuned with RuFT (rubricrl): supervised fine-tuning (TRL's SFTTrainer, loss on the answers "
        "only) on the rubric-graded answers a `rubricrl ruft build` kept, the best of K candidates per query at or "
        "above the threshold tau.",
        dataset=data.source,
        facts=[
            f"{len(data.dataset)} examples"
            + (f"; build manifest `{data.manifest_path}`" if data.manifest_path else ""),
            *([f"rubrics: `{rubrics}`"] if rubrics else []),
            *[f"{PROVENANCE[column]}: {', '.join(map(str, values))}" for column, values in provenance.items()],
            f"training: {trainer.state.global_step} steps, final loss {final_loss:.4f}",
        ],
        tags=["ruft", "sft"],
        use_peft=bool(config.get("use_peft")),
        merged=merged,
        datasets=[rubrics] if rubrics else [],
    ).write(output_dir, config)
