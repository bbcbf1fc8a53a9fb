"""`rubricrl export openrlhf`: a rubric dataset as OpenRLHF's prompt dataset reads it. OpenRLHF takes the prompt and
the label from the top level of each row (`data[input_key]`, `data[label_key]`, openrlhf/datasets/prompts_dataset.py),
which verl's export keeps nested (`reward_model.ground_truth`):

    {"prompt": [{"role", "content"}], "id": <row id>}     (JSONL)

The label is the row id: OpenRLHF sends it to the reward (experiments/rubric_reward.py, then `rubricrl reward
serve --rubrics` with the same dataset). Launch lines, by release:

    v0.10.2 and later:  --data.prompt_dataset train.jsonl --data.input_key prompt --data.label_key id
                        --data.apply_chat_template --reward.remote_url experiments/rubric_reward.py
    up to v0.10.1:      --prompt_data train.jsonl --input_key prompt --label_key id --apply_chat_template
                        --remote_rm_url experiments/rubric_reward.py
"""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from engines.export_verl import checked_output, verl_rows
from grading.rar import PitfallConvention
from rubricrl.config import add_config_arguments, parse_settings
from rubricrl.runs.jsonl import write_jsonl


@dataclass
class ExportOpenRLHFArgs:
    rubrics: Path
    """Rubric dataset: .parquet, .jsonl, a saved HF dataset, a repository folder or a Hub id (org/name[:SPLIT])."""
    output: Path
    """OpenRLHF prompt dataset to write (*.jsonl)."""
    system_prompt: str | None = None
    """A system message put before every prompt that has none (default: none)."""
    rar_pitfalls: PitfallConvention = "auto"
    """RaR rubrics: whether pitfall texts name the mistake or what to avoid (grading/rar.py)."""


def export_openrlhf(rubrics: str | Path, output: Path, **options) -> int:
    """Write OpenRLHF's rows for `rubrics` to `output`, in the dataset's order; the number of rows."""
    output = checked_output(rubrics, output, ".jsonl", "name the file *.jsonl (OpenRLHF reads it with `datasets`)")
    rows = [{"prompt": row["prompt"], "id": row["extra_info"]["id"]} for row in verl_rows(rubrics, **options)]
    write_jsonl(output, rows)
    return len(rows)


def add_format(formats) -> None:
    openrlhf = formats.add_parser("openrlhf", help="OpenRLHF's prompt dataset (prompt messages, id = the label)")
    add_config_arguments(openrlhf, [ExportOpenRLHFArgs])
    openrlhf.set_defaults(run=run_export_openrlhf)
    openrlhf.epilog = "examples:\n  rubricrl export openrlhf --rubrics rubrics/final.parquet --output data/train.jsonl"


def run_export_openrlhf(args: argparse.Namespace) -> int:
    (export,) = parse_settings(args, command="export openrlhf")
    count = export_openrlhf(
        export.rubrics, export.output, system_prompt=export.system_prompt, rar_pitfalls=export.rar_pitfalls
    )
    print(f"wrote {count} rows to {export.output}", file=sys.stderr)
    return 0
