"""`rubricrl ruft build` at scale on the canned endpoint (benches/canned_server.py, L +- 20%): the harness, not a model.

    python -m benches.ruft_build [--queries 100 1000] [--k 8] [--criteria 20] [--concurrency 64] [--rss 2000 20000]

Each query makes one n = K call for its candidates, then K x criteria verdict calls (per_criterion, --queries[0]
queries) or K x ceil(criteria / 16) (batched, --queries[1]). Per mode: efficiency = (requests x L / C) / wall time
(1.0: the endpoint never waits on the client; target >= 0.9 at C = 64), bytes written per byte of output (target
<= 1.5), peak RSS; then peak RSS of batched builds of --rss queries at a 10x shorter latency (target: flat).
"""

import argparse
import json
import tempfile
from pathlib import Path

from benches.harness import canned_endpoint, run_command, where_time_went

LATENCY = 0.2


def write_rubrics(path: Path, n: int, criteria: int) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            rubric = [
                {
                    "criterion": f"Criterion {j} of query {i}: states fact {j} about topic {i % 97}.",
                    "points": (j % 10) + 1 if j % 5 else -((j % 10) + 1),
                }
                for j in range(criteria)
            ]
            f.write(
                json.dumps({"id": f"q{i:06d}", "question": f"Question {i}: explain topic {i % 97}.", "rubrics": rubric})
                + "\n"
            )
    return path


def build(server: str, rubrics: Path, out: Path, home: Path, args, mode: str) -> dict:
    return run_command(
        [
            "ruft",
            "build",
            "--rubrics",
            str(rubrics),
            "--output-dir",
            str(out),
            "--base-url",
            server,
            "--model",
            "canned",
            "--concurrency",
            str(args.concurrency),
            "--candidates",
            f"policy={args.k}",
            "--self_judging",  # one canned endpoint answers and judges
            "--threshold",
            "0.5",
            "--mode",
            mode,
        ],
        out,
        home,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, nargs=2, default=[100, 1000])
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--criteria", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rss", type=int, nargs=2, default=[2000, 20000])
    args = parser.parse_args()
    c = args.concurrency
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with canned_endpoint(LATENCY) as endpoint:
            for mode, n in zip(("per_criterion", "batched"), args.queries):
                rubrics = write_rubrics(tmp / f"rubrics-{n}.jsonl", n, args.criteria)
                endpoint.reset()
                r = build(endpoint.base_url, rubrics, tmp / f"out-{mode}", tmp / f"home-{mode}", args, mode)
                stats = endpoint.stats()
                efficiency = stats["requests"] * LATENCY / c / r["seconds"]
                print(
                    f"{mode:13} {n} queries, K = {args.k}, {args.criteria} criteria, C = {c}: {stats['requests']} "
                    f"requests in {r['seconds']:.1f} s, efficiency {efficiency:.3f} (target >= 0.9); bytes written / "
                    f"output {r['written'] / r['output']:.2f} (target <= 1.5); peak RSS {r['rss_mb']:.0f} MB"
                )
                print("              " + where_time_went(stats, r, c))
        with canned_endpoint(LATENCY / 10) as endpoint:
            rss = []
            for n in args.rss:
                rubrics = write_rubrics(tmp / f"rss-{n}.jsonl", n, args.criteria)
                rss.append(build(endpoint.base_url, rubrics, tmp / f"rss-{n}", tmp / f"rss-home-{n}", args, "batched"))
            print(
                f"peak RSS (batched, L = {LATENCY / 10} s): {rss[0]['rss_mb']:.0f} MB at {args.rss[0]} queries, "
                f"{rss[1]['rss_mb']:.0f} MB at {args.rss[1]}: ratio {rss[1]['rss_mb'] / rss[0]['rss_mb']:.2f} "
                f"(target: flat, ~1.0); {rss[1]['seconds']:.0f} s"
            )


if __name__ == "__main__":
    main()
