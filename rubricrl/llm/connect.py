"""From a command's LLM settings to roles at live endpoints and the one client: `open_llm` is how every command
that calls models starts.

Roles without an endpoint are served by one local vLLM server (reused if one is running, else started for the
duration of the `with` block). A base_url without a model takes the one model that endpoint serves. Roles that end
up on the embedded model (SmolLM2-135M-Instruct on a CPU) and set no max_tokens get the command's CPU budgets: left
without one, that model rambles to thousands of tokens, minutes per request on two cores.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from rubricrl.config import ConfigError
from rubricrl.embedded_model import EMBEDDED_MODEL_NAME
from rubricrl.llm.cache import ResponseCache
from rubricrl.llm.client import LLMClient
from rubricrl.llm.roles import Role, bind_local, resolve_roles
from rubricrl.serve import listed_models, local_endpoint, served_models

DEFAULT_CPU_MAX_TOKENS = 256
REACHABLE_TIMEOUT = 10.0  # seconds for an endpoint to accept a connection and answer GET /models


@dataclass
class LLMSettings:
    """The `llm:` section: who answers each role, and how the client talks to them."""

    config_section: ClassVar[str] = "llm"

    base_url: str | None = None
    """OpenAI-compatible endpoint for every role (key from OPENAI_API_KEY); a role's own entry wins over it.
    Without one, roles are served by the embedded model on this machine."""
    model: str | None = None
    """Model for every role (a role's own entry wins). With base_url and no model: the one model it serves."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """Settings for every role: api_key_env, temperature, top_p, max_tokens, seed, stop, structured_outputs,
    extra_body (e.g. --defaults temperature=0.7); the endpoint and model for every role are base_url and model."""
    roles: dict[str, Any] = field(default_factory=dict)
    """Per-role settings, more specific than defaults, e.g. --roles judge.model=gpt-4.1-mini judge.temperature=0"""
    concurrency: int = 16
    """Requests in flight at once, over all roles."""
    timeout: float = 600.0
    """Seconds one request may take; a request that times out is sent once more with twice the limit."""
    cache: bool = True
    """Read and write the response cache ($RUBRICRL_HOME/cache/responses): a call answered once is never paid again."""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.timeout <= 0:
            raise ValueError("concurrency must be at least 1 and timeout above 0")
        if isinstance(self.defaults, dict) and {"base_url", "model"} & set(self.defaults):
            # one place for each setting, so that "the command line wins over the file" has one meaning
            raise ValueError("set the endpoint and model for every role with llm.base_url / llm.model "
                             "(--base-url / --model), not inside llm.defaults")  # fmt: skip

    def role_defaults(self) -> dict[str, Any]:
        shorthand = {key: value for key, value in (("base_url", self.base_url), ("model", self.model)) if value}
        return {**self.defaults, **shorthand}


@dataclass
class LLMSession:
    """Roles bound to live endpoints, and the client settings: `client()` makes the one client for them."""

    roles: dict[str, Role]
    settings: LLMSettings
    cpu_budgets: dict[str, int]
    """max_tokens given to roles on the embedded model that set none."""

    def client(self, **options: Any) -> LLMClient:
        cache = ResponseCache() if self.settings.cache else None
        return LLMClient(self.roles, cache=cache, concurrency=self.settings.concurrency, timeout=self.settings.timeout,
                         **options)  # fmt: skip

    def budget_note(self) -> str | None:
        """One line for a command's summary, when CPU budgets were applied."""
        if not self.cpu_budgets:
            return None
        listed = ", ".join(f"{name} {tokens}" for name, tokens in self.cpu_budgets.items())
        return (f"max_tokens for the embedded model on CPU (roles without their own): {listed}; set a role's "
                "max_tokens (--roles NAME.max_tokens=N or llm.roles in --config) to change them")  # fmt: skip


@contextmanager
def open_llm(
    settings: LLMSettings, names: list[str], *, source: str = "config", cpu_budgets: dict[str, int] | None = None,
) -> Iterator[LLMSession]:  # fmt: skip
    """Resolve the named roles, start or reuse the local server they need, and apply CPU budgets where a role is
    on the embedded model (`cpu_budgets[name]`, else DEFAULT_CPU_MAX_TOKENS)."""
    roles = resolve_roles(names, settings.role_defaults(), settings.roles, source=source)
    listed: dict[str, list[str]] = {}  # each endpoint asked once
    roles = {name: _with_model(name, role, source, listed) for name, role in roles.items()}
    _check_reachable(roles, source, answered=set(listed))
    local_models = {role.model for role in roles.values() if role.is_local}
    if len(local_models) > 1:
        raise ConfigError(
            f"{source}: roles without base_url ask for different local models {sorted(map(str, local_models))}; "
            "one local server serves one model: give the others a base_url"
        )
    with _local(local_models) as endpoint:
        if endpoint is not None:
            roles = bind_local(roles, endpoint.base_url, endpoint.model)
        budgets = {name: (cpu_budgets or {}).get(name, DEFAULT_CPU_MAX_TOKENS) for name, role in roles.items()
                   if role.model == EMBEDDED_MODEL_NAME and role.max_tokens is None}  # fmt: skip
        roles = {name: replace(role, max_tokens=budgets.get(name, role.max_tokens)) for name, role in roles.items()}
        session = LLMSession(roles, settings, budgets)
        if budgets:
            print(f"[rubricrl] {session.budget_note()}", file=sys.stderr)
        yield session


def _check_reachable(roles: dict[str, Role], source: str, answered: set[str]) -> None:
    """Each endpoint once, before any paid call (those in `answered` already listed their model): one that refuses
    connections or does not answer at all is a one-line error naming it (an HTTP error status is not: some
    endpoints do not list models)."""
    for url in sorted({role.base_url.rstrip("/") for role in roles.values() if not role.is_local} - answered):
        try:
            listed_models(url, timeout=REACHABLE_TIMEOUT)
        except (OSError, ValueError) as error:
            names = sorted(name for name, role in roles.items() if (role.base_url or "").rstrip("/") == url)
            reason = getattr(error, "reason", error)
            raise ConfigError(f"{source}: endpoint {url} (roles {names}) does not answer: {reason}; is the server "
                              "up, and the URL right (e.g. http://host:8000/v1)?") from None  # fmt: skip


@contextmanager
def _local(models: set) -> Iterator[Any]:
    if not models:
        yield None
        return
    with local_endpoint(next(iter(models))) as endpoint:
        yield endpoint


def _with_model(name: str, role: Role, source: str, asked: dict[str, list[str]]) -> Role:
    """A role at an endpoint without a model name takes the one model the endpoint serves (vLLM serves one)."""
    if role.is_local or role.model is not None:
        return role
    url = role.base_url.rstrip("/")
    if url not in asked:
        asked[url] = served_models(url, api_key=role.api_key())
    listed = asked[url]
    if len(listed) == 1:
        return replace(role, model=listed[0])
    found = f"it serves {listed[:5]}" if listed else "its /models lists nothing (or it does not answer)"
    raise ConfigError(f"{source}: role '{name}' points at {role.base_url} but names no model, and {found}: "
                      "give --model or llm.roles.NAME.model")  # fmt: skip
