"""A RuRL run's criterion ledger (grading/ledger.py): counted on the main process from every process's verdicts once
per generation batch, saved with each checkpoint (a resumed run goes on counting from it) and beside it in the run
folder (a killed run keeps what its last checkpoint had), then written with the tests a run adds:

- moved: a criterion's pass rate in the last fifth of the steps against the first (a two-sided two-proportion
  z-test among the criteria decided at least MOVED_MIN_DECIDED times in each, Benjamini-Hochberg at MOVED_FDR);
- judge_consistent: where verdicts were asked again afresh (rurl.ledger_reask), whether the second verdict follows the
  first: P(again met | first met) above P(again met | first unmet), the same test one-sided, among criteria re-asked at
  least REASK_MIN_PAIRS times with both first verdicts seen, at the same false discovery rate. A criterion that moved
  the reward (`carries` "signal"), tested, whose re-asks the test cannot tell from chance is marked "noise": the judge
  answers it at random, or too few re-asks were made to show otherwise (its counts say which)."""

import sys
from pathlib import Path
from typing import Any

from checks.evidence import bh_threshold, two_proportions
from grading.ledger import Ledger, headline, plot, read_table, write_table
from rurl.watch.summary import MOVED_FDR, MOVED_MIN_DECIDED, window_moves

FILE = "ledger.parquet"
PLOT = "ledger.png"
SO_FAR = ("ledger/criteria", "ledger/no_signal_criteria", "ledger/no_signal_share")
"""The per-step figures that count the whole run so far: a step logs its last value, not the mean of its rounds."""
WANDB_ROWS = 10_000
"""The most asked criteria that go to wandb's table (all of them are in ledger.parquet)."""
REASK_MIN_PAIRS = 10
"""Re-asked verdicts a criterion needs, with both first verdicts among them, before its consistency is tested."""


def assess(table):
    """The ledger's pyarrow table with the run's tests added: moved, moved_p, moved_significant, self_agreement_p,
    judge_consistent, and `carries` "noise" where the re-asks show no consistency."""
    import numpy as np
    import pyarrow as pa

    def numbers(name: str) -> np.ndarray:
        return table.column(name).to_numpy(zero_copy_only=False)

    first, last = numbers("first_pass_rate").astype(float), numbers("last_pass_rate").astype(float)
    moved = last - first
    first_met, first_decided = numbers("first_met"), numbers("first_decided")
    last_met, last_decided = numbers("last_met"), numbers("last_decided")
    tested = np.nonzero(np.minimum(first_decided, last_decided) >= MOVED_MIN_DECIDED)[0]
    moved_p = np.full(table.num_rows, np.nan)
    p_values, threshold = window_moves(
        list(zip(first_met[tested], first_decided[tested], last_met[tested], last_decided[tested]))
    )
    moved_p[tested] = p_values
    met_met, met_unmet, unmet_met = numbers("reask_met_met"), numbers("reask_met_unmet"), numbers("reask_unmet_met")
    reasked = numbers("reasked")
    first_was_met = met_met + met_unmet
    checked = np.nonzero((reasked >= REASK_MIN_PAIRS) & (first_was_met > 0) & (reasked - first_was_met > 0))[0]
    consistency = np.full(table.num_rows, np.nan)
    for i in checked:  # one-sided: re-asks that go against the first verdicts are no consistency
        first_unmet = reasked[i] - first_was_met[i]
        p = two_proportions(met_met[i], first_was_met[i], unmet_met[i], first_unmet) / 2
        consistency[i] = p if met_met[i] / first_was_met[i] > unmet_met[i] / first_unmet else 1 - p
    agreeing = bh_threshold(consistency[checked], MOVED_FDR)
    consistent = consistency <= agreeing
    carries = np.array(table.column("carries").to_pylist(), dtype=object)
    noise = (carries == "signal") & ~np.isnan(consistency) & ~consistent
    carries[noise] = "noise"
    added = {
        "moved": pa.array(moved, pa.float64(), mask=np.isnan(moved)),
        "moved_p": pa.array(moved_p, pa.float64(), mask=np.isnan(moved_p)),
        "moved_significant": pa.array(moved_p <= threshold, pa.bool_(), mask=np.isnan(moved_p)),
        "self_agreement_p": pa.array(consistency, pa.float64(), mask=np.isnan(consistency)),
        "judge_consistent": pa.array(consistent, pa.bool_(), mask=np.isnan(consistency)),
    }
    for name, column in added.items():
        table = (
            table.append_column(name, column)
            if name not in table.column_names
            else table.set_column(table.column_names.index(name), name, column)
        )
    return table.set_column(table.column_names.index("carries"), "carries", pa.array(carries.tolist(), pa.string()))


def tag_moves(table) -> list[dict[str, Any]]:
    """Per tag, the pass rate of its criteria pooled over the first and the last fifth of the steps, tested as a
    criterion's move is (two-proportion z-test where each fifth holds at least MOVED_MIN_DECIDED decided verdicts,
    Benjamini-Hochberg at MOVED_FDR over the tags tested), the significant ones first. Where each query is drawn too
    rarely for its own criteria to be tested (one epoch of a large set), its tags still are."""
    pooled: dict[str, list[float]] = {}
    columns = [
        table.column(name).to_pylist() for name in ("tags", "first_met", "first_decided", "last_met", "last_decided")
    ]
    for tags, *counts in zip(*columns):
        for tag in tags or ():
            entry = pooled.setdefault(tag, [0.0, 0, 0.0, 0])
            for k, value in enumerate(counts):
                entry[k] += value
    p_values, threshold = window_moves(list(pooled.values()))
    rows = [
        {"tag": tag, "first_pass_rate": first_met / first, "first_decided": first, "last_pass_rate": last_met / last,
         "last_decided": last, "p": p, "significant": p <= threshold}
        for (tag, (first_met, first, last_met, last)), p in zip(pooled.items(), p_values)
        if p is not None
    ]  # fmt: skip
    return sorted(rows, key=lambda row: (not row["significant"], row["p"], row["tag"]))


def run_headline(table) -> dict[str, Any]:
    """A run's headline: grading/ledger.py's, with the tags whose pass rate moved (`tag_moves`)."""
    return {**headline(table), "tags_moved": tag_moves(table)}


class RunLedger:
    """The ledger of one `rurl train` run (main process)."""

    def __init__(self, output_dir: Path):
        self.ledger = Ledger()
        self.output_dir = output_dir

    def add(self, answers: list, step: int, planned_steps: int, group_size: int | None = None) -> dict[str, float]:
        """Count a generation batch's answers (every process's, in row order; None: not judged) at `step` of
        `planned_steps`, `group_size` consecutive answers a group; the batch's headline figures, for the logs."""
        self.ledger.planned_steps = self.ledger.planned_steps or planned_steps
        batch = self.ledger.add(answers, step, group_size)
        asked = [pair for answer in answers if answer is not None for pair in answer.reasks]
        reasked, agreed = len(asked), sum(first == again for _, first, again in asked)
        nothing, in_groups = self.ledger.flat_criteria()
        metrics = {"ledger/criteria": float(len(self.ledger)), "ledger/no_signal_criteria": float(nothing)}
        if in_groups:
            metrics["ledger/no_signal_share"] = nothing / in_groups
        if batch["group_verdicts"]:
            metrics["ledger/flat_verdict_share"] = batch["flat_verdicts"] / batch["group_verdicts"]
        if reasked:
            metrics["ledger/self_agreement"] = agreed / reasked
            metrics["ledger/reasked"] = float(reasked)
        return metrics

    def table(self):
        """The ledger with the run's tests (a pyarrow table)."""
        return assess(self.ledger.arrow())

    def save(self, folder: Path) -> None:
        """The ledger as it stands, in a checkpoint folder and the run folder."""
        table = self.ledger.arrow()
        write_table(table, folder / FILE)
        if folder != self.output_dir:
            write_table(assess(table), self.output_dir / FILE)

    def load(self, checkpoint: Path) -> None:
        path = checkpoint / FILE
        if not path.is_file():
            print(f"rurl: {path} is missing: the criterion ledger starts anew", file=sys.stderr)
            return
        self.ledger = Ledger.from_table(read_table(path))

    def finish(self, wandb_run=None) -> dict[str, Any]:
        """Write the assessed table and its plot in the run folder; log the headline and the table to wandb.
        Returns the headline."""
        table = self.table()
        write_table(table, self.output_dir / FILE)
        plot(table, self.output_dir / PLOT)
        figures = run_headline(table)
        if wandb_run is not None:
            log_table(wandb_run, table, figures)
        return figures


def log_table(wandb_run, table, figures: dict[str, Any]) -> None:
    """The headline figures in the run's summary, and the ledger as a wandb table (its readable columns)."""
    import wandb

    wandb_run.summary.update(
        {
            "ledger/flat_verdict_share": figures["flat_verdict_share"],
            "ledger/no_signal_criteria": figures["no_signal"]["criteria"],
            "ledger/no_signal_judge_verdicts": figures["no_signal"]["judge_verdicts"],
            "ledger/top_share": figures["top_share"],
        }
    )
    columns = ["query_id", "position", "criterion", "points", "source", "judge_verdicts", "pass_rate", "flat_share",
               "signal_share", "rubric_signal_share", "carries", "moved", "self_agreement", "overclaim"]  # fmt: skip
    import numpy as np
    import pyarrow as pa

    order = np.argsort(-table.column("judge_verdicts").to_numpy(), kind="stable")[:WANDB_ROWS]
    shown = table.select(columns).take(pa.array(order))
    rows = [list(row.values()) for row in shown.to_pylist()]
    wandb_run.log({"criterion_ledger": wandb.Table(columns=columns, data=rows)})
