"""`rubricrl publish`: a synthesis output folder (or a `ruft build` folder: ruft/card.py) as a Hugging Face Hub
dataset: the parquet data and a dataset card (YAML metadata, schema, statistics, provenance from the manifest),
uploaded with huggingface_hub."""

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

from rubricrl.errors import UserError
from rubricrl.provenance import card_note

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


def add_commands(commands) -> None:
    publish = commands.add_parser("publish", help="publish a synthesis or RuFT output folder as a Hugging Face dataset")
    publish.add_argument("dir", type=Path, help="a finished `rubricrl synth` or `rubricrl ruft build` output folder")
    publish.add_argument("--repo-id", required=True, help="ORG/NAME on the Hub")
    publish.add_argument("--private", action="store_true", help="create the Hub repository as private (default: public)")
    publish.add_argument("--dry-run", type=Path, metavar="OUT",
                         help="only write the Hub-ready folder (files and card) to OUT (default: upload)")
    publish.set_defaults(run=run_publish)


def build_folder(source: Path, out: Path, repo_id: str) -> Path:
    import pyarrow.parquet as pq  # here, not at the top: every command would pay its tenth of a second to load

    manifest_path, data = source / "manifest.json", source / "final.parquet"
    if (source / "sft.parquet").is_file() and manifest_path.is_file():
        from ruft.card import build_folder as build_ruft_folder

        return build_ruft_folder(source, out, repo_id)
    if not data.is_file() or not manifest_path.is_file():
        raise FileNotFoundError(f"{source}: no final.parquet (or sft.parquet) and manifest.json; is this a finished "
                                "`rubricrl synth` or `rubricrl ruft build` output?")  # fmt: skip
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
    stages = "" if config["method"] == "rar" else (
        f" (candidate rubrics: {len(config['rubric_roles'])}, contrast: {config['contrast']}, "
        f"aggregate: {config['aggregate']}, evolve: {config['evolve']}, weights: {config['weights']})")  # fmt: skip
    roles = "\n".join(f"  - {name}: `{role['model']}`" for name, role in manifest["roles"].items())
    # a folder resumed with changed settings: each set of settings, with its rows (older manifests have none)
    mixed = card_note(manifest, "rows", "the `fingerprint` column of final_details.parquet")
    card = CARD.format(
        metadata=metadata, name=repo_id.split("/")[-1], repo_id=repo_id, rows=table.num_rows, criteria=len(points),
        per_query=f"per query: min {min(counts)}, median {statistics.median(counts):g}, max {max(counts)}",
        penalties=sum(p < 0 for p in points), points_min=min(points), points_max=max(points),
        method=config["method"], stages=stages, roles=roles, mixed=mixed,
        latest=" (latest settings)" if mixed else "",
        prompts=", ".join(f"`{name}` {digest[:12]}" for name, digest in manifest["prompts"].items()),
        packages=", ".join(f"{name} {version}" for name, version in manifest["packages"].items() if version),
    )  # fmt: skip
    (out / "README.md").write_text(card)
    return out


def run_publish(args: argparse.Namespace) -> int:
    if args.dry_run:
        blocking = next((p for p in (args.dry_run, *args.dry_run.parents) if p.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise UserError(f"--dry-run {args.dry_run}: {blocking} is a file, not a folder; choose a folder")
        print(build_folder(args.dir, args.dry_run, args.repo_id))
        return 0
    import tempfile

    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError

    # What the Hub client raises when the Hub is unreachable or refuses (its HTTP library's errors, and OSError)
    hub_errors = (OSError, *HfHubHTTPError.__bases__)
    api = HfApi()  # the token comes from HF_TOKEN or `huggingface-cli login`; it is never printed
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(args.dir, Path(tmp), args.repo_id)
        try:
            api.create_repo(args.repo_id, repo_type="dataset", private=args.private, exist_ok=True)
            api.upload_folder(repo_id=args.repo_id, repo_type="dataset", folder_path=folder,
                              commit_message="Upload rubrics synthesized with rubricrl")  # fmt: skip
        except hub_errors as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(f"publish {args.repo_id}: the Hub at {constants.ENDPOINT} did not take it ({first}); "
                            "check the network, HF_TOKEN (write access) and the repo id, or write the folder "
                            "with --dry-run OUT and upload it later") from None  # fmt: skip
    print(f"published https://huggingface.co/datasets/{args.repo_id}", file=sys.stderr)
    return 0
