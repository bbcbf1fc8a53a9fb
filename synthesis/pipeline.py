"""The synthesis run: queries stream in, each moves through the stages on its own (no barrier between stages) and is
written to the output folder as it finishes (output.py). A rerun skips the ids in final.jsonl (a line cut off by a
kill dropped first) and replays the rest through the response cache, whatever the input order; one with other
settings is refused before it starts (rubricrl/runs/folder.py, rubricrl/runs/provenance.py). Memory holds only the
finished ids, the queries in flight and one batch of Parquet rows.
"""

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grading.grader import Grader, GradingConfig
from rubricrl.llm import EndpointUnreachable, LLMClient, LLMError
from rubricrl.queries import Query
from rubricrl.runs.folder import RunCounts
from rubricrl.runs.streaming import for_each
from synthesis import stages
from synthesis.config import SynthesisConfig
from synthesis.criteria import export
from synthesis.output import OutputFolder, final_line


@dataclass
class RunSummary(RunCounts):
    """A synthesis run's counts, and what its rows hold."""

    criteria: list[int] = field(default_factory=list)
    """The number of criteria of each query this run finished."""
    rows_in_final: int = 0
    rows_by_fingerprint: Counter = field(default_factory=Counter)
    """Rows in final.parquet by the fingerprint of the settings that made them."""


class SynthesisRun:
    def __init__(
        self,
        output_dir: Path,
        config: SynthesisConfig,
        client: LLMClient,
        in_flight: int = 64,
        fingerprint: str | None = None,
    ):
        self.config = config
        self.fingerprint = fingerprint
        """The id of the settings this run makes rows with (rubricrl/runs/provenance.py), in each details line."""
        self.client = client
        self.grader = Grader(client, GradingConfig()) if config.contrast_pool else None  # the judge role, per criterion
        self.in_flight = in_flight
        self.summary = RunSummary()
        self.output = OutputFolder(output_dir)

    async def run(self, queries, total: int | None = None) -> RunSummary:
        """Every query not done yet, then the output closed: Parquet files in place, in the queries' order, only
        when the run got through."""
        order: list[str] = []

        def noted(items):  # the input order, seen as the queries stream by: the Parquet files are written in it
            for query in items:
                order.append(query.id)
                yield query

        try:
            self.summary.skipped = await for_each(
                noted(queries),
                self._one,
                done=self.output.done,
                in_flight=self.in_flight,
                total=total,
                desc="synthesis",
            )
        except BaseException:
            self.output.close(finished=False)
            raise
        self.summary.rows_in_final = self.output.close(order=order)
        self.summary.rows_by_fingerprint = self.output.rows_by_fingerprint
        return self.summary

    async def _one(self, query: Query) -> None:
        record: dict[str, Any] = {"id": query.id, "prompt": query.messages, "fingerprint": self.fingerprint}
        stage = "reference"
        try:
            # The reference and the contrast responses do not depend on each other: both are asked for at once.
            first = [stages.reference(self.client, query.messages)]
            if self.config.contrast and not self.config.contrast_pool:
                first.append(stages.contrast(self.client, query.messages))
            results = await asyncio.gather(*first, return_exceptions=True)
            for stage, result in zip(("reference", "contrast"), results):  # noqa: B007 (the except names the stage)
                if isinstance(result, BaseException):
                    raise result
            record["reference_answer"] = results[0]
            if len(results) > 1:
                record["responses"] = results[1]
            stage = "candidates"
            record["candidates"] = await stages.rubric_candidates(
                self.client, self.config, query.messages, record["reference_answer"]
            )
            stage = "aggregate"
            merged = await stages.aggregate(self.client, self.config, query.messages, record["candidates"])
            record["merged"] = merged
            if self.config.contrast_pool:  # A and B by consensus: the two best of a pool graded against `merged`
                stage = "contrast"
                record["responses"], record["response_scores"] = await stages.contrast_pool(
                    self.client, self.grader, self.config, query.messages, merged
                )
            evolved = []
            if self.config.evolve:
                stage = "evolve"
                evolved = await stages.evolve(self.client, self.config, query.messages, merged, record["responses"])
            record["evolved"] = evolved
        except EndpointUnreachable:  # the server is down: every other query would fail alike; one error ends the run
            raise
        except Exception as error:  # noqa: BLE001 - one query's failure is recorded and never stops the others
            message = str(error) if isinstance(error, LLMError) else f"{type(error).__name__}: {error}"
            self._fail(query.id, stage, message)
            return
        criteria = export(merged + evolved, self.config.cap)
        if not criteria:
            self._fail(query.id, "export", "no usable criterion")
            return
        record["criteria"] = criteria
        rubrics = [{"criterion": c["criterion"], "points": c["points"]} for c in criteria]
        self.output.add(record, final_line(query.id, query.messages, rubrics, record["reference_answer"]))
        self.summary.done += 1
        self.summary.criteria.append(len(criteria))

    def _fail(self, query_id: str, stage: str, message: str) -> None:
        """A failed query: counted, written to errors.jsonl, retried by the next run."""
        self.summary.fail(self.output.errors, query_id, stage, message)
