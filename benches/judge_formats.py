"""What the three verdict formats cost on the embedded judge, and how far they agree.

    python -m benches.judge_formats [--examples 8]

Grades the physician-written ideal completions of the first --examples HealthBench sample examples that have one,
per criterion, once in each format (explained, verdict_only, probability), no cache; each run tags its
conversations so none reuses another's prefix cache. Prints per format: verdicts/s, output and prompt tokens per
verdict, the judge server's CPU seconds per verdict (its process tree, from /proc), each with its ratio against
explained; then Cohen's kappa between the formats' verdicts (probability: P >= 0.5) with its bootstrap std,
resampled by example. Reuses a running `rubricrl serve`, else starts a server (then CPU is not measured).
"""

import argparse
import asyncio
import time
from pathlib import Path

from benches.harness import tree_cpu_seconds
from checks.agreement import criterion_agreement
from grading.dataset import load_rubric_rows
from grading.grader import GradeItem, Grader, GradingConfig
from rubricrl.llm import LLMClient, LLMSettings, open_llm
from rubricrl.serving.discovery import find_running

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"
FORMATS = ("explained", "verdict_only", "probability")


async def run(roles, examples, verdict_format: str, server_pid: int | None) -> dict:
    def tagged(conversation):  # a distinct first message per run: no run reuses another's prefix cache
        first, *rest = conversation
        return [{**first, "content": f"[{verdict_format}] {first['content']}"}, *rest]

    items = [GradeItem(tagged(e.conversation), e.ideal_completion, e.rubric) for e in examples]
    config = GradingConfig(verdict_format=verdict_format, integrity_check=False)
    async with LLMClient(roles, cache=None, concurrency=16) as client:
        cpu_before = tree_cpu_seconds(server_pid) if server_pid else None
        started = time.monotonic()
        graded = await Grader(client, config).grade_many(items)
        seconds = time.monotonic() - started
        cpu = tree_cpu_seconds(server_pid) - cpu_before if server_pid else None
        usage = client.usage["judge"]
    verdicts = [v.met for g in graded for v in g.verdicts]
    return {
        "verdicts": verdicts,
        "groups": [i for i, g in enumerate(graded) for _ in g.verdicts],
        "verdicts/s": len(verdicts) / seconds,
        "output tokens": usage.completion_tokens / len(verdicts),
        "prompt tokens": usage.prompt_tokens / len(verdicts),
        "cpu s": None if cpu is None else cpu / len(verdicts),
        "decided": sum(v is not None for v in verdicts) / len(verdicts),
    }


def ratio(value, base) -> str:
    return "" if value is None or not base else f" ({value / base:.2f}x)"


async def bench(roles, examples, server_pid: int | None) -> None:
    results = {f: await run(roles, examples, f, server_pid) for f in FORMATS}
    base = results["explained"]
    print(f"{len(base['verdicts'])} criteria over {len(examples)} ideal completions, judge {roles['judge'].model}")
    print(f"{'format':14}{'verdicts/s':>18}{'output tok/verdict':>26}{'prompt tok':>12}{'judge CPU s/verdict':>26}")
    for name, r in results.items():
        cpu = "n/a" if r["cpu s"] is None else f"{r['cpu s']:.3f}{ratio(r['cpu s'], base['cpu s'])}"
        print(
            f"{name:14}{r['verdicts/s']:>9.2f}{ratio(r['verdicts/s'], base['verdicts/s']):>9}"
            f"{r['output tokens']:>17.1f}{ratio(r['output tokens'], base['output tokens']):>9}"
            f"{r['prompt tokens']:>12.0f}{cpu:>26}"
        )
    print(f"{'agreement':28}{'kappa':>8}{'± std':>8}{'raw':>7}{'decided':>9}")
    for a, b in (("explained", "verdict_only"), ("explained", "probability"), ("verdict_only", "probability")):
        agreement = criterion_agreement(results[a]["verdicts"], results[b]["verdicts"], groups=base["groups"])
        kappa, std = agreement.kappa, agreement.bootstrap.get("kappa")
        print(
            f"{a + ' / ' + b:28}{'n/a' if kappa is None else f'{kappa:.2f}':>8}"
            f"{'n/a' if std is None else f'{std:.2f}':>8}{agreement.agreement or 0:>7.2f}{agreement.decided:>9}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=8)
    args = parser.parse_args()
    examples = [e for e in load_rubric_rows(SAMPLE).values() if e.ideal_completion][: args.examples]
    settings = LLMSettings(roles={"judge": {"temperature": 0.0, "max_tokens": 256}})
    with open_llm(settings, ["judge"], source="bench") as session:
        running = find_running()
        asyncio.run(bench(session.roles, examples, running.pid if running else None))


if __name__ == "__main__":
    main()
