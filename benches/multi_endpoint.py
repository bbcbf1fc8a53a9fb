"""Routing over several endpoints behind one role: canned endpoints (benches/canned_server.py, latency L), no cache.

    python -m benches.multi_endpoint [--requests 2400] [--concurrency 16] [--latency 0.2]

Prints requests/s on one endpoint and on three at the same per-endpoint concurrency C (ratio target >= 2.8x); then
three with one SIGKILLed mid-answer a third of the way through: rows lost (target 0), throughput after the kill
against two endpoints' (2x the one-endpoint rate; target >= 0.9), the two survivors' slot occupancy (request-seconds
answered / (C x the span they served)) and each endpoint's counts.
"""

import argparse
import asyncio
import sys
import time
from contextlib import ExitStack

from benches.harness import canned_endpoint
from rubricrl.llm import LLMClient, Role


async def measure(endpoints, requests: int, concurrency: int, tag: str, kill=None, kill_after: float = 0.0) -> dict:
    """`requests` distinct calls at once through one client; with `kill`, that endpoint dies after `kill_after` s."""
    role = Role(base_url=[e.base_url for e in endpoints], model="canned", temperature=1.0)
    finished: list[float] = []

    async def one(client, i):
        result = await client.chat("bench", f"{tag} question {i}: explain topic {i % 97}.")
        finished.append(time.monotonic())
        return result

    async def killer():
        await asyncio.sleep(kill_after)
        kill.kill()
        return time.monotonic()

    async with LLMClient({"bench": role}, concurrency=concurrency) as client:
        started = time.monotonic()
        killed = asyncio.create_task(killer()) if kill else None
        results = await asyncio.gather(*(one(client, i) for i in range(requests)), return_exceptions=True)
        ended = time.monotonic()
        killed_at = await killed if killed else None
        summary = client.endpoint_summary()
    answered = [r for r in results if not isinstance(r, BaseException)]
    errors = [r for r in results if isinstance(r, BaseException)]
    return {
        "seconds": ended - started,
        "rps": len(answered) / (ended - started),
        "answered": len(answered),
        "errors": errors,
        "killed_at": killed_at,
        "ended": ended,
        "finished": finished,
        "summary": summary,
    }


def occupancy(endpoints, concurrency: int) -> float:
    """Slots in use over the span the endpoints served (1.0: never a slot idle)."""
    stats = [e.stats() for e in endpoints]
    span = max(s["last"] for s in stats) - min(s["first"] for s in stats)
    return sum(s["busy"] for s in stats) / (len(stats) * concurrency * span)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2400, help="calls of the three-endpoint runs (a third on one)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight per endpoint")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds each canned answer takes")
    args = parser.parse_args()
    c, latency = args.concurrency, args.latency
    with ExitStack() as stack:
        endpoints = [stack.enter_context(canned_endpoint(latency, jitter=0.0)) for _ in range(3)]
        asyncio.run(measure(endpoints, 3 * c, c, "warm-up"))
        one = asyncio.run(measure(endpoints[:1], args.requests // 3, c, "one"))
        three = asyncio.run(measure(endpoints, args.requests, c, "three"))
        for endpoint in endpoints:
            endpoint.reset()
        kill_after = three["seconds"] / 3
        killed = asyncio.run(measure(endpoints, args.requests, c, "kill", kill=endpoints[2], kill_after=kill_after))
        survivors = occupancy(endpoints[:2], c)

    ratio = three["rps"] / one["rps"]
    after = sum(1 for t in killed["finished"] if t > killed["killed_at"]) / (killed["ended"] - killed["killed_at"])
    efficiency = after / (2 * one["rps"])
    lost = args.requests - killed["answered"]
    print(f"canned endpoints: latency {latency} s (fixed), {c} requests in flight per endpoint, no cache")
    print(f"{'':34}{'requests':>10}{'seconds':>10}{'requests/s':>12}")
    for name, run, n in (
        ("one endpoint", one, args.requests // 3),
        ("three endpoints", three, args.requests),
        (f"three, one killed at {kill_after:.1f} s", killed, args.requests),
    ):
        print(f"{name:34}{n:10d}{run['seconds']:10.2f}{run['rps']:12.1f}")
    print(f"ideal per endpoint: {c / latency:.1f} requests/s")
    print(f"throughput three / one endpoint: {ratio:.2f}x (target >= 2.8x) {verdict(ratio >= 2.8)}")
    print(
        f"one endpoint killed mid-run: rows lost {lost} (target 0) {verdict(lost == 0)}"
        + (f"; first error: {killed['errors'][0]}" if killed["errors"] else "")
    )
    print(
        f"after the kill: {after:.1f} requests/s = {efficiency:.3f} of two endpoints' {2 * one['rps']:.1f} "
        f"(target >= 0.9) {verdict(efficiency >= 0.9)}; survivors' slots busy {survivors:.3f} of their span"
    )
    print(killed["summary"])
    if ratio < 2.8 or lost or efficiency < 0.9:
        sys.exit(1)


if __name__ == "__main__":
    main()
