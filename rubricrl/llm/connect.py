"""From a command's LLM settings to roles at live endpoints and the one client: every command that calls models
starts with `open_llm`. Roles without an endpoint share one local vLLM server, reused or started for the `with` block
(one per torchrun / accelerate launch: serve.local_endpoint). A base_url without a model takes the one it serves.
Roles on the embedded model (SmolLM2-135M-Instruct on a CPU) with no max_tokens get the command's CPU budgets:
without one, that model rambles to thousands of tokens, minutes per request on two cores.
"""

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from rubricrl.config import ConfigError
from rubricrl.llm.cache import ResponseCache
from rubricrl.llm.client import LLMClient
from rubricrl.llm.endpoints import endpoint_urls
from rubricrl.llm.roles import Role, bind_local, check_role_names, resolve_roles
from rubricrl.serving.discovery import listed_models
from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME
from rubricrl.serving.server import local_endpoint

DEFAULT_CPU_MAX_TOKENS = 256
REACHABLE_TIMEOUT = 10.0  # seconds for an endpoint to accept a connection and answer GET /models


@dataclass
class LLMSettings:
    """The `llm:` section: who answers each role, and how the client talks to them."""

    config_section: ClassVar[str] = "llm"

    base_url: str | list[str] | None = None
    """OpenAI-compatible endpoint for every role (key from OPENAI_API_KEY); a role's own entry wins over it.
    Several endpoints serving the same model: URLs separated by commas, a YAML list, or @FILE (one URL a line);
    calls are spread over them. Without one, roles are served by the embedded model on this machine."""
    model: str | None = None
    """Model for every role (a role's own entry wins). With base_url and no model: the one model it serves."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """Settings for every role: api_key_env, temperature, top_p, max_tokens, seed, stop, structured_outputs,
    extra_body (e.g. --defaults temperature=0.7); the endpoint and model for every role are base_url and model."""
    roles: dict[str, Any] = field(default_factory=dict)
    """Per-role settings, more specific than defaults, e.g. --roles judge.model=gpt-4.1-mini judge.temperature=0"""
    concurrency: int = 16
    """Requests in flight at once on each endpoint (over all roles that use it)."""
    timeout: float = 600.0
    """Seconds one request may take; a request that times out is sent once more with twice the limit."""
    max_retries: int = 5
    """Times a request is sent again after no connection, a 408/409/429/5xx or a timeout (with backoff)."""
    cache: bool = True
    """Read and write the response cache ($RUBRICRL_HOME/cache/responses): a call answered once is never paid again."""
    server_timeout: float = 600.0
    """Seconds a local vLLM server that the command starts may take to come up (a large model from a slow disk can
    need more); past them the command stops it and ends with one line naming its log."""

    def __post_init__(self) -> None:
        for name, valid, expected in (
            ("concurrency", self.concurrency >= 1, "at least 1"),
            ("timeout", self.timeout > 0, "above 0 (seconds)"),
            ("max_retries", self.max_retries >= 0, "at least 0"),
            ("server_timeout", self.server_timeout > 0, "above 0 (seconds)"),
        ):
            if not valid:
                raise ValueError(f"{name} (--{name.replace('_', '-')}) must be {expected}, got {getattr(self, name)}")
        if isinstance(self.base_url, str) and self.base_url.lower() in ("none", "null"):
            self.base_url = None  # `--base-url none`, as every optional flag reads it (a list is not optional there)
        if self.base_url is not None:
            endpoint_urls(self.base_url, "base_url (--base-url)")
        if isinstance(self.defaults, dict) and {"base_url", "model"} & set(self.defaults):
            # one place for each setting, so that "the command line wins over the file" has one meaning
            raise ValueError(
                "set the endpoint and model for every role with llm.base_url / llm.model "
                "(--base-url / --model), not inside llm.defaults"
            )

    def check_across(self, configs: list[dict[str, Any]], source: str) -> None:
        """What the other sections tell about this one (config.parse_settings calls it): every role named in
        llm.roles is one some command reads."""
        check_role_names(self.roles, configs, source)

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
        options = {
            "concurrency": self.settings.concurrency,
            "timeout": self.settings.timeout,
            "max_retries": self.settings.max_retries,
            **options,
        }
        return LLMClient(self.roles, cache=cache, **options)

    def budget_note(self) -> str | None:
        """One line for a command's summary, when CPU budgets were applied."""
        if not self.cpu_budgets:
            return None
        listed = ", ".join(f"{name} {tokens}" for name, tokens in self.cpu_budgets.items())
        return (
            f"max_tokens for the embedded model on CPU (roles without their own): {listed}; set a role's "
            "max_tokens (--roles NAME.max_tokens=N or llm.roles in --config) to change them"
        )


@contextmanager
def open_llm(
    settings: LLMSettings,
    names: list[str],
    *,
    source: str = "config",
    cpu_budgets: dict[str, int] | None = None,
) -> Iterator[LLMSession]:
    """Resolve the named roles, start or reuse the local server they need, and apply CPU budgets where a role is
    on the embedded model (`cpu_budgets[name]`, else DEFAULT_CPU_MAX_TOKENS)."""
    roles = resolve_roles(names, settings.role_defaults(), settings.roles, source=source)
    listed = _list_endpoints(roles, source)  # each endpoint asked once
    roles = {name: _with_model(name, role, source, listed) for name, role in roles.items()}
    local_models = {role.model for role in roles.values() if role.is_local}
    if len(local_models) > 1:
        raise ConfigError(
            f"{source}: roles without base_url ask for different local models {sorted(map(str, local_models))}; "
            "one local server serves one model: give the others a base_url"
        )
    with _local(local_models, settings.server_timeout) as endpoint:
        if endpoint is not None:
            roles = bind_local(roles, endpoint.base_url, endpoint.model)
        budgets = {
            name: (cpu_budgets or {}).get(name, DEFAULT_CPU_MAX_TOKENS)
            for name, role in roles.items()
            if role.model == EMBEDDED_MODEL_NAME and role.max_tokens is None
        }
        roles = {name: replace(role, max_tokens=budgets.get(name, role.max_tokens)) for name, role in roles.items()}
        session = LLMSession(roles, settings, budgets)
        if budgets:
            print(f"[rubricrl] {session.budget_note()}", file=sys.stderr)
        yield session


def _list_endpoints(roles: dict[str, Role], source: str) -> dict[str, list[str]]:
    """The models each endpoint lists, asking each once (all at once), before any paid call. A role none of whose
    endpoints accepts a connection and answers is a one-line error naming them; one of several that does not is
    named on stderr (the client takes it out of rotation). An HTTP error status is an answer: some endpoints do
    not list models."""
    urls = sorted({url for role in roles.values() for url in role.endpoints})
    keys = {url: _key_for(url, roles) for url in urls}
    with ThreadPoolExecutor(max_workers=min(16, len(urls) or 1)) as pool:
        answers = dict(zip(urls, pool.map(lambda url: _listed_or_error(url, keys[url]), urls)))
    listed = {url: answer for url, answer in answers.items() if isinstance(answer, list)}
    warned = set()
    for _name, role in roles.items():
        down = [url for url in role.endpoints if url not in listed]
        if not down:
            continue
        users = sorted(n for n, r in roles.items() if set(down) & set(r.endpoints))
        reasons = "; ".join(f"{url}: {answers[url]}" for url in down)
        if len(down) == len(role.endpoints):
            where = f"endpoint {down[0]}" if len(down) == 1 else f"endpoints {', '.join(down)}"
            raise ConfigError(
                f"{source}: {where} (roles {users}) {'does' if len(down) == 1 else 'do'} not answer: "
                f"{answers[down[0]] if len(down) == 1 else reasons}; is the server up, and the URL "
                "right (e.g. http://host:8000/v1)?"
            )
        if reasons not in warned:
            warned.add(reasons)
            print(
                f"[rubricrl] {source}: {reasons} (roles {users}): no answer; calls go to the other endpoints",
                file=sys.stderr,
            )
    return listed


def _key_for(url: str, roles: dict[str, Role]) -> str | None:
    """An API key of a role at `url`, for endpoints that list models only to a caller with a key."""
    for role in roles.values():
        if url in role.endpoints:
            try:
                return role.api_key()
            except ConfigError:  # reported when the role is called
                continue
    return None


def _listed_or_error(url: str, api_key: str | None) -> list[str] | str:
    try:
        return listed_models(url, timeout=REACHABLE_TIMEOUT, api_key=api_key)
    except (OSError, ValueError) as error:
        return str(getattr(error, "reason", error))


@contextmanager
def _local(models: set, timeout: float) -> Iterator[Any]:
    if not models:
        yield None
        return
    with local_endpoint(next(iter(models)), timeout) as endpoint:
        yield endpoint


def _with_model(name: str, role: Role, source: str, listed: dict[str, list[str]]) -> Role:
    """A role at endpoints without a model name takes the one model they serve (vLLM serves one); several
    endpoints must serve the same one."""
    if role.is_local or role.model is not None:
        return role
    served = {url: listed[url] for url in role.endpoints if url in listed}
    models = {model for found in served.values() for model in found}
    if len(models) == 1:
        return replace(role, model=models.pop())
    if len(models) > 1 and all(len(found) == 1 for found in served.values()):
        found = ", ".join(f"{url} serves {found[0]}" for url, found in served.items())
        raise ConfigError(
            f"{source}: role '{name}' names endpoints that serve different models ({found}): "
            "give each role endpoints of one model"
        )
    first = next(iter(served.values()))
    found = f"it serves {first[:5]}" if first else "its /models lists nothing"
    raise ConfigError(
        f"{source}: role '{name}' points at {role.base_url} but names no model, and {found}: "
        "give --model or llm.roles.NAME.model"
    )
