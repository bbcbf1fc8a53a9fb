"""Synthesis at scale against a canned endpoint (benches/canned_server.py: latency L = 0.2 s +- 20%, valid
answers), so that what is measured is the harness, not a model.

    python benches/synthesis_throughput.py [--queries 2000] [--concurrency 64 256] [--rss-queries 20000]

Prints, per concurrency C: efficiency = (requests x L / C) / wall time (1.0: the endpoint is never waiting on
the client), bytes written per byte of output, peak RSS; then peak RSS at --rss-queries against --queries (flat
means memory does not grow with the input), and the wall time of a rerun with everything done (resume).
The limits the synthesis issue sets are printed beside each figure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from rubricrl.serve import free_port

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.2
RUN = """
import resource, sys
from rubricrl.cli import main
code = main(sys.argv[1:])
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
print("WCHAR", io["write_bytes"], "RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def synth(server: str, queries: Path, out: Path, home: Path, concurrency: int) -> dict:
    """One `rubricrl synth` in a child process: wall time, bytes it wrote, its peak RSS."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", RUN, "synth", "--input", str(queries), "--output-dir", str(out), "--base-url", server,
         "--model", "canned", "--concurrency", str(concurrency)],
        env={**os.environ, "RUBRICRL_HOME": str(home)}, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    ended = time.monotonic()
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    wchar, rss_kb = (int(done.stderr.split(tag)[1].split()[0]) for tag in ("WCHAR ", "RSS_KB "))
    output = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    return {"seconds": ended - started, "started": started, "ended": ended, "written": wchar, "output": output,
            "rss_mb": rss_kb / 1024}  # fmt: skip


def endpoint_stats(port: int) -> dict:
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats"))


def write_queries(path: Path, n: int) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"q{i:06d}", "question": f"Benchmark question number {i}: explain topic {i % 97}."}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rss-queries", type=int, default=20000)
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "benches" / "canned_server.py"), "--port", str(port),
                               "--latency", str(LATENCY)], cwd=ROOT)  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(100):
            try:
                endpoint_stats(port)
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            queries = write_queries(tmp / "queries.jsonl", args.queries)
            targets = {64: 0.95, 256: 0.6}
            print(f"{args.queries} queries, L = {LATENCY} s")
            for c in args.concurrency:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/stats/reset", method="POST"))
                r = synth(base_url, queries, tmp / f"out-{c}", tmp / f"home-{c}", c)
                after = endpoint_stats(port)
                requests = after["requests"]
                efficiency = requests * LATENCY / c / r["seconds"]
                limit = f" (target >= {targets[c]})" if c in targets else ""
                print(f"C = {c:4d}: {requests} requests in {r['seconds']:.1f} s, efficiency {efficiency:.3f}{limit}; "
                      f"bytes written / output {r['written'] / r['output']:.2f} (target <= 1.5); peak RSS {r['rss_mb']:.0f} MB")  # fmt: skip
                if requests:
                    # Where the time went: before the first request (start-up, validation), the endpoint's slots in
                    # use between its first request and its last answer, after the last answer (Parquet, manifest).
                    span = after["last"] - after["first"]
                    busy = after["busy"] / (c * span)
                    print(f"          first request after {after['first'] - r['started']:.2f} s; slots busy {busy:.3f} "
                          f"of {span:.1f} s; exit {r['ended'] - after['last']:.2f} s after the last answer")  # fmt: skip
            c = args.concurrency[-1]
            again = synth(base_url, queries, tmp / f"out-{c}", tmp / f"home-{c}", c)
            print(f"resume with everything done: {again['seconds']:.1f} s (target: seconds)")
            big = write_queries(tmp / "big.jsonl", args.rss_queries)
            r_big = synth(base_url, big, tmp / "out-big", tmp / "home-big", c)
            small = synth(base_url, queries, tmp / "out-small", tmp / "home-small", c)
            print(f"peak RSS: {small['rss_mb']:.0f} MB at {args.queries} queries, {r_big['rss_mb']:.0f} MB at "
                  f"{args.rss_queries}: ratio {r_big['rss_mb'] / small['rss_mb']:.2f} (target: flat, ~1.0)")  # fmt: skip
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
