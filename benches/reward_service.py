"""Load test of `rubricrl reward serve`: concurrent requests of thousands of completions each, on a canned judge.

    python -m benches.reward_service [--completions 2048] [--requests 8] [--rounds 2] [--criteria 8]
                                     [--mode batched] [--latency 0.05] [--concurrency 256]

Requests come as verl's batch reward manager or several OpenRLHF workers send them: `--requests` at once, `--rounds`
times, each of `--completions` distinct completions for rows of C criteria, to a child `rubricrl reward serve
--no-cache` (every completion costs judge calls) whose judge (benches/canned_server.py) answers after L +- 20%.
Prints completions/s, judge calls/s, request latency (median, max), the ideal (every judge slot busy: calls x L /
concurrency) and the service's CPU per completion; exit 1 if a completion came back unscored or a request failed.
"""

import argparse
import asyncio
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp

from benches.harness import ROOT, canned_endpoint

TOKEN = "bench-token-0123456789abcdef"


def write_rubrics(path: Path, rows: int, criteria: int) -> None:
    with path.open("w") as f:
        for i in range(rows):
            f.write(
                json.dumps(
                    {
                        "id": f"row-{i}",
                        "question": f"Question {i}: how should one treat condition {i}?",
                        "rubrics": [
                            {"criterion": f"Criterion {k} of row {i}: covers point {k}.", "points": 1 + k % 3}
                            for k in range(criteria)
                        ],
                    }
                )
                + "\n"
            )


def start_service(rubrics: Path, base_url: str, args, home: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "RUBRICRL_HOME": home, "RUBRICRL_REWARD_TOKEN": TOKEN}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands",
            "reward",
            "serve",
            "--rubrics",
            str(rubrics),
            "--port",
            "0",
            "--base-url",
            base_url,
            "--model",
            "canned-judge",
            "--no-cache",
            "--mode",
            args.mode,
            "--chunk-size",
            str(args.criteria),
            "--concurrency",
            str(args.concurrency),
            "--no-integrity-check",
            "--max-batch",
            str(max(8192, args.completions)),
            "--roles",
            "judge.temperature=0",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        found = [m for m in (re.search(r"listening on (\S+)", line) for line in lines) if m]
        if found:
            return process, found[0].group(1)
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the service did not start")


async def load(url: str, args, rows: int) -> list[dict]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    timeout = aiohttp.ClientTimeout(total=3600)
    results = []
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:

        async def one(round_: int, request: int) -> dict:
            labels = [f"row-{(request * args.completions + k) % rows}" for k in range(args.completions)]
            responses = [
                f"Answer {k} of request {request}, round {round_}: rest, fluids, and see a doctor."
                for k in range(args.completions)
            ]
            started = time.monotonic()
            async with session.post(url + "/get_reward", json={"responses": responses, "labels": labels}) as answer:
                body = await answer.json()
                status = answer.status
            return {"status": status, "seconds": time.monotonic() - started, "body": body}

        for round_ in range(args.rounds):
            started = time.monotonic()
            done = await asyncio.gather(*(one(round_, r) for r in range(args.requests)))
            wall = time.monotonic() - started
            results.append({"wall": wall, "requests": done})
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=2048, help="completions per request")
    parser.add_argument("--requests", type=int, default=8, help="concurrent requests")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of concurrent requests")
    parser.add_argument("--criteria", type=int, default=8, help="criteria per rubric")
    parser.add_argument("--mode", default="batched", choices=["batched", "per_criterion"])
    parser.add_argument("--latency", type=float, default=0.05, help="L: seconds per judge call")
    parser.add_argument("--concurrency", type=int, default=256, help="judge calls in flight (llm.concurrency)")
    args = parser.parse_args()

    calls_per_completion = 1 if args.mode == "batched" else args.criteria
    with tempfile.TemporaryDirectory() as tmp, canned_endpoint(args.latency) as judge:
        rubrics = Path(tmp) / "rubrics.jsonl"
        rows = 512
        write_rubrics(rubrics, rows, args.criteria)
        process, url = start_service(rubrics, judge.base_url, args, tmp)
        try:
            cpu_before = _cpu_seconds(process.pid)
            judge.reset()
            results = asyncio.run(load(url, args, rows))
            cpu = _cpu_seconds(process.pid) - cpu_before
            stats = judge.stats()
        finally:
            process.terminate()
            process.wait(timeout=60)
    failed = [r for round_ in results for r in round_["requests"] if r["status"] != 200]
    unscored = sum(
        r["body"]["scored"].count(False) for round_ in results for r in round_["requests"] if r["status"] == 200
    )
    completions = args.completions * args.requests * args.rounds
    wall = sum(r["wall"] for r in results)
    latencies = [r["seconds"] for round_ in results for r in round_["requests"]]
    calls = completions * calls_per_completion
    ideal = args.latency * math.ceil(calls / args.concurrency)
    print(
        f"reward service: {args.rounds} rounds x {args.requests} concurrent requests x {args.completions} "
        f"completions ({args.criteria} criteria, {args.mode}: {calls_per_completion} judge call(s) each), judge "
        f"latency L={args.latency} s, concurrency {args.concurrency}"
    )
    print(
        f"  {completions / wall:.0f} completions/s, {calls / wall:.0f} judge calls/s ({stats['requests']} calls "
        f"answered by the judge); {wall:.2f} s in all, ideal {ideal:.2f} s (ratio {wall / ideal:.2f})"
    )
    print(
        f"  request latency: median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s; service CPU "
        f"{1e3 * cpu / completions:.3f} ms per completion"
    )
    print(f"  failed requests {len(failed)}, unscored completions {unscored}")
    return 1 if failed or unscored else 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main())
