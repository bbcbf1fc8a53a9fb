"""output_dir/eval.jsonl: one line per in-training evaluation (rurl/watch/evaluate.py appends its report, with the
monitor's metrics and the paired scores when there is a monitor), read back by a resumed run's alarms (their
baseline, rurl/watch/alarms.py) and by the gold-best summary (the evaluations its peak was picked among,
rurl/watch/gold_best.py). A run may be killed while it appends a line: as the harness's other appended files
(rubricrl/runs/jsonl.py complete_rows, reports/read.py iter_jsonl), a last line without its newline, or not a JSON
object, is a kill's doing and is left out; a bad line before the last one is not, and is an error."""

import json
from pathlib import Path
from typing import Any

from rubricrl.runs.jsonl import json_object

EVAL_FILE = "eval.jsonl"


def read_evaluations(path: Path, strict: bool = True) -> list[dict[str, Any]]:
    """The evaluations eval.jsonl holds, in the order written (a resumed run's earlier ones included); none when
    there is no such file. A last line cut off by a kill is left out; a bad line before it raises ValueError, or is
    left out too where not `strict` (a summary written after training: a file an older version resumed onto, its cut
    line run on into the next, must not cost the run its summary)."""
    try:
        with open(path, "rb") as f:
            lines = list(f)
    except FileNotFoundError:
        return []
    evaluations = []
    for number, line in enumerate(lines, 1):
        entry = json_object(line)
        if entry is None:
            if number == len(lines) or not strict:
                continue  # cut off by a kill (append_evaluation drops it before the next line)
            raise ValueError(f"{path}: line {number}: not an evaluation (a JSON object)")
        evaluations.append(entry)
    return evaluations


def append_evaluation(path: Path, entry: dict[str, Any]) -> None:
    """`entry` appended as a line; a last line a kill cut off (no newline) is dropped first, so that the new line
    does not run on from it (a bad line before the last is an error to read_evaluations)."""
    path = Path(path)
    if path.is_file():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
