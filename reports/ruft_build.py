"""A RuFT build folder (`rubricrl ruft build`) read into a `Folder`: the reports of all candidates and of those
kept (recomputed from candidates.jsonl), the score-length points, and one Example per query with its candidates."""

from typing import Any

from grading.report import build_report, example_metrics
from grading.scores import aggregate
from reports import facts
from reports.folder import BuildPoints, Example, Folder
from reports.graded import graded_example
from reports.read import iter_jsonl, read_manifest, read_yaml, rubric_rows, scoring_rule

FULL_BOOTSTRAP = 5000
LARGE_BOOTSTRAP = 200
"""A build's candidate reports: 1000 bootstrap resamples (as `rubricrl eval`) up to FULL_BOOTSTRAP candidates, then
LARGE_BOOTSTRAP (measured: 1000 resamples of 5000 candidates over 43 metrics took 7.4 s; a paper-scale build holds
a few hundred thousand)."""


def read_ruft_build(folder: Folder, max_examples: int) -> None:
    path = folder.path
    manifest = read_manifest(path)
    config = manifest.get("config") or read_yaml(path / "config.yaml")
    ruft, rule = config.get("ruft") or {}, scoring_rule(config.get("grading") or {})
    queries = list(iter_jsonl(path / "queries.jsonl", folder.notes)) if (path / "queries.jsonl").is_file() else []
    kept_queries = sum(bool(q.get("kept")) for q in queries)
    folder.retention = {"finished": len(queries), "kept": kept_queries, "below threshold": len(queries) - kept_queries}
    points = BuildPoints([], [], [], ruft.get("threshold"))
    everything, kept, shown = [], [], {}
    candidates = path / "candidates.jsonl"
    for c in iter_jsonl(candidates, folder.notes) if candidates.is_file() else ():
        everything.append(_slim(c))
        if c.get("kept"):
            kept.append(everything[-1])
        if c.get("score") is not None:
            points.scores.append(c["score"])
            points.lengths.append(c.get("length", len(c.get("response") or "")))
            points.kept.append(bool(c.get("kept")))
        if c.get("id") in shown or len(shown) < max_examples:
            shown.setdefault(c.get("id"), []).append(c)
    folder.build, folder.scores_label = points, "candidate score"
    folder.reports = {
        name: candidates_report(records, rule)
        for name, records in (("all candidates", everything), ("kept", kept))
        if records
    }
    folder.headline = "all candidates" if everything else None
    if len(everything) > FULL_BOOTSTRAP:
        folder.notes.append(
            f"bootstrap std over {LARGE_BOOTSTRAP} resamples ({len(everything)} candidates; "
            f"up to {FULL_BOOTSTRAP}: 1000, as rubricrl eval)"
        )
    rows = rubric_rows(config.get("rubrics"), path, set(shown) - {None}, folder.notes)
    folder.examples = [_query_example(query_id, found, rows.get(query_id), rule) for query_id, found in shown.items()]
    folder.examples_total = len({q.get("id") for q in queries}) or len(shown)
    folder.examples_source = "candidates.jsonl"
    folder.facts = _build_facts(manifest, config, queries, everything, kept)


def _build_facts(
    manifest: dict, config: dict, queries: list[dict], everything: list[dict], kept: list[dict]
) -> dict[str, str]:
    ruft, counts, roles = config.get("ruft") or {}, manifest.get("counts") or {}, manifest.get("roles") or {}
    per_role = ruft.get("candidates") or {}
    kept_queries = sum(bool(q.get("kept")) for q in queries)
    truncated = ", truncated answers allowed" if ruft.get("keep_truncated") else ""
    return facts.present(
        {
            "status": "finished (manifest.json)" if manifest else "no manifest.json: still running, stopped or killed",
            "rubrics": config.get("rubrics"),
            "candidates": ", ".join(
                f"{role} x{n}" + (f" ({roles[role]['model']})" if role in roles else "") for role, n in per_role.items()
            ),
            "selection": f"K = {sum(per_role.values())}, tau = {ruft.get('threshold')}, keep {ruft.get('keep', 1)} per "
            f"query{truncated}",
            "judge": facts.judge(config, manifest.get("judge") or {}),
            "queries": f"{len(queries)} finished, {kept_queries} kept "
            f"({facts.pct(kept_queries / len(queries)) if queries else 'n/a'}), "
            f"{len(queries) - kept_queries} below tau",
            "candidate counts": f"{len(everything)} candidates, {sum(s['score'] is None for s in everything)} unscored, "
            f"{sum(bool(s['integrity_flag']) for s in everything)} flagged by the integrity check, "
            f"{sum(s['finish_reason'] == 'length' for s in everything)} cut off at max_tokens, "
            f"{len(kept)} SFT rows",
            "judge failure rate": counts.get("judge_failure_rate") is not None
            and facts.pct(counts["judge_failure_rate"]),
            "failed queries": counts.get("failed") and str(counts["failed"]),
            "wall time": manifest.get("seconds") is not None and f"{manifest['seconds']} s",
        }
    )


def candidates_report(records: list[dict[str, Any]], rule: dict[str, Any]) -> dict[str, Any]:
    """grading.report.build_report of graded candidates (same metric names, same counts); past FULL_BOOTSTRAP
    records, with LARGE_BOOTSTRAP resamples."""
    if len(records) <= FULL_BOOTSTRAP:
        return build_report(records, **rule)
    per_example = [example_metrics(r, **rule) for r in records]
    metrics = {}
    for name, stats in aggregate(per_example, samples=LARGE_BOOTSTRAP, seed=0).items():
        metrics.update(
            {
                name: stats["value"],
                f"{name}:n_samples": stats["n_samples"],
                f"{name}:bootstrap_std": stats["bootstrap_std"],
            }
        )
    verdicts = [v for r in records for v in r["verdicts"] if v.get("source") != "none"]
    return {
        "metrics": metrics,
        "examples": len(records),
        "unscored_examples": sum("overall_score" not in m for m in per_example),
        "judge_failure_rate": sum(v["met"] is None for v in verdicts) / len(verdicts) if verdicts else 0.0,
        "integrity_flagged": sum(bool(r.get("integrity_flag")) for r in records),
        **rule,
    }


def _slim(candidate: dict[str, Any]) -> dict[str, Any]:
    """What a report is recomputed from, without the texts (a build may hold many thousands of candidates)."""
    verdicts = [
        {
            "criterion": v["criterion"],
            "points": v["points"],
            "tags": v.get("tags") or [],
            "met": v["met"],
            "source": v.get("source"),
        }
        for v in candidate.get("verdicts") or ()
    ]
    return {
        "score": candidate.get("score"),
        "rating": candidate.get("rating"),
        "verdicts": verdicts,
        "integrity_flag": candidate.get("integrity_flag"),
        "example_tags": candidate.get("example_tags") or [],
        "finish_reason": candidate.get("finish_reason"),
    }


def _query_example(query_id: str, candidates: list[dict[str, Any]], row: Any, rule: dict[str, Any]) -> Example:
    """One query of a build: its prompt, and each candidate with its score, verdicts and whether it was kept."""
    children = []
    for c in candidates:
        notes = [
            "kept" if c.get("kept") else "not kept",
            f"candidate {c.get('candidate')}",
            f"{c.get('role')} ({c.get('model')})",
            f"{c.get('length')} chars",
            f"finish: {c.get('finish_reason')}",
        ]
        children.append(graded_example(c, example_metrics(c, **rule).get("overall_score"), None, notes))
    scores = [c.score for c in children if c.score is not None]
    kept = sum(bool(c.get("kept")) for c in candidates)
    return Example(
        id=query_id,
        prompt=row.conversation if row else None,
        response=None,
        score=max(scores) if scores else None,
        candidates=children,
        notes=[f"{len(candidates)} candidates, {kept} kept", "best score"],
        reference=(row.reference or row.ideal_completion) if row else None,
    )
