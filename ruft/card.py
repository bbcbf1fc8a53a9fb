"""A `ruft build` folder as a Hub-ready dataset folder: the SFT data and a card that states K, tau, the models and
the selection rule (`rubricrl publish` calls this for a RuFT folder)."""

import json
import shutil
from pathlib import Path

from rubricrl.runs.provenance import card_note

CARD = """---
license: other
task_categories:
- text-generation
tags:
- sft
- rejection-sampling
- rubrics
- rubricrl
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---

# {name}

Supervised fine-tuning data built with [rubricrl](https://pypi.org/project/rubricrl/)'s RuFT: for each query, K
candidate answers were sampled, each graded against the query's rubric by an LLM judge (one verdict per
criterion), and the best answer scoring at least tau was kept. The format is TRL's conversational
prompt-completion (`prompt`: the query's turns, `completion`: the kept assistant answer), so TRL's SFTTrainer
trains on the answers only; provenance columns say where each row came from.

```python
from datasets import load_dataset
ds = load_dataset("{repo_id}", split="train")
```

## How it was built

{mixed}| | |
|---|---|
| candidates per query (K) | {k} ({candidates}) |
| threshold (tau) | {threshold} |
| kept per query | at most {keep}: the best score at or above tau; ties go to the shorter answer, then the earlier |
| judge | `{judge_model}`, mode `{mode}` |
| queries | {queries} finished, {kept} with a kept answer ({retention}), {below} below tau |
| rows | {rows} |
| score of kept answers | {kept_scores} |

- candidate models{latest}: {models}
- packages: {packages}
"""


def build_folder(source: Path, out: Path, repo_id: str) -> Path:
    manifest = json.loads((source / "manifest.json").read_text())
    (out / "data").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "sft.parquet", out / "data" / "train-00000-of-00001.parquet")
    config, counts, scores = manifest["config"]["ruft"], manifest["counts"], manifest["scores"]
    kept = scores.get("kept")
    roles = manifest["roles"]
    # a folder resumed with changed settings: each set of settings, with its queries (older manifests have none)
    mixed = card_note(manifest, "queries", "the `fingerprint` of each line of queries.jsonl in the build folder")
    card = CARD.format(
        name=repo_id.split("/")[-1],
        repo_id=repo_id,
        k=sum(config["candidates"].values()),
        candidates=", ".join(f"{role}: {n}" for role, n in config["candidates"].items()),
        threshold=config["threshold"],
        keep=config["keep"],
        judge_model=manifest["judge"]["judge_model"],
        mode=manifest["judge"]["mode"],
        queries=counts["finished_queries"],
        kept=counts["queries_kept"],
        below=counts["queries_below_threshold"],
        retention=f"{counts['queries_kept'] / max(1, counts['finished_queries']):.0%}",
        rows=counts["sft_rows"],
        kept_scores=f"mean {kept['mean']:.3f}, min {kept['min']:.3f}" if kept else "none kept",
        models=", ".join(f"{role} `{roles[role]['model']}`" for role in config["candidates"] if role in roles),
        packages=", ".join(f"{name} {version}" for name, version in manifest["packages"].items() if version),
        mixed=mixed
        and f"{mixed}\nThe table gives the latest settings; each row's `model`, `judge_model`, "
        "`grading_mode`, `k` and `threshold` columns give its own.\n\n",
        latest=" (latest settings)" if mixed else "",
    )
    (out / "README.md").write_text(card)
    return out
