"""Rubrics that keep up with the policy: difficulty evolution online, during RuRL (RLER: AI2's DR Tulu, and
allenai/open-instruct `open_instruct/rubrics/`).

Every `evolve_every` steps, for the groups of each generation batch (the flat ones, or all), the `evolver` role
writes new criteria from the query, its current rubric and the group's answers as the judge saw them, with a prompt
for the group's situation (rurl/evolving/evolve_choice.py). The main process runs the calls on the reward's event loop
(at most `evolve_concurrency` at once, `evolve_max_calls` per step) and hands every result to all processes in one
broadcast; every process adds them alike (rurl/evolving/rubric_buffer.py validates, caps and retires). Then:

- `same_step` (DR Tulu's training code): the step waits for its calls (at most `evolve_deadline`; a late call is
  cancelled and its group graded without it, counted), and the trainer grades the groups whose rubric changed again
  before their advantages are computed (RubricGRPOTrainer._evolve).
- `next_draw` (open-instruct's RubricManager): the calls run while training goes on; at each step's end the
  finished ones join the rubric, which grades the query's next draws.

Before a new positive criterion joins, the main process probes it on its row (`evolve_vet`, rurl/evolving/vetting.py,
inside the call): a criterion that answers with no substance earn more often than chance allows is refused with its
test, and one past the step's probe budget waits for a later round, never admitted unprobed.

A failed or malformed call adds nothing and is counted; the client caches every call, so a resumed run asks nothing
twice that it asked before, and the calls in flight at a checkpoint are asked again after a resume.
"""

import asyncio
import concurrent.futures
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rubricrl.runs.jsonl import write_whole
from rurl.evolving.evolve_choice import as_judged, digest, situation, spread_sample
from rurl.evolving.evolve_outputs import STEPS_FILE, finish, step_metrics, write_lines
from rurl.evolving.rubric_buffer import RubricBuffer
from rurl.evolving.vetting import EXPLOITABLE, PASSED, UNPROBED, WAITING, Vetting


@dataclass
class Call:
    """An evolve call the main process made: what it read, and its future on the reward's event loop."""

    query: str
    step: int
    situation: str
    answers: list[tuple[str, float]]
    future: Any = None
    waited: list | None = None
    """A call that probes criteria waiting for probe budget (no evolver call): their (criterion, step written,
    source) triples."""

    @property
    def key(self) -> str:
        """Its place among the calls in flight and this round's lines: one of each kind per query."""
        return self.query if self.waited is None else f"{self.query} (waited for probe budget)"

    def source(self, mode: str) -> dict[str, Any]:
        """What every criterion it wrote records about where it came from."""
        seen = [{"score": round(score, 4), "sha256": digest(text)} for text, score in self.answers]
        return {"apply": mode, "situation": self.situation, "answers": seen}


def by_query(answers: list[tuple[str, dict[str, bool]]]) -> dict[str, list[dict[str, bool]]]:
    """Each query's completions' decided verdicts, from a batch's (query, verdicts) pairs."""
    verdicts_of: dict[str, list[dict[str, bool]]] = {}
    for query_id, verdicts in answers:
        verdicts_of.setdefault(query_id, []).append(verdicts)
    return verdicts_of


class RubricEvolution(TrainerCallback):
    def __init__(self, rurl, grading, client, data):
        from rurl.data import rubric_items
        from synthesis.config import SynthesisConfig

        self.trainer = None  # set by `attach`, once the trainer exists (the reward needs `rubric_for` before)
        self.rurl, self.grading, self.client = rurl, grading, client
        self.rows = {row.id: row for row in data.train}
        self.original = {row.id: rubric_items(row.rubric) for row in data.train}
        """The training rows by id, and each one's original `rubrics` items."""
        self.buffer = RubricBuffer(rurl.evolve_max_active, rurl.evolve_retire_window, rurl.evolve_max_share)
        self.synthesis = SynthesisConfig(max_new_criteria=rurl.evolve_max_new)
        self.pending: dict[str, Call] = {}
        """Main process, next_draw: query id -> its call in flight."""
        self.counts: Counter = Counter()
        """Over the run; the main process counts asked, failed and timed_out, every process the rest alike."""
        self.budget = [-1, 0]
        """[step, evolve calls it started]: evolve_max_calls holds per step, whatever the sampling rounds."""
        self.new: list[list[Any]] = []
        """(step, query, criterion, points) of every criterion added: the wandb table."""
        self.lines: dict[str, dict[str, Any]] = {}
        """Main process: this round's evolve_steps.jsonl lines by query, finished once their group is graded."""
        self.lines_written = 0
        """Lines in evolve_steps.jsonl: a resumed run keeps those its checkpoint counted."""
        self.cut = None
        self._limit: asyncio.Semaphore | None = None
        self.vetting = (
            Vetting(client, grading, data.train, rurl.probe_per_kind, rurl.probe_test, rurl.evolve_probe_calls)
            if rurl.evolve_vet
            else None
        )
        self.waiting: list[tuple[str, dict, int, dict]] = []
        """Main process: (query, criterion, step written, source) of the criteria waiting for probe budget."""

    @property
    def same_step(self) -> bool:
        return self.rurl.evolve_apply == "same_step"

    def attach(self, trainer) -> None:
        from rurl.evolving.evolve_choice import token_cut

        self.trainer = trainer
        self.cut = token_cut(trainer.processing_class, self.rurl.evolve_answer_tokens)
        trainer.add_callback(self)

    def rubric_for(self, query_id: str, items: list[dict]) -> list[dict]:
        return self.buffer.rubric(query_id, self.original.get(query_id, items))

    # --- a round: every process, once per scored generation batch --------------------------------------------

    def evolve_now(self, step: int, groups: dict[str, list[tuple[str, float]]], answers: list) -> set[str]:
        """same_step: the main process asks about this batch's groups and waits (at most evolve_deadline); every
        process adds the criteria alike. Returns the queries whose rubric changed: their groups are graded again."""
        changes = None
        if self.trainer.accelerator.is_main_process:
            calls = [self._ask(call) for call in self._choose(step, groups, by_query(answers))]
            calls += self._waiting_calls(step)
            futures = [call.future for call in calls]
            _, late = concurrent.futures.wait(futures, timeout=self.rurl.evolve_deadline) if futures else ((), ())
            for call in calls:
                if call.future in late:
                    call.future.cancel()
                    self.waiting += [(call.query, *item) for item in call.waited or ()]  # they wait on
            self.counts["timed_out"] += len(late)
            if late:
                print(
                    f"rurl evolve: step {step}: {len(late)} of {len(calls)} evolve call(s) not back within "
                    f"{self.rurl.evolve_deadline:g} s (rurl.evolve_deadline): their groups graded without them",
                    file=sys.stderr,
                )
            changes = [done for call in calls if call.future not in late for done in [self._written(call)] if done]
        return {query_id for query_id, added in self._apply(self._broadcast(changes)) if added}

    def observe(self, step: int, groups: dict[str, list[tuple[str, float]]], answers: list) -> dict[str, float]:
        """A scored batch of all processes (graded again where its rubric changed this step): per query its
        (completion, reward) pairs, and every completion's decided verdicts. Updates the buffer's statistics and
        retirements (every process alike), starts next_draw's calls (main process) and returns the metrics."""
        retired = self.buffer.observe(answers, step)
        self.counts["retired"] += len(retired)
        verdicts_of = by_query(answers)
        if self.trainer.accelerator.is_main_process:
            write_lines(self, step, groups, verdicts_of)
            if not self.same_step:
                for call in self._choose(step, groups, verdicts_of) + self._waiting_calls(step):
                    self.pending[call.key] = call if call.waited is not None else self._ask(call)
        return step_metrics(self, groups, verdicts_of)

    def _choose(self, step: int, groups: dict, verdicts_of: dict[str, list[dict[str, bool]]]) -> list[Call]:
        """Main process: the groups to ask about (`verdicts_of`: each query's decided verdicts, by_query), each with
        its situation and the answers the evolver sees."""
        rurl = self.rurl
        if step % rurl.evolve_every:
            return []
        if self.budget[0] != step:
            self.budget = [step, 0]
        chosen = []
        for query_id, scored in groups.items():
            if self.budget[1] + len(chosen) >= rurl.evolve_max_calls:
                break
            rewards = [r for _, r in scored if r == r]  # NaN: unscored
            if query_id in self.pending or query_id not in self.rows or len(rewards) < 2:
                continue
            flat = self._flat(query_id, scored, verdicts_of.get(query_id, []))
            points = {c["criterion"]: c["points"] for c in self.rubric_for(query_id, self.original[query_id])}
            earned = any(
                met and points.get(text, 0) > 0 for v in verdicts_of.get(query_id, []) for text, met in v.items()
            )
            kind = situation(flat, earned)
            if (rurl.evolve_groups == "flat" and not flat) or (kind == "failed" and rurl.evolve_on_failed == "none"):
                continue
            if self.buffer.room(query_id) <= 0:  # full of criteria that split groups: a new one would be refused
                continue
            grading = self.grading
            seen = [
                (answer, reward)
                for text, reward in spread_sample([(t, r) for t, r in scored if r == r], rurl.evolve_answers)
                for answer in [as_judged(text, grading.reasoning_delimiters, grading.reasoning_starts_open, self.cut)]
                if answer is not None
            ]
            if seen:
                chosen.append(Call(query_id, step, kind, seen))
        self.budget[1] += len(chosen)
        return chosen

    def _flat(self, query_id: str, scored: list, answers: list[dict[str, bool]], original_only: bool = False) -> bool:
        """No criterion split the group's answers, or its rewards spread by no more than evolve_flat_std. With
        `original_only`: no original criterion split them (the rewards, which the evolved criteria move, not read)."""
        allowed = {c["criterion"] for c in self.original.get(query_id, [])} if original_only else None
        split: dict[str, set] = {}
        for verdicts in answers:
            for text, met in verdicts.items():
                if allowed is None or text in allowed:
                    split.setdefault(text, set()).add(met)
        if any(len(values) > 1 for values in split.values()):
            rewards = [r for _, r in scored if r == r]
            return not original_only and len(rewards) > 1 and statistics.pstdev(rewards) <= self.rurl.evolve_flat_std
        return True

    def _ask(self, call: Call) -> Call:
        """Main process: start the call on the reward's event loop (the client caches it)."""
        from synthesis import stages

        current = self.rubric_for(call.query, self.original[call.query])
        merged = [
            {"title": " ".join(c["criterion"].split()[:5]), "description": c["criterion"], "weight": c["points"]}
            for c in current
        ]
        conversation = self.rows[call.query].conversation

        async def limited():
            from synthesis.criteria import export

            if self._limit is None:  # made on the loop that runs it
                self._limit = asyncio.Semaphore(self.rurl.evolve_concurrency)
            async with self._limit:
                written = await stages.evolve_group(
                    self.client, self.synthesis, conversation, merged, call.answers, call.situation
                )
                criteria = [{"criterion": c["criterion"], "points": c["points"]} for c in export(written)]
                return criteria, await self._vetted(call, current, criteria)

        call.future = asyncio.run_coroutine_threadsafe(limited(), self.trainer.async_loop)
        self.counts["asked"] += 1
        return call

    async def _vetted(self, call: Call, current: list[dict], criteria: list[dict]) -> list[dict] | None:
        """On the reward's event loop: each written criterion's probe decision (rurl/evolving/vetting.py); None
        unvetted."""
        if self.vetting is None:
            return None
        return await self.vetting.vet(call.query, current, criteria, call.step)

    def _waiting_calls(self, step: int) -> list[Call]:
        """Main process: the criteria waiting for probe budget, probed now, a call per query (no evolver call)."""
        if self.vetting is None or not self.waiting:
            return []
        waiting, self.waiting = self.waiting, []
        by_query_id: dict[str, list] = {}
        for query_id, criterion, written_at, source in waiting:
            by_query_id.setdefault(query_id, []).append((criterion, written_at, source))
        calls = []
        for query_id, items in by_query_id.items():
            call = Call(query_id, step, "waited for probe budget", [], waited=items)
            criteria = [{"criterion": c["criterion"], "points": c["points"]} for c, _, _ in items]
            current = self.rubric_for(query_id, self.original[query_id])

            async def vet_again(call=call, criteria=criteria, current=current):
                return criteria, await self._vetted(call, current, criteria)

            call.future = asyncio.run_coroutine_threadsafe(vet_again(), self.trainer.async_loop)
            calls.append(call)
        return calls

    def _written(self, call: Call) -> tuple[str, list[dict], int, dict, list | None] | None:
        """Main process: a finished call's admitted criteria as (query, criteria, step, source, probe decisions); a
        failure counted; the criteria waiting for probe budget kept for a later step."""
        try:
            criteria, vetted = call.future.result()
        except Exception as error:  # noqa: BLE001 - one failed call adds nothing; training goes on
            self.counts["failed"] += 1
            print(f"rurl evolve: query {call.query}: no new criteria: {error}"[:300], file=sys.stderr)
            return None
        # a criterion that waited keeps the step and source it was written with
        source = call.waited[0][2] if call.waited else call.source(self.rurl.evolve_apply)
        step = call.waited[0][1] if call.waited else call.step
        line = {"step": call.step, "query": call.query, **source, "written": criteria}
        if call.waited:
            line["waited_since"] = step
        if vetted is not None:
            line["vetted"] = vetted
            self.waiting += [
                (call.query, c, step, source) for c, v in zip(criteria, vetted) if v["decision"] == WAITING
            ]
            criteria = [c for c, v in zip(criteria, vetted) if v["decision"] in PASSED]
        self.lines[call.key] = line
        return call.key, call.query, criteria, step, source, vetted

    def _broadcast(self, changes):
        if self.trainer.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            changes = broadcast_object_list([changes])[0]
        return changes or ()

    def _apply(self, changes) -> list[tuple[str, int]]:
        """Every process, alike: the written criteria into the buffer. Returns (query, criteria added) pairs."""
        applied = []
        for key, query_id, written, step, source, vetted in changes:
            decisions = Counter(v["decision"] for v in vetted or ())
            self.counts["probed"] += sum("probes" in v and v["decision"] != WAITING for v in vetted or ())
            self.counts["exploitable"] += decisions[EXPLOITABLE]
            self.counts["unprobed"] += decisions[UNPROBED]
            self.counts["waited"] += decisions[WAITING]
            self.counts["probe_calls"] += sum(v.get("calls", 0) for v in vetted or ())
            retired = len(self.buffer.retired.get(query_id, []))
            added, refused = self.buffer.add(query_id, self.original[query_id], written, step, source)
            self.counts["added"] += len(added)
            self.counts["refused"] += len(refused)
            self.counts["retired"] += len(self.buffer.retired.get(query_id, [])) - retired  # displaced over the cap
            self.new += [[step, query_id, e.criterion, e.points] for e in added]
            if key in self.lines:
                self.lines[key]["added"] = [e.criterion for e in added]
                self.lines[key]["refused"] = refused + [
                    f"{v['criterion'][:60]!r}: {v['test']}"
                    for v in vetted or ()
                    if v["decision"] in (EXPLOITABLE, UNPROBED)
                ]
                self.lines[key]["waiting"] = [v["criterion"] for v in vetted or () if v["decision"] == WAITING]
            if added:
                self._eligible_again(query_id)
            applied.append((query_id, len(added)))
        return applied

    # --- next_draw: at each step's end, on every process -----------------------------------------------------------

    def on_step_end(self, args, state, control, **kwargs):
        if not self.same_step:
            finished = None
            if self.trainer.accelerator.is_main_process:
                done = [call for call in self.pending.values() if call.future.done()]
                for call in done:
                    del self.pending[call.key]
                finished = [written for call in done for written in [self._written(call)] if written]
            self._apply(self._broadcast(finished))
            if self.trainer.accelerator.is_main_process:  # their group was graded before they existed
                write_lines(self, state.global_step, {}, {})
        return control

    def _eligible_again(self, query_id: str) -> None:
        """A query dynamic sampling found flat this epoch may be drawn again once its rubric changed."""
        sampler = getattr(self.trainer, "sampler", None)
        if sampler is not None:
            sampler.flat.discard(query_id)  # its key: rurl/schedule/dynamic_sampling.py DynamicSampler._key

    # --- the run's state, and its end -------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps: the buffer, the counts, this step's call budget and the calls in flight."""
        return {
            **self.buffer.state(),
            "counts": dict(self.counts),
            "budget": self.budget,
            "new": self.new,
            "pending": [[c.query, c.step, c.situation, c.answers] for c in self.pending.values() if c.waited is None],
            "lines_written": self.lines_written,
            "vetting": self.vetting.state() if self.vetting is not None else {},
            "waiting": [[query, *item] for query, *item in self._all_waiting()],
        }

    def _all_waiting(self) -> list[tuple[str, dict, int, dict]]:
        """Main process: the criteria waiting for probe budget, those being probed now included."""
        flying = [(c.query, *item) for c in self.pending.values() if c.waited for item in c.waited]
        return [*self.waiting, *flying]

    def load(self, state: dict[str, Any], step: int) -> None:
        """A resumed run: everything state() kept; the calls in flight are asked again (the cache answers those
        that were answered), the criteria waiting for probe budget wait on, the refusals stand; evolve_steps.jsonl
        keeps the lines the checkpoint counted."""
        self.buffer.load(state)
        self.counts = Counter(state.get("counts", {}))
        self.budget = list(state.get("budget", [-1, 0]))
        self.new = [row for row in state.get("new", []) if row[0] <= step]
        if self.vetting is not None:
            self.vetting.load(state.get("vetting", {}))
        if self.trainer.accelerator.is_main_process:
            self.waiting = [(query, criterion, at, source) for query, criterion, at, source in state.get("waiting", [])]
            for query, asked_at, kind, answers in state.get("pending", []):
                self.pending[query] = self._ask(Call(query, asked_at, kind, [tuple(a) for a in answers]))
                self.counts["asked"] -= 1  # asked again, counted once
            path = Path(self.trainer.args.output_dir) / STEPS_FILE
            self.lines_written = int(state.get("lines_written", 0))
            if path.is_file():  # the lines written after the checkpoint are written again
                kept = path.read_text().splitlines()[: self.lines_written]
                write_whole(path, "".join(line + "\n" for line in kept))

    def finish(self, output_dir: Path, wandb) -> dict[str, Any]:
        """Main process, at the end: the evolved rubric dataset, the buffer, the wandb table; the summary's counts."""
        return finish(self, output_dir, wandb)
