"""A judge grading answers its own model wrote pays what that model already likes (a model rates its own outputs
higher), so a comparison or a selection made that way says little. `eval` and `ruft build` refuse it unless the
user says so: decided from the settings alone, before a server starts or a call is made."""

from rubricrl.config import ConfigError
from rubricrl.llm import LLMSettings
from rubricrl.llm.endpoints import endpoint_urls

LOCAL = "the local server"


def resolved_model(settings: LLMSettings, role: str) -> tuple[frozenset[str], str | None]:
    """(endpoints, model) a role resolves to, as far as the settings tell: no base_url is this machine's local
    server, serving the embedded model unless the role names one; at an endpoint, no model is the one it serves
    (None here)."""
    entry = {**settings.role_defaults(), **(settings.roles.get(role) or {})}
    if not entry.get("base_url"):
        return frozenset([LOCAL]), entry.get("model") or "the embedded model"
    try:
        urls = frozenset(endpoint_urls(entry["base_url"], f"roles.{role}.base_url"))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return urls, entry.get("model")


def check_judge_apart(settings: LLMSettings, judge_role: str, answering: list[str], allowed: bool, flag: str) -> None:
    """Refuse (one line naming both) when a role in `answering` shares an endpoint with the judge and resolves to its
    model (at an endpoint, a role naming no model gets the one it serves: the same), unless `allowed` (the `flag`
    the user passed)."""
    if allowed:
        return
    judge_urls, judge_model = resolved_model(settings, judge_role)
    for role in answering:
        urls, model = resolved_model(settings, role)
        shared = urls & judge_urls
        if shared and (model == judge_model or None in (model, judge_model)):
            named = model or judge_model or "the model it serves"
            raise ConfigError(
                f"the judge would grade answers of its own model: roles '{role}' and '{judge_role}' both resolve "
                f"to {named} at {min(shared)}; give the judge one of its own (--roles {judge_role}.base_url=URL "
                f"{judge_role}.model=NAME), or pass {flag} to grade them anyway"
            )
