"""Who may call the reward service (engines/service.py), settled at start-up: it spends judge calls on request, so
listening beyond this machine needs a bearer token (env TOKEN_ENV, at least MIN_TOKEN_LENGTH characters)."""

import ipaddress

from rubricrl.errors import UserError

TOKEN_ENV = "RUBRICRL_REWARD_TOKEN"
MIN_TOKEN_LENGTH = 16


class ServiceError(UserError):
    """A setting that makes the service unsafe or unusable, said at start-up."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_token(host: str, token: str | None) -> str | None:
    """The token the service requires (None: none), or a ServiceError: off loopback one is needed."""
    token = token or None
    if token is None and not is_loopback(host):
        raise ServiceError(
            f"--host {host} listens beyond this machine: the service spends judge calls on request, "
            f"so it needs a bearer token; set {TOKEN_ENV} (at least {MIN_TOKEN_LENGTH} characters, "
            "e.g. `export RUBRICRL_REWARD_TOKEN=$(openssl rand -hex 24)`) and send it as "
            "`Authorization: Bearer ...`, or listen on 127.0.0.1"
        )
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise ServiceError(
            f"{TOKEN_ENV} is {len(token)} characters; use at least {MIN_TOKEN_LENGTH} (e.g. `openssl rand -hex 24`)"
        )
    return token
