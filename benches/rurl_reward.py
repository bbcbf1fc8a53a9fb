"""What the rubric reward costs a GRPO step: reward wall time against the ideal, client CPU per judge call, step time.

    python -m benches.rurl_reward [--latency 0.2] [--completions 64] [--criteria 8] [--concurrency 64] [--steps 3]

1. Reward overhead: one reward call (TRL makes one per generation batch) grades B completions x C criteria,
   per_criterion without cache, on the canned endpoint (benches/canned_server.py), which answers each judge call after
   exactly L s. Ideal: L x ceil(B*C / concurrency), every slot always busy; limit: 1.2 x ideal + 50 ms. Client CPU
   per judge call: this process's CPU time over the calls.
2. GRPO steps: RubricGRPOTrainer on the embedded model (LoRA, CPU, 8 completions of 16 tokens a step), --steps steps
   with the rubric reward on the canned endpoint, then with a constant reward, in this process; each one's mean step
   time (the first, warm-up step left out) and their ratio.
"""

import argparse
import asyncio
import math
import statistics
import sys
import time

from benches.harness import canned_endpoint
from grading.grader import Grader, GradingConfig
from rubricrl.llm import LLMClient, Role
from rurl.reward.rubric_reward import make_rubric_reward, rubric_reward


def rubric(criteria: int) -> list[dict]:
    return [
        {"criterion": f"Criterion {i}: the answer covers point {i}.", "points": 1 + i % 3, "tags": None}
        for i in range(criteria)
    ]


async def reward_steps(base_url: str, args) -> list[dict]:
    role = Role(base_url=base_url, model="canned-judge", temperature=0.0)
    grading = GradingConfig(integrity_check=False)
    results = []
    async with LLMClient({"judge": role}, cache=None, concurrency=args.concurrency) as client:
        grader = Grader(client, grading)
        for step in range(args.repeats + 1):
            prompts = [
                [{"role": "user", "content": f"Question {i % 8} of step {step}?"}] for i in range(args.completions)
            ]
            completions = [
                [{"role": "assistant", "content": f"Answer {i} of step {step}."}] for i in range(args.completions)
            ]
            before = sum(u.requests for u in client.usage.values())
            cpu, wall = time.process_time(), time.monotonic()
            rewards = await rubric_reward(
                prompts=prompts,
                completions=completions,
                rubrics=[rubric(args.criteria)] * args.completions,
                grader=grader,
            )
            wall, cpu = time.monotonic() - wall, time.process_time() - cpu
            calls = sum(u.requests for u in client.usage.values()) - before
            assert calls == args.completions * args.criteria and all(r is not None for r in rewards)
            if step:  # the first call opens the connections
                results.append({"wall": wall, "cpu": cpu, "calls": calls})
    return results


def grpo_step_times(base_url: str, args, rubric_reward_on: bool) -> list[float]:
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    from rubricrl.serving.embedded_model import prepare_embedded_model
    from rurl.trainer import RubricGRPOTrainer

    def constant_reward(completions, **kwargs):
        return [0.5] * len(completions)

    role = Role(base_url=base_url, model="canned-judge", temperature=0.0)
    grader = Grader(
        LLMClient({"judge": role}, cache=None, concurrency=args.concurrency), GradingConfig(integrity_check=False)
    )
    reward = make_rubric_reward(grader) if rubric_reward_on else constant_reward
    dataset = Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": f"Say something about topic {i}."}],
                "rubrics": rubric(args.criteria),
            }
            for i in range(16)
        ]
    )
    config = GRPOConfig(
        output_dir="/tmp/rurl-bench",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        max_steps=args.steps + 1,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=16,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=0,
    )
    trainer = RubricGRPOTrainer(
        model=str(prepare_embedded_model()),
        reward_funcs=[reward],
        args=config,
        train_dataset=dataset,
        peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    if rubric_reward_on:  # TRL runs async rewards on its own loop, where the client's sessions live
        asyncio.run_coroutine_threadsafe(grader.client.aclose(), trainer.async_loop).result(timeout=60)
    return [entry["step_time"] for entry in trainer.state.log_history if "step_time" in entry][1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--completions", type=int, default=64, help="B: completions per reward call")
    parser.add_argument("--criteria", type=int, default=8, help="C: criteria per rubric")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed reward calls")
    parser.add_argument("--steps", type=int, default=3, help="timed GRPO steps per reward")
    parser.add_argument("--skip-grpo", action="store_true")
    args = parser.parse_args()

    with canned_endpoint(args.latency, jitter=0.0) as endpoint:
        results = asyncio.run(reward_steps(endpoint.base_url, args))
        calls = args.completions * args.criteria
        ideal = args.latency * math.ceil(calls / args.concurrency)
        limit = 1.2 * ideal + 0.05
        wall = statistics.median(r["wall"] for r in results)
        cpu_ms = 1000 * statistics.median(r["cpu"] / r["calls"] for r in results)
        print(
            f"reward overhead: B={args.completions} completions x C={args.criteria} criteria = {calls} judge calls, "
            f"L={args.latency} s, concurrency {args.concurrency}"
        )
        print(
            f"  wall per reward call {wall:.3f} s (median of {len(results)}); ideal {ideal:.3f} s; "
            f"ratio to ideal {wall / ideal:.3f}; limit 1.2 x ideal + 50 ms = {limit:.3f} s: "
            f"{'within' if wall <= limit else 'OVER'}"
        )
        print(f"  client CPU per judge call: {cpu_ms:.2f} ms")
        if not args.skip_grpo:
            rubric_times = grpo_step_times(endpoint.base_url, args, rubric_reward_on=True)
            constant_times = grpo_step_times(endpoint.base_url, args, rubric_reward_on=False)
            with_rubric, constant = statistics.fmean(rubric_times), statistics.fmean(constant_times)
            per_step_ideal = args.latency * math.ceil(8 * args.criteria / args.concurrency)
            print(
                f"GRPO step (embedded model, LoRA, 8 completions x 16 tokens, {args.criteria} criteria each): "
                f"rubric reward {with_rubric:.2f} s, constant reward {constant:.2f} s, ratio "
                f"{with_rubric / constant:.2f} (the judge's ideal share: {per_step_ideal:.2f} s)"
            )
    return 0 if wall <= limit else 1


if __name__ == "__main__":
    sys.exit(main())
