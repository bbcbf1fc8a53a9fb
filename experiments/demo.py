"""The end-to-end demo on the embedded model (`make demo`).

    python -m experiments.demo [--output-dir runs/demo]

Prepares SmolLM2-135M-Instruct (once) and a local vLLM server (or reuses a running `rubricrl serve`), then:
1. a few concurrent chat requests and a structured-output one through the one LLM client;
2. a Coarse-to-Fine rubric per query of experiments/data/demo_queries.jsonl (configs/synthesis/tiny-cpu.yaml);
3. a score table per query, grading synthesis's contrast responses A and B against it criterion by criterion;
4. RuFT: 4 answers per query, the best at or above tau kept, a few LoRA SFT steps (configs/ruft/tiny-cpu.yaml);
5. RuRL: a few GRPO steps from the RuFT model, same rubrics and judge (configs/rurl/tiny-cpu.yaml);
6. the base, RuFT and RuFT->RuRL models evaluated HealthBench-style on experiments/data/rurl_tiny.jsonl (each
   checkpoint served by `rubricrl eval --policy`), the judge probed on the same rubrics (`rubricrl probe`): one
   comparison table, and runs/demo/report.html (`rubricrl report` of the evaluations, the probe, the build and the run).
Every stage is a real `rubricrl` command; a second run replays from the response cache. The model is tiny: rubrics
and verdicts are often wrong and a few steps teach little; the demo shows the machinery, not quality. Stages 4-6 are
experiments/rubrichub_chain.py, which also runs them at paper scale with the GPU configs.
"""

import argparse
import asyncio
import json
import os
import shlex
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq

from experiments.rubrichub_chain import (
    EVAL_TOKENS,
    HELD_OUT,
    TINY_RURL_ARGS,
    Chain,
    comparison_table,
    report_folders,
)
from rubricrl.llm import LLMClient, LLMSettings, open_llm
from rubricrl.serving.embedded_model import prepare_embedded_model

ROOT = Path(__file__).resolve().parents[1]

QUESTIONS = ["What is the boiling point of water at sea level?", "Give one tip for writing clear code."]
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
    # No cache here, so that the timings printed are the model's own; every stage below uses the cache.
    async with LLMClient(roles, cache=None, concurrency=8) as client:
        started = time.monotonic()
        answers = await asyncio.gather(*(client.chat("chat", q, max_tokens=96) for q in QUESTIONS))
        print(f"\n== {len(QUESTIONS)} chat requests, concurrently ({time.monotonic() - started:.1f} s)")
        for question, answer in zip(QUESTIONS, answers):
            print(f"\nQ: {question}\nA ({answer.seconds:.1f} s): {answer.text.strip()}")
        prompt = "Reply in JSON with a topic, one fact about it, and your confidence from 1 to 10. Topic: the Moon."
        result = await client.chat("chat", prompt, schema=FACT_SCHEMA, max_tokens=200)
        # The client has parsed and validated the reply against FACT_SCHEMA (it raises otherwise).
        print(f"\n== structured output ({result.seconds:.1f} s), valid against its JSON schema:")
        print(json.dumps(result.value, indent=2, ensure_ascii=False))


def show_rubrics(out: Path) -> None:
    for row in pq.read_table(out / "final.parquet").to_pylist():
        print(f"\n[{row['id']}] {row['question']}")
        for item in row["rubrics"]:
            print(f"   ({item['points']:+3d}) {item['criterion']}")


def write_responses(out: Path) -> list[Path]:
    """responses_a.jsonl and responses_b.jsonl from the contrast responses synthesis recorded."""
    details = [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()]
    paths = []
    for k, name in enumerate(("a", "b")):
        path = out / f"responses_{name}.jsonl"
        path.write_text("".join(json.dumps({"id": d["id"], "response": d["responses"][k]}) + "\n" for d in details))
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "demo")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_SILENT", "true")  # the training runs still log to wandb (offline): quietly here
    # Each demo starts from an empty folder (its model calls replay from the cache): a folder left by an older
    # rubricrl, or by other settings, would be refused by the resuming stages.
    shutil.rmtree(args.output_dir, ignore_errors=True)

    started = time.monotonic()
    print(f"== embedded model: {prepare_embedded_model()} ({time.monotonic() - started:.1f} s)")
    with open_llm(LLMSettings(), ["chat"]) as session:
        chat = session.roles["chat"]
        endpoint = ["--base-url", chat.base_url, "--model", chat.model]
        print(f"== server: {chat.base_url} serving {chat.model}")
        asyncio.run(talk(session.roles))

        print("\n== synthesis: a rubric per query (Coarse-to-Fine)")
        chain = Chain(args.output_dir, endpoint, str(prepare_embedded_model()))  # the base model is the judge's
        rubrics = chain.synthesize(
            ROOT / "experiments" / "data" / "demo_queries.jsonl", ROOT / "configs" / "synthesis" / "tiny-cpu.yaml"
        )
        show_rubrics(rubrics.parent)

        for name, responses in zip("AB", write_responses(rubrics.parent)):
            print(f"\n== grading the contrast responses {name} against the synthesized rubrics")
            chain.step(
                f"grade ({name})",
                [
                    "grade",
                    "--rubrics",
                    str(rubrics),
                    "--responses",
                    str(responses),
                    "--output",
                    str(args.output_dir / f"graded_{name.lower()}.jsonl"),
                    "--config",
                    str(ROOT / "configs" / "tiny-cpu.yaml"),
                    *endpoint,
                ],
            )

        ruft_model = chain.ruft(rubrics, ROOT / "configs" / "ruft" / "tiny-cpu.yaml", None)
        rurl_model = chain.rurl(
            rubrics, ROOT / "configs" / "rurl" / "tiny-cpu.yaml", ruft_model, shlex.split(TINY_RURL_ARGS)
        )
        models = {"base": str(prepare_embedded_model()), "ruft": str(ruft_model), "ruft+rurl": str(rurl_model)}
        reports = chain.evaluate(models, HELD_OUT, EVAL_TOKENS)
        probe = chain.probe(HELD_OUT)
        page = chain.report(report_folders(args.output_dir))

    table = comparison_table(reports, args.output_dir / "eval", probe)
    (args.output_dir / "comparison.md").write_text(table + "\n")
    print(
        f"\n== HealthBench-style scores on {reports['base']['examples']} queries of {HELD_OUT.name}, which none of "
        f"the models trained on (± bootstrap std)\n\n{table}"
    )
    print(
        "\n== wall time per stage: "
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in chain.times.items())
        + f"; total {time.monotonic() - started:.0f} s"
    )
    print(f"== report: {page} (one page, opens offline)\n== outputs in {args.output_dir}")


if __name__ == "__main__":
    main()
