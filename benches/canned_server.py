"""An OpenAI-compatible server for benchmarks: every chat request is answered after a fixed latency (L +- 20%)
with a valid canned answer (a schema instance when the request carries a JSON schema). It measures the client,
not a model. GET /stats gives the request count.

    python benches/canned_server.py --port 8791 --latency 0.2
"""

import argparse
import asyncio
import json
import random

from aiohttp import web

from rubricrl.llm.structured import example_instance


def make_app(latency: float) -> web.Application:
    stats = {"requests": 0}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        stats["requests"] += 1
        await asyncio.sleep(latency * random.uniform(0.8, 1.2))
        response_format = body.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            text = json.dumps(example_instance(response_format["json_schema"]["schema"]))
        else:
            text = "A canned answer. " * 20
        n = body.get("n") or 1
        return web.json_response({
            "id": f"c{stats['requests']}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        for i in range(n)],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50 * n, "total_tokens": 100 + 50 * n},
        })  # fmt: skip

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats)

    app = web.Application()
    app.add_routes([web.post("/v1/chat/completions", chat), web.get("/stats", get_stats)])
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    web.run_app(make_app(args.latency), host="127.0.0.1", port=args.port, print=None, access_log=None)
