"""Finding a running OpenAI-compatible server: the models a URL serves (/models), the local server `rubricrl serve`
advertises in `$RUBRICRL_HOME/server.json` (else one named by $RUBRICRL_LOCAL_SERVER, else one on the default port),
and free ports for new ones. Starting servers, and sharing one, is serve.py's."""

import json
import os
import socket
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rubricrl.home import rubricrl_home
from rubricrl.runs.jsonl import write_whole
from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME

DEFAULT_PORT = 8750
HOST = "127.0.0.1"
LOCAL_SERVER_ENV = "RUBRICRL_LOCAL_SERVER"
"""A running server's base URL for commands to reuse instead of starting one: one started on another port or
under another RUBRICRL_HOME (the test suite's shared server: tests run each command with a home of its own)."""


@dataclass(frozen=True)
class Endpoint:
    """A running server: where it answers and which model name it serves."""

    base_url: str
    model: str
    pid: int | None = None


def listed_models(base_url: str, timeout: float = 2.0, api_key: str | None = None) -> list[str]:
    """The model names a server lists at /models; [] when it answers with an error status or something else.
    Raises OSError (or ValueError for a malformed URL) when nothing answers at all."""
    request = urllib.request.Request(f"{base_url}/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return [m["id"] for m in json.load(response)["data"]]
    except (urllib.error.HTTPError, json.JSONDecodeError, KeyError, TypeError):  # it answered, not with a list
        return []


def served_models(base_url: str, timeout: float = 2.0, api_key: str | None = None) -> list[str]:
    """The model names a server lists at /models; [] when nothing answers there."""
    try:
        return listed_models(base_url, timeout, api_key)
    except (OSError, ValueError):
        return []


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` now (SO_REUSEADDR, as servers bind: TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


def state_file() -> Path:
    return rubricrl_home() / "server.json"


def advertise(endpoint: Endpoint) -> None:
    """Record a long-lived server so that other commands reuse it (written atomically)."""
    write_whole(state_file(), json.dumps(asdict(endpoint)))


def withdraw(endpoint: Endpoint) -> None:
    path = state_file()
    try:
        if json.loads(path.read_text()).get("pid") == endpoint.pid:
            path.unlink()
    except (OSError, ValueError):
        pass


def find_running(model: str = EMBEDDED_MODEL_NAME) -> Endpoint | None:
    """A server that answers now with `model`: the advertised one, else one on the default port."""
    candidates = []
    try:
        state = json.loads(state_file().read_text())
        candidates.append(Endpoint(state["base_url"], state["model"], state.get("pid")))
    except (OSError, ValueError, KeyError):
        pass
    if os.environ.get(LOCAL_SERVER_ENV):
        candidates.append(Endpoint(os.environ[LOCAL_SERVER_ENV], model))
    candidates.append(Endpoint(f"http://{HOST}:{DEFAULT_PORT}/v1", model))
    for candidate in candidates:
        if candidate.model != model:
            continue
        live = [url for url in candidate.base_url.split(",") if model in served_models(url)]  # replicas: those up
        if live:
            return replace(candidate, base_url=",".join(live))
    return None
