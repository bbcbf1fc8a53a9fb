"""What a finished `ruft build` folder holds beyond its JSONL lines, made from them at the end of a run (and by
`rubricrl merge`, from the joined lines): the SFT dataset (sft.parquet and sft/), below_threshold.jsonl, the score
and length plots, the statistics for the manifest, and the summary printed to the user."""

import hashlib
import json
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricrl import charts
from rubricrl.runs.folder import summary_head, summary_tail
from rubricrl.runs.jsonl import ParquetTable, complete_rows, json_line, write_whole
from rubricrl.runs.provenance import UNKNOWN
from ruft.config import RuftConfig

if TYPE_CHECKING:
    import pyarrow as pa


def finish(out: Path, config: RuftConfig, judge: dict[str, Any]) -> dict[str, Any]:
    """The SFT dataset, the list of queries below tau, plots and statistics, streamed from the lines of the
    finished queries (memory holds numbers, not rows)."""
    write_sft(out, (row for _, row in complete_rows(out / "sft.jsonl")))
    finished, below, best = 0, 0, array("d")
    by_fingerprint = Counter()
    with open(out / "below_threshold.jsonl", "wb") as f:
        for _, q in complete_rows(out / "queries.jsonl"):
            finished += 1
            by_fingerprint[q.get("fingerprint") or UNKNOWN] += 1
            if q["best_score"] is not None:
                best.append(q["best_score"])
            if not q["kept"]:
                below += 1
                # best_eligible_score: of the answers that could be kept but for tau (not cut off, flagged or blank)
                f.write(
                    json_line(
                        {
                            "id": q["id"],
                            "best_score": q["best_score"],
                            "best_eligible_score": q.get("best_eligible_score"),
                        }
                    )
                )
    scores, lengths, kept = array("d"), array("l"), array("b")
    counts = Counter()
    for _, c in complete_rows(out / "candidates.jsonl"):
        counts["candidates"] += 1
        counts["flagged_candidates"] += c["integrity_flag"] is not None
        counts["truncated_candidates"] += c["finish_reason"] == "length"
        counts["no_answer_candidates"] += bool(c.get("no_answer"))
        # judge decisions: one per judged criterion, or one rating (rating modes); none for a flagged answer or
        # one without an answer (its reasoning never closed)
        graded_by_judge = c["integrity_flag"] is None and not c.get("no_answer")
        judged = sum(v["source"] == "judge" for v in c["verdicts"]) or int(graded_by_judge)
        counts["verdicts"] += judged
        counts["failed_verdicts"] += min(judged, c["judge_failures"])
        if c["score"] is None:
            counts["unscored_candidates"] += 1
            continue
        scores.append(c["score"]), lengths.append(c["length"]), kept.append(c["kept"])
    chosen = [i for i, k in enumerate(kept) if k]
    return {
        "counts": {
            "finished_queries": finished,
            "queries_kept": finished - below,
            "queries_below_threshold": below,
            "candidates": counts["candidates"],
            "unscored_candidates": counts["unscored_candidates"],
            "flagged_candidates": counts["flagged_candidates"],
            "no_answer_candidates": counts["no_answer_candidates"],
            "truncated_candidates": counts["truncated_candidates"],
            "sft_rows": sum(kept),
            "judge_failure_rate": counts["failed_verdicts"] / max(1, counts["verdicts"]),
        },
        "scores": {
            "best_per_query": _describe(best),
            "all": _describe(scores),
            "kept": _describe([scores[i] for i in chosen]),
            "length_all": _describe(lengths),
            "length_kept": _describe([lengths[i] for i in chosen]),
            "plots": write_plots(out, scores, lengths, kept, config.threshold),
        },
        "queries_by_fingerprint": by_fingerprint,
    }


def sft_schema() -> "pa.Schema":
    """TRL's conversational prompt-completion columns, then the provenance of each row."""
    import pyarrow as pa

    messages = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    return pa.schema(
        [
            ("prompt", messages),
            ("completion", messages),
            ("id", pa.string()),
            ("candidate", pa.int32()),
            ("model", pa.string()),
            ("score", pa.float64()),
            ("k", pa.int32()),
            ("threshold", pa.float64()),
            ("judge_model", pa.string()),
            ("grading_mode", pa.string()),
            ("rubric_sha256", pa.string()),
            ("sft_completion", pa.string()),
        ]
    )


def write_sft(out: Path, rows: Iterable[dict[str, Any]]) -> None:
    """sft.parquet and sft/ (`datasets.load_from_disk`) in one pass over the rows, in batches: memory stays flat
    whatever the number of rows. sft/ is what `save_to_disk` writes for one shard: its metadata files come from
    `datasets` itself (an empty dataset with these features), and its Arrow file gets the same batches as the
    Parquet file. Reading the Parquet file back with `datasets` instead (from_parquet, then save_to_disk) wrote
    the rows twice more and held them memory-mapped: peak RSS grew by ~80 MB from 1,000 to 20,000 rows."""
    import datasets

    features = datasets.Features.from_arrow_schema(sft_schema())
    folder = out / "sft"
    empty = datasets.Dataset.from_dict({name: [] for name in features}, features=features)
    empty.save_to_disk(str(folder), num_shards=1)
    state = json.loads((folder / "state.json").read_text())
    [data_file] = state["_data_files"]
    table = ParquetTable(out / "sft.parquet", sft_schema, arrow=(folder / data_file["filename"], features.arrow_schema))
    digest = hashlib.sha256()
    for row in rows:
        line = json_line(row)
        digest.update(line)
        table.add(line)
    table.finish()
    table.tmp.replace(table.path)
    # datasets names the cache files of a map() over this folder by the fingerprint: it must change with the rows
    write_whole(folder / "state.json", json.dumps({**state, "_fingerprint": digest.hexdigest()[:16]}, indent=2))


SCATTER_POINTS = 10_000
"""At most this many points per series in length_vs_score.png: more only blur the picture, and matplotlib's memory
grows with them (+50 MB at 160,000 candidates)."""


def write_plots(
    out: Path, scores: Sequence[float], lengths: Sequence[int], kept: Sequence[int], threshold: float
) -> list[str]:
    """Score histograms (all vs kept candidates) and length against score: where a verbosity bias would show. The
    histograms are counted with numpy and the scatter is an even sample, so memory does not grow with the build."""
    if not charts.available():  # the `train` extra brings it; without it the statistics stay in the manifest
        return []
    if not scores:
        return []
    import numpy as np  # matplotlib's own dependency

    scores, lengths = np.asarray(scores, dtype=float), np.asarray(lengths)
    chosen = np.flatnonzero(np.asarray(kept))
    clipped = np.clip(scores, 0.0, 1.0)
    figure, axis = charts.figure(6, 4)
    charts.histogram(axis, {"all candidates": clipped, "kept": clipped[chosen]}, np.linspace(0, 1, 21), threshold)
    axis.set(xlabel="rubric score (clipped to [0, 1])", ylabel="candidates", title="RuFT candidate scores")
    axis.legend()
    charts.save_png(figure, out / "scores.png")
    figure, axis = charts.figure(6, 4)
    charts.scatter(axis, lengths, scores, "all candidates", SCATTER_POINTS, s=8, alpha=0.5)
    charts.scatter(axis, lengths[chosen], scores[chosen], "kept", SCATTER_POINTS, s=12)
    axis.set(xlabel="answer length (characters)", ylabel="rubric score", title="Length vs score")
    axis.legend()
    charts.save_png(figure, out / "length_vs_score.png")
    return ["scores.png", "length_vs_score.png"]


def _describe(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "min": min(values),
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "max": max(values),
    }


def summary_text(manifest: dict[str, Any], out: Path) -> str:
    counts, scores = manifest["counts"], manifest["scores"]
    finished = counts["finished_queries"]
    rejected = counts.get("rejected_rows")
    lines = summary_head(
        manifest,
        str(counts["queries"]),
        counts["done_this_run"],
        counts["done_before"],
        also=f"; {rejected} bad rows left out ({out / 'rejected.jsonl'})" if rejected else "",
    )
    lines += [
        f"kept: {counts['queries_kept']} of {finished} queries ({counts['queries_kept'] / max(1, finished):.0%} "
        f"retained), {counts['sft_rows']} SFT rows; below tau: {counts['queries_below_threshold']} "
        f"({out / 'below_threshold.jsonl'})",
        f"candidates: {counts['candidates']}, unscored (judge failed) {counts['unscored_candidates']}, "
        f"flagged {counts['flagged_candidates']}, cut off at max_tokens {counts['truncated_candidates']}; judge failure "
        f"rate {counts['judge_failure_rate']:.1%} of verdicts",
    ]
    for name, label in (
        ("best_per_query", "best score per query"),
        ("all", "score, all candidates"),
        ("kept", "score, kept"),
        ("length_all", "length, all"),
        ("length_kept", "length, kept"),
    ):
        d = scores[name]
        if d:
            lines.append(
                f"{label:22} n {d['n']:6d}  min {d['min']:8.3f}  median {d['median']:8.3f}  "
                f"mean {d['mean']:8.3f}  max {d['max']:8.3f}"
            )
    if scores["plots"]:
        lines.append("plots: " + ", ".join(str(out / p) for p in scores["plots"]))
    lines += summary_tail(
        manifest,
        "queries",
        "queries.jsonl line",
        "sft/ for load_from_disk, sft.parquet, candidates.jsonl, manifest.json",
    )
    return "\n".join(lines)
