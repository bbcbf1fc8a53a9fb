"""`rubricrl export verl`: a rubric dataset as verl's RL parquet, the shape of verl's
examples/data_preprocess/gsm8k.py:

    data_source: str, prompt: [{"role", "content"}], ability: str,
    reward_model: {"style": "model", "ground_truth": <row id>}, extra_info: {"split", "index", "id"}

The rubric itself stays with `rubricrl reward serve --rubrics` (the same dataset): the row id in `ground_truth` is
what verl hands the reward function (experiments/rubric_reward.py), which sends it to the service as the
label. `style` is "model": an LLM judge grades, not a rule in verl."""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from grading.dataset import iter_rubric_rows
from grading.rar import PitfallConvention
from rubricrl.config import ConfigError, add_config_arguments, parse_settings


@dataclass
class ExportVerlArgs:
    rubrics: Path
    """Rubric dataset: .parquet, .jsonl, a saved HF dataset, a repository folder or a Hub id (org/name[:SPLIT])."""
    output: Path
    """verl RL parquet to write (*.parquet)."""
    data_source: str = "rubricrl"
    """The `data_source` column (verl routes rewards and groups validation metrics by it)."""
    ability: str = "rubric"
    """The `ability` column."""
    split: str = "train"
    """`extra_info.split`."""
    system_prompt: str | None = None
    """A system message put before every prompt that has none (default: none)."""
    rar_pitfalls: PitfallConvention = "auto"
    """RaR rubrics: whether pitfall texts name the mistake or what to avoid (grading/rar.py)."""


def verl_rows(
    rubrics: str | Path,
    *,
    data_source: str = "rubricrl",
    ability: str = "rubric",
    split: str = "train",
    system_prompt: str | None = None,
    rar_pitfalls: str = "auto",
) -> list[dict]:
    """verl's rows for each rubric row, in the dataset's order (rubrics read and checked as `grade` reads them)."""
    rows = []
    for index, row in enumerate(iter_rubric_rows(rubrics, rar_pitfalls)):
        prompt = [{"role": m["role"], "content": m["content"]} for m in row.conversation]
        if system_prompt and not any(m["role"] == "system" for m in prompt):
            prompt.insert(0, {"role": "system", "content": system_prompt})
        rows.append(
            {
                "data_source": data_source,
                "prompt": prompt,
                "ability": ability,
                "reward_model": {"style": "model", "ground_truth": row.id},
                "extra_info": {"split": split, "index": index, "id": row.id},
            }
        )
    return rows


def checked_output(rubrics: str | Path, output: Path, suffix: str, hint: str) -> Path:
    """An export's --output, refused before any row is read: the engine's file type, and never the input itself."""
    output = Path(output)
    if output.suffix.lower() != suffix:
        raise ConfigError(f"--output {output}: {hint}")
    if Path(rubrics).resolve() == output.resolve():
        raise ConfigError(f"--output {output} is the --rubrics file, which writing would replace")
    return output


def export_verl(rubrics: str | Path, output: Path, **options) -> int:
    """Write verl's parquet for `rubrics` to `output`; the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    output = checked_output(rubrics, output, ".parquet", "verl reads parquet; name the file *.parquet")
    rows = verl_rows(rubrics, **options)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--output {output}: cannot make the folder {output.parent}: {error.strerror}") from None
    temporary = output.with_name(output.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), temporary)  # then renamed: a reader never sees half a file
    temporary.replace(output)
    return len(rows)


def add_format(formats) -> None:
    verl = formats.add_parser("verl", help="verl's RL parquet (prompt messages, reward_model.ground_truth = row id)")
    add_config_arguments(verl, [ExportVerlArgs])
    verl.set_defaults(run=run_export_verl)
    verl.epilog = "examples:\n  rubricrl export verl --rubrics rubrics/final.parquet --output data/train.parquet"


def run_export_verl(args: argparse.Namespace) -> int:
    (export,) = parse_settings(args, command="export verl")
    count = export_verl(
        export.rubrics,
        export.output,
        data_source=export.data_source,
        ability=export.ability,
        split=export.split,
        system_prompt=export.system_prompt,
        rar_pitfalls=export.rar_pitfalls,
    )
    print(f"wrote {count} rows to {export.output}", file=sys.stderr)
    return 0
