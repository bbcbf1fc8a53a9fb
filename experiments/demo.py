"""The end-to-end demo on the embedded model (`make demo`).

    python experiments/demo.py [--config configs/tiny-cpu.yaml]

Prepares SmolLM2-135M-Instruct (once), reuses a running `rubricrl serve` or starts a local vLLM server for the
demo's duration, then:
1. sends a few chat requests concurrently and one structured-output request through the one LLM client;
2. answers two HealthBench prompts with the model as policy and grades the answers against their physician-
   written rubrics with the model as judge, criterion by criterion, and prints a HealthBench-style table.
Later stages (synthesis, RuFT, RuRL) extend this script; grading will then take the synthesized rubrics.
"""

import argparse
import asyncio
import json
import time
from pathlib import Path

from grading.grader import Grader, GradingConfig
from grading.dataset import load_rubric_rows
from grading.report import build_report, format_report
from rubricrl.config import dataclass_from_dict, load_yaml
from rubricrl.embedded_model import prepare_embedded_model
from rubricrl.llm import LLMClient, connected_roles

ROOT = Path(__file__).resolve().parents[1]
HEALTHBENCH = ROOT.parent / "shared" / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
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


async def answer_and_grade(roles, grading: GradingConfig) -> None:
    examples = sorted(load_rubric_rows(HEALTHBENCH).values(), key=lambda e: len(e.rubric.criteria))[:2]
    async with LLMClient(roles, concurrency=16) as client:
        started = time.monotonic()
        answers = await asyncio.gather(*(client.chat("policy", e.conversation) for e in examples))
        graded = await Grader(client, grading).grade_many(
            [(e.conversation, a.text, e.rubric, None) for e, a in zip(examples, answers)])  # fmt: skip
        print(f"\n== answered and graded {len(examples)} HealthBench prompts ({time.monotonic() - started:.1f} s)")
    records = []
    for example, answer, g in zip(examples, answers, graded):
        print(f"\nQ: {example.conversation[-1]['content'][:200]}\nA: {answer.text.strip()[:300]}")
        for v in g.verdicts:
            mark = {True: "met", False: "not met", None: "no verdict"}[v.met]
            print(f"   [{mark:>10}] ({v.points:+d}) {v.criterion[:100]}")
        score = "undefined" if g.score is None else f"{g.score:.2f}"
        print(f"   score {score}")
        records.append(g.to_record(example.rubric.example_tags))
    print("\n" + format_report(build_report(records, min_coverage=grading.min_coverage)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny-cpu.yaml")
    args = parser.parse_args()

    started = time.monotonic()
    model_dir = prepare_embedded_model()
    print(f"== embedded model: {model_dir} ({time.monotonic() - started:.1f} s)")
    started = time.monotonic()
    config = load_yaml(args.config)
    grading = dataclass_from_dict(GradingConfig, config.get("grading") or {}, f"{args.config}: grading")
    with connected_roles(["chat", "policy", "judge"], config.get("llm"), source=str(args.config)) as roles:
        print(f"== server: {roles['chat'].base_url} serving {roles['chat'].model} "
              f"({time.monotonic() - started:.1f} s to reach it)")  # fmt: skip
        asyncio.run(talk({"chat": roles["chat"]}))
        asyncio.run(answer_and_grade({"policy": roles["policy"], "judge": roles["judge"]}, grading))


if __name__ == "__main__":
    main()
