"""One run of a command (`synth`, `ruft build`) into its resumable output folder, step by step:
1. before any model call or change: the stage checks its input; the finished rows are read (a bad line: error);
2. roles opened (a local server if needed); a change in the settings that determine the rows refused (provenance.py);
3. folder prepared: rejected.jsonl (--skip-bad-rows), what says "finished" removed until the end, config.yaml;
4. the stage's work through one client; even on an exception its run goes to runs.jsonl (its spend counts);
5. the run's line in runs.jsonl with its counts, then manifest.json last (its presence means finished).
`summary_head` and `summary_tail` are the lines every stage's summary shares.
"""

import argparse
import shutil
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rubricrl.config import config_source, resolved, write_resolved
from rubricrl.llm import LLMClient, LLMSession, LLMSettings, Role, open_llm
from rubricrl.queries import Rejected, write_rejected
from rubricrl.runs.jsonl import json_line
from rubricrl.runs.manifest import endpoint_counts, package_versions, usage_lines, write_manifest
from rubricrl.runs.provenance import FINGERPRINT_FILE, RunRecord, check_settings, fingerprint, finished_rows, totals


@dataclass
class RunCounts:
    """What a run did with its queries (a stage may add its own fields)."""

    done: int = 0
    skipped: int = 0
    """Finished in an earlier run."""
    failed: Counter = field(default_factory=Counter)
    """Failed queries by stage (errors.jsonl; retried by the next run)."""
    first_error: str | None = None
    """`id at stage: message` of the first failure (all of them are in errors.jsonl)."""

    def fail(self, errors: BinaryIO, query_id: str, stage: str, message: str) -> None:
        """A failed query: counted, its line in errors.jsonl (`errors`, flushed), retried by the next run."""
        self.failed[stage] += 1
        self.first_error = self.first_error or f"{query_id} at {stage}: {message}"
        errors.write(json_line({"id": query_id, "stage": stage, "error": message[:1000]}))
        errors.flush()


class FolderRun:
    """One run of `command` into `out`. Made after the stage has checked its input: it reads the folder's finished
    rows (`done_file`) at once; then the stage calls `roles` (step 2), `prepare` (steps 2 and 3), works through
    `client` (step 4) and calls `finish` (step 5). `settings`: the command's parsed settings, as config.yaml saves
    them."""

    def __init__(self, command: str, settings: list[Any], out: Path, *, done_file: str, allow_changed: bool):
        self.command, self.out, self.allow_changed = command, out, allow_changed
        self.finished_before = finished_rows(out / done_file)  # also: a bad line in the folder is said now
        self.config = resolved(settings)
        self.config.pop("allow_changed_settings", None)  # an acknowledgement for one run, never a saved setting
        self.session: LLMSession | None = None
        self.record: RunRecord | None = None
        self.used: list[dict[str, Any]] = []

    @contextmanager
    def roles(
        self, args: argparse.Namespace, llm: LLMSettings, roles: list[str], *, cpu_budgets: dict[str, int]
    ) -> Iterator[dict[str, Role]]:
        """Step 2: the roles at live endpoints (a local server started if one is needed), closed after the block."""
        with open_llm(llm, roles, source=config_source(args), cpu_budgets=cpu_budgets) as session:
            self.session = session
            yield session.roles

    def prepare(
        self,
        row_settings: dict[str, Any],
        *,
        rejected: list[Rejected] | None = None,
        rejected_said: str = "",
        stale: tuple[str, ...] = ("manifest.json",),
    ) -> str:
        """Steps 2 and 3: `row_settings` (what determines the rows, rubricrl/runs/provenance.py) checked against the
        folder's earlier runs before anything in it changes, then the folder prepared. `rejected`: the rows left out,
        for rejected.jsonl (None: no --skip-bad-rows), said as `rejected_said: PATH`; `stale`: what says the folder
        is finished. Returns the id of this run's settings, which each row it writes names."""
        current = fingerprint(row_settings)
        self.used = check_settings(self.out, current, rows=self.finished_before, allow_changed=self.allow_changed)
        self.out.mkdir(parents=True, exist_ok=True)  # every check passed: now the folder may change
        if rejected is not None:
            write_rejected(rejected, self.out / "rejected.jsonl")
            if rejected:
                print(f"{rejected_said}: {self.out / 'rejected.jsonl'}", file=sys.stderr)
        for name in stale:  # only true again at the end
            if (self.out / name).is_dir():
                shutil.rmtree(self.out / name, ignore_errors=True)
            else:
                (self.out / name).unlink(missing_ok=True)
        write_resolved(self.out / "config.yaml", self.config)
        self.record = RunRecord(self.out, current["id"])
        return current["id"]

    @asynccontextmanager
    async def client(self, **options: Any) -> AsyncIterator[LLMClient]:
        """Step 4: the run's one client. An exception (an interrupt too) still writes the run's line in runs.jsonl:
        what it spent counts in the folder's totals."""
        async with self.session.client(**options) as client:
            self.record.client = client
            try:
                yield client
            except BaseException:
                self.record.write(finished=False)
                raise

    @property
    def slots(self) -> int:
        """Calls in flight: the concurrency on each endpoint of the role with the most (several judge servers)."""
        return self.session.settings.concurrency * max(len(role.endpoints) for role in self.session.roles.values())

    def finish(
        self,
        counts: dict[str, Any],
        *,
        first_error: str | None,
        rows: Counter,
        described: dict[str, Any],
        extra: dict[str, Any] | None = None,
        more_counts: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Step 5: the run's line with `counts`, then the manifest, returned. `rows`: the folder's rows by the id of
        the settings that made them; `described`: what the run read (after "command"); `extra`: the stage's own
        keys; `more_counts`: the folder's statistics, in the manifest's counts after this run's."""
        self.record.write(finished=True, counts=counts)
        manifest = {
            "command": self.command,
            **described,
            "output_dir": str(self.out),
            "config": self.config,
            "roles": {name: role.public() for name, role in self.session.roles.items()},
            "budgets": self.session.budget_note(),
            "packages": package_versions(),
            "counts": {**counts, **(more_counts or {})},
            "first_error": first_error,
            **(extra or {}),
            "endpoints": endpoint_counts(self.record.client),
            **totals(self.out, self.used, rows),
        }
        write_manifest(self.out, manifest)
        return manifest


def summary_head(manifest: dict[str, Any], queries: str, done: int, before: int, also: str = "") -> list[str]:
    """A summary's first lines: the queries (`queries` says how many, `also` ends the line) and what became of
    them; when some failed, by stage, the first error and where every error is."""
    failed = manifest["counts"]["failed"]
    lines = [f"queries: {queries}; {done} done now, {before} done before, {sum(failed.values())} failed{also}"]
    if failed:
        first = manifest["first_error"] or ""
        errors = Path(manifest["output_dir"]) / "errors.jsonl"
        lines.append(
            f"failed by stage: {failed}; first error: {first[:300]}; every error: {errors} "
            "(failed queries are retried by the next run)"
        )
    return lines


def summary_tail(manifest: dict[str, Any], unit: str, where: str, files: str) -> list[str]:
    """A summary's last lines: the settings the `unit` come from when there are several (`where` names each one's),
    the model usage and time, and the output folder with its main `files`."""
    out = Path(manifest["output_dir"])
    lines = []
    mixed = [f"{f['id']} ({f['rows']} {unit})" for f in manifest["fingerprints"]]
    if len(mixed) > 1:
        lines.append(
            f"settings: the {unit} come from {len(mixed)} different settings: {', '.join(mixed)} "
            f"({out / FINGERPRINT_FILE}; each {where} names its own)"
        )
    return lines + usage_lines(manifest) + [f"output: {out} ({files})"]
