"""Grading throughput on the embedded judge, per mode, and what prefix ordering and the cache buy.

    python -m benches.grading_modes [--examples 4] [--chunk-size 8]

Grades the physician-written ideal completions of the first --examples HealthBench sample examples that have one.
Prints criteria/s and prompt tokens per criterion, with ratios against per_criterion, for:
- per_criterion: one call per criterion, conversation and response first, criterion last (what grading does);
- criterion first: the same calls, criterion before the conversation, so vLLM's prefix cache shares only the system
  message between a response's criteria (the baseline for prefix ordering);
- batched: a chunk of criteria per call; then per_criterion on a warm response cache (nothing sent).
Each timed run tags its conversations so no run reuses another's prefix cache. Reuses a running `rubricrl serve`,
else starts a server.
"""

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from grading import judge
from grading.dataset import load_rubric_rows
from grading.grader import GradeItem, Grader, GradingConfig
from rubricrl.llm import LLMClient, LLMSettings, ResponseCache, open_llm

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"


def criterion_first(text: str) -> str:
    """The per-criterion prompt text with its criterion block moved to the top (same placeholders)."""
    head, criterion = text.split("Criterion (")
    criterion_block, question = criterion.split("\n\n", 1)
    return f"Criterion ({criterion_block}\n\n{head}{question}"


async def run(roles, examples, config: GradingConfig, tag: str, cache=None) -> dict:
    def tagged(conversation):  # a distinct first message per run: no run reuses another's prefix cache
        first, *rest = conversation
        return [{**first, "content": f"[{tag}] {first['content']}"}, *rest]

    items = [GradeItem(tagged(e.conversation), e.ideal_completion, e.rubric) for e in examples]
    async with LLMClient(roles, cache=cache, concurrency=16) as client:
        started = time.monotonic()
        graded = await Grader(client, config).grade_many(items)
        seconds = time.monotonic() - started
        usage = client.usage[config.judge_role]
    criteria = sum(len(g.verdicts) for g in graded)
    decided = sum(g.decided for g in graded)
    return {
        "criteria/s": criteria / seconds,
        "prompt tokens/criterion": usage.prompt_tokens / criteria,
        "decided": decided / criteria,
        "seconds": seconds,
    }


async def bench(roles, examples, chunk_size: int) -> None:
    per_criterion = GradingConfig(mode="per_criterion")
    results = {"per_criterion": await run(roles, examples, per_criterion, "pc")}
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "judge_criterion_first.txt"
        first.write_text(criterion_first(judge.CRITERION.text), encoding="utf-8")
        config = GradingConfig(mode="per_criterion", judge_prompt=str(first))
        results["per_criterion, criterion first"] = await run(roles, examples, config, "pc-first")
        results["batched"] = await run(roles, examples, GradingConfig(mode="batched", chunk_size=chunk_size), "b")
        cache = ResponseCache(Path(tmp) / "cache")
        await run(roles, examples, per_criterion, "warm", cache)
        results["per_criterion, cached"] = await run(roles, examples, per_criterion, "warm", cache)
        cache.close()
    base = results["per_criterion"]["criteria/s"]
    print(f"{sum(len(e.rubric.criteria) for e in examples)} criteria over {len(examples)} responses")
    print(f"{'run':34}{'criteria/s':>12}{'prompt tok/crit':>17}{'decided':>9}{'vs per_criterion':>18}")
    for name, r in results.items():
        print(
            f"{name:34}{r['criteria/s']:12.2f}{r['prompt tokens/criterion']:17.0f}{r['decided']:9.0%}"
            f"{r['criteria/s'] / base:17.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=4)
    parser.add_argument("--chunk-size", type=int, default=8)
    args = parser.parse_args()
    examples = [e for e in load_rubric_rows(SAMPLE).values() if e.ideal_completion][: args.examples]
    settings = LLMSettings(roles={"judge": {"temperature": 0.0, "max_tokens": 256}})
    with open_llm(settings, ["judge"], source="bench") as session:
        asyncio.run(bench(session.roles, examples, args.chunk_size))


if __name__ == "__main__":
    main()
