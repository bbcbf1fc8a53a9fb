"""What `ruft train` and `rurl train` share around TRL's trainers: CPU defaults, the checks before a model loads (base
model, checkpoint to resume), the resolved TRL settings, and the steps in order: `begin_run` (config.yaml, first),
`wandb_run` (offline without a key), `train`, `save_model` (LoRA merged), `end_trainer`. TRL, transformers and torch
load only inside the functions: `rubricrl --help` imports this module.
"""

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricrl.config import ConfigError, write_resolved

if TYPE_CHECKING:
    from transformers import Trainer, TrainingArguments

CPU_DEFAULTS = {"use_cpu": True, "bf16": False, "gradient_checkpointing": False}
"""TRL defaults on a machine without CUDA: SFTConfig's and GRPOConfig's own (bf16=True, gradient checkpointing on)
fail there ("Your setup doesn't support bf16/gpu") or only cost time. The config file and the flags still win."""
NO_OUTPUT_DIR = "\x00unset"
"""output_dir's default while parsing: TRL would write to ./trainer_output unasked; we ask for --output_dir."""
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
"""A Hugging Face Hub model id (`Qwen/Qwen3-4B-Base`); a name that is not one must be a folder that exists."""


def trl_defaults() -> dict[str, Any]:
    """The defaults a training command gives TRL's config before the file and flags: no output_dir, and the CPU
    defaults on a machine without CUDA."""
    import torch

    return {"output_dir": NO_OUTPUT_DIR, **({} if torch.cuda.is_available() else CPU_DEFAULTS)}


def require_output_dir(trl_config: "TrainingArguments", command: str) -> Path:
    if trl_config.output_dir == NO_OUTPUT_DIR:
        raise ConfigError(
            f"`rubricrl {command}` needs --output_dir (or the key output_dir in --config): where the "
            "checkpoints and the trained model go"
        )
    return Path(trl_config.output_dir)


def check_base_model(name: str) -> None:
    """A folder must exist and hold config.json; anything else must look like a Hub id (loaded by transformers)."""
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model_name_or_path {name}: not a model folder (no config.json)")
    elif (
        path.is_absolute()
        or name.startswith((".", "~"))
        or not HUB_ID.fullmatch(name)
        or (len(path.parts) > 1 and Path(path.parts[0]).is_dir())
    ):
        # `runs/missing` reads as a Hub id, but `runs/` is a folder here: a local path that does not exist
        raise ConfigError(f"model_name_or_path {name}: no such folder")


def base_model(model_config) -> str:
    """ModelConfig's model_name_or_path, the embedded model when unset (prepared on first use), checked."""
    if model_config.model_name_or_path is None:
        from rubricrl.serving.embedded_model import prepare_embedded_model

        model_config.model_name_or_path = str(prepare_embedded_model(log=lambda m: print(m, file=sys.stderr)))
    check_base_model(model_config.model_name_or_path)
    return model_config.model_name_or_path


def resume_target(trl_config: "TrainingArguments") -> str | None:
    """`resume_from_checkpoint` as Trainer.train takes it: a checkpoint folder, True (the latest checkpoint-N in
    output_dir; "true" on the command line, where the field is a string) or None. Checked here, before the model."""
    value = trl_config.resume_from_checkpoint
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0", "none", ""):
        value = value.strip().lower() in ("true", "yes", "1")
    if not value:
        return None
    if value is True:
        latest = latest_checkpoint(Path(trl_config.output_dir))
        if latest is None:
            raise ConfigError(f"resume_from_checkpoint: no complete checkpoint-N folder in {trl_config.output_dir}")
        return str(latest)
    if not (Path(value) / "trainer_state.json").is_file():
        raise ConfigError(f"resume_from_checkpoint {value}: not a checkpoint folder (no trainer_state.json)")
    return str(value)


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The latest checkpoint-N folder with trainer_state.json, which the Trainer writes last: a kill while saving
    leaves a half-written folder that transformers' get_last_checkpoint would pick. None when there is none."""
    found = [
        p
        for p in output_dir.glob("checkpoint-*")
        if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None


def step_of(checkpoint: str | None) -> int:
    if checkpoint is None:
        return 0
    return json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]


def trl_settings(trl_config: "TrainingArguments") -> dict[str, Any]:
    """TRL's config as a flat mapping `--config` takes back. TrainingArguments.to_dict masks every field ending in
    `_token`: hub_token (a secret) is left out, eos_token and pad_token (not secrets) keep their values."""
    settings = trl_config.to_dict()
    if settings.get("output_dir") == NO_OUTPUT_DIR:  # not given (a dry run): say so
        settings["output_dir"] = None
    for key in [k for k in settings if k.endswith("_token")]:
        if key == "hub_token":
            del settings[key]
        else:
            settings[key] = getattr(trl_config, key)
    return settings


def model_init_kwargs(trl_config: "TrainingArguments", model_config) -> dict[str, Any]:
    """The model's load settings from ModelConfig, the user's model_init_kwargs on top (as `trl sft|grpo` do)."""
    kwargs = {
        "revision": model_config.model_revision,
        "trust_remote_code": trl_config.trust_remote_code,
        "attn_implementation": model_config.attn_implementation,
        "dtype": model_config.dtype,
    }
    kwargs.update(trl_config.model_init_kwargs or {})
    return kwargs


@dataclass
class Trained:
    """What `train` gives back."""

    first_step: int
    """The step it resumed from (0 for a fresh run)."""
    seconds: float
    """How long trainer.train took."""
    training_loss: float
    """trainer.train's mean loss over the run."""


def is_main_process(trl_config: "TrainingArguments") -> bool:
    """Under `accelerate launch`, one process writes files and reports."""
    return trl_config.process_index == 0


def begin_run(trl_config: "TrainingArguments", config: dict[str, Any], message: str) -> None:
    """On the main process: the resolved settings in output_dir/config.yaml, first, then `message` on stderr."""
    if is_main_process(trl_config):
        write_resolved(Path(trl_config.output_dir) / "config.yaml", config)
        print(message, file=sys.stderr)


@contextmanager
def wandb_run(trl_config: "TrainingArguments", run_settings: dict[str, Any], command: str) -> Iterator[Any]:
    """The run's wandb run on the main process when report_to names wandb (else None), finished however the block
    ends."""
    run = start_wandb(trl_config, run_settings, command) if is_main_process(trl_config) else None
    try:
        yield run
    finally:
        if run is not None:
            run.finish()


def train(trainer: "Trainer", resume: str | None, wandb: Any, run_settings: dict[str, Any]) -> Trained:
    """trainer.train from `resume` (None: from scratch), timed; the wandb run's config kept as `run_settings`."""
    if wandb is not None:
        trainer.add_callback(keep_run_config(wandb, run_settings))
    started, first_step = time.monotonic(), step_of(resume)
    output = trainer.train(resume_from_checkpoint=resume)
    return Trained(first_step, time.monotonic() - started, output.training_loss)


def end_trainer(trainer: "Trainer") -> None:
    """transformers >= 5.18: Trainer.end ends accelerate's trackers and the process group."""
    if hasattr(trainer, "end"):
        trainer.end()


def start_wandb(trl_config: "TrainingArguments", config: dict[str, Any], command: str):
    """The wandb run, started here with the run's config (the resolved settings and what the data came with),
    which transformers' WandbCallback then reuses. Offline without WANDB_API_KEY, unless WANDB_MODE says otherwise."""
    if "wandb" not in (trl_config.report_to or []):
        return None
    return wandb_init(command, trl_config.output_dir, name=trl_config.run_name, config=config)


def wandb_init(command: str, output_dir: str | Path, **init: Any):
    """wandb.init for every run of the project (training runs, experiments): project WANDB_PROJECT (default
    rubricrl), files in WANDB_DIR or `output_dir`, offline without WANDB_API_KEY unless WANDB_MODE says otherwise
    (said once, on stderr); `init`: the rest of wandb.init's arguments (name, group, config, job_type)."""
    import wandb

    mode = None
    if not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY"):
        mode = "offline"
        print(
            f"{command}: no WANDB_API_KEY: wandb runs offline (`wandb sync` uploads it later; WANDB_MODE=online "
            "uses the key of `wandb login`)",
            file=sys.stderr,
        )
    return wandb.init(
        project=os.environ.get("WANDB_PROJECT", "rubricrl"),
        mode=mode,
        dir=os.environ.get("WANDB_DIR") or str(output_dir),
        **init,
    )


def keep_run_config(wandb_run, settings: dict[str, Any]):
    """A callback that sets the run's config again once transformers' WandbCallback has merged its own into it
    (at train begin): that one holds the model's config.json keys (its `dtype` would replace ModelConfig's) and
    TrainingArguments.to_dict's masked `<EOS_TOKEN>` / `<PAD_TOKEN>`."""
    from transformers import TrainerCallback

    class KeepRunConfig(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            wandb_run.config.update(settings, allow_val_change=True)

    return KeepRunConfig()


def save_model(trainer: "Trainer", output_dir: Path, merge: bool) -> None:
    """The model and tokenizer in output_dir; a LoRA model merged (the adapter alone in output_dir/adapter). The
    trained model is merged where it is, in place (the run is over), unless its parameters are shards (ZeRO-3,
    FSDP) or its base is quantized (QLoRA): then the saved adapter is merged into the base model loaded again, on the
    CPU (`merge_saved_adapter`), which for a large model costs a load from disk and a merge on the host's cores."""
    from transformers import Trainer

    # Trainer's own save (no trainer's additions), which pushes nothing: with push_to_hub, the finished folder goes up
    # whole once its model card is written (push_finished)
    if not merge:
        Trainer.save_model(trainer, str(output_dir), _internal_call=True)
        return
    adapter = output_dir / "adapter"
    Trainer.save_model(trainer, str(adapter), _internal_call=True)  # every process: gathers sharded weights
    if trainer.args.should_save:
        base = trainer.model.get_base_model()
        # shards (ZeRO-3, FSDP) merge nothing whole; a quantized base (QLoRA) would keep its rounding: both from disk
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled or getattr(base, "hf_quantizer", None) is not None:
            merge_saved_adapter(base, adapter, output_dir)
        else:
            trainer.accelerator.unwrap_model(trainer.model).merge_and_unload().save_pretrained(output_dir)
        trainer.processing_class.save_pretrained(output_dir)


HUB_IGNORED = ["checkpoint-*", "_*", "wandb/*"]
"""What push_finished leaves out of the output folder: checkpoints (the Trainer pushes those as it saves them, by
hub_strategy), folders being written ("_"), and the offline wandb run."""


def push_finished(trainer: "Trainer", output_dir: Path, command: str) -> str | None:
    """With push_to_hub, the finished output folder (model, tokenizer, model card, manifest, and a RuRL run's
    gold-best/) to the repository hub_model_id, after the Trainer's own pushes in flight; main process. Returns the
    repository, or None without push_to_hub. The Trainer's pushes at each checkpoint (hub_strategy) go on as TRL
    makes them; this last one carries the run's own model card."""
    if not trainer.args.push_to_hub or not trainer.is_world_process_zero():
        return None
    from huggingface_hub import HfApi

    trainer._finish_current_push()  # a checkpoint's upload still running must not land after this one
    repo = trainer.hub_model_id or trainer.args.hub_model_id or output_dir.name
    HfApi(token=trainer.args.hub_token).upload_folder(
        repo_id=repo,
        folder_path=str(output_dir),
        commit_message=f"{command}: the finished run",
        revision=trainer.args.hub_revision,
        ignore_patterns=HUB_IGNORED,
    )
    return repo


def merge_saved_adapter(trained, adapter: Path, output_dir: Path) -> None:
    """The base model loaded on the CPU, the saved adapter merged into it, saved in output_dir. Not the trained model
    merged in memory: under ZeRO-3 or FSDP its parameters are shards (merging them merges nothing whole). `trained`
    (the training model under the adapter) gives the class, the dtype it trained in, and its config and generation
    config, which the trainers adjust (pad and eos tokens): the merged model keeps them."""
    import copy

    from peft import PeftConfig, PeftModel
    from transformers.integrations import deepspeed

    source = PeftConfig.from_pretrained(str(adapter))
    revision = {"revision": source.revision} if source.revision else {}
    # Only this process loads: under ZeRO-3 transformers would load the model partitioned across all processes (a
    # collective the others never join), so its DeepSpeed config is out of sight meanwhile.
    zero3, deepspeed._hf_deepspeed_config_weak_ref = deepspeed._hf_deepspeed_config_weak_ref, None
    try:
        base = type(trained).from_pretrained(
            source.base_model_name_or_path,
            config=copy.deepcopy(trained.config),
            dtype=trained.dtype,
            device_map="cpu",
            **revision,
        )
        merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    finally:
        deepspeed._hf_deepspeed_config_weak_ref = zero3
    merged.generation_config = copy.deepcopy(trained.generation_config)
    merged.save_pretrained(output_dir)
