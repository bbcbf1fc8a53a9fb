"""What every command pays before its work: the wall time and peak RSS of `--help` and of `synth` on one query.

    python -m benches.startup [--repeats 7] [--baseline 205bd48 49cd6da]

Each command runs --repeats times in a fresh process (`python -m commands`, bytecode already compiled, the
canned endpoint answering at once); printed: the median wall time, its ratio to the 1-second limit for `--help`, and
the peak RSS. --baseline REV runs commit REV's code (a git worktree) in the same venv, interleaved with this tree's
runs, so that both see the same machine at the same moments. tests/test_startup.py holds the rule behind the figures:
no `--help` and no `synth` imports torch, transformers, peft, TRL, vLLM or datasets.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from benches.harness import ROOT, baseline_tree, canned_endpoint

HELP_LIMIT = 1.0  # seconds: the project's rule for `--help`


def timed(argv: list[str], root: Path, env: dict) -> tuple[float, float]:
    """One `python -m commands ARGV` from `root`: (wall seconds, peak RSS in MiB) of that process alone."""
    entry = "commands" if (root / "commands" / "__main__.py").exists() else "rubricrl.cli"  # a baseline before it
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", entry, *argv],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv} from {root} failed: {process.stderr.read().decode()[-2000:]}")
    process.stderr.close()
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", nargs="*", default=[], metavar="REV", help="commits to run beside this tree")
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        endpoint = stack.enter_context(canned_endpoint(0.0, jitter=0.0))
        trees = {"this tree": ROOT}
        for rev in args.baseline:
            trees[rev] = stack.enter_context(baseline_tree(rev))
        query = Path(tmp) / "query.jsonl"
        query.write_text(json.dumps({"id": "q", "question": "Why is the sky blue?"}) + "\n")
        commands = {
            "rubricrl --help": ["--help"],
            "rubricrl synth --help": ["synth", "--help"],
            "rubricrl rurl train --help": ["rurl", "train", "--help"],
            "rubricrl synth (1 query)": ["synth", "--input", str(query), "--base-url", endpoint.base_url],
        }
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        runs = 0
        for _ in range(args.repeats):
            for name, argv in commands.items():
                for tree, root in trees.items():
                    runs += 1  # each run a home and an output of its own: nothing comes from a cache
                    env = {**os.environ, "RUBRICRL_HOME": str(Path(tmp) / f"home-{runs}")}
                    output = ["--model", "canned", "--output-dir", str(Path(tmp) / f"out-{runs}")]
                    run_argv = [*argv, *output] if "synth (" in name else argv
                    figures.setdefault((name, tree), []).append(timed(run_argv, root, env))
    print(f"median of {args.repeats} fresh processes each (Python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    for name in commands:
        for tree in trees:
            runs = figures[(name, tree)]
            seconds = statistics.median(s for s, _ in runs)
            limit = f" = {seconds / HELP_LIMIT:.2f} x the {HELP_LIMIT:g} s limit" if "--help" in name else ""
            print(f"{name:28s} {tree:>10s}: {seconds:5.2f} s{limit}; peak RSS {max(r for _, r in runs):.0f} MiB")


if __name__ == "__main__":
    main()
