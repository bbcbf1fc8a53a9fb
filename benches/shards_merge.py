"""Shards, then merge, on a canned endpoint (benches/canned_server.py, L +- 20%): `rubricrl synth --shard i/n` in n
processes at once (n machines sharing one cache folder), `rubricrl merge`, then one unsharded run with that cache.

    python -m benches.shards_merge [--queries 400] [--shards 4] [--concurrency 16]

Prints the wall time of the shards (in parallel) and of the merge, and checks what the scale-out issue asks: the
merged folder holds the one run's ids and rubrics (PASS/FAIL), and the one run made no new request (every answer
came from the shards' cache entries).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from benches.harness import ROOT, RUN, canned_endpoint, run_command

LATENCY = 0.05


def write_queries(path: Path, n: int) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            f.write(
                json.dumps({"id": f"q{i:06d}", "question": f"Benchmark question {i}: explain topic {i % 97}."}) + "\n"
            )
    return path


def rubrics(folder: Path) -> dict[str, list]:
    return {row["id"]: row["rubrics"] for row in pq.read_table(folder / "final.parquet").to_pylist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, canned_endpoint(LATENCY) as endpoint:
        tmp = Path(tmp)
        queries, home = write_queries(tmp / "queries.jsonl", args.queries), tmp / "home"
        common = [
            "--input",
            str(queries),
            "--base-url",
            endpoint.base_url,
            "--model",
            "canned",
            "--concurrency",
            str(args.concurrency),
        ]
        shards = [tmp / f"shard-{i}" for i in range(args.shards)]
        started = time.monotonic()
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    RUN,
                    "synth",
                    *common,
                    "--output-dir",
                    str(folder),
                    "--shard",
                    f"{i}/{args.shards}",
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "RUBRICRL_HOME": str(home)},
            )
            for i, folder in enumerate(shards)
        ]
        for process in processes:
            _, err = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(err[-3000:])
        sharded = time.monotonic() - started
        requests = endpoint.stats()["requests"]
        merged = run_command(["merge", *map(str, shards), "--output-dir", str(tmp / "merged")], tmp / "merged", home)
        endpoint.reset()
        run_command(["synth", *common, "--output-dir", str(tmp / "one")], tmp / "one", home)
        new_requests = endpoint.stats()["requests"]
        same = rubrics(tmp / "merged") == rubrics(tmp / "one")
        sizes = [pq.read_metadata(folder / "final.parquet").num_rows for folder in shards]
        print(
            f"{args.queries} queries in {args.shards} shards of {sizes} (L = {LATENCY} s, C = {args.concurrency} "
            f"each): {requests} requests in {sharded:.1f} s; merge {merged['seconds']:.1f} s"
        )
        print(
            f"merged == one run (same ids, same rubrics): {'PASS' if same else 'FAIL'}; "
            f"{len(rubrics(tmp / 'merged'))} ids"
        )
        print(
            f"one run after the shards: {new_requests} new requests (target 0, all from the cache): "
            f"{'PASS' if new_requests == 0 else 'FAIL'}"
        )
    if not same or new_requests:
        sys.exit(1)


if __name__ == "__main__":
    main()
