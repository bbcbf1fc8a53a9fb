"""One row per policy of a comparison: policies trained under different settings from one base, then evaluated alike
(experiments/compare_rewards.py). Each row comes from what the runs left in the comparison folder: the held-out score
on the common yardstick (eval/<name>/report.json), what training logged (runs/<name>/manifest.json: steps, reward,
judge calls, a stop), the cost (eval/<name>/run.json: timings, exit codes), and a published figure to set beside it."""

import json
from pathlib import Path
from typing import Any

from reports.charts import metric_bars
from reports.tables import group_of, metric, metric_names, num
from rubricrl.markdown import md_table


def read_reports(output_dir: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """The common yardstick's report (eval/<name>/report.json) of each policy that has one."""
    reports = {name: _read_json(output_dir / "eval" / name / "report.json") for name in names}
    return {name: report for name, report in reports.items() if report}


def collect_rows(
    output_dir: Path, descriptions: dict[str, str], trained: set[str], paper: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per name of `descriptions`, in its order; the names in `trained` had a training run (runs/<name>),
    the others (the base policy) were evaluated only."""
    reports, rows = read_reports(output_dir, list(descriptions)), []
    for name, description in descriptions.items():
        report, run = reports.get(name), _read_json(output_dir / "eval" / name / "run.json") or {}
        summary = (_read_json(output_dir / "runs" / name / "manifest.json") or {}).get("summary") or {}
        row = {"method": name, "description": description, "trained": name in trained}
        row["status"] = _status(row["trained"], report, run, summary)
        row |= dict(zip(("overall", "overall_std", "n"), metric(report, "overall_score") or (None, None, None)))
        axes = [key for key in metric_names([report or {}]) if group_of(key) == "axes" and key.count(":") == 1]
        row["axes"] = {key: dict(zip(("value", "std", "n"), metric(report, key))) for key in axes}
        row |= {key: summary.get(key) for key in ("steps", "reward_first", "reward_last")}
        row["judge_calls"] = (summary.get("judge") or {}).get("judge_calls")
        times = [run[key] for key in ("generate_s", "grade_s") if run.get(key) is not None]
        row |= {"train_s": run.get("train_wall_s"), "eval_s": round(sum(times), 1) if times else None}
        rows.append({**row, "wall_s": run.get("wall_s"), "paper": paper.get(name)})
    return rows


def _status(trained: bool, report: dict | None, run: dict[str, Any], summary: dict[str, Any]) -> str:
    if summary.get("stopped"):
        return f"stopped at step {summary.get('steps')}: {summary['stopped'].split(':')[0]}"
    if run.get("train_code"):
        return f"training failed (exit {run['train_code']})"
    if not report:
        return f"eval failed (exit {run.get('eval_code')})" if run and trained else "not evaluated"
    return "ok"


def results_table(rows: list[dict[str, Any]], paper_title: str) -> list[str]:
    """The markdown table: one row per policy, scores ± bootstrap std, the training reward, cost and the paper's."""
    axes = sorted({axis for row in rows for axis in row["axes"]})
    header = ["method", "training reward", "overall ± std", *axes, "reward first→last", "judge calls (train)"]
    return md_table([*header, "wall: train + eval", "status", paper_title], [_cells(row, axes) for row in rows])


def _cells(row: dict[str, Any], axes: list[str]) -> list[str]:
    scores = [{"value": row["overall"], "std": row["overall_std"]}, *(row["axes"].get(a) for a in axes)]
    paper, trained = row["paper"], row["trained"]
    return [
        f"**{row['method']}**",
        row["description"],
        *("–" if s is None or s["value"] is None else f"{num(s['value'])} ± {num(s['std'])}" for s in scores),
        f"{num(row['reward_first'])} → {num(row['reward_last'])}" if trained else "–",
        "–" if row["judge_calls"] is None else str(row["judge_calls"]),
        f"{seconds(row['train_s'])} + {seconds(row['eval_s'])}" if trained else f"eval {seconds(row['eval_s'])}",
        row["status"],
        f"{paper['name']}: {' / '.join(str(v) for k, v in paper.items() if k != 'name')}" if paper else "–",
    ]


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} s"


def write_chart(reports: dict[str, dict[str, Any]], path: Path, title: str) -> Path | None:
    """The overall and per-axis scores ± bootstrap std, one bar per policy (the report page's metric bars)."""
    names = [name for name in metric_names(reports.values()) if group_of(name) in ("overall", "axes")]
    chart = metric_bars(reports, names, title)
    if chart is not None:
        path.write_bytes(chart.png)
    return path if chart is not None else None


def log_to_wandb(rows: list[dict[str, Any]], chart: Path | None, group: str, output_dir: Path, command: str) -> None:
    """A `<group>-table` run beside the training runs: the table and the chart (offline without WANDB_API_KEY)."""
    import wandb

    from rubricrl.runs.training import wandb_init

    columns = ["method", "overall", "overall_std", "reward_first", "reward_last", "judge_calls", "train_s", "eval_s"]
    published = list(dict.fromkeys(key for row in rows for key in row["paper"] or {}))
    data = [[row[c] for c in [*columns, "status"]] + [(row["paper"] or {}).get(k) for k in published] for row in rows]
    table = wandb.Table(columns=[*columns, "status", *(f"paper_{key}" for key in published)], data=data)
    logged: dict[str, Any] = {"comparison": table}
    logged |= {"chart": wandb.Image(str(chart))} if chart is not None else {}
    run = wandb_init(command, output_dir, name=f"{group}-table", group=group, job_type="comparison")
    try:
        run.log(logged)
    finally:
        run.finish()


def _read_json(path: Path) -> Any:
    """What a run left, or None where it left nothing readable (not run yet, or killed while writing)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
