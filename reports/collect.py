"""Each kind of output folder read into a `Folder`, its kind told by its files:

- eval (`rubricrl eval`): report.json, beside graded.jsonl and config.yaml;
- RuRL run (`rubricrl rurl train`): manifest.json saying so, or log_history.json, eval.jsonl, or a config.yaml with
  a `rurl:` section (a run still going, or killed, has only that and its checkpoints);
- RuFT build (`rubricrl ruft build`): manifest.json saying so, or candidates.jsonl or queries.jsonl;
- SFT run (`rubricrl ruft train`): a config.yaml naming a `dataset:` (losses in checkpoint-*/trainer_state.json);
- rubric audit (`rubricrl audit`): manifest.json saying so, with summary.json;
- reward probe (`rubricrl probe`): manifest.json saying so, with summary.json and criteria.jsonl.

A build is read in ruft_build.py; graded records become Examples in graded.py.

Nothing here writes to the folder, which may still be growing; what is missing is said in `Folder.notes`."""

import json
from pathlib import Path
from typing import Any

from grading.cli import read_graded
from grading.report import example_metrics
from reports import facts
from reports.folder import Example, Folder, Kind, Verdict
from reports.graded import graded_example
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
from reports.ruft_build import read_ruft_build
from reports.tables import num
from rurl.watch.summary import moved_most

LOOKED_FOR = (
    "report.json (eval), candidates.jsonl or queries.jsonl (ruft build), manifest.json, log_history.json, "
    "eval.jsonl or a config.yaml with a rurl: section (rurl train), a config.yaml with dataset: "
    "(ruft train)"
)
EVAL_ANSWERS = "eval_answers.jsonl"
"""A RuRL run's graded eval answers (rurl/watch/evaluate.py writes them)."""
COMMANDS: dict[str, Kind] = {"rurl train": "rurl", "ruft build": "ruft_build", "audit": "audit", "probe": "probe"}
"""manifest.json's `command` for the kinds that write one."""


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


def read_ledger(folder: Folder) -> None:
    """The folder's criterion ledger (ledger.parquet), where it has one: its headline (a run's with the tags that
    moved) and table."""
    from grading.ledger import headline, read_table
    from rurl.watch.ledger import run_headline

    path = folder.path / "ledger.parquet"
    if path.is_file():
        folder.ledger_table = read_table(path)
        folder.ledger = (run_headline if folder.kind == "rurl" else headline)(folder.ledger_table)


# --- eval -----------------------------------------------------------------------------------------------------------


def read_eval(folder: Folder, max_examples: int) -> None:
    path = folder.path
    config = read_yaml(path / "config.yaml")
    report = read_json(path / "report.json")
    folder.reports, folder.headline = {"eval": report}, "eval"
    read_ledger(folder)
    graded = path / "graded.jsonl"
    if not graded.is_file():  # `eval --graded FILE` reports on that file and writes no graded.jsonl
        graded = find_file(config.get("graded"), path)
    if graded is None:
        folder.notes.append("no graded.jsonl (nor the graded file the config names): no examples or histogram")
    records = read_graded(graded) if graded else []  # checked as `eval --graded` checks it
    rule = scoring_rule(report)
    metrics = [example_metrics(r, **rule) for r in records]
    folder.scores = [m["overall_score"] for m in metrics if "overall_score" in m]
    folder.graded = records
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


# --- RuRL run -------------------------------------------------------------------------------------------------------


def read_rurl(folder: Folder, max_examples: int) -> None:
    path = folder.path
    manifest = read_manifest(path)
    config = manifest.get("config") or read_yaml(path / "config.yaml")
    folder.history, folder.history_source = log_history(path)
    read_ledger(folder)
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
    if (path / "criteria.json").is_file():
        folder.moved = moved_most(read_json(path / "criteria.json"))
    if (path / "rubric_buffer.json").is_file():
        buffer = read_json(path / "rubric_buffer.json")
        folder.evolved = [
            {**e, "query": query_id}
            for kind in ("active", "retired")
            for query_id, items in buffer.get(kind, {}).items()
            for e in items
        ]
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
            "reward": summary and f"first {num(summary.get('reward_first'))}, last {num(summary.get('reward_last'))}",
            "judge totals": facts.judge_totals(summary.get("judge") or {}),
            "dynamic sampling": (config.get("rurl") or {}).get("dynamic_sampling")
            and (", ".join(f"{k} {v:g}" for k, v in dynamic.items()) or "on"),
            "stopped": summary.get("stopped"),
            "evolved criteria": (evolve := summary.get("evolve"))
            and f"{evolve['added']} added, {evolve['retired']} retired, {evolve['active']} active over "
            f"{evolve['queries_evolved']} queries; {evolve['asked']} evolve calls, {evolve['failed']} failed",
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
    (`rubric_verdicts`: [criterion[:60], points, met] per criterion, rurl/reward/rubric_reward.py)."""
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


def read_audit(folder: Folder, max_examples: int) -> None:
    manifest = read_manifest(folder.path)
    folder.audit = read_json(folder.path / "summary.json")
    audit, pruned = folder.audit, (manifest.get("counts") or {}).get("pruned")
    folder.facts = facts.present(
        {
            "graded answers": ", ".join(manifest.get("inputs") or []),
            "rubric dataset": manifest.get("rubrics"),
            "counted": f"{audit['queries']} queries, {audit['criteria']} criteria, {audit['graded_answers']} answers, "
            f"{audit['verdicts']} verdicts",
            "not flagged": f"{audit['queries_with_too_few_answers']} queries with too few answers",
            "pruned": pruned and f"{pruned['criteria_dropped']} criteria dropped over {pruned['queries']} queries",
        }
    )


def read_probe(folder: Folder, max_examples: int) -> None:
    manifest = read_manifest(folder.path)
    folder.probe = read_json(folder.path / "summary.json")
    folder.probe["flagged"] = [c for c in iter_jsonl(folder.path / "criteria.jsonl", folder.notes) if c["exploitable"]]
    folder.facts = facts.present(
        {
            "rubric dataset": manifest.get("rubrics"),
            "judges": ", ".join(folder.probe["judges"]),
            "counted": f"{folder.probe['rows']} rows, {(manifest.get('counts') or {}).get('probes')} probes graded",
        }
    )


READERS = {
    "eval": read_eval,
    "rurl": read_rurl,
    "ruft_build": read_ruft_build,
    "ruft_train": read_ruft_train,
    "audit": read_audit,
    "probe": read_probe,
}
