"""Rubrics that keep up with the policy: difficulty evolution online, during RuRL (RLER, AI2's DR Tulu, in
allenai/open-instruct `open_instruct/rubrics/`), with synthesis's own evolve stage and prompt (synthesis/stages.py).

Every `evolve_every` steps, for the queries of the latest generation batch whose group is flat (no criterion split
its answers, or its rewards spread by <= `evolve_flat_std`; `evolve_groups: all` takes every group, as RLER does),
the `evolver` role writes stricter criteria from the query, its current rubric and the group's best and worst
answers. The calls run on the reward's event loop while training goes on; at each step's end the main process
hands every finished call's criteria to all processes (one broadcast), and every process adds them alike
(rurl/rubric_buffer.py validates, caps and retires). A query's new criteria grade its next draw, never the batch that
produced them. A failed or malformed call adds nothing and is counted; the client caches every call, so a resumed
run asks nothing twice that it already asked and applied.
"""

import asyncio
import hashlib
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rubricrl.runs.jsonl import write_jsonl, write_whole
from rurl.rubric_buffer import RubricBuffer

EVOLVED_FILE = "evolved_rubrics.jsonl"


class RubricEvolution(TrainerCallback):
    def __init__(self, rurl, client, data):
        from rurl.data import rubric_items
        from synthesis.config import SynthesisConfig

        self.trainer = None  # set by `attach`, once the trainer exists (the reward needs `rubric_for` before)
        self.rurl, self.client = rurl, client
        self.rows = {row.id: row for row in data.train}
        self.original = {row.id: rubric_items(row.rubric) for row in data.train}
        """The training rows by id, and each one's original `rubrics` items."""
        self.buffer = RubricBuffer(rurl.evolve_max_active)
        self.synthesis = SynthesisConfig(max_new_criteria=rurl.evolve_max_new)
        self.pending: dict[str, tuple[Any, int, dict]] = {}
        """Main process: query id -> (future of its evolve call, step, source)."""
        self.counts: Counter = Counter()
        """asked, added, refused, failed, retired over the run (main process counts asked and failed)."""
        self.new: list[list[Any]] = []
        """(step, query, criterion, points) of every criterion added: the wandb table."""

    def attach(self, trainer) -> None:
        self.trainer = trainer
        trainer.add_callback(self)

    # --- called by the trainer, on every process, once per scored generation batch -----------------------------

    def rubric_for(self, query_id: str, items: list[dict]) -> list[dict]:
        return self.buffer.rubric(query_id, self.original.get(query_id, items))

    def observe(self, step: int, groups: dict[str, list[tuple[str, float]]], answers: list) -> dict[str, float]:
        """A scored batch of all processes: per query its (completion, reward) pairs, and every completion's
        decided verdicts. Updates the evolved criteria's statistics (every process alike), starts evolve calls
        (main process) and returns the batch's metrics."""
        retired = self.buffer.observe(answers, step)
        self.counts["retired"] += len(retired)
        verdicts_of: dict[str, list[dict[str, bool]]] = {}
        for query_id, verdicts in answers:
            verdicts_of.setdefault(query_id, []).append(verdicts)
        flat = {q for q in groups if self._flat(q, groups[q], verdicts_of.get(q, []))}
        if self.trainer.accelerator.is_main_process and step % self.rurl.evolve_every == 0:
            chosen = groups if self.rurl.evolve_groups == "all" else {q: groups[q] for q in flat}
            for query_id, scored in list(chosen.items())[: self.rurl.evolve_max_queries]:
                if query_id not in self.pending and query_id in self.rows and len(scored) >= 2:
                    self._ask(query_id, scored, step)
        evolved_verdicts = [
            verdicts[evolved.criterion]
            for query_id, verdicts in answers
            for evolved in self.buffer.active.get(query_id, [])
            if evolved.criterion in verdicts
        ]
        counts = self.buffer.counts()
        metrics = {
            "evolve/flat_groups": len(flat) / len(groups) if groups else 0.0,
            "evolve/flat_groups_original": (
                sum(self._flat(q, groups[q], verdicts_of.get(q, []), original_only=True) for q in groups) / len(groups)
                if groups
                else 0.0
            ),
            "evolve/active": counts["active"],
            "evolve/active_per_query": counts["active"] / counts["queries"] if counts["queries"] else 0.0,
            "evolve/retired": float(self.counts["retired"]),
        }
        if evolved_verdicts:
            metrics["evolve/pass_rate"] = sum(evolved_verdicts) / len(evolved_verdicts)
        return metrics

    def _flat(self, query_id: str, scored: list, answers: list[dict[str, bool]], original_only: bool = False) -> bool:
        """No criterion split the group's answers (over its original criteria only, when asked), or its rewards
        spread by no more than evolve_flat_std."""
        allowed = {c["criterion"] for c in self.original.get(query_id, [])} if original_only else None
        split: dict[str, set] = {}
        for verdicts in answers:
            for text, met in verdicts.items():
                if allowed is None or text in allowed:
                    split.setdefault(text, set()).add(met)
        if any(len(values) > 1 for values in split.values()):
            rewards = [r for _, r in scored if r == r]  # NaN: unscored
            return not original_only and len(rewards) > 1 and statistics.pstdev(rewards) <= self.rurl.evolve_flat_std
        return True

    def _ask(self, query_id: str, scored: list[tuple[str, float]], step: int) -> None:
        from synthesis import stages

        ranked = sorted((r, text) for text, r in scored if r == r)
        if len(ranked) < 2:
            return
        (worst_score, worst), (best_score, best) = ranked[0], ranked[-1]
        current = self.rubric_for(query_id, self.original[query_id])
        merged = [
            {"title": " ".join(c["criterion"].split()[:5]), "description": c["criterion"], "weight": c["points"]}
            for c in current
        ]
        call = stages.evolve(self.client, self.synthesis, self.rows[query_id].conversation, merged, [best, worst])
        future = asyncio.run_coroutine_threadsafe(call, self.trainer.async_loop)
        source = {
            "best": {"score": round(best_score, 4), "sha256": _digest(best)},
            "worst": {"score": round(worst_score, 4), "sha256": _digest(worst)},
        }
        self.pending[query_id] = (future, step, source)
        self.counts["asked"] += 1

    # --- at each step's end, on every process ----------------------------------------------------------------------

    def on_step_end(self, args, state, control, **kwargs):
        changes = self._finished() if self.trainer.accelerator.is_main_process else None
        if self.trainer.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            changes = broadcast_object_list([changes])[0]
        for query_id, written, step, source in changes or ():
            added, refused = self.buffer.add(query_id, self.original[query_id], written, step, source)
            self.counts["added"] += added
            self.counts["refused"] += len(refused)
            if added:
                self.new += [[step, query_id, e.criterion, e.points] for e in self.buffer.active[query_id][-added:]]
                self._eligible_again(query_id)
        return control

    def _finished(self) -> list[tuple[str, list[dict], int, dict]]:
        """Main process: the evolve calls that are done, as (query, criteria, step, source); failures counted."""
        from synthesis.criteria import export

        done = []
        for query_id, (future, step, source) in list(self.pending.items()):
            if not future.done():
                continue
            del self.pending[query_id]
            try:
                written = export(future.result())
            except Exception as error:  # noqa: BLE001 - one failed call adds nothing; training goes on
                self.counts["failed"] += 1
                print(f"rurl evolve: query {query_id}: no new criteria: {error}"[:300], file=sys.stderr)
                continue
            done.append(
                (query_id, [{"criterion": c["criterion"], "points": c["points"]} for c in written], step, source)
            )
        return done

    def _eligible_again(self, query_id: str) -> None:
        """A query dynamic sampling found flat this epoch may be drawn again once its rubric changed."""
        sampler = getattr(self.trainer, "sampler", None)
        if sampler is not None:
            sampler.flat.discard(query_id)  # its key: rurl/dynamic_sampling.py DynamicSampler._key

    def finish(self, output_dir: Path, wandb) -> dict[str, Any]:
        """Main process, at the end: the evolved rubric dataset (every training query, its original criteria then
        its active evolved ones, each tagged `evolved` with its step and the answers it came from) in the format
        every command reads, the whole buffer (retired criteria too), the wandb table; the summary's counts."""
        for future, _, _ in self.pending.values():  # asked again by a resumed run, from the cache
            future.cancel()
        rows = [
            {
                "id": query_id,
                "prompt": row.conversation,
                "rubrics": self.rubric_for(query_id, self.original[query_id]),
                "reference_answer": row.reference,
                "example_tags": list(row.rubric.example_tags),
            }
            for query_id, row in self.rows.items()
        ]
        write_jsonl(output_dir / EVOLVED_FILE, rows)
        write_whole(output_dir / "rubric_buffer.json", json.dumps(self.buffer.state(), indent=1, ensure_ascii=False))
        if wandb is not None and self.new:
            import wandb as wandb_module

            columns = ["step", "query", "criterion", "points"]
            wandb.log({"evolved_criteria": wandb_module.Table(columns=columns, data=self.new)})
        return {
            **{name: self.counts[name] for name in ("asked", "added", "refused", "failed", "retired")},
            "in_flight_at_end": len(self.pending),
            "active": int(self.buffer.counts()["active"]),
            "queries_evolved": int(self.buffer.counts()["queries"]),
        }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
