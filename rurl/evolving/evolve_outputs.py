"""What rubric evolution (rurl/evolving/evolution.py) reports: the lines of evolve_steps.jsonl, each step's `evolve/*`
metrics, and at the end the evolved rubric dataset, the whole buffer, the wandb table and the summary's counts."""

import json
import statistics
from pathlib import Path
from typing import Any

from rubricrl.runs.jsonl import write_jsonl, write_whole
from rurl.evolving.evolve_choice import concordance, scores_with_and_without

EVOLVED_FILE = "evolved_rubrics.jsonl"
STEPS_FILE = "evolve_steps.jsonl"
"""A line per evolve call: its step, query, situation, the criteria it wrote (their probe decisions; added or why
refused), and the group's scores and each added criterion's verdicts on the group (same_step) or the group's scores
it read."""
COUNTS = (
    "asked",
    "added",
    "refused",
    "failed",
    "timed_out",
    "retired",
    "regraded",
    "probed",
    "exploitable",
    "unprobed",
    "waited",
    "probe_calls",
)


def write_lines(evolution, step: int, groups: dict, verdicts_of: dict) -> None:
    """Main process: this round's lines of evolve_steps.jsonl, with the group's scores under the new rubric and
    each added criterion's verdicts where the group was graded with it (same_step)."""
    if not evolution.lines or evolution.trainer.args.output_dir is None:
        return
    with open(Path(evolution.trainer.args.output_dir) / STEPS_FILE, "a", encoding="utf-8") as out:
        for query_id, line in evolution.lines.items():
            if query_id in groups:
                line["scores_after"] = [round(r, 4) for _, r in groups[query_id] if r == r]
                line["verdicts"] = {
                    text: {
                        "met": sum(v[text] for v in verdicts_of.get(query_id, []) if text in v),
                        "decided": sum(text in v for v in verdicts_of.get(query_id, [])),
                    }
                    for text in line.get("added", [])
                }
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    evolution.lines_written += len(evolution.lines)
    evolution.lines = {}


def step_metrics(evolution, groups: dict, verdicts_of: dict) -> dict[str, float]:
    counts = evolution.buffer.counts()
    flat = [q for q in groups if evolution._flat(q, groups[q], verdicts_of.get(q, []))]
    original_flat = [q for q in groups if evolution._flat(q, groups[q], verdicts_of.get(q, []), original_only=True)]
    metrics = {
        "evolve/flat_groups": len(flat) / len(groups) if groups else 0.0,
        "evolve/flat_groups_original": len(original_flat) / len(groups) if groups else 0.0,
        "evolve/active": counts["active"],
        "evolve/active_per_query": counts["active"] / counts["queries"] if counts["queries"] else 0.0,
        "evolve/retired": float(evolution.counts["retired"]),
        "evolve/added": float(evolution.counts["added"]),
    }
    if evolution.vetting is not None:  # over the run, as added and retired
        metrics["evolve/probed"] = float(evolution.counts["probed"])
        metrics["evolve/refused_exploitable"] = float(evolution.counts["exploitable"])
        metrics["evolve/probe_calls"] = float(evolution.counts["probe_calls"])
        metrics["evolve/waiting"] = float(len(evolution._all_waiting()))
    met = decided = alike = pairs = 0
    changes = []
    rule = evolution.grading.rule()
    for query_id, answers in verdicts_of.items():
        evolved = {e.criterion: e.points for e in evolution.buffer.active.get(query_id, [])}
        evolved |= {e.criterion: e.points for e in evolution.buffer.retired.get(query_id, [])}
        graded = [v for v in answers if any(text in evolved for text in v)]
        if not graded:
            continue
        original = {c["criterion"]: c["points"] for c in evolution.original.get(query_id, [])}
        both = [scores_with_and_without(v, original, evolved, rule) for v in graded]
        both = [(a, b) for a, b in both if a is not None and b is not None]
        here = concordance(both)
        alike, pairs = alike + here[0], pairs + here[1]
        changes += [b - a for a, b in both]
        met += sum(met_ for v in graded for text, met_ in v.items() if text in evolved)
        decided += sum(text in evolved for v in graded for text in v)
    if decided:
        metrics["evolve/pass_rate"] = met / decided
        metrics["evolve/graded_completions"] = float(len(changes))
    if pairs:
        metrics["evolve/agreement"] = alike / pairs
    if changes:
        metrics["evolve/reward_change"] = statistics.fmean(changes)
    return metrics


def finish(evolution, output_dir: Path, wandb) -> dict[str, Any]:
    """Main process, at the end: the evolved rubric dataset (every training query, its original criteria then
    its active evolved ones, each tagged `evolved` with its step and the answers it came from) in the format
    every command reads, the whole buffer (retired criteria too), the wandb table; the summary's counts."""
    for call in evolution.pending.values():  # asked again by a resumed run, from the cache
        call.future.cancel()
    rows = [
        {
            "id": query_id,
            "prompt": row.conversation,
            "rubrics": evolution.rubric_for(query_id, evolution.original[query_id]),
            "reference_answer": row.reference,
            "example_tags": list(row.rubric.example_tags),
        }
        for query_id, row in evolution.rows.items()
    ]
    write_jsonl(output_dir / EVOLVED_FILE, rows)
    write_whole(output_dir / "rubric_buffer.json", json.dumps(evolution.buffer.state(), indent=1, ensure_ascii=False))
    if wandb is not None and evolution.new:
        import wandb as wandb_module

        columns = ["step", "query", "criterion", "points"]
        wandb.log({"evolved_criteria": wandb_module.Table(columns=columns, data=evolution.new)})
    return {
        "apply": evolution.rurl.evolve_apply,
        **{name: evolution.counts[name] for name in COUNTS},
        "in_flight_at_end": sum(c.waited is None for c in evolution.pending.values()),
        "waiting_at_end": len(evolution._all_waiting()),
        "active": int(evolution.buffer.counts()["active"]),
        "queries_evolved": int(evolution.buffer.counts()["queries"]),
    }
