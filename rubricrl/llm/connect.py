"""From command-line flags and a config to roles that point at live endpoints."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rubricrl.config import ConfigError
from rubricrl.llm.roles import Role, bind_local, resolve_roles
from rubricrl.serve import local_endpoint


@contextmanager
def connected_roles(
    names: list[str],
    llm_config: dict[str, Any] | None = None,
    *,
    base_url: str | None = None,
    model: str | None = None,
    source: str = "config",
) -> Iterator[dict[str, Role]]:
    """Resolve the named roles; those without an endpoint are served by one local server (reused if one is
    running, else started for the duration of the `with` block)."""
    roles = resolve_roles(names, llm_config, base_url=base_url, model=model, source=source)
    local_models = {role.model for role in roles.values() if role.is_local}
    if not local_models:
        yield roles
        return
    if len(local_models) > 1:
        raise ConfigError(
            f"{source}: roles without base_url ask for different local models {sorted(map(str, local_models))}; "
            "one local server serves one model: give the others a base_url"
        )
    with local_endpoint(local_models.pop()) as endpoint:
        yield bind_local(roles, endpoint.base_url, endpoint.model)
