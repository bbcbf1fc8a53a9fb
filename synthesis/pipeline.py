"""The synthesis run: queries stream in, each moves through the stages on its own (no barrier between stages),
and each finished query is appended to the output at once.

Output folder:
- `details.jsonl`: one line per finished query with every stage's output (reference, responses, candidates,
  merged, evolved) and per-criterion detail (title, category, origin stage, source model): the debugging record;
- `final.jsonl`: one line per finished query, `{id, question, rubrics: [{criterion, points}]}`, written after its
  details line, so a line here means the query is complete;
- `errors.jsonl`: the queries that failed in this run, with the stage and the error (they are retried next run);
- at the end, `final.parquet` (RubricHub's exact schema), `final_details.parquet`, then `manifest.json` last.

Resume: a rerun skips the ids already in final.jsonl (a line cut off by a kill is dropped first) and replays the
rest through the response cache, so no finished model call is made twice, whatever the input order. Appending
line by line writes each byte once; memory holds only the set of finished ids and the queries in flight.
"""

import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from rubricrl.llm import LLMClient, LLMError
from rubricrl.prompts import format_conversation
from rubricrl.queries import Query
from synthesis import stages
from synthesis.config import SynthesisConfig
from synthesis.criteria import export

# RubricHub's public export schema: readers of theirs read ours.
FINAL_SCHEMA = pa.schema([
    ("id", pa.string()), ("question", pa.string()),
    ("rubrics", pa.list_(pa.struct([("criterion", pa.string()), ("points", pa.int32())]))),
])  # fmt: skip
DETAIL_CRITERION = pa.struct([("criterion", pa.string()), ("points", pa.int32()), ("title", pa.string()),
                              ("category", pa.string()), ("stage", pa.string()), ("source", pa.string())])  # fmt: skip
DETAILS_SCHEMA = pa.schema([
    ("id", pa.string()), ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
    ("criteria", pa.list_(DETAIL_CRITERION)),
])  # fmt: skip


@dataclass
class RunSummary:
    done: int = 0
    skipped: int = 0
    """Already finished in an earlier run."""
    failed: Counter = field(default_factory=Counter)
    """Failed queries per stage."""
    criteria: list[int] = field(default_factory=list)
    seconds: float = 0.0


def question_text(messages: list[dict[str, str]]) -> str:
    """RubricHub's `question` is a string: the question itself, or the whole transcript for multi-turn queries."""
    return messages[0]["content"] if len(messages) == 1 else format_conversation(messages)


def finished_ids(path: Path) -> set[str]:
    """Ids of complete lines; a line cut off by a kill (no newline, or not JSON) is truncated away."""
    if not path.exists():
        return set()
    ids, good_bytes = set(), 0
    with open(path, "rb") as f:
        for line in f:
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("cut off")
                ids.add(json.loads(line)["id"])
            except (ValueError, KeyError):
                break
            good_bytes += len(line)
    if good_bytes != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good_bytes)
    return ids


class SynthesisRun:
    def __init__(self, output_dir: Path, config: SynthesisConfig, client: LLMClient, in_flight: int = 64):
        self.output_dir = output_dir
        self.config = config
        self.client = client
        self.in_flight = in_flight
        self.summary = RunSummary()
        output_dir.mkdir(parents=True, exist_ok=True)
        finished_ids(output_dir / "details.jsonl")  # drop a cut-off line there too
        self.done = finished_ids(output_dir / "final.jsonl")

    async def run(self, queries, total: int | None = None) -> RunSummary:
        started = time.monotonic()
        slots = asyncio.Semaphore(self.in_flight)
        tasks: set[asyncio.Task] = set()
        with (open(self.output_dir / "details.jsonl", "a", encoding="utf-8") as details,
              open(self.output_dir / "final.jsonl", "a", encoding="utf-8") as final,
              open(self.output_dir / "errors.jsonl", "w", encoding="utf-8") as errors,
              tqdm(total=total, desc="synthesis", unit="query", file=sys.stderr) as progress):  # fmt: skip
            for query in queries:
                if query.id in self.done:
                    self.summary.skipped += 1
                    progress.update()
                    continue
                await slots.acquire()
                task = asyncio.create_task(self._one(query, details, final, errors))
                tasks.add(task)
                task.add_done_callback(lambda t: (tasks.discard(t), slots.release(), progress.update()))
            await asyncio.gather(*tasks)
        self.summary.seconds = time.monotonic() - started
        return self.summary

    async def _one(self, query: Query, details, final, errors) -> None:
        record: dict[str, Any] = {"id": query.id, "prompt": query.messages}
        stage = "reference"
        try:
            # The reference and the contrast responses do not depend on each other: both are asked for at once.
            first = [stages.reference(self.client, query.messages)]
            if self.config.contrast:
                first.append(stages.contrast(self.client, query.messages))
            results = await asyncio.gather(*first, return_exceptions=True)
            for stage, result in zip(("reference", "contrast"), results):
                if isinstance(result, BaseException):
                    raise result
            record["reference"] = results[0]
            if self.config.contrast:
                record["responses"] = results[1]
            stage = "candidates"
            record["candidates"] = await stages.candidates(self.client, self.config, query.messages, record["reference"])
            stage = "aggregate"
            merged = await stages.aggregate(self.client, self.config, query.messages, record["candidates"])
            record["merged"] = merged
            evolved = []
            if self.config.evolve:
                stage = "evolve"
                evolved = await stages.evolve(self.client, self.config, query.messages, merged, record["responses"])
            record["evolved"] = evolved
        except Exception as error:  # noqa: BLE001 - one query's failure is recorded and never stops the others
            message = str(error) if isinstance(error, LLMError) else f"{type(error).__name__}: {error}"
            self._fail(errors, query.id, stage, message)
            return
        criteria = export(merged + evolved, self.config.cap)
        if not criteria:
            self._fail(errors, query.id, "export", "no usable criterion")
            return
        record["criteria"] = criteria
        details.write(json.dumps(record, ensure_ascii=False) + "\n")
        details.flush()
        final.write(json.dumps({"id": query.id, "question": question_text(query.messages),
                                "rubrics": [{"criterion": c["criterion"], "points": c["points"]} for c in criteria]},
                               ensure_ascii=False) + "\n")  # fmt: skip
        final.flush()
        self.summary.done += 1
        self.summary.criteria.append(len(criteria))

    def _fail(self, errors, query_id: str, stage: str, message: str) -> None:
        """A failed query: counted, written to errors.jsonl, retried by the next run."""
        self.summary.failed[stage] += 1
        errors.write(json.dumps({"id": query_id, "stage": stage, "error": message[:1000]}, ensure_ascii=False) + "\n")
        errors.flush()


def write_parquet(output_dir: Path, batch_rows: int = 2000) -> tuple[int, int]:
    """final.parquet and final_details.parquet from the JSONL files, streamed in batches, one row per id."""
    counts = []
    for source, target, schema, columns in (
        ("final.jsonl", "final.parquet", FINAL_SCHEMA, ("id", "question", "rubrics")),
        ("details.jsonl", "final_details.parquet", DETAILS_SCHEMA, ("id", "prompt", "criteria")),
    ):  # fmt: skip
        seen: set[str] = set()
        tmp = output_dir / (target + ".tmp")
        with pq.ParquetWriter(tmp, schema) as writer, open(output_dir / source, encoding="utf-8") as f:
            batch = []
            for line in f:
                row = json.loads(line)
                if row["id"] in seen:  # a query redone after a kill between its two lines
                    continue
                seen.add(row["id"])
                batch.append({name: row[name] for name in columns})
                if len(batch) >= batch_rows:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        tmp.replace(output_dir / target)
        counts.append(len(seen))
    return counts[0], counts[1]
