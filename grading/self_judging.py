"""A judge grading answers its own model wrote pays what that model already likes (a model rates its own outputs
higher), so a comparison or a selection made that way says little. `eval` and `ruft build` refuse it unless the
user says so: decided from the settings alone, before a server starts or a call is made."""

from rubricrl.config import ConfigError
from rubricrl.llm import LLMSettings


def resolved_model(settings: LLMSettings, role: str) -> tuple[str, str | None]:
    """(endpoint, model) a role resolves to, as far as the settings tell: no base_url is this machine's local server;
    no model, the one model its endpoint serves."""
    entry = {**settings.role_defaults(), **(settings.roles.get(role) or {})}
    base_url = entry.get("base_url")
    return ",".join(base_url) if isinstance(base_url, list) else base_url or "the local server", entry.get("model")


def check_judge_apart(settings: LLMSettings, judge_role: str, answering: list[str], allowed: bool, flag: str) -> None:
    """Refuse (one line naming both) when a role in `answering` resolves to the judge's endpoint and model (a role
    naming no model gets the one its endpoint serves: the same), unless `allowed` (the `flag` the user passed)."""
    if allowed:
        return
    endpoint, judge_model = resolved_model(settings, judge_role)
    for role in answering:
        where, model = resolved_model(settings, role)
        if where == endpoint and (model == judge_model or None in (model, judge_model)):
            named = model or judge_model or "the model it serves"
            raise ConfigError(
                f"the judge would grade answers of its own model: roles '{role}' and '{judge_role}' both resolve "
                f"to {named} at {endpoint}; give the judge one of its own (--roles {judge_role}.base_url=URL "
                f"{judge_role}.model=NAME), or pass {flag} to grade them anyway"
            )
