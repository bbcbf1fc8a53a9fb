"""The model card a training command writes (rubricrl/runs/card.py): a Hub base model and a Hub dataset go in its
front matter, where the Hub links them; a local folder is named in the text only."""

import pytest
import yaml

from rubricrl.runs.card import ModelCard, hub_id

pytestmark = pytest.mark.pure


def front_matter(card: str) -> dict:
    return yaml.safe_load(card.split("---")[1])


def test_hub_names_go_in_the_front_matter_and_local_paths_in_the_text_only(tmp_path):
    local = tmp_path / "base"
    local.mkdir()
    card = ModelCard("rurl train", "Qwen/Qwen3-4B-Base", "trained.", "sojuL/RubricHub_v1:train", tags=["rurl"])
    text = card.text(tmp_path / "out", {"max_steps": 3})
    front = front_matter(text)
    assert front["base_model"] == "Qwen/Qwen3-4B-Base" and front["datasets"] == ["sojuL/RubricHub_v1"]
    assert front["tags"] == ["rubricrl", "rurl", "trl"] and front["library_name"] == "transformers"
    assert "- trained on: `sojuL/RubricHub_v1:train`" in text and "max_steps: 3" in text
    adapter = ModelCard("ruft train", str(local), "trained.", str(tmp_path / "sft"), use_peft=True, merged=False)
    front = front_matter(adapter.text(tmp_path / "out", {}))
    assert "base_model" not in front and "datasets" not in front and front["library_name"] == "peft"
    assert f"`{local}` trained." in adapter.text(tmp_path / "out", {})


def test_only_a_name_shaped_org_slash_name_that_is_not_a_file_is_a_hub_dataset(tmp_path):
    (tmp_path / "rows.jsonl").write_text("{}\n")
    assert hub_id("org/name") == "org/name" and hub_id("hf://datasets/org/name/data.parquet") == "org/name"
    assert hub_id(str(tmp_path / "rows.jsonl")) is None and hub_id("runs/x.jsonl") is None and hub_id(None) is None
