"""A judge grading answers its own model wrote pays what that model already likes (a model rates its own outputs
higher), so a comparison or a selection made that way says little. `eval` and `ruft build` refuse it unless the
user says so: decided from the settings alone, before a server starts or a call is made, so whether a server is up
changes nothing.

Two roles are one model when they name the same model, wherever it is served (the reason does not depend on the
address), or when they share a server and one names no model (it gets the one that server serves). Model names are
the same when they are equal ignoring case and a trailing slash (`Qwen/Qwen3-4B` and `qwen/qwen3-4b/`); a local
checkpoint counts under its path and under the name the local server serves it as. Servers are the same when their
URLs are, once normalised: scheme and host in lower case, every loopback address (localhost, 127.x.x.x, ::1, 0.0.0.0)
one, the default port (80, 443) written or not, and a trailing slash or final /v1 dropped (the client posts to the
URL as written, but a server that answers both ways, as llama.cpp's does, is one server, and vLLM answers only under
/v1). A role with no base_url is the local server, at each address a command looks for it: the one `rubricrl serve`
advertises, $RUBRICRL_LOCAL_SERVER, and the default port."""

import ipaddress
import json
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from rubricrl.config import ConfigError
from rubricrl.llm.connect import LLMSettings
from rubricrl.llm.endpoints import endpoint_urls
from rubricrl.llm.roles import role_entry
from rubricrl.serving.discovery import DEFAULT_PORT, HOST, LOCAL_SERVER_ENV, state_file
from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME
from rubricrl.serving.server import served_name_for

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Resolved:
    """Where a role is served and which model, as far as its settings tell."""

    urls: tuple[str, ...]
    """Its endpoints; for a role without base_url, the addresses the local server may have."""
    model: str | None
    """The model it names (a local role naming none: the embedded model); None: the one its endpoint serves."""
    local: bool

    @property
    def servers(self) -> frozenset[tuple]:
        return frozenset(map(server_of, self.urls))

    @property
    def names(self) -> frozenset[str]:
        if self.model is None:
            return frozenset()
        names = {self.model, served_name_for(self.model)} if self.local else {self.model}
        return frozenset(name.strip().rstrip("/").casefold() for name in names)

    def describe(self, model: str | None, shared: frozenset[tuple]) -> str:
        """`model` here, for a message: at the endpoint it shares with the other role if any, else its first."""
        url = next((u for u in self.urls if server_of(u) in shared), None)
        if self.local:
            model = f"{model} (the embedded model)" if model == EMBEDDED_MODEL_NAME else model
            url = f"the local server ({url})" if url else "the local server"
        more = f" (and {len(self.urls) - 1} more)" if len(self.urls) > 1 else ""
        return f"{model or 'the model it serves'} at {url or self.urls[0] + more}"


def server_of(url: str) -> tuple:
    """(scheme, host, port, path) with the differences that do not change the server taken out."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if host == "localhost" or _is_loopback_ip(host):
        host = "localhost"
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # not a number: compared as written
        port = parts.netloc.rsplit(":", 1)[-1]
    return scheme, host, port, parts.path.rstrip("/").removesuffix("/v1")


def _is_loopback_ip(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    address = getattr(address, "ipv4_mapped", None) or address
    return address.is_loopback or address.is_unspecified


def local_addresses(served_name: str) -> tuple[str, ...]:
    """Where a command finds the local server for `served_name` (discovery.find_running), running or not: a server
    started on a free port instead is new, and no other role can name its address."""
    urls = []
    try:
        state = json.loads(state_file().read_text())
        if state["model"] == served_name:
            urls += state["base_url"].split(",")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    urls += [url for url in os.environ.get(LOCAL_SERVER_ENV, "").split(",") if url.strip()]
    return (*urls, f"http://{HOST}:{DEFAULT_PORT}/v1")


def resolved_model(settings: LLMSettings, role: str) -> Resolved:
    """What `role` resolves to in `settings`: no base_url is the local server, serving the embedded model unless the
    role names one."""
    entry = role_entry(role, settings.role_defaults(), settings.roles)
    if not entry.get("base_url"):
        model = entry.get("model") or EMBEDDED_MODEL_NAME
        return Resolved(local_addresses(served_name_for(model)), model, local=True)
    try:
        urls = tuple(endpoint_urls(entry["base_url"], f"roles.{role}.base_url"))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return Resolved(urls, entry.get("model"), local=False)


def check_judge_apart(settings: LLMSettings, judge_role: str, answering: list[str], allowed: bool, flag: str) -> None:
    """Refuse (one line naming both roles, the model, the endpoints and `flag`) when a role in `answering` resolves
    to the judge's model, as the module says, unless `allowed` (the `flag` the user passed)."""
    if allowed:
        return
    judge = resolved_model(settings, judge_role)
    for role in answering:
        other = resolved_model(settings, role)
        shared = other.servers & judge.servers
        if not (other.names & judge.names or (shared and None in (other.model, judge.model))):
            continue
        # a role naming no model at a shared server gets the other's
        ours, theirs = other.model or judge.model, judge.model or other.model
        here, there = other.describe(ours, shared), judge.describe(theirs, shared)
        both = f"both resolve to {here}" if here == there else f"resolve to one model: {here} and {there}"
        raise ConfigError(
            f"the judge would grade answers of its own model: roles '{role}' and '{judge_role}' {both}; give the "
            f"judge one of its own (--roles {judge_role}.base_url=URL {judge_role}.model=NAME), or pass {flag} to "
            "grade them anyway"
        )
