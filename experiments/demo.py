"""The end-to-end demo on the embedded model (`make demo`). First version: the foundation.

    python experiments/demo.py [--config configs/tiny-cpu.yaml]

Prepares SmolLM2-135M-Instruct (once), reuses a running `rubricrl serve` or starts a local vLLM server for the
demo's duration, sends a few chat requests concurrently and one structured-output request through the one LLM
client, prints answers and timings, and stops the server it started. Later stages (synthesis, grading, RuFT,
RuRL) extend this script.
"""

import argparse
import asyncio
import json
import time
from pathlib import Path

from rubricrl.config import load_yaml
from rubricrl.embedded_model import prepare_embedded_model
from rubricrl.llm import LLMClient, connected_roles

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "What is the boiling point of water at sea level?",
    "Give one tip for writing clear code.",
    "Why do leaves change colour in autumn?",
]
FACT_SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string", "maxLength": 60},
        "fact": {"type": "string", "maxLength": 200},
        "confidence": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["topic", "fact", "confidence"],
    "additionalProperties": False,
}


async def talk(roles) -> None:
    # No cache here, so that the timings printed are the model's own; every real stage uses the cache.
    async with LLMClient(roles, cache=None, concurrency=8) as client:
        started = time.monotonic()
        answers = await asyncio.gather(*(client.chat("chat", q) for q in QUESTIONS))
        print(f"\n== {len(QUESTIONS)} chat requests, concurrently ({time.monotonic() - started:.1f} s)")
        for question, answer in zip(QUESTIONS, answers):
            print(f"\nQ: {question}\nA ({answer.seconds:.1f} s): {answer.text.strip()}")

        prompt = "Reply in JSON with a topic, one fact about it, and your confidence from 1 to 10. Topic: the Moon."
        result = await client.chat("chat", prompt, schema=FACT_SCHEMA, max_tokens=200)
        # The client has parsed and validated the reply against FACT_SCHEMA (it raises otherwise).
        print(f"\n== structured output ({result.seconds:.1f} s), valid against its JSON schema:")
        print(json.dumps(result.value, indent=2, ensure_ascii=False))

        usage = client.usage["chat"]
        print(f"\n== usage: {usage.requests} requests, {usage.prompt_tokens} prompt + "
              f"{usage.completion_tokens} completion tokens")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny-cpu.yaml")
    args = parser.parse_args()

    started = time.monotonic()
    model_dir = prepare_embedded_model()
    print(f"== embedded model: {model_dir} ({time.monotonic() - started:.1f} s)")
    started = time.monotonic()
    with connected_roles(["chat"], load_yaml(args.config).get("llm"), source=str(args.config)) as roles:
        print(f"== server: {roles['chat'].base_url} serving {roles['chat'].model} "
              f"({time.monotonic() - started:.1f} s to reach it)")  # fmt: skip
        asyncio.run(talk(roles))


if __name__ == "__main__":
    main()
