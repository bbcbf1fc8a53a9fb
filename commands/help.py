"""What `rubricrl COMMAND --help` says beyond the flags, by command name (`ruft build`): an example or two
(EXAMPLES), the preset configs (PRESETS), the roles it reads (ROLES), and what a rerun does after Ctrl-C or SIGTERM
(ON_INTERRUPT, which main prints). commands/main.py attaches them to every command `all_commands` finds."""

import argparse
import itertools
import re
import textwrap
from pathlib import Path

# Preset folders listed in a command's help: (folder under configs/, what to say).
PRESETS = {
    "synth": ("synthesis",),
    "eval": ("eval",),
    "ruft build": ("ruft",),
    "ruft train": ("ruft",),
    "rurl train": ("rurl",),
}


def presets(kind: str) -> str:
    """`presets (--config FILE):` and each file in configs/KIND with the first sentence of its opening comment,
    when the configs folder is there (a source checkout; an installed wheel has none)."""
    folder = Path(__file__).resolve().parents[1] / "configs" / kind
    lines = []
    for path in sorted(folder.glob("*.yaml")):
        comment = " ".join(
            itertools.takewhile(
                bool, (line[1:].strip() if line.startswith("#") else "" for line in path.read_text().splitlines())
            )
        )
        first = re.match(r"(.*?\.)(?:\s|$)", comment)
        text = textwrap.fill(
            first.group(1) if first else comment,
            116,
            initial_indent="    ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
        lines.append(f"  configs/{kind}/{path.name}:\n{text}")
    return "presets (--config FILE):\n" + "\n".join(lines) if lines else ""


def all_commands(parser: argparse.ArgumentParser, prefix: str = ""):
    """(`ruft build`, its parser) for every command, nested ones included."""
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield prefix + name, command
                yield from all_commands(command, prefix + name + " ")


# The roles each command reads (llm.roles; docs/models-and-endpoints.md, the roles), by command.
ROLES = {
    "synth": "reference, rubric_writer (or each name in synthesis.rubric_roles), response_a and response_b "
    "(synthesis.contrast; response_a and judge with synthesis.contrast_pool), aggregator (two or more rubric roles), "
    "evolver (synthesis.evolve)",
    "grade": "judge (or the name in grading.judge_role)",
    "eval": "policy (the model that answers; --policy), judge (or the name in grading.judge_role)",
    "ruft build": "each role in ruft.candidates (e.g. policy, strong), judge (or the name in grading.judge_role)",
    "rurl train": "judge (or the name in grading.judge_role), monitor (rurl.monitor_judge), evolver (rurl.evolve)",
    "probe": "judge (or the name in grading.judge_role) and each of --judge_roles, attacker (--attacker)",
    "reward serve": "judge (or the name in grading.judge_role)",
    "chat": "chat",
}

# What a rerun does after Ctrl-C or SIGTERM, by command.
ON_INTERRUPT = {
    "*": "nothing was written but what finished",
    "synth": "finished queries are kept; rerun the same command to resume (the rest replays from the cache)",
    "ruft build": "finished queries are kept; rerun the same command to resume (the rest replays from the cache)",
    "grade": "rerun the same command: finished judge calls come from the cache",
    "eval": "rerun the same command: finished model calls come from the cache",
    "ruft train": "rerun with --resume_from_checkpoint true to go on from the last checkpoint",
    "rurl train": "rerun with --resume_from_checkpoint true to go on from the last checkpoint",
    "serve": "the server was stopped",
}

EXAMPLES = {
    "synth": [
        "rubricrl synth --input queries.jsonl --output-dir rubrics/            # Coarse-to-Fine, local model",
        "rubricrl synth --config configs/synthesis/rar.yaml --input q.parquet --output-dir rar/ \\",
        "    --base-url https://api.openai.com/v1 --model gpt-4.1-mini              # Rubrics as Rewards, hosted",
    ],
    "publish": [
        "rubricrl publish rubrics/ --repo-id me/my-rubrics --dry-run hub-preview/   # the card and files, no upload"
    ],
    "grade": ["rubricrl grade --rubrics rubrics/final.parquet --responses answers.jsonl --output graded.jsonl"],
    "eval": [
        "rubricrl eval --rubrics tests/data/healthbench_sample --output-dir eval/   # the local model answers",
        "rubricrl eval --output-dir eval-again/ --graded eval/graded.jsonl          # the report again, no call",
    ],
    "chat": ['rubricrl chat "Name three symptoms of flu." -n 2 --temperature 1'],
    "serve": ["rubricrl serve --port 8750     # the embedded model on CPU; other commands find it"],
    "model prepare": ["rubricrl model prepare          # once per machine; every command that needs it does it too"],
    "model path": ["ls $(rubricrl model path)        # the converted model folder, loadable with transformers"],
    "cache info": ["rubricrl cache info             # where the response cache is, its entries and size"],
    "cache clear": ["RUBRICRL_HOME=/tmp/x rubricrl cache clear   # that home's cache only; the next run pays again"],
    "ruft build": [
        "rubricrl ruft build --config configs/ruft/tiny-cpu.yaml --rubrics rubrics/final.parquet --output-dir sft/"
    ],
    "ruft train": ["rubricrl ruft train --config configs/ruft/tiny-cpu.yaml --dataset sft/ --output_dir model/"],
    "rurl train": [
        "rubricrl rurl train --config configs/rurl/tiny-cpu.yaml --output_dir policy/",
        "rubricrl rurl train --config configs/rurl/tiny-cpu.yaml --dry_run   # print the resolved config",
    ],
    "merge": ["rubricrl merge rubrics-0 rubrics-1 rubrics-2 rubrics-3 --output-dir rubrics/   # synth --shard i/4"],
    "audit": [
        "rubricrl audit sft/ --output-dir audit/             # a RuFT build's graded candidates, no judge call",
        "rubricrl audit eval-a/ eval-b/ --rubrics rubrics/final.parquet --prune duplicate suspect_sign --output-dir a/",
    ],
    "probe": [
        "rubricrl probe --rubrics rubrics/final.parquet --output-dir probe/   # no-substance answers, local judge",
        "rubricrl probe --config configs/rurl/tiny-cpu.yaml --output-dir probe/ --verdict_formats explained verdict_only",
    ],
    "report": [
        "rubricrl report eval/                                  # eval/report.html and .md",
        "rubricrl report base/ tuned/ --labels base tuned --output compare.html",
    ],
}
