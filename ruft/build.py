"""`rubricrl ruft build`: a rubric dataset in, SFT data out. Per query, K candidate answers from the candidate roles
(one n-sample call per distinct request, through the one client and its cache) are graded against its rubric and the
best at or above tau kept (grading/select.py); as in synthesis, queries stream with no barrier between stages.
The folder is append-only while running; a rerun skips the queries in queries.jsonl and replays the rest from the
cache. `candidates.jsonl`: every candidate (role, model, finish reason, length, score, verdicts, kept); `sft.jsonl`:
the kept answers; `queries.jsonl`: a line per finished query with its `fingerprint`, written last (it means done);
`fingerprint.json` and `runs.jsonl`: rubricrl/runs/provenance.py. At the end (ruft/build_output.py): `sft.parquet`
and `sft/` (`datasets.load_from_disk`) in TRL's conversational prompt-completion format with provenance columns,
`below_threshold.jsonl` (no candidate >= tau), `scores.png`, `length_vs_score.png`, `config.yaml`, `manifest.json` last.
"""

import argparse
import asyncio
import hashlib
import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grading.dataset import RubricRow, iter_rubric_rows
from grading.grader import EXPLICIT_MODES, Grader, GradingConfig, judge_prompt
from grading.judge import SYSTEM as JUDGE_SYSTEM
from grading.rubric import RubricError
from grading.select import candidates, eligible, sample_and_grade, select
from rubricrl.config import parse_settings, resolved
from rubricrl.llm import EndpointUnreachable, LLMClient, LLMError
from rubricrl.llm.reasoning import split_reasoning
from rubricrl.llm.self_judging import check_judge_apart
from rubricrl.queries import Rejected
from rubricrl.records.hub import describe_input
from rubricrl.runs.folder import FolderRun, RunCounts
from rubricrl.runs.jsonl import complete_rows, json_line
from rubricrl.runs.provenance import role_settings
from rubricrl.runs.shards import parse_shard
from rubricrl.runs.streaming import for_each
from ruft.build_output import finish, summary_text
from ruft.config import RuftConfig


@dataclass
class BuildArgs:
    rubrics: Path
    """Rubric dataset: a synthesis output (final.parquet / final.jsonl), HealthBench JSONL, RaR rows, Parquet, a
    saved HF dataset, a dataset repository folder or a Hub id (org/name[:SPLIT]); multi-turn prompts are kept as
    messages."""
    output_dir: Path
    """Where candidates, the SFT dataset, plots, config.yaml and manifest.json go; a rerun resumes there."""
    limit: int | None = None
    """Only the first N rows (with --shard: this shard's ids among the first N rows)."""
    rar_pitfalls: Literal["auto", "mistake", "avoidance"] = "auto"
    """RaR rubrics: whether pitfall texts name the mistake or what to avoid (grading/rar.py)."""
    shard: str | None = None
    """i/n: only the ids of shard i of n (0 <= i < n), a split by id independent of row order, so that n machines
    each run one part (`rubricrl merge` joins their folders); default: all."""
    skip_bad_rows: bool = False
    """Leave out the rows no candidate could be scored on (explicit modes: no criterion with positive points;
    reference_likert: no reference answer), listed in rejected.jsonl, and go on (default: stop before any call,
    naming them)."""
    allow_changed_settings: bool = False
    """Resume into an output folder whose rows were made with other settings (models, sampling, K, tau, grading):
    the manifest and the dataset card then name each set of settings, and each queries.jsonl line its own. Never
    saved in config.yaml."""

    def __post_init__(self) -> None:
        parse_shard(self.shard)
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be at least 1, got {self.limit}")


def run_build(args: argparse.Namespace) -> int:
    settings = parse_settings(args, command="ruft build")
    build, config, grading, llm = settings
    out = build.output_dir
    shard = parse_shard(build.shard)

    # --limit before --shard: the shards of a limited run hold the ids of that run, and merge into it
    def selected():
        return (
            row
            for row in itertools.islice(iter_rubric_rows(build.rubrics, build.rar_pitfalls), build.limit)
            if shard is None or row.id in shard
        )  # noqa: E731

    rejected, total = bad_rows(selected(), grading, build.rubrics, build.skip_bad_rows)  # every row, before any call
    left_out = {r.row["id"] for r in rejected}
    rows = lambda: (row for row in selected() if row.id not in left_out)  # noqa: E731
    run = FolderRun("ruft build", settings, out, done_file="queries.jsonl", allow_changed=build.allow_changed_settings)

    check_judge_apart(llm, grading.judge_role, list(config.candidates), config.self_judging, "--self_judging")
    role_names = list(dict.fromkeys([*config.candidates, grading.judge_role]))
    budgets = {**config.cpu_max_tokens(), **grading.cpu_max_tokens()}
    with run.roles(args, llm, role_names, cpu_budgets=budgets) as roles:
        settings_id = run.prepare(
            build_settings(build, config, grading, roles),
            rejected=rejected if build.skip_bad_rows else None,
            rejected_said=f"left out {len(rejected)} rows no candidate could be scored on",
            stale=("manifest.json", "sft.parquet", "sft"),
        )
        counts, judge = asyncio.run(sample_and_select(run, config, grading, rows(), total, settings_id))
    stats = finish(out, config, judge)
    run_counts = {
        "queries": total,
        "rejected_rows": len(rejected),
        "done_this_run": counts.done,
        "done_before": counts.skipped,
        "failed": dict(counts.failed),
    }
    manifest = run.finish(
        run_counts,
        first_error=counts.first_error,
        rows=stats["queries_by_fingerprint"],
        described={"rubrics": describe_input(build.rubrics)},
        extra={"judge": judge, "scores": stats["scores"]},
        more_counts=stats["counts"],
    )
    print(summary_text(manifest, out))
    return 0 if not counts.failed else 1


async def sample_and_select(
    run: FolderRun, config: RuftConfig, grading: GradingConfig, rows, total: int, settings_id: str
) -> tuple[RunCounts, dict[str, Any]]:
    """K candidates per query, graded, the best kept; the judge's metadata."""
    async with run.client() as client:
        grader = Grader(client, grading)
        builder = Builder(
            run.out, config, grader, client, fingerprint=settings_id, in_flight=max(8, 2 * run.slots // config.k)
        )
        return await builder.run(rows, total), grader.metadata


ADDED_LATER = {"verdict_format": "explained", "reask_undecided": 0, "probability_min_mass": 0.5, "max_judge_calls": 6}
"""Grading settings newer than some builds, at their defaults: the rows they shape are those of older builds."""


def build_settings(build: BuildArgs, config: RuftConfig, grading: GradingConfig, roles: dict) -> dict[str, Any]:
    """What determines the rows (rubricrl/runs/provenance.py): the selection, the grading settings, how RaR pitfalls
    read, each role as resolved, the judge's prompts (by hash: a copied prompt file is the same prompt). Not
    concurrency, timeouts, the limit or paths."""
    # not the judge prompt's path (its hash is below), nor max_failure_rate (grade and eval's exit code, not rows);
    # settings added after builds existed count only when set, so that such a build still resumes
    grading_values = {
        k: v
        for k, v in resolved([grading])["grading"].items()
        if k not in ("judge_prompt", "max_failure_rate") and ADDED_LATER.get(k, object()) != v
    }
    return {
        "command": "ruft build",
        "ruft": {k: v for k, v in resolved([config])["ruft"].items() if k != "self_judging"},  # not the rows
        "grading": grading_values,
        "rar_pitfalls": build.rar_pitfalls,
        "roles": role_settings(roles),
        "prompts": {"judge": judge_prompt(grading).sha256, "judge_system": JUDGE_SYSTEM.sha256},
    }


def bad_rows(rows: Iterable[RubricRow], grading: GradingConfig, path: Path, skip: bool) -> tuple[list[Rejected], int]:
    """The rows no candidate could be scored on (`_problem`), in one pass before any call: refused in one line
    (the first of them and how many), or with `skip` returned to be left out and listed in rejected.jsonl; and
    the number of rows to build."""
    rejected, first, bad, seen = [], None, 0, 0
    for row in rows:
        seen += 1
        problem = _problem(row, grading)
        if problem is None:
            continue
        bad += 1
        first = first or f"{row.where or path}: id {row.id!r}: {problem}"
        if skip:
            rejected.append(Rejected(row.where or str(path), problem, {"id": row.id}))
    if bad and not skip:  # all of them counted: the user learns how many, not only the first
        more = f" ({bad} of {seen} rows cannot be scored)" if bad > 1 else ""
        raise RubricError(
            f"{first}{more}; fix or remove them, or --skip-bad-rows to leave them out (listed in rejected.jsonl)"
        )
    return rejected, seen - bad


def _problem(row: RubricRow, grading: GradingConfig) -> str | None:
    """Why no candidate could be scored on a row, or None: explicit modes need a criterion with positive points
    (a score divides by them: every candidate would be unscored), reference_likert a reference answer."""
    if grading.mode in EXPLICIT_MODES and row.rubric.positive_points == 0:
        return f"no criterion with positive points (all penalties), so no score can be computed in {grading.mode} mode"
    if grading.mode == "reference_likert" and not row.reference:
        return "reference_likert grading needs a reference_answer in every row"
    return None


def rubric_sha256(row: RubricRow) -> str:
    """What the candidates were graded against, as a hash (provenance of each SFT row)."""
    criteria = [[c.text, c.points, list(c.tags), c.rule] for c in row.rubric.criteria]
    return hashlib.sha256(json.dumps(criteria, ensure_ascii=False).encode()).hexdigest()


class Builder:
    def __init__(
        self,
        out: Path,
        config: RuftConfig,
        grader: Grader,
        client: LLMClient,
        in_flight: int,
        fingerprint: str | None = None,
    ):
        self.out, self.config, self.grader, self.client, self.in_flight = out, config, grader, client, in_flight
        self.fingerprint = fingerprint
        """The id of the settings this run makes rows with (rubricrl/runs/provenance.py), in each queries.jsonl
        line."""
        self.counts = RunCounts()
        self.done = {row["id"] for _, row in complete_rows(out / "queries.jsonl")}
        for name in ("candidates.jsonl", "sft.jsonl"):
            _only_finished(out / name, self.done)
        self.files = {name: open(out / f"{name}.jsonl", "ab") for name in ("candidates", "sft", "queries")}
        self.files["errors"] = open(out / "errors.jsonl", "wb")

    async def run(self, rows, total: int) -> RunCounts:
        try:
            self.counts.skipped = await for_each(
                rows, self._one, done=self.done, in_flight=self.in_flight, total=total, desc="ruft build"
            )
        finally:
            for f in self.files.values():
                f.close()
        return self.counts

    async def _one(self, row: RubricRow) -> None:
        roles = [role for role, count in self.config.candidates.items() for _ in range(count)]
        try:
            answers, graded = await sample_and_grade(
                self.client, self.grader, roles, row.conversation, row.rubric, row.reference
            )
        except EndpointUnreachable:  # the server is down: every other query would fail alike; one error ends the run
            raise
        except Exception as error:  # noqa: BLE001 - recorded, retried next run; never stops the other queries
            message = str(error) if isinstance(error, LLMError) else f"{type(error).__name__}: {error}"
            self._failed(row.id, message)
            return
        if all(g.score is None for g in graded) and any(g.judge_failures for g in graded):
            # nothing was scored because the judge failed: not a finished query (a rerun grades it again)
            first = next(
                (v.explanation for g in graded for v in g.verdicts if v.met is None),
                graded[0].explanation or "no verdict",
            )  # rating modes: the rating's explanation
            self._failed(row.id, f"the judge failed on every candidate (first: {first})")
            return
        texts = [self._sft_text(answer.text) for answer in answers]
        ranked = candidates(answers, graded)
        best = [
            c.index
            for c in select(
                ranked, threshold=self.config.threshold, keep=self.config.keep, truncated_ok=self.config.keep_truncated
            )
        ]
        kept = set(best)
        self._write(
            "candidates",
            [
                g.to_record(
                    row.rubric.example_tags,
                    id=row.id,
                    candidate=i,
                    role=a.role,
                    model=a.model,
                    response=a.text,
                    finish_reason=a.finish_reasons[0],
                    length=len(a.text),
                    kept=i in kept,
                )
                for i, (a, g) in enumerate(zip(answers, graded))
            ],
        )
        judge, digest = self.grader.metadata, rubric_sha256(row)
        self._write(
            "sft",
            [
                {
                    "prompt": row.conversation,
                    "completion": [{"role": "assistant", "content": texts[i]}],
                    "id": row.id,
                    "candidate": i,
                    "model": answers[i].model,
                    "score": graded[i].score,
                    "k": self.config.k,
                    "threshold": self.config.threshold,
                    "judge_model": judge["judge_model"],
                    "grading_mode": judge["mode"],
                    "rubric_sha256": digest,
                    "sft_completion": self.config.sft_completion,
                }
                for i in best
            ],
        )
        scores = [g.score for g in graded if g.score is not None]
        self._write(
            "queries",
            [
                {
                    "id": row.id,
                    "fingerprint": self.fingerprint,
                    "k": len(texts),
                    "scored": len(scores),
                    "flagged": sum(c.flagged for c in ranked),
                    "truncated": sum(c.truncated for c in ranked),
                    "kept": sorted(kept),
                    "best_score": max(scores) if scores else None,
                    "best_eligible_score": max(
                        (c.score for c in ranked if eligible(c, -math.inf, self.config.keep_truncated)), default=None
                    ),
                }
            ],
        )
        self.counts.done += 1

    def _sft_text(self, text: str) -> str:
        """A candidate as its SFT completion (ruft.sft_completion): as the policy wrote it, or its answer alone."""
        grading = self.grader.config
        if self.config.sft_completion == "whole":
            return text
        answer = split_reasoning(text, grading.reasoning_delimiters, starts_open=grading.reasoning_starts_open).answer
        return text if answer is None else answer  # no answer: never kept (grading/select.py)

    def _failed(self, query_id: str, message: str) -> None:
        """Recorded in errors.jsonl and retried by the next run; never stops the other queries."""
        self.counts.fail(self.files["errors"], query_id, "sample and grade", message)

    def _write(self, name: str, rows: list[dict[str, Any]]) -> None:
        """One write per query and file, flushed: a kill loses at most the query in hand (its done line comes last)."""
        self.files[name].write(b"".join(json_line(r) for r in rows))
        self.files[name].flush()


def _only_finished(path: Path, done: set[str]) -> None:
    """Before appending: drop a line cut off by a kill, and the lines of queries without a done line (killed in
    flight; they are done again), so that every line of a finished build is counted once, reading it as it streams."""
    if all(row["id"] in done for _, row in complete_rows(path)):
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.writelines(line for line, row in complete_rows(path) if row["id"] in done)
    tmp.replace(path)
