"""The model card (README.md) a training command writes beside the model it saves: the base model, the method, the
data it was trained on, how to load it, and the resolved settings. TRL's own card names a local base model `None`
and points its Quick start at the Hub; this one names what the run read, and lists a Hub dataset or base model in
its front matter so the Hub links them when the folder is pushed."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rubricrl.records.hub import dataset_source
from rubricrl.runs.manifest import package_versions


@dataclass
class ModelCard:
    command: str
    """The command that trained the model (`ruft train`), whose `--config config.yaml` reruns it."""
    base_model: str
    method: str
    """One paragraph: how the model was trained."""
    dataset: str
    """Where the training rows were read (a folder, a file or a Hub id)."""
    facts: list[str] = field(default_factory=list)
    """More lines of the card's list (counts, the judge, provenance)."""
    tags: list[str] = field(default_factory=list)
    use_peft: bool = False
    merged: bool = True
    datasets: list[str] = field(default_factory=list)
    """More datasets the model derives from (a rubric set on the Hub), listed in the front matter if on the Hub."""

    @property
    def kind(self) -> str:
        return "full fine-tuning" if not self.use_peft else "LoRA, merged" if self.merged else "LoRA adapter"

    def text(self, output_dir: Path, config: dict[str, Any]) -> str:
        hub_datasets = [found for found in map(hub_id, (self.dataset, *self.datasets)) if found]
        front = {
            **({} if Path(self.base_model).expanduser().exists() else {"base_model": self.base_model}),
            **({"datasets": hub_datasets} if hub_datasets else {}),
            "library_name": "peft" if self.kind == "LoRA adapter" else "transformers",
            "tags": ["rubricrl", *self.tags, "trl"],
        }
        versions = ", ".join(f"{name} {v}" for name, v in package_versions().items() if v)
        return "\n".join(
            [
                "---",
                yaml.safe_dump(front, sort_keys=False).rstrip(),
                "---",
                "",
                f"# {output_dir.name}",
                "",
                f"`{self.base_model}` {self.method}",
                "",
                f"- base model: `{self.base_model}`",
                f"- trained on: `{self.dataset}`",
                *[f"- {fact}" for fact in self.facts],
                f"- weights: {self.kind}",
                f"- packages: {versions}",
                "",
                "## Use",
                "",
                "```python",
                "from transformers import AutoModelForCausalLM, AutoTokenizer",
                "",
                f"model = AutoModelForCausalLM.from_pretrained({str(output_dir)!r})",
                f"tokenizer = AutoTokenizer.from_pretrained({str(output_dir)!r})",
                'inputs = tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True,',
                '                                       return_tensors="pt", return_dict=True)',
                "print(tokenizer.decode(model.generate(**inputs, max_new_tokens=64)[0]))",
                "```",
                "",
                "## Settings",
                "",
                "Resolved (defaults < --config file < flags), as `config.yaml` beside this file: "
                f"`rubricrl {self.command} --config config.yaml` reruns it.",
                "",
                "```yaml",
                yaml.safe_dump(config, sort_keys=False, allow_unicode=True).rstrip(),
                "```",
                "",
            ]
        )

    def write(self, output_dir: Path, config: dict[str, Any]) -> None:
        (output_dir / "README.md").write_text(self.text(output_dir, config))


def hub_id(source: str | Path | None) -> str | None:
    """The Hub dataset `source` names (org/name), or None for a local file or folder."""
    if not source:
        return None
    try:
        named = dataset_source(source)
    except ValueError:  # not shaped as a Hub id at all
        return None
    return named.path if named is not None and named.hub else None
