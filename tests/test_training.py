"""What the training commands share: TRL's configs parsed beside our sections (rubricrl/config.py), and
rubricrl/runs/training.py's save_model with LoRA: the trained model merged in place, and the folder it gives is the one
that merging the saved adapter into the base model loaded on the CPU gives (what a sharded model under ZeRO-3/FSDP
takes), in the dtype it trained in."""

import argparse
import json
from pathlib import Path

import pytest
import yaml

from rubricrl.config import ConfigError, add_config_arguments, parse_settings, parse_trl
from rubricrl.runs import training
from rubricrl.runs.training import merge_saved_adapter, save_model
from tests.test_config import Knobs, Paths
from tests.test_ruft_train import tensors


@pytest.fixture
def knobs_section(monkeypatch):
    """The sections of tests/test_config.py's groups (its autouse `sections`)."""
    monkeypatch.setattr("rubricrl.config.SECTIONS", ("knobs", "llm", "other"))


def test_trl_fields_parse_as_trl_sft_reads_them(tmp_path, knobs_section):
    """A TRL user's flat YAML (SFTConfig and ModelConfig fields) works beside our sections; flags win."""
    from trl import ModelConfig, SFTConfig

    file = {
        "learning_rate": 2.0e-5,
        "num_train_epochs": 2,
        "model_name_or_path": "some/model",
        "output_dir": str(tmp_path / "out"),
        "use_cpu": True,
        "bf16": False,
        "knobs": {"mode": "b"},
    }
    sft, model = parse_trl([SFTConfig, ModelConfig], file, ["--learning_rate", "1e-5", "--use_peft"])
    assert sft.learning_rate == 1e-5 and sft.num_train_epochs == 2 and sft.output_dir == str(tmp_path / "out")
    assert model.model_name_or_path == "some/model" and model.use_peft is True
    with pytest.raises(ConfigError, match="learning_rat"):
        parse_trl([SFTConfig, ModelConfig], {"learning_rat": 1.0}, [])
    with pytest.raises(ConfigError, match="not_a_field"):
        parse_trl([SFTConfig, ModelConfig], {"use_cpu": True, "bf16": False}, ["--not_a_field", "1.0"])


def test_a_training_command_takes_our_sections_and_trl_fields_from_one_file_and_the_flags(tmp_path, knobs_section):
    """What `rubricrl ruft train` / `rurl train` get: our groups, then SFTConfig/ModelConfig, one --config."""
    file = {
        "input": "data",
        "knobs": {"samples": 2},
        "learning_rate": 3.0e-5,
        "output_dir": str(tmp_path / "out"),
        "use_cpu": True,
        "bf16": False,
        "model_name_or_path": "base",
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(file))
    parser = argparse.ArgumentParser(prog="test", exit_on_error=False)
    add_config_arguments(parser, [Paths, Knobs], trl_types=["trl.SFTConfig", "trl.ModelConfig"])
    args, rest = parser.parse_known_args(
        ["--config", str(tmp_path / "train.yaml"), "--samples", "3", "--learning_rate", "1e-5", "--lora_r", "8"]
    )
    args.trl_argv = rest
    paths, knobs, sft, model = parse_settings(args, command="test")
    assert (paths.input, knobs.samples, sft.learning_rate, model.lora_r, sft.use_cpu) == (
        Path("data"),
        3,
        1e-5,
        8,
        True,
    )
    assert "SFTConfig" in parser.epilog


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_lora_model_merged_in_memory_equals_the_one_merged_from_its_saved_adapter(
    dtype, tmp_path, quiet_env, monkeypatch
):
    """save_model merges an unsharded model in place; a sharded one (ZeRO-3, FSDP) from the saved adapter on the base
    model loaded again: both give the same weights, config and generation config."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from rubricrl.serving.embedded_model import prepare_embedded_model

    base_path = prepare_embedded_model()  # stored in bf16; the tiny presets train it in float32
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, 0]  # the trainers adjust it: the merge keeps it
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():  # an adapter that changes the weights (LoRA's B starts at zero)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    trainer = Trainer(
        model=model,
        processing_class=tokenizer,
        args=TrainingArguments(str(tmp_path / "run"), use_cpu=True, report_to="none"),
    )

    out, from_adapter = tmp_path / "out", tmp_path / "from_adapter"
    trained = trainer.model.get_base_model()
    with monkeypatch.context() as patched:  # unsharded: the base model is not loaded again
        patched.setattr(training, "merge_saved_adapter", lambda *args: pytest.fail("loaded the base model again"))
        save_model(trainer, out, merge=True)  # merges `trained` in place: class, config and dtype stay
    merge_saved_adapter(trained, out / "adapter", from_adapter)  # how a sharded model is merged

    merged, expected, base = tensors(out), tensors(from_adapter), tensors(base_path)
    assert merged.keys() == expected.keys() and merged
    for name, tensor in expected.items():
        assert merged[name].dtype == tensor.dtype == getattr(torch, dtype), name
        assert torch.equal(merged[name], tensor), name
    changed = {name for name in base if not torch.equal(base[name].float(), merged[name].float())}
    assert changed and all(name.endswith(("q_proj.weight", "v_proj.weight")) for name in changed), sorted(changed)
    for file in ("config.json", "generation_config.json"):
        assert json.loads((out / file).read_text()) == json.loads((from_adapter / file).read_text()), file
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [tokenizer.eos_token_id, 0]
    assert (out / "adapter" / "adapter_config.json").is_file() and (out / "tokenizer_config.json").is_file()
    assert AutoModelForCausalLM.from_pretrained(out).dtype == getattr(torch, dtype)


def test_the_deepspeed_switch_the_merge_hides_still_switches_zero3(monkeypatch):
    """merge_saved_adapter hides transformers' ZeRO-3 config (a private module variable) while the main process
    loads the base model alone; if transformers stopped reading it, the merge would load partitioned and hang."""
    import weakref

    from transformers.integrations import deepspeed

    class Zero3Config:
        def is_zero3(self) -> bool:
            return True

    config = Zero3Config()
    monkeypatch.setattr(deepspeed, "_hf_deepspeed_config_weak_ref", weakref.ref(config))
    assert deepspeed.is_deepspeed_zero3_enabled()
    monkeypatch.setattr(deepspeed, "_hf_deepspeed_config_weak_ref", None)  # what the merge sets meanwhile
    assert not deepspeed.is_deepspeed_zero3_enabled()
