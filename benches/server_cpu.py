"""What the local vLLM server on a CPU costs beside the work it does: CPU-seconds of its process tree per pattern of
calls, and its throughput, with the model in the engine's own process on every core but one (rubricrl's setting on
CPU: `LocalServer.environment`) and in a worker process beside it (vLLM's default there, which binds its threads to
every core but one itself).

    python -m benches.server_cpu

vLLM's worker busy-polls its shared-memory queue for 1 s after every step (SpinCondition in
vllm/distributed/device_communicators/shm_broadcast.py): calls less than a second apart keep a core spinning, taken
from whatever shares the machine with the server (a training run, the other commands, the test suite). Each setting
starts the embedded model's server in turn (`rubricrl.serving.server.LocalServer`, ~30 s), then measures: 10 s idle;
one call of 1 token and of 32 tokens, each followed by 4 s; 10 calls of 4 tokens 0.5 s apart; 16 concurrent calls of
64 tokens (tokens/s); one call of 64 tokens (tokens/s). Printed: each figure per setting and the ratio uni / mp.
"""

import json
import os
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from benches.harness import tree_cpu_seconds
from rubricrl.serving.server import LocalServer


def call(endpoint, tokens: int) -> int:
    body = {"model": endpoint.model, "messages": [{"role": "user", "content": "Say hello in a sentence."}]}
    body |= {"max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    request = urllib.request.Request(
        endpoint.base_url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as reply:
        return json.loads(reply.read())["usage"]["completion_tokens"]


def measure(multiprocessing: str) -> dict[str, float]:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = multiprocessing  # LocalServer keeps a value already set
    server = LocalServer()
    endpoint = server.start(timeout=600)
    root = server.process.pid
    figures: dict[str, float] = {}
    try:
        call(endpoint, 8)  # warm
        time.sleep(3)

        def cpu_of(name: str, work, after: float = 0.0) -> None:
            before = tree_cpu_seconds(root)
            work()
            time.sleep(after)
            figures[name] = tree_cpu_seconds(root) - before

        cpu_of("idle 10 s (CPU-s)", lambda: time.sleep(10))
        cpu_of("1 call of 1 token, then 4 s (CPU-s)", lambda: call(endpoint, 1), after=4)
        cpu_of("1 call of 32 tokens, then 4 s (CPU-s)", lambda: call(endpoint, 32), after=4)
        cpu_of(
            "10 calls of 4 tokens 0.5 s apart (CPU-s)",
            lambda: [call(endpoint, 4) or time.sleep(0.5) for _ in range(10)],
            after=2,
        )
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            tokens = sum(pool.map(lambda _: call(endpoint, 64), range(16)))
        figures["16 concurrent calls of 64 tokens (tokens/s)"] = tokens / (time.monotonic() - started)
        started = time.monotonic()
        figures["1 call of 64 tokens (tokens/s)"] = call(endpoint, 64) / (time.monotonic() - started)
    finally:
        server.stop()
    return figures


def main() -> int:
    runs = {"uni (rubricrl)": measure("0"), "mp (vLLM's default)": measure("1")}
    uni, mp = runs.values()
    width = max(map(len, uni))
    print(f"{'':{width}}  {'uni':>8}  {'mp':>8}  uni / mp")
    for name in uni:
        print(
            f"{name:{width}}  {uni[name]:8.2f}  {mp[name]:8.2f}  {uni[name] / mp[name] if mp[name] else float('nan'):8.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
