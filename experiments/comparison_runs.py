"""Running a comparison of policies: one `rurl train` per setting from one base policy, then every trained policy (and
the base) evaluated alike, on the same held-out rows by the same judge (experiments/compare_rewards.py). Folder:
runs/<name>/ (rurl train's output_dir), eval/<name>/ (responses.jsonl, graded.jsonl, report.json, run.json: timings
and exit codes). `reports/comparison.py` turns what they leave into the table."""

import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from commands.main import main as rubricrl


def resolved_settings(flags: list[str]) -> dict[str, Any]:
    """`rurl train FLAGS --dry_run`: the settings every run resolves to (policy, max_completion_length, judge)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = rubricrl(["rurl", "train", *flags, "--dry_run"])
    if code:
        raise SystemExit(f"the settings do not resolve (rurl train --dry_run: exit {code})")
    return yaml.safe_load(printed.getvalue())


def eval_config(settings: dict[str, Any]) -> dict[str, Any]:
    """The config of every `rubricrl eval`: the runs' judge (llm section), grading per criterion on the explicit
    rubric; the training grading's judge, samples and coverage rules kept, its mode-specific prompt not."""
    return {"llm": settings["llm"], "grading": {**settings["grading"], "mode": "per_criterion", "judge_prompt": None}}


@contextlib.contextmanager
def judge_server(settings: dict[str, Any], needed: bool, command: str) -> Iterator[tuple[list[str], str]]:
    """Yields (flags, judge name). A local judge gets one vLLM server of this comparison's own, up for all its
    commands (else each would start and stop one, ~30 s each on a CPU), every command pinned to it by the flags. A
    running server is not reused (so not rubricrl.serving.server.local_endpoint, which would): one started by
    someone else can stop in the middle of a run (seen here: a run on a shared machine lost every verdict of a
    step). A remote
    judge, or nothing left to grade: no flags."""
    from rubricrl.llm import LLMSettings
    from rubricrl.llm.roles import resolve_roles
    from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME
    from rubricrl.serving.server import LocalServer

    llm, name = LLMSettings(**settings["llm"]), settings["grading"]["judge_role"]
    role = resolve_roles([name], llm.role_defaults(), {name: llm.roles.get(name)}, source=command)[name]
    if not role.is_local or not needed:
        yield [], (role.model or EMBEDDED_MODEL_NAME) if role.is_local else f"{role.model} at {role.base_url}"
        return
    server = LocalServer(role.model)  # a free port; not advertised: the flags name it
    print(f"{command}: starting a judge server (log {server.log_path})", file=sys.stderr)
    with server as endpoint:
        yield ["--roles", f"{name}.base_url={endpoint.base_url}", f"{name}.model={endpoint.model}"], endpoint.model


def run_rubricrl(argv: list[str], launcher: str | None = None, env: dict[str, str] | None = None) -> int:
    """`rubricrl ARGV` in this process, or as its own under `launcher` (e.g. `accelerate launch ...`)."""
    if launcher:
        command = [*shlex.split(launcher), "-m", "commands", *argv]
        return subprocess.run(command, env={**os.environ, **(env or {})}).returncode
    try:
        with mock.patch.dict(os.environ, env or {}):
            return rubricrl(argv)
    finally:  # what the run left on the device, before the next one loads its model
        import gc

        gc.collect()
        with contextlib.suppress(ImportError):
            import torch

            torch.cuda.empty_cache()  # nothing to do where CUDA was never used


def attempt(record: dict[str, Any], key: str, action: Callable[[], int]) -> None:
    """record[key]: the action's exit code; a crash is exit 1 with its traceback in record["error"], and leaves the
    other policies to run (the table says what happened)."""
    try:
        record[key] = action()
    except Exception:
        record[key], record["error"] = 1, traceback.format_exc(limit=3)
        print(record["error"], file=sys.stderr)


def trained_policy(run_dir: Path) -> Path | None:
    """What a run left to evaluate: the saved model, else the latest checkpoint (a run a guard stopped saves one and
    no model; complete ones only: a kill while saving leaves a half-written folder)."""
    from rubricrl.runs.training import latest_checkpoint

    return run_dir if (run_dir / "config.json").is_file() else latest_checkpoint(run_dir)


@dataclass
class ComparisonRuns:
    out: Path
    """The comparison folder; eval_config.yaml in it is the yardstick's config."""
    heldout: list[dict]
    """The held-out rows (rurl's trainer rows), written to heldout_file."""
    heldout_file: Path
    policy: str
    """The base policy: what every run trains from, and the row `run(name, None)` evaluates."""
    max_new_tokens: int
    llm_args: list[str]
    """Judge flags of every command (after the run's own: they win)."""
    group: str
    """The wandb group of every run."""
    train_args: Sequence[str] = ()
    """More flags for every `rurl train`, last: they win over the run's and the judge's."""
    launcher: str | None = None
    """Run each training under this launcher (e.g. `accelerate launch ...`), else in this process."""

    def run(self, name: str, train_flags: list[str] | None, record: dict[str, Any] | None = None) -> None:
        """Train `name` with `rurl train TRAIN_FLAGS` (None: the base policy, nothing to train), evaluate what it
        left, write eval/<name>/run.json (`record` and the timings and exit codes)."""
        started, record = time.monotonic(), {"method": name, "train_wall_s": None, **(record or {})}
        model = Path(self.policy) if train_flags is None else self.train(name, train_flags, record)
        if train_flags is not None:
            record["train_wall_s"] = round(time.monotonic() - started, 1)
        out = self.out / "eval" / name
        out.mkdir(parents=True, exist_ok=True)
        if model is not None:
            attempt(record, "eval_code", lambda: self.evaluate(model, out, record))
        record["wall_s"] = round(time.monotonic() - started, 1)
        (out / "run.json").write_text(json.dumps(record, indent=1))

    def train(self, name: str, flags: list[str], record: dict[str, Any]) -> Path | None:
        """runs/<name>: trained unless a saved model is there; what it left to evaluate."""
        run_dir = self.out / "runs" / name
        record["train_code"] = 0
        if trained_policy(run_dir) == run_dir:
            print(f"\n=== {name}: trained earlier ({run_dir})", file=sys.stderr)
            return run_dir
        shutil.rmtree(run_dir, ignore_errors=True)  # no saved model: train (again)
        flags = [*flags, "--output_dir", str(run_dir), "--run_name", f"{self.group}-{name}", *self.llm_args]
        flags += self.train_args
        print(f"\n=== {name}: rurl train -> {run_dir}", file=sys.stderr, flush=True)
        env = {"WANDB_RUN_GROUP": self.group}
        attempt(record, "train_code", lambda: run_rubricrl(["rurl", "train", *flags], self.launcher, env))
        return trained_policy(run_dir)

    def evaluate(self, model: Path, out: Path, record: dict[str, Any]) -> int:
        """Greedy answers to the held-out rows, then `rubricrl eval --responses` with the common yardstick."""
        from rubricrl.runs.jsonl import write_jsonl
        from rurl.watch.evaluate import answer_with

        print(f"=== {out.name}: evaluating {model} on {len(self.heldout)} held-out rows", file=sys.stderr)
        started = time.monotonic()
        answers = answer_with(model, [r["prompt"] for r in self.heldout], self.max_new_tokens, self.policy)
        write_jsonl(out / "responses.jsonl", [{"id": r["id"], "response": a} for r, a in zip(self.heldout, answers)])
        record["generate_s"], started = round(time.monotonic() - started, 1), time.monotonic()
        flags = ["--rubrics", str(self.heldout_file), "--responses", str(out / "responses.jsonl"), "--config"]
        flags += [str(self.out / "eval_config.yaml"), "--output-dir", str(out), "--mode", "per_criterion"]
        code = run_rubricrl(["eval", *flags, *self.llm_args])
        record["grade_s"], record["evaluated"] = round(time.monotonic() - started, 1), str(model)
        return code
