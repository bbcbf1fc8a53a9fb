"""Throughput of the one LLM client against the embedded model on the local vLLM server.

    python -m benches.client_throughput [--requests 32] [--tokens 32]

Every request generates exactly --tokens tokens (vLLM's ignore_eos), so runs compare. Prints requests/s and tokens/s
at concurrency 1 and 16 and their ratio (the server's batching), then the rate of the cache answering the same
requests (its ratio to the server's is what a resumed run saves). Reuses a running `rubricrl serve`, else starts one.
"""

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from rubricrl.llm import LLMClient, LLMSettings, ResponseCache, open_llm


async def measure(roles, concurrency: int, requests: int, tokens: int, cache=None, tag: str = "") -> dict:
    async with LLMClient(roles, cache=cache, concurrency=concurrency) as client:
        started = time.monotonic()
        await asyncio.gather(
            *(
                client.chat(
                    "bench", f"{tag}Write about the number {i}.", max_tokens=tokens, extra_body={"ignore_eos": True}
                )
                for i in range(requests)
            )
        )
        seconds = time.monotonic() - started
        usage = client.usage["bench"]
    return {
        "rps": requests / seconds,
        "tps": usage.completion_tokens / seconds,
        "seconds": seconds,
        "completion_tokens": usage.completion_tokens,
        "cache_hits": usage.cache_hits,
    }


async def bench(roles, requests: int, tokens: int) -> None:
    await measure(roles, 4, 4, 4, tag="warm-up ")
    c1 = await measure(roles, 1, max(4, requests // 4), tokens, tag="c1 ")
    with tempfile.TemporaryDirectory() as tmp:
        cache = ResponseCache(Path(tmp) / "cache")
        c16 = await measure(roles, 16, requests, tokens, cache=cache, tag="c16 ")
        hits = await measure(roles, 16, requests, tokens, cache=cache, tag="c16 ")
        cache.close()
    assert hits["cache_hits"] == requests and c16["completion_tokens"] == requests * tokens
    print(f"{'':24}{'requests/s':>12}{'tokens/s':>12}")
    print(f"{'concurrency 1':24}{c1['rps']:12.2f}{c1['tps']:12.1f}")
    print(f"{'concurrency 16':24}{c16['rps']:12.2f}{c16['tps']:12.1f}")
    print(f"{'cache hits, conc. 16':24}{hits['rps']:12.1f}")
    print(f"ratio concurrency 16 / 1: {c16['rps'] / c1['rps']:.1f}x")
    print(f"ratio cache / server at concurrency 16: {hits['rps'] / c16['rps']:.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    with open_llm(LLMSettings(defaults={"temperature": 0.8}), ["bench"], source="bench") as session:
        asyncio.run(bench(session.roles, args.requests, args.tokens))


if __name__ == "__main__":
    main()
