"""A synthesis output folder as a Hugging Face Hub dataset folder: the parquet data and a dataset card (YAML
metadata, schema, statistics, provenance from the manifest). `rubricrl publish` (rubricrl/runs/publish.py) uploads it;
ruft/card.py does the same for a `ruft build` folder."""

import json
import shutil
import statistics
from pathlib import Path

from rubricrl.runs.provenance import card_note

CARD = """---
{metadata}---

# {name}

Rubrics synthesized with [rubricrl](https://pypi.org/project/rubricrl/): one rubric per query, each criterion a
binary check with integer points (negative points are penalties). The schema is RubricHub's
(`id`, `question`, `rubrics: list<struct<criterion: string, points: int32>>`), so RubricHub's readers read it.

```python
from datasets import load_dataset
ds = load_dataset("{repo_id}", split="train")
```

## Statistics

| | |
|---|---|
| queries | {rows} |
| criteria | {criteria} ({per_query}) |
| penalty criteria (negative points) | {penalties} |
| points | min {points_min}, max {points_max} |

## Provenance

{mixed}- method{latest}: `{method}`{stages}
- roles and models{latest}:
{roles}
- prompt hashes (sha256){latest}: {prompts}
- packages: {packages}
"""


def build_folder(source: Path, out: Path, repo_id: str) -> Path:
    import pyarrow.parquet as pq  # here, not at the top: every command would pay its tenth of a second to load

    manifest_path, data = source / "manifest.json", source / "final.parquet"
    manifest = json.loads(manifest_path.read_text())
    (out / "data").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data, out / "data" / "train-00000-of-00001.parquet")
    table = pq.read_table(data)
    rubrics = table.column("rubrics").to_pylist()
    counts = [len(r) for r in rubrics]
    points = [c["points"] for r in rubrics for c in r]
    config = manifest["config"].get("synthesis", manifest["config"])  # before the one config system: the section itself
    metadata = (
        "license: other\ntask_categories:\n- text-generation\ntags:\n- rubrics\n- reward-modeling\n- rubricrl\n"
        "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n"
        "dataset_info:\n  features:\n  - name: id\n    dtype: string\n  - name: question\n    dtype: string\n"
        "  - name: rubrics\n    list:\n    - name: criterion\n      dtype: string\n    - name: points\n      dtype: int32\n"
        f"  splits:\n  - name: train\n    num_examples: {table.num_rows}\n"
    )
    stages = (
        ""
        if config["method"] == "rar"
        else (
            f" (candidate rubrics: {len(config['rubric_roles'])}, contrast: {config['contrast']}, "
            f"aggregate: {config['aggregate']}, evolve: {config['evolve']}, weights: {config['weights']})"
        )
    )
    roles = "\n".join(f"  - {name}: `{role['model']}`" for name, role in manifest["roles"].items())
    # a folder resumed with changed settings: each set of settings, with its rows (older manifests have none)
    mixed = card_note(manifest, "rows", "the `fingerprint` column of final_details.parquet")
    card = CARD.format(
        metadata=metadata,
        name=repo_id.split("/")[-1],
        repo_id=repo_id,
        rows=table.num_rows,
        criteria=len(points),
        per_query=f"per query: min {min(counts)}, median {statistics.median(counts):g}, max {max(counts)}",
        penalties=sum(p < 0 for p in points),
        points_min=min(points),
        points_max=max(points),
        method=config["method"],
        stages=stages,
        roles=roles,
        mixed=mixed,
        latest=" (latest settings)" if mixed else "",
        prompts=", ".join(f"`{name}` {digest[:12]}" for name, digest in manifest["prompts"].items()),
        packages=", ".join(f"{name} {version}" for name, version in manifest["packages"].items() if version),
    )
    (out / "README.md").write_text(card)
    return out
