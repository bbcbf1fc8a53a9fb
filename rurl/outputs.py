"""What `rurl train` writes beside the model: before training, the rows left out and the held-out ids; after it,
criteria.json, log_history.json, reward.png and the manifest (last), and the summary on stderr."""

import json
import sys
from pathlib import Path
from typing import Any

from rubricrl import charts
from rubricrl.queries import write_rejected
from rubricrl.runs.card import ModelCard
from rubricrl.runs.jsonl import write_whole
from rubricrl.runs.manifest import package_versions, write_manifest
from rurl.data import RurlData
from rurl.watch.summary import log_criteria, summary_text

COMMAND = "rurl train"


def write_inputs(data: RurlData, output_dir: Path) -> None:
    """The rows left out (rurl.bad_rows: skip) and the held-out ids, before training."""
    if data.rejected:
        write_rejected(data.rejected, output_dir / "rejected.jsonl")
    if data.evaluation:
        (output_dir / "eval_ids.txt").write_text("".join(f"{row.id}\n" for row in data.evaluation))


def write_outputs(
    trainer,
    output_dir: Path,
    config: dict[str, Any],
    data_info: dict[str, Any],
    criteria: list[dict[str, Any]],
    summary: dict[str, Any],
    wandb: Any,
) -> None:
    """What the run leaves beside the model (main process): criteria.json, log_history.json, reward.png and the
    manifest, last; the summary on stderr."""
    write_whole(output_dir / "criteria.json", json.dumps(criteria, indent=1, ensure_ascii=False))
    if wandb is not None and criteria:
        log_criteria(wandb, criteria)
    write_whole(output_dir / "log_history.json", json.dumps(trainer.state.log_history, indent=1))
    write_reward_plot(trainer.state.log_history, output_dir / "reward.png")
    if not summary.get("stopped"):  # a stopped run saved a checkpoint, not a model
        model_card(config, data_info, summary).write(output_dir, config)
    write_manifest(
        output_dir,
        {"command": COMMAND, "config": config, "data": data_info, "versions": package_versions(), "summary": summary},
    )
    print(f"{COMMAND}: {summary_text(summary, output_dir)}", file=sys.stderr)


def model_card(config: dict[str, Any], data_info: dict[str, Any], summary: dict[str, Any]) -> ModelCard:
    """The trained model's card: its base, GRPO with the rubric reward, the rubrics and the judge it was trained on."""
    evaluation = summary.get("eval") or {}
    score = evaluation.get("overall_score") if isinstance(evaluation, dict) else None
    return ModelCard(
        command=COMMAND,
        base_model=config["model_name_or_path"],
        method=f"trained with RuRL (rubricrl): reinforcement learning with TRL's GRPOTrainer (loss "
        f"`{config.get('loss_type')}`) on a rubric reward, each completion graded criterion by criterion by a "
        "judge and scored as the share of the rubric's points it earns.",
        dataset=data_info["source"],
        facts=[
            f"{data_info['train_rows']} training queries, {data_info['eval_rows']} held out",
            f"judge: {data_info['judge']['judge_model']} ({data_info['judge']['mode']})",
            f"training: {summary['steps']} steps, {config.get('num_generations')} completions a query, mean reward "
            f"{summary.get('reward_first') or 0:.3f} at the first step, {summary.get('reward_last') or 0:.3f} at the last",
            *([f"held-out score at the end: {score:.3f}"] if isinstance(score, float) else []),
        ],
        tags=["rurl", "grpo"],
        use_peft=bool(config.get("use_peft")),
        merged=bool(config.get("merge_adapter", True)),
    )


def write_reward_plot(log_history: list[dict[str, Any]], path: Path) -> None:
    """The mean reward per logged step, and the eval overall score where there is one."""
    train = [(e["step"], e["reward"]) for e in log_history if e.get("reward") is not None]
    evals = [(e["step"], e["eval/overall_score"]) for e in log_history if e.get("eval/overall_score") is not None]
    if not train and not evals:
        return
    figure, axis = charts.figure(6, 3.5)
    charts.curves(axis, {"train reward (mean)": train}, marker=".")
    charts.curves(axis, {"eval overall score": evals}, marker="o")
    axis.set(xlabel="step", ylabel="rubric score")
    axis.legend()
    charts.save_png(figure, path)
