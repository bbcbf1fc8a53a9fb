"""Each kind of output folder read into a `Folder`, its kind told by its files:

- eval (`rubricrl eval`): report.json, beside graded.jsonl and config.yaml;
- RuRL run (`rubricrl rurl train`): manifest.json saying so, or log_history.json, eval.jsonl, or a config.yaml with
  a `rurl:` section (a run still going, or killed, has only that and its checkpoints);
- RuFT build (`rubricrl ruft build`): manifest.json saying so, or candidates.jsonl or queries.jsonl;
- SFT run (`rubricrl ruft train`): a config.yaml naming a `dataset:` (losses in checkpoint-*/trainer_state.json).

Nothing here writes to the folder, which may still be growing; what is missing is said in `Folder.notes`."""

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grading.cli import read_graded
from grading.report import build_report, example_metrics
from grading.scores import aggregate
from reports import facts
from reports.folder import BuildPoints, Example, Folder, Kind, Verdict
from reports.read import (
    ReportError,
    find_file,
    iter_jsonl,
    log_history,
    read_json,
    read_manifest,
    read_yaml,
    rubric_rows,
    scoring_rule,
)

LOOKED_FOR = (
    "report.json (eval), candidates.jsonl or queries.jsonl (ruft build), manifest.json, log_history.json, "
    "eval.jsonl or a config.yaml with a rurl: section (rurl train), a config.yaml with dataset: "
    "(ruft train)"
)
EVAL_ANSWERS = "eval_answers.jsonl"
"""A RuRL run's graded eval answers (rurl/evaluate.py writes them)."""
COMMANDS: dict[str, Kind] = {"rurl train": "rurl", "ruft build": "ruft_build"}
"""manifest.json's `command` for the kinds that write one."""
FULL_BOOTSTRAP = 5000
LARGE_BOOTSTRAP = 200
"""A build's candidate reports: 1000 bootstrap resamples (as `rubricrl eval`) up to FULL_BOOTSTRAP candidates, then
LARGE_BOOTSTRAP (measured: 1000 resamples of 5000 candidates over 43 metrics took 7.4 s; a paper-scale build holds
a few hundred thousand)."""


def detect(path: Path) -> Kind:
    if not path.is_dir():
        raise ReportError(f"{path}: {'not a folder' if path.exists() else 'no such folder'}")
    manifest = read_manifest(path)
    if manifest.get("command") in COMMANDS:
        return COMMANDS[manifest["command"]]
    if (path / "report.json").is_file():
        return "eval"
    if (path / "candidates.jsonl").is_file() or (path / "queries.jsonl").is_file():
        return "ruft_build"
    config = read_yaml(path / "config.yaml")
    if "rurl" in config or (path / "log_history.json").is_file() or (path / "eval.jsonl").is_file():
        return "rurl"
    if "dataset" in config:
        return "ruft_train"
    raise ReportError(f"{path}: not an output folder rubricrl report knows; looked for {LOOKED_FOR}")


def collect(path: Path, label: str, max_examples: int) -> Folder:
    kind = detect(path)
    folder = Folder(path=path, kind=kind, label=label)
    READERS[kind](folder, max_examples)
    return folder


# --- eval -----------------------------------------------------------------------------------------------------------


def read_eval(folder: Folder, max_examples: int) -> None:
    path = folder.path
    config = read_yaml(path / "config.yaml")
    report = read_json(path / "report.json")
    folder.reports, folder.headline = {"eval": report}, "eval"
    graded = path / "graded.jsonl"
    if not graded.is_file():  # `eval --graded FILE` reports on that file and writes no graded.jsonl
        graded = find_file(config.get("graded"), path)
    if graded is None:
        folder.notes.append("no graded.jsonl (nor the graded file the config names): no examples or histogram")
    records = read_graded(graded) if graded else []  # checked as `eval --graded` checks it
    rule = scoring_rule(report)
    metrics = [example_metrics(r, **rule) for r in records]
    folder.scores = [m["overall_score"] for m in metrics if "overall_score" in m]
    folder.scores_label = "score per example"
    shown = list(zip(records, metrics))[:max_examples]
    # What the graded records say made them (an `eval --graded` folder's config.yaml names no policy or rubrics).
    made_by = report.get("provenance") or {}
    rubrics = made_by.get("rubrics") if isinstance(made_by.get("rubrics"), str) else config.get("rubrics")
    rows = rubric_rows(rubrics, path, {r["id"] for r, _ in shown if "id" in r}, folder.notes)
    folder.examples = [graded_example(r, m.get("overall_score"), rows.get(r.get("id"))) for r, m in shown]
    folder.examples_total, folder.examples_source = len(records), graded.name if graded else ""
    recorded = next((r["judge"] for r in records if isinstance(r.get("judge"), dict)), {})
    folder.facts = facts.present(
        {
            "policy": made_by.get("policy_model") or facts.policy(config),
            "rubrics": rubrics,
            "judge": facts.judge(config, recorded),
            "examples": f"{report.get('examples')} ({report.get('unscored_examples')} unscored, "
            f"{report.get('integrity_flagged', 0)} flagged by the integrity check)",
            "judge failure rate": facts.pct(report.get("judge_failure_rate")),
            "scoring": f"min_coverage {rule['min_coverage']}, undecided penalty: {rule['undecided_penalty']}, "
            f"undecided criterion: {rule['undecided_criterion']}",
        }
    )


def graded_example(record: dict[str, Any], score: float | None, row: Any = None, notes: Iterable[str] = ()) -> Example:
    """An Example from a graded record (as `grading.grader.Graded.to_record` writes it) and its rubric row."""
    notes = list(notes)
    if record.get("integrity_flag"):
        notes.append(f"integrity flag: {record['integrity_flag']}")
    elif record.get("integrity_note"):
        notes.append(f"integrity note (reward unchanged): {record['integrity_note']}")
    if record.get("no_answer"):
        notes.append(f"no answer: {record['no_answer']}")
    if record.get("policy_error"):
        notes.append(f"policy error: {record['policy_error']}")
    if record.get("judge_failures"):
        notes.append(f"{record['judge_failures']} judge failure(s)")
    if record.get("rating") is not None:
        notes.append(f"rating {record['rating']:.1f} / 10")
    verdicts = [
        Verdict(
            v.get("criterion", ""),
            v.get("points", 0),
            v.get("met"),
            v.get("explanation") or "",
            list(v.get("tags") or ()),
            v.get("source") or "",
        )
        for v in record.get("verdicts") or ()
    ]
    return Example(
        id=str(record.get("id", "")),
        prompt=row.conversation if row else None,
        response=record.get("response"),
        score=score,
        verdicts=verdicts,
        notes=notes,
        explanation=record.get("explanation") or "",
        reference=(row.reference or row.ideal_completion) if row else None,
    )


# --- RuRL run -------------------------------------------------------------------------------------------------------


def read_rurl(folder: Folder, max_examples: int) -> None:
    path = folder.path
    manifest = read_manifest(path)
    config = manifest.get("config") or read_yaml(path / "config.yaml")
    folder.history, folder.history_source = log_history(path)
    if not folder.history:
        folder.notes.append("no log history yet (log_history.json, checkpoint-*/trainer_state.json): no curves")
    if (path / "eval.jsonl").is_file():
        evals = list(iter_jsonl(path / "eval.jsonl", folder.notes))
    else:
        evals = _history_evals(folder.history)
    evals = list({e.get("step"): e for e in evals}.values())  # a resumed run evaluates a step again: the last counts
    if evals:
        shown = [evals[0], evals[-1]] if len(evals) > 1 else evals
        folder.reports = {f"eval, step {e['step']}": e for e in shown}
        folder.headline = f"eval, step {evals[-1]['step']}"
        folder.evals = evals
    answers, rows_answered = _eval_answers(folder, config, max_examples)
    _completions(folder, max(0, max_examples - len(answers)), keep_scores=bool(answers))
    if answers:
        source = f"{EVAL_ANSWERS}: each held-out row's graded answer at the last eval (its earlier answers inside)"
        folder.examples = answers + folder.examples
        folder.examples_total += rows_answered
        folder.examples_source = f"{source}; then {folder.examples_source}" if folder.examples_source else source
    summary, data = manifest.get("summary") or {}, manifest.get("data") or {}
    dynamic = summary.get("dynamic_sampling_logged") or {}
    folder.facts = facts.present(
        {
            "status": "finished (manifest.json)" if manifest else "no manifest.json: still running, stopped or killed",
            "model": facts.model(config),
            "method": facts.method(config),
            "data": facts.training_data(data, config),
            "judge": facts.judge(config, data.get("judge") or {}),
            "steps": summary and f"{summary.get('steps')} in {summary.get('seconds')} s",
            "reward": summary
            and f"first {facts.num(summary.get('reward_first'))}, last {facts.num(summary.get('reward_last'))}",
            "judge totals": facts.judge_totals(summary.get("judge") or {}),
            "dynamic sampling": (config.get("rurl") or {}).get("dynamic_sampling")
            and (", ".join(f"{k} {v:g}" for k, v in dynamic.items()) or "on"),
            "stopped": summary.get("stopped"),
            "log history": folder.history_source,
        }
    )


def _history_evals(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Eval reports rebuilt from the `eval/...` keys of a log history (when eval.jsonl is gone)."""
    evals = []
    for entry in history:
        metrics = {
            k[5:]: v
            for k, v in entry.items()
            if k.startswith("eval/") and k not in ("eval/judge_failure_rate", "eval/unscored_examples")
        }
        if "overall_score" in metrics:
            evals.append(
                {
                    "step": entry.get("step"),
                    "metrics": metrics,
                    "examples": metrics.get("overall_score:n_samples"),
                    "unscored_examples": entry.get("eval/unscored_examples"),
                    "judge_failure_rate": entry.get("eval/judge_failure_rate"),
                }
            )
    return evals


def _eval_answers(folder: Folder, config: dict[str, Any], max_examples: int) -> tuple[list[Example], int]:
    """The graded answers of the in-training evals (eval_answers.jsonl: `rubricrl eval`'s graded records plus
    `step`): one Example per held-out row, its answer at the last eval, its answers at the earlier evals inside; the
    scores of the last eval for the histogram. Returns the Examples shown and the number of rows."""
    path = folder.path / EVAL_ANSWERS
    if not path.is_file():
        if folder.evals:
            folder.notes.append(f"no {EVAL_ANSWERS}: the eval reports without their answers")
        return [], 0
    by_row: dict[str, dict[Any, dict[str, Any]]] = {}
    for record in iter_jsonl(path, folder.notes):
        by_row.setdefault(str(record.get("id", "")), {})[record.get("step")] = record  # a step evaluated again: last
    if not by_row:
        return [], 0
    last_step = max((step for steps in by_row.values() for step in steps if isinstance(step, int)), default=None)
    rule = scoring_rule(config.get("grading") or {})
    rows = rubric_rows(config.get("rubrics"), folder.path, set(list(by_row)[:max_examples]), folder.notes)
    examples, scores = [], []
    for row_id, steps in by_row.items():
        ordered = sorted(steps.items(), key=lambda item: (item[0] is None, item[0]))
        graded = [
            graded_example(r, example_metrics(r, **rule).get("overall_score"), rows.get(row_id), [f"eval step {step}"])
            for step, r in ordered
        ]
        latest = graded[-1]
        if ordered[-1][0] == last_step and latest.score is not None:
            scores.append(latest.score)
        latest.candidates, latest.candidates_title = graded[:-1][::-1], "Earlier evals (latest first)"
        for earlier in latest.candidates:
            earlier.prompt = earlier.reference = None  # shown once, on the row
        examples.append(latest)
    folder.scores, folder.scores_label = scores, f"eval score per held-out row, step {last_step}"
    return examples[:max_examples], len(examples)


def _completions(folder: Folder, max_examples: int, keep_scores: bool = False) -> None:
    """The last completions TRL logged (completions/completions_<step>.parquet, `log_completions`) as examples;
    their rewards are the histogram's scores unless `keep_scores` (the eval's are there)."""
    files = sorted((folder.path / "completions").glob("completions_*.parquet"))
    if not files:
        folder.notes.append("no completions/*.parquet (TRL's log_completions): no example completions")
        return
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(files[-1]).to_pylist()
    except (OSError, ValueError) as error:  # pyarrow's errors derive from these
        folder.notes.append(f"{files[-1]}: cannot read: {error}")
        return
    examples = [_completion_example(number, row) for number, row in enumerate(rows, 1)]
    if not keep_scores:
        folder.scores = [e.score for e in examples if e.score is not None]
        folder.scores_label = (
            f"reward per completion, step {rows[0]['step']}" if rows and "step" in rows[0] else "reward"
        )
    folder.examples, folder.examples_total = examples[:max_examples], len(examples)
    folder.examples_source = (
        f"completions/{files[-1].name}, TRL's completion log: the score is the training "
        "reward (after any overlong penalty), criteria are cut at 60 characters, no judge "
        "explanations"
    )


def _completion_example(number: int, row: dict[str, Any]) -> Example:
    """One row of TRL's completion log: prompt, completion, the reward, and the verdicts the reward logged
    (`rubric_verdicts`: [criterion[:60], points, met] per criterion, grading/reward.py)."""
    try:
        verdicts = [Verdict(c, p, m) for c, p, m in json.loads(row.get("rubric_verdicts") or "[]")]
    except (ValueError, TypeError):
        verdicts = []
    notes = [f"integrity flag: {row['rubric_flag']}"] if row.get("rubric_flag") else []
    if isinstance(row.get("advantage"), float):
        notes.append(f"advantage {row['advantage']:+.3f}")
    prompt, reward = row.get("prompt"), row.get("rubric_reward")
    return Example(
        id=f"step {row.get('step', '?')}, completion {number}",
        prompt=prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}],
        response=_text(row.get("completion")),
        score=reward if isinstance(reward, float) else None,
        verdicts=verdicts,
        notes=notes,
    )


def _text(completion: Any) -> str:
    if isinstance(completion, list):
        return "\n\n".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return "" if completion is None else str(completion)


# --- SFT run --------------------------------------------------------------------------------------------------------


def read_ruft_train(folder: Folder, max_examples: int) -> None:
    path = folder.path
    config = read_yaml(path / "config.yaml")
    folder.history, folder.history_source = log_history(path)
    if not folder.history:
        folder.notes.append("no checkpoint-*/trainer_state.json: no loss curve (the run saved no checkpoint yet)")
    losses = folder.series("loss")
    dataset = find_file(config.get("dataset"), path)
    if dataset is not None and (dataset / "candidates.jsonl").is_file():
        folder.notes.append(
            f"the training data is a RuFT build ({config['dataset']}): add it to the command line "
            "to see its candidates and what was kept"
        )
    settings = (
        "learning_rate",
        "num_train_epochs",
        "max_steps",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "max_length",
    )
    folder.facts = facts.present(
        {
            "model": facts.model(config),
            "dataset": config.get("dataset"),
            "training": ", ".join(f"{k} {config[k]}" for k in settings if config.get(k) is not None),
            "steps logged": losses and f"{int(losses[-1][0])}, loss first {losses[0][1]:.4f}, last {losses[-1][1]:.4f}",
            "model card": "README.md" if (path / "README.md").is_file() else None,
            "log history": folder.history_source,
        }
    )


# --- RuFT build -----------------------------------------------------------------------------------------------------


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


READERS = {"eval": read_eval, "rurl": read_rurl, "ruft_build": read_ruft_build, "ruft_train": read_ruft_train}
