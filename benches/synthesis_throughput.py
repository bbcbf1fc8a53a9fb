"""Synthesis at scale on a canned endpoint (benches/canned_server.py, L = 0.2 s +- 20%): the harness, not a model.

    python -m benches.synthesis_throughput [--queries 2000] [--concurrency 64 256] [--rss-queries 20000]
                                           [--baseline 205bd48]

Prints, beside the synthesis issue's limits: per concurrency C, efficiency = (requests x L / C) / wall time (1.0: the
endpoint never waits on the client), bytes written per byte of output and peak RSS; peak RSS at --rss-queries against
--queries (flat: memory does not grow with the input); the wall time of a rerun with everything done (resume).
--baseline REV runs commit REV's code (a git worktree) on the same queries right after each of this tree's runs, in
the same venv against the same endpoint, and prints its figures beneath: a comparison that the machine's mood
between two sessions cannot bend.
"""

import argparse
import json
import tempfile
from pathlib import Path

from benches.harness import ROOT, baseline_tree, canned_endpoint, run_command, where_time_went

LATENCY = 0.2


def synth(server: str, queries: Path, out: Path, home: Path, concurrency: int, root: Path = ROOT) -> dict:
    return run_command(
        [
            "synth",
            "--input",
            str(queries),
            "--output-dir",
            str(out),
            "--base-url",
            server,
            "--model",
            "canned",
            "--concurrency",
            str(concurrency),
        ],
        out,
        home,
        root,
    )


def write_queries(path: Path, n: int) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            f.write(
                json.dumps({"id": f"q{i:06d}", "question": f"Benchmark question number {i}: explain topic {i % 97}."})
                + "\n"
            )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rss-queries", type=int, default=20000)
    parser.add_argument("--baseline", metavar="REV", help="also run commit REV's code, beside each run (default: none)")
    args = parser.parse_args()
    with canned_endpoint(LATENCY) as endpoint, baseline_tree(args.baseline) as baseline:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            queries = write_queries(tmp / "queries.jsonl", args.queries)
            targets = {64: 0.95, 256: 0.6}
            print(f"{args.queries} queries, L = {LATENCY} s")
            trees = {"": ROOT, **({f" ({args.baseline})": baseline} if baseline else {})}
            for c in args.concurrency:
                for label, root in trees.items():
                    endpoint.reset()
                    r = synth(endpoint.base_url, queries, tmp / f"out-{c}{label}", tmp / f"home-{c}{label}", c, root)
                    after = endpoint.stats()
                    requests = after["requests"]
                    efficiency = requests * LATENCY / c / r["seconds"]
                    limit = f" (target >= {targets[c]})" if c in targets else ""
                    print(
                        f"C = {c:4d}{label}: {requests} requests in {r['seconds']:.1f} s, efficiency {efficiency:.3f}"
                        f"{limit}; bytes written / output {r['written'] / r['output']:.2f} (target <= 1.5); peak RSS "
                        f"{r['rss_mb']:.0f} MB"
                    )
                    if requests:
                        print("          " + where_time_went(after, r, c))
            c = args.concurrency[-1]
            again = synth(endpoint.base_url, queries, tmp / f"out-{c}", tmp / f"home-{c}", c)
            print(f"resume with everything done: {again['seconds']:.1f} s (target: seconds)")
            big = write_queries(tmp / "big.jsonl", args.rss_queries)
            r_big = synth(endpoint.base_url, big, tmp / "out-big", tmp / "home-big", c)
            small = synth(endpoint.base_url, queries, tmp / "out-small", tmp / "home-small", c)
            print(
                f"peak RSS: {small['rss_mb']:.0f} MB at {args.queries} queries, {r_big['rss_mb']:.0f} MB at "
                f"{args.rss_queries}: ratio {r_big['rss_mb'] / small['rss_mb']:.2f} (target: flat, ~1.0)"
            )


if __name__ == "__main__":
    main()
