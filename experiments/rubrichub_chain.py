"""The RubricHub chain: synthesize a rubric per query -> RuFT (build + SFT) -> RuRL (GRPO from the RuFT model) ->
evaluate the base, RuFT and RuFT->RuRL models on a held-out rubric set, one comparison table. Every stage is a real
`rubricrl` command with its config; this script only connects them.

On this CPU (the embedded model everywhere; what `make demo` runs after its introduction):
    python -m experiments.rubrichub_chain --output-dir runs/chain

At paper scale on GPUs (Qwen3-4B-Base, judge and writers served by vLLM at --base-url; the RuRL stage under
`accelerate launch` is better run on its own with configs/accelerate/zero3.yaml):
    python -m experiments.rubrichub_chain --output-dir runs/chain-gpu --queries my_queries.jsonl \\
        --held-out healthbench.jsonl --base-url http://localhost:8000/v1 --model openai/gpt-oss-20b \\
        --synthesis-config configs/synthesis/rubrichub.yaml --ruft-config configs/ruft/qwen3-gpu.yaml \\
        --rurl-config configs/rurl/rubrichub-dapo.yaml --base-model Qwen/Qwen3-4B-Base --eval-tokens 2048 --rurl-args ""

Outputs (in --output-dir): synthesis/, ruft/, ruft-model/, rurl-model/, eval/<model>/ (graded.jsonl, report.json),
comparison.md (the table), report.html / report.md (`rubricrl report` of the evaluations and the training runs)
and timings.json (wall time per stage).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_RURL_ARGS = (
    "--eval_size 0 --max_steps 2 --per_device_train_batch_size 4 --save_steps 2 "
    "--dynamic_sampling false --log_completions false"
)
"""The CPU budget of the RuRL stage: 2 GRPO steps of 4 answers to one query each."""
HELD_OUT = ROOT / "experiments" / "data" / "rurl_tiny.jsonl"
"""The CPU rubric set the models are compared on: 8 queries none of them trained on."""
EVAL_TOKENS = 64


class Chain:
    """Runs the stages in order, timing each; stops at the first command that fails."""

    def __init__(self, out: Path, endpoint: list[str], judge_model_folder: str | None = None):
        self.out, self.endpoint = out, endpoint
        self.judge_model_folder = judge_model_folder
        """The folder of the model the judge's endpoint serves, when it is one of the models compared (on a CPU)."""
        self.times: dict[str, float] = {}
        os.environ.setdefault("WANDB_RUN_GROUP", out.name)  # the chain's training runs, grouped in wandb

    def step(self, name: str, argv: list[str]) -> None:
        """One `rubricrl` command in a process of its own: a training stage's GPU memory (its colocated vLLM
        included) is free again before the next stage starts a server."""
        started = time.monotonic()
        code = subprocess.run([sys.executable, "-m", "commands", *argv], check=False).returncode
        if code:
            raise SystemExit(f"{name} failed (exit {code}): rubricrl {shlex.join(argv)}")
        self.times[name] = round(time.monotonic() - started, 1)

    def synthesize(self, queries: Path, config: Path) -> Path:
        out = self.out / "synthesis"
        self.step(
            "synthesis",
            ["synth", "--input", str(queries), "--output-dir", str(out), "--config", str(config), *self.endpoint],
        )
        return out / "final.parquet"

    def ruft(self, rubrics: Path, config: Path, base_model: str | None) -> Path:
        build, model = self.out / "ruft", self.out / "ruft-model"
        print("\n== RuFT: K answers per query, graded against the rubrics; the best at or above tau kept")
        self.step(
            "ruft build",
            [
                "ruft",
                "build",
                "--config",
                str(config),
                "--rubrics",
                str(rubrics),
                "--output-dir",
                str(build),
                *self.endpoint,
            ],
        )
        print("\n== RuFT: supervised fine-tuning on the kept answers")
        self.step(
            "ruft train",
            [
                "ruft",
                "train",
                "--config",
                str(config),
                "--dataset",
                str(build),
                "--output_dir",
                str(model),
                *(["--model_name_or_path", base_model] if base_model else []),
            ],
        )
        return model

    def rurl(self, rubrics: Path, config: Path, start: Path, extra: list[str]) -> Path:
        model = self.out / "rurl-model"
        print("\n== RuRL: GRPO from the RuFT model, rewarded by the rubrics")
        self.step(
            "rurl train",
            [
                "rurl",
                "train",
                "--config",
                str(config),
                "--rubrics",
                str(rubrics),
                "--model_name_or_path",
                str(start),
                "--output_dir",
                str(model),
                *extra,
                *self.endpoint,
            ],
        )
        return model

    def evaluate(self, models: dict[str, str], held_out: Path, tokens: int) -> dict[str, dict]:
        """`rubricrl eval` of each model on the held-out rubrics: a folder (a checkpoint) is served for the run by a
        local vLLM server of its own, a Hub id likewise, the judge stays at the chain's endpoint; answers greedy,
        `tokens` tokens at most. A model that is the judge's own (the embedded model on this CPU, the only one at
        hand) answers at the judge's server, said with --self_judging."""
        out = self.out / "eval"
        judge = dict(zip(self.endpoint[::2], self.endpoint[1::2]))
        reports = {}
        for name, model in models.items():
            print(f"\n== evaluation: {name} ({model}) answers the held-out queries; the judge grades them")
            argv = ["eval", "--rubrics", str(held_out), "--output-dir", str(out / name)]
            argv += ["--roles", f"policy.max_tokens={tokens}", "policy.temperature=0"]
            argv += [f"judge.base_url={judge['--base-url']}", f"judge.model={judge['--model']}"]
            if Path(model).resolve() == Path(self.judge_model_folder or "").resolve():
                argv += [f"policy.base_url={judge['--base-url']}", f"policy.model={judge['--model']}", "--self_judging"]
            else:
                argv += ["--policy", model]
            self.step(f"eval ({name})", argv)
            reports[name] = json.loads((out / name / "report.json").read_text())
        return reports

    def probe(self, held_out: Path) -> Path:
        """`rubricrl probe` of the judge on the held-out rubrics: how much it pays answers with no substance, which
        decides whether the comparison can trust it."""
        out = self.out / "probe"
        print("\n== the judge's probes: answers with no substance, graded against the held-out rubrics")
        self.step("probe", ["probe", "--rubrics", str(held_out), "--output-dir", str(out), *self.endpoint])
        return out

    def report(self, labels: dict[str, Path]) -> Path:
        """One HTML page (and its markdown summary) comparing the given folders: `rubricrl report`."""
        page = self.out / "report.html"
        self.step(
            "report",
            [
                "report",
                *map(str, labels.values()),
                "--labels",
                *labels,
                "--output",
                str(page),
                "--title",
                "RubricHub chain: base vs RuFT vs RuFT+RuRL",
            ],
        )
        return page


def comparison_table(reports: dict[str, dict], eval_dir: Path, probe: Path | None = None) -> str:
    """Overall and per-axis HealthBench-style scores, one row per model, each ± its bootstrap std, and each model
    against the first (paired over the held-out examples: a tie when the 95% interval holds 0); above the table, a
    line when the judge cannot tell the models apart, by its verdicts or by its probes (`probe`, a probe folder)."""
    from grading.cli import read_graded
    from reports.distinguish import is_tie, paired_difference, probe_line, saturation_line

    graded = {name: read_graded(eval_dir / name / "graded.jsonl") for name in reports}
    first = next(iter(reports))
    axes = sorted({m for r in reports.values() for m in r["metrics"] if m.startswith("axis:") and m.count(":") == 1})
    lines = [
        "| model | overall | " + " | ".join(a.removeprefix("axis:") for a in axes) + f" | against {first} |",
        "|---|---|" + "---|" * (len(axes) + 1),
    ]
    for name, report in reports.items():
        m = report["metrics"]
        cells = [f"{m[k]:.3f} ± {m[k + ':bootstrap_std']:.3f}" if k in m else "-" for k in ["overall_score", *axes]]
        found = None if name == first else paired_difference(graded[first], graded[name])
        against = "-" if found is None else f"{found['difference']:+.3f}, " + ("tie" if is_tie(found) else "apart")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {against} |")
    summary = json.loads((probe / "summary.json").read_text()) if probe else None
    above = [
        line for line in (saturation_line(graded), probe_line({"judge probe": summary} if summary else {})) if line
    ]
    return "\n".join([*(f"{line}\n" for line in above), *lines])


def run_chain(chain: Chain, args: argparse.Namespace, base_model: str) -> dict[str, dict]:
    rubrics = chain.synthesize(args.queries, args.synthesis_config)
    ruft_model = chain.ruft(rubrics, args.ruft_config, args.base_model)
    rurl_model = chain.rurl(rubrics, args.rurl_config, ruft_model, shlex.split(args.rurl_args))
    models = {"base": base_model, "ruft": str(ruft_model), "ruft+rurl": str(rurl_model)}
    reports = chain.evaluate(models, args.held_out, args.eval_tokens)
    probe = chain.probe(args.held_out)
    page = chain.report(report_folders(chain.out))
    table = comparison_table(reports, chain.out / "eval", probe)
    (chain.out / "comparison.md").write_text(table + "\n")
    (chain.out / "timings.json").write_text(json.dumps(chain.times, indent=1))
    examples = next(iter(reports.values()))["examples"]
    print(f"\n== HealthBench-style scores on {examples} held-out queries (± bootstrap std)\n\n{table}")
    print(f"\n== report: {page} (open it in a browser; offline)")
    return reports


def report_folders(out: Path) -> dict[str, Path]:
    """What the report compares: the three evaluations, the judge's probes, the RuFT build and the RuRL run."""
    evals = {name: out / "eval" / name for name in ("base", "ruft", "ruft+rurl")}
    return {**evals, "judge probe": out / "probe", "ruft build": out / "ruft", "rurl run": out / "rurl-model"}


def chain_arguments(parser: argparse.ArgumentParser) -> None:
    data = ROOT / "experiments" / "data"
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "chain")
    parser.add_argument("--queries", type=Path, default=data / "demo_queries.jsonl")
    parser.add_argument(
        "--held-out",
        type=Path,
        default=HELD_OUT,
        help="the rubric set the models are compared on (none of them trains on it)",
    )
    parser.add_argument("--synthesis-config", type=Path, default=ROOT / "configs" / "synthesis" / "tiny-cpu.yaml")
    parser.add_argument("--ruft-config", type=Path, default=ROOT / "configs" / "ruft" / "tiny-cpu.yaml")
    parser.add_argument("--rurl-config", type=Path, default=ROOT / "configs" / "rurl" / "tiny-cpu.yaml")
    parser.add_argument("--rurl-args", default=TINY_RURL_ARGS, help="extra flags for `rurl train` (the CPU budget)")
    parser.add_argument("--base-model", help="the policy's starting model (default: the embedded model)")
    parser.add_argument("--eval-tokens", type=int, default=EVAL_TOKENS, help="answer length in the evaluation")
    parser.add_argument("--base-url", help="endpoint for every role (default: the local vLLM server)")
    parser.add_argument("--model", help="model for every role at --base-url")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    chain_arguments(parser)
    args = parser.parse_args()
    from rubricrl.llm import LLMSettings, open_llm
    from rubricrl.serving.embedded_model import prepare_embedded_model

    started = time.monotonic()
    with open_llm(LLMSettings(base_url=args.base_url, model=args.model), ["judge"]) as session:
        judge = session.roles["judge"]
        embedded = None if args.base_url else str(prepare_embedded_model())  # the local judge's own model
        chain = Chain(args.output_dir, ["--base-url", judge.base_url, "--model", judge.model], embedded)
        run_chain(chain, args, args.base_model or str(prepare_embedded_model()))
    print(f"\n== wall time per stage (s): {chain.times}; total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
