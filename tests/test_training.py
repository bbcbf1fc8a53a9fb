"""rubricrl/runs/training.py's save_model with LoRA: the merged model is built from the saved adapter on the base model
loaded on the CPU (what still works under ZeRO-3/FSDP, where the trained parameters are shards), and it is the
folder that merging the trained model in memory gives, in the dtype it trained in."""

import inspect
import json

import pytest

from rubricrl.runs.training import save_model
from tests.test_ruft_train import tensors


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_lora_model_merged_from_its_saved_adapter_equals_the_one_merged_in_memory(dtype, tmp_path, quiet_env):
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

    out, in_memory = tmp_path / "out", tmp_path / "in_memory"
    save_model(trainer, out, merge=True)
    trainer.model.merge_and_unload().save_pretrained(in_memory)  # after: it merges in place

    merged, expected, base = tensors(out), tensors(in_memory), tensors(base_path)
    assert merged.keys() == expected.keys() and merged
    for name, tensor in expected.items():
        assert merged[name].dtype == tensor.dtype == getattr(torch, dtype), name
        assert torch.equal(merged[name], tensor), name
    changed = {name for name in base if not torch.equal(base[name].float(), merged[name].float())}
    assert changed and all(name.endswith(("q_proj.weight", "v_proj.weight")) for name in changed), sorted(changed)
    for file in ("config.json", "generation_config.json"):
        assert json.loads((out / file).read_text()) == json.loads((in_memory / file).read_text()), file
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [tokenizer.eos_token_id, 0]
    assert (out / "adapter" / "adapter_config.json").is_file() and (out / "tokenizer_config.json").is_file()
    assert AutoModelForCausalLM.from_pretrained(out).dtype == getattr(torch, dtype)


def test_the_deepspeed_switch_the_merge_hides_still_exists():
    """merge_saved_adapter hides transformers' ZeRO-3 config (a private module variable) while the main process
    loads the base model alone; if transformers renames it, the merge would load partitioned and hang."""
    from transformers.integrations import deepspeed

    assert hasattr(deepspeed, "_hf_deepspeed_config_weak_ref")
    assert "_hf_deepspeed_config_weak_ref" in inspect.getsource(deepspeed.is_deepspeed_zero3_enabled)
