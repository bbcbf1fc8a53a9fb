"""`rubricrl ruft train`: SFT with TRL's SFTTrainer on a `ruft build` dataset (written here, in the build's format).
Bad input is one line and exit 2 before any model loads; the loss is on the answer only (checked on the tokens and
on the loss value); real LoRA steps on a tiny random policy: weights move, the folder loads and generates, wandb
keeps an offline run with the config, and a run resumes from its checkpoint."""

import json
import re
from pathlib import Path

import pytest
import yaml

from commands.main import build_parser, main
from rubricrl.config import parse_settings
from tests.helpers import SECRET, tiny_policy

TINY_PRESET = Path(__file__).parents[1] / "configs" / "ruft" / "tiny-cpu.yaml"
GPU_PRESET = Path(__file__).parents[1] / "configs" / "ruft" / "qwen3-gpu.yaml"
MULTI_TURN = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there, what do you need?"},
    {"role": "user", "content": "Name a primary color."},
]
EXAMPLES = [
    ([{"role": "user", "content": "What is the capital of France?"}], "The capital of France is Paris."),
    (MULTI_TURN, "Red is a primary color."),
    ([{"role": "user", "content": "What is 2 + 2?"}], "2 + 2 equals 4."),
    ([{"role": "user", "content": "Which planet is red?"}], "Mars is the red planet."),
]


def sft_rows(examples=EXAMPLES) -> list[dict]:
    """Rows as `ruft build` writes them: prompt, completion, then the provenance columns."""
    return [
        {
            "prompt": prompt,
            "completion": [{"role": "assistant", "content": answer}],
            "id": f"q{i}",
            "candidate": i % 2,
            "model": "SmolLM2-135M-Instruct",
            "score": 0.75,
            "k": 4,
            "threshold": 0.5,
            "judge_model": "SmolLM2-135M-Instruct",
            "grading_mode": "per_criterion",
            "rubric_sha256": "ab" * 32,
        }
        for i, (prompt, answer) in enumerate(examples)
    ]


def write_build(folder: Path, rows: list[dict] | None = None) -> Path:
    """A finished `ruft build` folder: sft/ (save_to_disk), sft.parquet, config.yaml, manifest.json (last)."""
    from ruft.build_output import write_sft

    rows = sft_rows() if rows is None else rows
    folder.mkdir(parents=True, exist_ok=True)
    write_sft(folder, rows)
    (folder / "config.yaml").write_text("ruft: {threshold: 0.5}\n")
    manifest = {
        "command": "ruft build",
        "config": {"ruft": {"threshold": 0.5, "candidates": {"policy": 4}}},
        "counts": {
            "finished_queries": 6,
            "queries_kept": len(rows),
            "queries_below_threshold": 6 - len(rows),
            "sft_rows": len(rows),
        },
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading any model fails the test: every check must come before it."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))
    monkeypatch.setattr("rubricrl.serving.embedded_model.prepare_embedded_model", refuse)


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("rubricrl: error: "), err
    return err[-1]


# --- fast: the input, checked before any model --------------------------------------------------------------------


def _no_columns(tmp_path):
    import datasets

    datasets.Dataset.from_list([{"question": "q", "answer": "a"}]).save_to_disk(str(tmp_path / "qa"))
    return tmp_path / "qa", r"qa: no 'prompt' or 'completion' column \(it has \['question', 'answer'\]\)"


def _empty_build(tmp_path):
    return write_build(tmp_path / "build", rows=[]), (
        r"build/sft: the dataset is empty \(0 rows\): no candidate "
        r"reached the threshold tau = 0.5 .*6 of 6 queries below it"
    )


def _bad_completion(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = sft_rows()[:2]
    rows[1]["completion"] = [{"role": "user", "content": "oops"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path, r"data.jsonl: line 2: completion\[0\]: expected \{role: assistant, content\}"


def _unfinished_build(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "sft.jsonl").write_text(json.dumps(sft_rows()[0]) + "\n")
    return tmp_path / "build", r"build: a `ruft build` folder without manifest.json and sft/.*rerun"


@pytest.mark.parametrize(
    "make, extra",
    [
        pytest.param(lambda tmp: (tmp / "nope", r"nope: no such file or folder"), [], id="missing"),
        pytest.param(_no_columns, [], id="no-prompt-completion"),
        pytest.param(_empty_build, [], id="empty"),
        pytest.param(_bad_completion, [], id="bad-row"),
        pytest.param(_unfinished_build, [], id="unfinished-build"),
        pytest.param(
            lambda tmp: (write_build(tmp / "b"), r"model_name_or_path .*no-model: no such folder"),
            ["--model_name_or_path", "{tmp}/no-model"],
            id="no-base-model",
        ),
        pytest.param(
            lambda tmp: (write_build(tmp / "b"), r"model_name_or_path tests/no-such-model: no such folder"),
            ["--model_name_or_path", "tests/no-such-model"],
            id="relative-path-like-a-hub-id",
        ),
        pytest.param(
            lambda tmp: (write_build(tmp / "b"), r"resume_from_checkpoint: no complete checkpoint-N folder in .*out"),
            ["--resume_from_checkpoint", "true"],
            id="nothing-to-resume",
        ),
        pytest.param(
            lambda tmp: (write_build(tmp / "b"), r"needs --output_dir"), ["--no-output-dir"], id="no-output-dir"
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_model_loads(
    tmp_path, capsys, no_model_load, quiet_env, make, extra
):
    path, message = make(tmp_path)
    extra = [arg.format(tmp=tmp_path) for arg in extra]
    output = [] if "--no-output-dir" in extra else ["--output_dir", str(tmp_path / "out")]
    extra = [arg for arg in extra if arg != "--no-output-dir"]
    assert main(["ruft", "train", "--dataset", str(path), *output, *extra]) == 2
    assert re.search(message, error_line(capsys)), message
    assert not (tmp_path / "out" / "config.yaml").exists()


def test_every_format_reads_to_the_same_rows_with_the_manifest(tmp_path):
    from ruft.train import load_sft_data

    build = write_build(tmp_path / "build")
    jsonl = tmp_path / "rows.jsonl"
    rows = sft_rows()
    rows[0]["prompt"] = rows[0]["prompt"][0]["content"]  # a text prompt is one user message
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    expected = sft_rows()
    for path in (build, build / "sft", build / "sft.parquet", jsonl):
        data = load_sft_data(path)
        got = data.dataset.to_list()
        assert [(r["prompt"], r["completion"], r["id"], r["score"]) for r in got] == [
            (r["prompt"], r["completion"], r["id"], r["score"]) for r in expected
        ], path
        assert (data.manifest is not None) == (path != jsonl), path
    assert load_sft_data(build).source == str(build / "sft")
    assert load_sft_data(build).dataset[1]["prompt"] == MULTI_TURN  # multi-turn kept, roles and all


def test_resolved_config_loads_back_and_holds_no_secret(tmp_path):
    """config.yaml: ours, SFTConfig's and ModelConfig's fields, flat; `--config` it and the settings are the same.
    hub_token is left out (TrainingArguments.to_dict masks every `*_token`, eos_token too: that one is kept)."""
    from rubricrl.config import write_resolved
    from rubricrl.runs.training import CPU_DEFAULTS
    from ruft.train import run_config

    def settings(argv):
        args, rest = build_parser().parse_known_args(["ruft", "train", *argv])
        args.trl_argv = rest
        return parse_settings(args, command="ruft train", trl_defaults=CPU_DEFAULTS)

    first = settings(
        [
            "--dataset",
            "d",
            "--output_dir",
            str(tmp_path / "o"),
            "--config",
            str(TINY_PRESET),
            "--hub_token",
            SECRET,
            "--eos_token",
            "<|im_end|>",
            "--lora_r",
            "8",
            "--no-merge-adapter",
        ]
    )
    config = run_config(*first)
    write_resolved(tmp_path / "config.yaml", config)
    text = (tmp_path / "config.yaml").read_text()
    assert SECRET not in text and "hub_token" not in text
    assert config["eos_token"] == "<|im_end|>" and config["lora_r"] == 8 and config["merge_adapter"] is False
    again = settings(["--config", str(tmp_path / "config.yaml")])
    assert again[0] == first[0] and again[2] == first[2]
    assert run_config(*again) == config


def test_what_max_length_did_is_said():
    """TRL drops an example whose prompt fills max_length and cuts the others silently: the note counts both."""
    from datasets import Dataset
    from trl import SFTConfig

    from ruft.train import truncation_note

    config = SFTConfig(output_dir="unused", max_length=10, use_cpu=True, bf16=False, report_to=[])
    prepared = Dataset.from_dict({"input_ids": [[1] * 10, [1] * 3, [1] * 12]}).select([0, 1])  # as TRL filters
    assert truncation_note(prepared, 3, config) == (
        "max_length 10: 1 of 3 examples dropped (the prompt fills it), 1 cut "
        "short (their answers lose the end); raise --max_length to keep "
        "them whole"
    )
    assert truncation_note(prepared.select([1]), 1, config) is None


def test_presets_are_valid_trl_settings():
    """Both presets parse with TRL's own parser (unknown keys would fail) and every TRL key they set reaches TRL as
    written; the GPU one with bf16 off, as this machine has no GPU."""
    from trl import ModelConfig, SFTConfig

    from rubricrl.config import load_yaml, parse_trl

    for preset, flags in ((TINY_PRESET, []), (GPU_PRESET, ["--bf16", "false", "--use_cpu"])):
        written = load_yaml(preset)
        parsed = parse_trl([SFTConfig, ModelConfig], written, flags)
        fields = {key: getattr(config, key) for config in parsed for key in vars(config)}
        overridden = {"bf16", "use_cpu"} if flags else set()
        for key, value in written.items():
            if key in fields and key not in overridden:
                assert fields[key] == (value if key != "report_to" else [value]), (preset.name, key)


# --- slow: the embedded model -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_model() -> str:
    """The policy these tests train: what it writes does not matter to them (helpers.tiny_policy)."""
    return str(tiny_policy())


@pytest.mark.slow
def test_the_loss_is_on_the_answer_only(tmp_path, quiet_env):
    """TRL 1.16 (sft_trainer.py `_prepare_dataset`): prompt-completion rows get `completion_mask`, folded into
    `labels` (-100 on the prompt) because `completion_only_loss=None` means True for such data. Checked on the
    tokens (every prompt token masked, an earlier assistant turn of a multi-turn prompt included; every answer
    token kept) and on the loss (the mean over answer tokens only); provenance columns never reach the model."""
    import torch
    from transformers import AutoTokenizer
    from trl import ModelConfig, SFTConfig

    from rubricrl.serving.embedded_model import prepare_embedded_model
    from ruft.train import build_trainer, load_sft_data

    base_model = str(prepare_embedded_model())  # a trained model: a random one's loss is the same on every token
    data = load_sft_data(write_build(tmp_path / "build"))
    sft = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_length=None,
        per_device_train_batch_size=4,
        report_to=[],
        **{"use_cpu": True, "bf16": False, "gradient_checkpointing": False},
    )
    trainer = build_trainer(sft, ModelConfig(model_name_or_path=base_model), data)
    assert trainer.completion_only_loss is True
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    for row in trainer.train_dataset:
        prompt_ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)["input_ids"]
        n = len(prompt_ids)
        ids, labels = row["input_ids"], row["labels"]
        assert ids[:n] == prompt_ids
        assert labels[:n] == [-100] * n  # the whole prompt, system message and earlier turns included
        assert labels[n:] == ids[n:]  # every answer token, the end-of-turn token included
        assert tokenizer.decode(ids[n:]) == row["completion"][0]["content"] + "<|im_end|>\n"
    multi = next(row for row in trainer.train_dataset if row["id"] == "q1")
    kept = tokenizer.decode([t for t, label in zip(multi["input_ids"], multi["labels"]) if label != -100])
    assert "Hi there" not in kept and "Red is a primary color." in kept

    batch = next(iter(trainer.get_train_dataloader()))
    assert set(batch) <= {"input_ids", "attention_mask", "labels", "position_ids"}, set(batch)  # no provenance
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch)
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]
    per_token = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), targets.flatten(), reduction="none", ignore_index=-100
    ).view_as(targets)
    answer = targets != -100
    torch.testing.assert_close(loss, per_token[answer].mean(), rtol=1e-4, atol=1e-5)
    everything = batch["attention_mask"][:, 1:].bool()
    all_tokens = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), batch["input_ids"][:, 1:].flatten(), reduction="none"
    )
    assert not torch.isclose(loss, all_tokens.view_as(targets)[everything].mean(), rtol=1e-3)


def tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(file))
    return out


def offline_run_config(path: Path) -> dict:
    """The config of an offline wandb run, from its transaction log (`run-<id>.wandb`: a 7-byte header, then
    LevelDB-log records in 32 KiB blocks, each a protobuf `Record`); wandb 0.31 ships no Python reader for it."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data, block, pos, chunks, config = path.read_bytes(), 32768, 7, [], {}
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a FULL record, or the LAST chunk of one
            record = wandb_internal_pb2.Record.FromString(b"".join(chunks))
            chunks = []
            kind_of_record = record.WhichOneof("record_type")
            items = {"run": record.run.config.update, "config": record.config.update}.get(kind_of_record, [])
            for item in items:
                config[item.key] = json.loads(item.value_json)
    return config


@pytest.mark.slow
def test_one_lora_step_from_the_cli_saves_a_model_that_loads_and_generates(tmp_path, capsys, base_model, quiet_env):
    """`rubricrl ruft train` with the tiny preset, 1 step: the merged model differs from the base exactly where LoRA
    adapts it (q_proj, v_proj), loads with AutoModelForCausalLM and generates; config.yaml, the model card and the
    offline wandb run (WANDB_DIR) hold the resolved config and the build's manifest, and no secret."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build, out = write_build(tmp_path / "build"), tmp_path / "out"
    assert (
        main(
            [
                "ruft",
                "train",
                "--config",
                str(TINY_PRESET),
                "--dataset",
                str(build),
                "--output_dir",
                str(out),
                "--max_steps",
                "1",
                "--max_length",
                "128",
                "--save_strategy",
                "no",
                "--model_name_or_path",
                base_model,
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert re.search(r"ruft train: 1 steps \(1 this run\) in .* final loss \d+\.\d+; model: .*out", captured.out)
    assert "wandb runs offline" in captured.err

    base, trained = tensors(Path(base_model)), tensors(out)
    changed = {name for name in base if not torch.equal(base[name].float(), trained[name].float())}
    n_layers = sum(1 for name in base if name.endswith("self_attn.q_proj.weight"))
    assert changed == {name for name in base if name.endswith(("q_proj.weight", "v_proj.weight"))}, sorted(changed)
    assert len(changed) == 2 * n_layers > 0
    assert (out / "adapter" / "adapter_config.json").is_file()

    tokenizer, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    generated = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] > inputs["input_ids"].shape[1]

    config = yaml.safe_load((out / "config.yaml").read_text())
    assert (config["dataset"], config["model_name_or_path"], config["max_steps"]) == (str(build), base_model, 1)
    card = (out / "README.md").read_text()
    assert str(build / "sft") in card and base_model in card and "max_steps: 1" in card
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    wandb_config = offline_run_config(next(run.glob("run-*.wandb")))
    assert {key: wandb_config[key] for key in config} == config  # the resolved config, as config.yaml holds it
    assert wandb_config["dataset_manifest"] == json.loads((build / "manifest.json").read_text())
    for file in [*out.rglob("*"), *run.rglob("*")]:
        if file.is_file() and file.stat().st_size < 50_000_000:
            assert SECRET.encode() not in file.read_bytes(), file


@pytest.mark.slow
def test_resume_from_checkpoint_continues_the_run(tmp_path, capsys, base_model, quiet_env):
    """2 steps with a checkpoint after each, then `--resume_from_checkpoint true --max_steps 3`: one more step from
    checkpoint-2's weights, optimizer, scheduler, data position and RNG, ending where 3 uninterrupted steps end.
    (A constant learning rate: a linear schedule restored from a 2-step run is at 0, and its step 3 changes
    nothing.) With --no-merge-adapter the folder holds the adapter, which transformers loads through peft."""
    import torch
    from transformers import AutoModelForCausalLM

    build, out, straight = write_build(tmp_path / "build"), tmp_path / "out", tmp_path / "straight"
    common = [
        "ruft",
        "train",
        "--config",
        str(TINY_PRESET),
        "--dataset",
        str(build),
        "--max_length",
        "128",
        "--save_steps",
        "1",
        "--report_to",
        "none",
        "--no-merge-adapter",
        "--lr_scheduler_type",
        "constant",
        "--model_name_or_path",
        base_model,
    ]
    assert main([*common, "--output_dir", str(straight), "--max_steps", "3"]) == 0
    assert main([*common, "--output_dir", str(out), "--max_steps", "2"]) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    capsys.readouterr()
    assert main([*common, "--output_dir", str(out), "--max_steps", "3", "--resume_from_checkpoint", "true"]) == 0
    assert re.search(r"3 steps \(1 this run, resumed from checkpoint-2\)", capsys.readouterr().out)

    def losses(folder):
        state = json.loads((folder / "trainer_state.json").read_text())
        return [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]

    resumed = losses(out / "checkpoint-3")
    assert resumed[:2] == losses(out / "checkpoint-2") and [step for step, _ in resumed] == [1, 2, 3]
    assert [loss for _, loss in resumed] == pytest.approx(
        [loss for _, loss in losses(straight / "checkpoint-3")], rel=1e-4
    )
    at_2, final, expected = tensors(out / "checkpoint-2"), tensors(out), tensors(straight)
    assert final.keys() == expected.keys() and any(not torch.equal(at_2[k], final[k]) for k in final)
    for name in final:
        torch.testing.assert_close(final[name], expected[name], rtol=1e-4, atol=1e-6)
    model = AutoModelForCausalLM.from_pretrained(out)  # base model + adapter, through peft
    assert any("lora_" in name for name, _ in model.named_parameters())


def test_resume_true_takes_the_latest_complete_checkpoint(tmp_path):
    from types import SimpleNamespace

    from rubricrl.runs.training import resume_target

    for step, complete in ((2, True), (3, False), (10, True), (11, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    config = SimpleNamespace(resume_from_checkpoint="true", output_dir=str(tmp_path))
    assert resume_target(config) == str(tmp_path / "checkpoint-10")  # checkpoint-11 was killed while being saved


@pytest.mark.slow
def test_push_to_hub_uploads_the_finished_folder_with_its_own_model_card(tmp_path, base_model, quiet_env, monkeypatch):
    """`--push_to_hub` passes through to the Trainer, which makes the repository; the model goes up once, after
    `ruft train` wrote its model card and manifest (the Trainer's own save would push it with TRL's card, before the
    LoRA merge), and never the folders being written. The Hub is recorded here: there is no network."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoUrl

    uploads: list[dict] = []

    def upload_folder(self, *, repo_id, folder_path, ignore_patterns=None, **kwargs):
        folder = Path(folder_path)
        card = (folder / "README.md").read_text() if (folder / "README.md").exists() else ""
        uploads.append({"repo": repo_id, "files": sorted(p.name for p in folder.iterdir()), "card": card})
        uploads[-1]["ignored"] = ignore_patterns

    monkeypatch.setattr(
        HfApi, "create_repo", lambda self, repo_id, **kwargs: RepoUrl(f"https://huggingface.co/{repo_id}")
    )
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    build, out = write_build(tmp_path / "build"), tmp_path / "out"
    argv = ["ruft", "train", "--config", str(TINY_PRESET), "--dataset", str(build), "--output_dir", str(out)]
    argv += ["--max_steps", "1", "--max_length", "128", "--save_strategy", "no", "--report_to", "none"]
    argv += ["--model_name_or_path", base_model, "--push_to_hub", "true", "--hub_model_id", "me/tiny-ruft"]
    assert main(argv) == 0
    assert len(uploads) == 1, uploads
    [upload] = uploads
    assert upload["repo"] == "me/tiny-ruft"
    assert {"README.md", "config.yaml", "config.json", "model.safetensors"} <= set(upload["files"])
    assert upload["card"] == (out / "README.md").read_text() and "ruft train" in upload["card"]
    assert {"checkpoint-*", "_*"} <= set(upload["ignored"])  # a RuRL run's _gold-best.* stay home; gold-best/ goes
