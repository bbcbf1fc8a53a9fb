"""What a folder's config and manifest say, as the short texts its heading lists (models, judge, method, counts)."""

from typing import Any

from rubricrl import markdown


def present(facts: dict[str, Any]) -> dict[str, str]:
    """The facts that have a value (None, False, "", {} and [] mean: the folder does not say)."""
    return {k: str(v) for k, v in facts.items() if v not in (None, False, "", {}, [])}


def role_model(config: dict[str, Any], role: str) -> str | None:
    """The model a role of the `llm:` section names (its own entry, else the section's default)."""
    llm = config.get("llm") or {}
    entry = (llm.get("roles") or {}).get(role) or {}
    return entry.get("model") or llm.get("model")


def policy(config: dict[str, Any]) -> str | None:
    """What answered an eval: given responses, a graded file, or the policy model."""
    if config.get("responses"):
        return f"responses from {config['responses']}"
    if config.get("graded"):
        return f"graded file {config['graded']}"
    return config.get("policy") or role_model(config, "policy") or (config and "the local model")


def judge(config: dict[str, Any], recorded: dict[str, Any]) -> str | None:
    """The judge model and mode: as recorded with the grades (`Grader.metadata`), else as the config sets them."""
    grading = config.get("grading") or {}
    model = recorded.get("judge_model") or role_model(config, grading.get("judge_role", "judge"))
    mode, samples = recorded.get("mode") or grading.get("mode"), recorded.get("samples") or grading.get("samples")
    if not model and not mode:
        return None
    extra = f", {samples} samples per verdict" if samples and samples > 1 else ""
    return f"{model or 'the local model'} ({mode}{extra})"


def model(config: dict[str, Any]) -> str | None:
    """The trained model: its base, and whether LoRA (merged or not)."""
    name = config.get("model_name_or_path")
    if not name:
        return "the embedded model (default)" if config else None
    if not config.get("use_peft"):
        return str(name)
    return f"{name} (LoRA{', merged' if config.get('merge_adapter', True) else ''})"


def method(config: dict[str, Any]) -> str:
    """A RuRL run's GRPO settings that matter most when comparing runs."""
    parts = [
        f"loss {config['loss_type']}" if config.get("loss_type") else "",
        f"{config['num_generations']} generations per prompt" if config.get("num_generations") else "",
        f"learning rate {config['learning_rate']}" if config.get("learning_rate") is not None else "",
        f"beta {config['beta']}" if config.get("beta") is not None else "",
        f"max_steps {config['max_steps']}" if (config.get("max_steps") or -1) > 0 else "",
    ]
    return ", ".join(p for p in parts if p)


def training_data(data: dict[str, Any], config: dict[str, Any]) -> str | None:
    source = data.get("source") or config.get("rubrics")
    if not source:
        return None
    rows = f": {data['train_rows']} training rows, {data['eval_rows']} held out" if "train_rows" in data else ""
    return f"{source}{rows}"


def judge_totals(totals: dict[str, Any]) -> str | None:
    """A RuRL run summary's judge counts."""
    if not totals:
        return None
    return (
        f"{totals.get('completions')} completions graded, {totals.get('unscored')} unscored, "
        f"{totals.get('failed_verdicts')} of {totals.get('verdicts')} verdicts failed, "
        f"{totals.get('judge_calls')} judge calls"
    )


def pct(value: float | None) -> str | None:
    """A share as a fact: None (the fact left out) when there is none."""
    return None if value is None else markdown.pct(value)
