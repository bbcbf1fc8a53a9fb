"""Roles: who answers a call. A role names an endpoint, a model and the sampling parameters to use.

Stages ask for roles by name ("reference", "judge", "policy", ...). A role's entry under `roles` beats `defaults`
(every role), and at each level the command line beats the config file (connect.LLMSettings). A role without a
base_url is served by the embedded local model; one with several endpoints (endpoints.py) spreads its calls.
"""

import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from rubricrl.config import ConfigError, dataclass_from_dict, did_you_mean
from rubricrl.llm.endpoints import endpoint_urls

LOCAL_API_KEY = "EMPTY"  # a local vLLM server accepts any key
ROLE_NAMES = (
    "chat",  # chat
    "reference",
    "rubric_writer",
    "response_a",
    "response_b",
    "aggregator",
    "evolver",  # synth (and rurl train's evolution)
    "judge",  # grade, eval, ruft build, rurl train, probe, reward serve
    "policy",  # eval, ruft build
    "monitor",  # rurl train
    "attacker",  # probe
)
"""The roles commands read by these names; a config may name more in the settings below (NAMING_SETTINGS)."""
NAMING_SETTINGS = "synthesis.rubric_roles, ruft.candidates, grading.judge_role, judge_roles"
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""What vLLM's chat completions request accepts (ChatCompletionRequest.reasoning_effort), a superset of OpenAI's."""


@dataclass(frozen=True)
class Role:
    model: str | None = None
    """Model name at the endpoint; None: the model the local server serves."""
    base_url: str | list[str] | None = None
    """OpenAI-compatible endpoint, e.g. http://host:8000/v1; None: the local embedded server. Several endpoints
    serving the same model: a list, URLs separated by commas, or @FILE (one URL a line); kept as one string, the
    URLs separated by commas."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the key (the key itself is never stored or logged)."""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    reasoning_effort: str | None = None
    """For a reasoning model: how long it thinks before answering (the chat API's `reasoning_effort`). vLLM takes
    none | minimal | low | medium | high | xhigh | max; gpt-oss only low | medium | high (its own default: medium),
    and a template with `enable_thinking` (Qwen3) turns thinking off at none and on otherwise. Its reasoning counts
    against max_tokens: a reply cut off while thinking has no answer and is an error. None: not sent."""
    structured_outputs: bool = True
    """Send JSON schemas as `response_format`; False for endpoints without schema support (the reply is then
    parsed by the tolerant extractor alone)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Endpoint-specific request fields, e.g. {"top_k": 20} for vLLM."""

    def __post_init__(self) -> None:
        if self.base_url is not None:
            object.__setattr__(self, "base_url", ",".join(endpoint_urls(self.base_url)))
        checks = [
            ("temperature", lambda v: v >= 0, "at least 0"),
            ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
            ("max_tokens", lambda v: v >= 1, "at least 1"),
            ("reasoning_effort", REASONING_EFFORTS.__contains__, f"one of {', '.join(REASONING_EFFORTS)}"),
        ]
        for name, valid, expected in checks:
            value = getattr(self, name)
            if value is not None and not valid(value):
                raise ValueError(f"{name} must be {expected}, got {value}")

    @property
    def is_local(self) -> bool:
        return self.base_url is None

    @property
    def endpoints(self) -> list[str]:
        """The endpoint URLs (one, or several serving the same model)."""
        return self.base_url.split(",") if self.base_url else []

    def sampling_params(self) -> dict[str, Any]:
        """The request fields that shape the answer (part of the cache key)."""
        names = ("temperature", "top_p", "max_tokens", "seed", "stop", "reasoning_effort")
        params = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        if self.extra_body:
            params["extra_body"] = dict(self.extra_body)
        return params

    def api_key(self) -> str:
        if self.is_local or not self.api_key_env:  # "" marks a role bound to our own local server
            return LOCAL_API_KEY
        key = os.environ.get(self.api_key_env)
        if key:
            return key
        if all(map(_is_loopback, self.endpoints)):
            return LOCAL_API_KEY
        raise ConfigError(f"endpoint {self.base_url} needs an API key: set the environment variable {self.api_key_env}")

    def public(self) -> dict[str, Any]:
        """What may be written to manifests and logs: everything here, since the key is only named."""
        return asdict(self)


def resolve_roles(
    names: list[str],
    defaults: dict[str, Any] | None = None,
    entries: dict[str, Any] | None = None,
    *,
    source: str = "config",
) -> dict[str, Role]:
    """Build the named roles: each is `defaults` overlaid with its own entry in `entries`."""
    entries = entries or {}
    if not isinstance(entries, dict) or not all(isinstance(e, dict | None) for e in entries.values()):
        raise ConfigError(f"{source}: llm.roles must map role names to settings, got {entries!r:.200}")
    unused = set(entries) - set(names)
    if unused:  # one config serves several commands, so not an error; but say it, a typo would hide here
        print(
            f"[rubricrl] {source}: roles {sorted(unused)} are not used by this command (it uses {names})",
            file=sys.stderr,
        )
    if defaults:  # a mistake there is reported there, not in the first role that inherits it
        dataclass_from_dict(Role, defaults, f"{source}: llm.defaults")
    return {
        name: dataclass_from_dict(Role, role_entry(name, defaults, entries), f"{source}: roles.{name}")
        for name in names
    }


def role_entry(name: str, defaults: dict[str, Any] | None, entries: dict[str, Any] | None) -> dict[str, Any]:
    """Role `name`'s settings as given, not yet checked: `defaults` (every role) overlaid with its own entry in
    `entries` (llm.roles)."""
    return {**(defaults or {}), **((entries or {}).get(name) or {})}


def roles_named_in(config: dict[str, Any]) -> set[str]:
    """The role names a config mapping (a file, or a command's resolved settings) gives in NAMING_SETTINGS."""

    def section(name: str) -> dict:
        found = config.get(name)
        return found if isinstance(found, dict) else {}

    named = []
    for value in (
        section("synthesis").get("rubric_roles"),
        config.get("judge_roles"),
        section("ruft").get("candidates"),
    ):
        if isinstance(value, list | dict):
            named += list(value)
    named.append(section("grading").get("judge_role"))
    return {name for name in named if isinstance(name, str)}


def check_role_names(entries: dict[str, Any], configs: list[dict[str, Any]], source: str) -> None:
    """llm.roles may set roles this command does not read (one config file serves several commands), but not a
    role no command reads: a typo there would leave the role it meant on its defaults, unnoticed."""
    named = set(ROLE_NAMES).union(*(roles_named_in(config) for config in configs))
    unknown = sorted(set(entries or {}) - named)
    if unknown:
        in_file = ((configs[0].get("llm") or {}).get("roles") or {}) if configs and isinstance(configs[0], dict) else {}
        where = f"{source}: llm.roles" if set(unknown) <= set(in_file) else "--roles"
        raise ConfigError(
            f"{where} {unknown}: no command reads a role of that name{did_you_mean(unknown, named)}; the "
            f"roles are {', '.join(ROLE_NAMES)} and the names a config gives in {NAMING_SETTINGS} "
            "(`rubricrl COMMAND --help` lists the roles each command reads)"
        )


def bind_local(roles: dict[str, Role], base_url: str, model: str) -> dict[str, Role]:
    """Point the roles that have no endpoint at a local server and the name it serves their model under (which
    for a folder is not the path; see serve.served_name_for). The server is sent no API key of the user's."""
    return {
        name: replace(role, base_url=base_url, model=model, api_key_env="") if role.is_local else role
        for name, role in roles.items()
    }


def _is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in {"127.0.0.1", "localhost", "::1"}
