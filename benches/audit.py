"""`rubricrl audit` at RubricHub's scale, on synthetic graded files (8 answers x 20 criteria per query, each verdict
with a judge's explanation, as `grade` writes them): wall time, verdicts/s and peak RSS per size.

    python -m benches.audit [--verdicts 2000000 4000000]

Memory must stay flat in the number of verdicts: a bucket holds at most 256 MiB of input whatever the file's size,
so the peak RSS of the largest size over that of a size past one bucket (the RSS ratio) should stay near 1. The
last line extrapolates the time to RubricHub's 17.6M verdicts (110k queries x 8 answers x 20 criteria)."""

import argparse
import json
import random
import tempfile
from pathlib import Path

from benches.harness import run_command

ANSWERS, CRITERIA = 8, 20
RUBRICHUB_VERDICTS = 110_000 * 8 * 20


def write_graded(path: Path, verdicts: int, seed: int = 0) -> int:
    """Graded records for verdicts / (ANSWERS * CRITERIA) queries, written a line at a time (the bench process stays
    small: a child's peak RSS on Linux starts from its parent's at the fork). Answer a of every query comes in the
    a-th eighth of the file, so the audit may not rely on order. A pass rate per criterion drawn at random makes
    every flag occur."""
    rng = random.Random(seed)
    queries = max(1, verdicts // (ANSWERS * CRITERIA))
    rates = [[rng.choice((0.0, 1.0, rng.random())) for _ in range(CRITERIA)] for _ in range(queries)]
    points = [rng.choice((1, 3, 5, 7, 10, -5)) for _ in range(CRITERIA)]
    with open(path, "w") as f:
        for a in range(ANSWERS):
            for q in range(queries):
                verdict_list = [
                    {
                        "criterion": f"Query {q} criterion {c}: the answer states point {c} of the topic clearly.",
                        "points": points[c],
                        "tags": [],
                        "met": rng.random() < rates[q][c] if rng.random() > 0.02 else None,
                        "explanation": "The response addresses this criterion as required by the rubric item.",
                        "source": "judge",
                    }
                    for c in range(CRITERIA)
                ]
                record = {"id": f"q{q:06d}", "response": f"answer {a} to {q}", "verdicts": verdict_list}
                f.write(json.dumps(record) + "\n")
    return queries * ANSWERS * CRITERIA


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verdicts", type=int, nargs="+", default=[2_000_000, 4_000_000])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for size in args.verdicts:
            graded = tmp / f"graded-{size}.jsonl"
            verdicts = write_graded(graded, size)
            out = tmp / f"audit-{size}"
            ran = run_command(["audit", str(graded), "--output-dir", str(out)], out, tmp / "home")
            summary = json.loads((out / "summary.json").read_text())
            assert summary["verdicts"] == verdicts, summary["verdicts"]
            rows.append((verdicts, graded.stat().st_size / 2**20, ran["seconds"], ran["rss_mb"]))
            graded.unlink()
            print(
                f"{verdicts:>10,} verdicts ({rows[-1][1]:,.0f} MiB): {ran['seconds']:.1f} s, "
                f"{verdicts / ran['seconds']:,.0f} verdicts/s, peak RSS {ran['rss_mb']:,.0f} MB",
                flush=True,
            )
    if len(rows) > 1:
        print(f"RSS ratio, {rows[-1][0]:,} vs {rows[0][0]:,} verdicts: {rows[-1][3] / rows[0][3]:.2f}")
    rate = rows[-1][0] / rows[-1][2]
    print(f"RubricHub's {RUBRICHUB_VERDICTS:,} verdicts at this rate: {RUBRICHUB_VERDICTS / rate / 60:.1f} min")


if __name__ == "__main__":
    main()
