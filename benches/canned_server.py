"""An OpenAI-compatible server for benchmarks: a valid canned answer to every chat request after L +- 20% by default
(--jitter), so that the client is measured, not a model. GET /stats: request count, request-seconds spent answering,
span from first request to last answer (POST /stats/reset zeroes them); GET /v1/models: one model (--model), as vLLM.

Answers are shaped like real ones, since their size and compressibility decide what the client writes: ~1,500
characters plain; with a JSON schema, several items, strings at their length bound, integers spread over their range.
The text, random prose from the standard library's docstrings, compresses ~2x with zlib (real answers: 2.5x for
HealthBench's ideal completions and rubrics).

    python -m benches.canned_server --port 8791 --latency 0.2
"""

import argparse
import asyncio
import inspect
import json
import random
import re
import time
from typing import Any

from aiohttp import web

ANSWER_CHARS = 1500
MAX_ITEMS = 8


def sentences() -> list[str]:
    modules = [
        __import__(name, fromlist=["_"])
        for name in (
            "argparse",
            "asyncio",
            "calendar",
            "collections",
            "csv",
            "datetime",
            "decimal",
            "difflib",
            "email",
            "fractions",
            "functools",
            "heapq",
            "http.client",
            "itertools",
            "logging",
            "pathlib",
            "sqlite3",
            "statistics",
            "subprocess",
            "tarfile",
            "textwrap",
            "typing",
            "unittest",
            "urllib.request",
            "zipfile",
        )
    ]
    text = " ".join(
        inspect.getdoc(o) or "" for m in modules for o in [m, *(getattr(m, n) for n in dir(m) if n[0] != "_")]
    )
    found = (s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())))
    return sorted({s for s in found if 20 < len(s) < 300 and s[0].isupper()})


def prose(rng: random.Random, corpus: list[str], chars: int) -> str:
    words: list[str] = []
    while sum(map(len, words)) < chars:
        words.append(rng.choice(corpus))
    return " ".join(words)[:chars]


def instance(schema: dict[str, Any], rng: random.Random, corpus: list[str]) -> Any:
    """A valid instance of a bounded schema, sized like a model's answer."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        return {name: instance(sub, rng, corpus) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        ids = schema["items"].get("properties", {}).get("id", {}).get("enum")
        if ids and schema.get("minItems") == schema.get("maxItems") == len(ids):  # one item per id, as asked
            return [{**instance(schema["items"], rng, corpus), "id": i} for i in ids]
        count = rng.randint(max(1, schema.get("minItems", 0)), max(1, min(schema["maxItems"], MAX_ITEMS)))
        return [instance(schema["items"], rng, corpus) for _ in range(count)]
    if kind in ("integer", "number"):
        return rng.choice([v for v in range(schema["minimum"], schema["maximum"] + 1) if v != 0] or [0])
    if kind == "boolean":
        return rng.random() < 0.5
    limit = schema.get("maxLength", 200)
    return prose(rng, corpus, rng.randint(limit // 2, limit))


def make_app(latency: float, jitter: float = 0.2, model: str = "canned") -> web.Application:
    # busy: request-seconds from arrival to answer (slept: the latencies drawn); first/last: the
    # span the endpoint was in use, so that a benchmark can tell client overhead at the edges from gaps in between.
    stats = {"requests": 0, "busy": 0.0, "slept": 0.0, "first": None, "last": None}
    corpus = sentences()
    rng = random.Random(0)

    async def chat(request: web.Request) -> web.Response:
        arrived = time.monotonic()
        stats["first"] = stats["first"] or arrived
        body = await request.json()
        stats["requests"] += 1
        pause = latency * rng.uniform(1 - jitter, 1 + jitter)
        response_format = body.get("response_format") or {}
        n = body.get("n") or 1
        if response_format.get("type") == "json_schema":
            texts = [json.dumps(instance(response_format["json_schema"]["schema"], rng, corpus)) for _ in range(n)]
        else:
            texts = [prose(rng, corpus, int(ANSWER_CHARS * rng.uniform(0.5, 1.5))) for _ in range(n)]
        response = web.json_response(
            {
                "id": f"c{stats['requests']}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    for i, text in enumerate(texts)
                ],
                "usage": {
                    "prompt_tokens": 100,
                    "completion_tokens": sum(len(t) // 4 for t in texts),
                    "total_tokens": 100 + sum(len(t) // 4 for t in texts),
                },
            }
        )
        # The answer is made while the latency runs, so that the latency is L whatever making it costs here.
        await asyncio.sleep(max(0.0, arrived + pause - time.monotonic()))
        stats["last"] = time.monotonic()
        stats["busy"] += stats["last"] - arrived
        stats["slept"] += pause
        return response

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def reset_stats(request: web.Request) -> web.Response:
        stats.update(requests=0, busy=0.0, slept=0.0, first=None, last=None)
        return web.json_response(stats)

    app = web.Application()
    app.add_routes(
        [
            web.post("/v1/chat/completions", chat),
            web.get("/stats", get_stats),
            web.post("/stats/reset", reset_stats),
            web.get("/v1/models", models),
        ]
    )
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--jitter", type=float, default=0.2, help="latency spread: L * (1 +- jitter)")
    parser.add_argument("--model", default="canned", help="the model name GET /v1/models lists")
    args = parser.parse_args()
    web.run_app(
        make_app(args.latency, args.jitter, args.model), host="127.0.0.1", port=args.port, print=None, access_log=None
    )
