"""A RuRL run's criterion ledger (grading/ledger.py): counted on the main process from every process's verdicts once
per generation batch, saved with each checkpoint (a resumed run goes on counting from it) and beside it in the run
folder (a killed run keeps what its last checkpoint had), then written with the tests a run adds:

- moved: a criterion's pass rate in the last fifth of the steps against the first (a two-sided two-proportion
  z-test among the criteria decided at least MOVED_MIN_DECIDED times in each, Benjamini-Hochberg at MOVED_FDR);
- judge_consistent: where verdicts were asked again afresh (rurl.ledger_reask), whether the second verdict follows the
  first: P(again met | first met) against P(again met | first unmet), the same test, among criteria re-asked at least
  REASK_MIN_PAIRS times with both first verdicts seen, at the same false discovery rate. A criterion that moved the
  reward (`carries` "signal") whose re-asks the test cannot tell from chance is marked "noise": the judge answers it
  at random, or too few re-asks were made to show otherwise (its counts say which)."""

import sys
from pathlib import Path
from typing import Any

from checks.evidence import bh_threshold, two_proportions
from grading.ledger import Ledger, headline, plot, read_table, write_table
from rurl.watch.summary import MOVED_FDR, MOVED_MIN_DECIDED

FILE = "ledger.parquet"
PLOT = "ledger.png"
WANDB_ROWS = 10_000
"""The most asked criteria that go to wandb's table (all of them are in ledger.parquet)."""
REASK_MIN_PAIRS = 10
"""Re-asked verdicts a criterion needs, with both first verdicts among them, before its consistency is tested."""


def assess(columns: dict[str, list]) -> dict[str, list]:
    """The table with the run's tests added: moved, moved_p, moved_significant, self_agreement_p, judge_consistent,
    and `carries` "noise" where the re-asks show no consistency."""
    n = len(columns["query_id"])
    out = dict(columns)
    out["moved"] = [
        None if first is None or last is None else last - first
        for first, last in zip(columns["first_pass_rate"], columns["last_pass_rate"])
    ]
    moved_p: list[float | None] = [None] * n
    for i in range(n):
        if min(columns["first_decided"][i], columns["last_decided"][i]) >= MOVED_MIN_DECIDED:
            moved_p[i] = two_proportions(
                round(columns["first_met"][i]), columns["first_decided"][i],
                round(columns["last_met"][i]), columns["last_decided"][i],
            )  # fmt: skip
    threshold = bh_threshold([p for p in moved_p if p is not None], MOVED_FDR)
    out["moved_p"] = moved_p
    out["moved_significant"] = [None if p is None else p <= threshold for p in moved_p]
    consistency: list[float | None] = [None] * n
    for i in range(n):
        met_met, met_unmet = columns["reask_met_met"][i], columns["reask_met_unmet"][i]
        unmet_met = columns["reask_unmet_met"][i]
        first_met = met_met + met_unmet
        first_unmet = columns["reasked"][i] - first_met
        if columns["reasked"][i] >= REASK_MIN_PAIRS and first_met and first_unmet:
            consistency[i] = two_proportions(met_met, first_met, unmet_met, first_unmet)
    threshold = bh_threshold([p for p in consistency if p is not None], MOVED_FDR)
    out["self_agreement_p"] = consistency
    out["judge_consistent"] = [None if p is None else p <= threshold for p in consistency]
    out["carries"] = [
        "noise" if carries == "signal" and reasked >= REASK_MIN_PAIRS and consistent is not True else carries
        for carries, reasked, consistent in zip(columns["carries"], columns["reasked"], out["judge_consistent"])
    ]
    return out


class RunLedger:
    """The ledger of one `rurl train` run (main process)."""

    def __init__(self, output_dir: Path):
        self.ledger = Ledger()
        self.output_dir = output_dir

    def add(self, answers: list, step: int, planned_steps: int) -> dict[str, float]:
        """Count a generation batch's answers (every process's) at `step` of `planned_steps`; the batch's headline
        figures, for the logs."""
        self.ledger.planned_steps = self.ledger.planned_steps or planned_steps
        batch = self.ledger.add(answers, step)
        reasked = sum(len(answer.reasks) for answer in answers)
        agreed = sum(first == again for answer in answers for _, first, again in answer.reasks)
        metrics = {"ledger/criteria": float(len(self.ledger))}
        if batch["group_verdicts"]:
            metrics["ledger/flat_verdict_share"] = batch["flat_verdicts"] / batch["group_verdicts"]
        if reasked:
            metrics["ledger/self_agreement"] = agreed / reasked
            metrics["ledger/reasked"] = float(reasked)
        return metrics

    def table(self) -> dict[str, list]:
        return assess(self.ledger.table())

    def save(self, folder: Path) -> None:
        """The ledger as it stands, in a checkpoint folder and the run folder."""
        table = self.ledger.table()
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
        figures = headline(table)
        if wandb_run is not None:
            log_table(wandb_run, table, figures)
        return figures


def log_table(wandb_run, table: dict[str, list], figures: dict[str, Any]) -> None:
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
    order = sorted(range(len(table["query_id"])), key=lambda i: -table["judge_verdicts"][i])[:WANDB_ROWS]
    rows = [[table[c][i] for c in columns] for i in order]
    wandb_run.log({"criterion_ledger": wandb.Table(columns=columns, data=rows)})
