"""`rubricrl serve` and the server a command starts for itself: they answer, and they leave nothing behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rubricrl.serving.discovery import DEFAULT_PORT, LOCAL_SERVER_ENV, free_port, port_is_free, served_models
from rubricrl.serving.embedded_model import embedded_model_dir, prepare_embedded_model

pytestmark = [pytest.mark.model, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path):
    """A RUBRICRL_HOME of its own (no advertised server) sharing the prepared model."""
    prepare_embedded_model()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / embedded_model_dir().name).symlink_to(embedded_model_dir())
    return tmp_path


def rubricrl(*args, home, **kwargs):
    env = {**os.environ, "RUBRICRL_HOME": str(home)}
    env.pop(LOCAL_SERVER_ENV, None)  # these tests start and stop servers: none of the suite's may be reused
    return subprocess.Popen([sys.executable, "-m", "commands", *args], env=env, cwd=ROOT, text=True, **kwargs)


def group_members(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-e", "-o", "pgid=,pid=,stat=,comm="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split()[0] == str(pgid) and not line.split()[2].startswith("Z")]


def wait_gone(pgid: int, seconds: float = 60) -> list[str]:
    deadline = time.monotonic() + seconds
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    return group_members(pgid)


def start_serve(home, port):
    serve = rubricrl("serve", "--port", str(port), home=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base_url = serve.stdout.readline().strip().removeprefix("base_url: ")
    model = serve.stdout.readline().strip().removeprefix("model: ")
    assert base_url == f"http://127.0.0.1:{port}/v1", serve.stderr.read() if serve.poll() is not None else base_url
    return serve, base_url, model


def test_serve_answers_advertises_and_sigterm_leaves_no_process(home):
    port = free_port()
    serve, base_url, model = start_serve(home, port)
    state = json.loads((home / "server.json").read_text())
    assert state["base_url"] == base_url and state["model"] == model == "SmolLM2-135M-Instruct"
    vllm_pgid = state["pid"]
    assert len(group_members(vllm_pgid)) >= 2  # the API server and its engine process

    chat = rubricrl(
        "chat",
        "Say hello.",
        "--max-tokens",
        "8",
        "--no-cache",
        home=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = chat.communicate(timeout=120)
    assert chat.returncode == 0 and out.strip(), err
    assert "starting one" not in err  # the advertised server was reused

    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=60) == 0
    assert wait_gone(vllm_pgid, 5) == []
    assert port_is_free(port) and not (home / "server.json").exists()


def test_a_folder_is_served_under_a_name_that_changes_with_its_weights(tmp_path):
    from rubricrl.serving.server import served_name_for

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"v1")
    first = served_name_for(str(tmp_path))
    assert first.startswith(tmp_path.name + "@") and served_name_for(str(tmp_path)) == first
    (tmp_path / "model.safetensors").write_bytes(b"v2 retrained")
    assert served_name_for(str(tmp_path)) != first
    assert served_name_for("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"


def test_sigkilled_serve_takes_its_server_down_even_mid_start(home):
    """`serve` SIGKILLed while vLLM is still starting (its engine process up, the model not yet served): the server's
    watch on its parent (rubricrl/serving/vllm_server.py) takes the API server and its engine down, where vLLM's own
    SIGTERM handler does not run yet; nothing is left, and nothing was advertised.
    (Killed at start-up, the hardest moment, it also costs the suite a vLLM start-up less than killing it ready.)"""
    port = free_port()
    serve = rubricrl("serve", "--port", str(port), home=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while "starting vLLM" not in (line := serve.stderr.readline()):
        assert line, serve.stdout.read()  # serve ended before starting vLLM
    deadline = time.monotonic() + 300
    children = []
    while not children or len(group_members(children[0])) < 2:  # the API server and its engine process
        assert serve.poll() is None and time.monotonic() < deadline, "no engine process within 5 minutes"
        time.sleep(0.2)
        ps = subprocess.run(["ps", "-o", "pid=", "--ppid", str(serve.pid)], capture_output=True, text=True)
        children = [int(pid) for pid in ps.stdout.split()]
    vllm_pgid = children[0]  # the API server leads its own process group
    assert served_models(f"http://127.0.0.1:{port}/v1") == []  # still starting
    serve.kill()
    serve.wait()
    assert wait_gone(vllm_pgid, 60) == []
    assert port_is_free(port) and not (home / "server.json").exists()


def test_command_without_server_starts_one_and_stops_it(home):
    if not port_is_free(DEFAULT_PORT):
        pytest.skip(f"a server on the default port {DEFAULT_PORT} would be reused")
    chat = rubricrl(
        "chat",
        "Say hello.",
        "--max-tokens",
        "8",
        "--no-cache",
        home=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = chat.communicate(timeout=600)
    assert chat.returncode == 0 and out.strip(), err
    assert "starting one for this command" in err and "stopping the local server" in err
    started = err.split("local server (pid ")[1]
    pgid, port = int(started.split(")")[0]), int(started.split("http://127.0.0.1:")[1].split("/")[0])
    assert wait_gone(pgid, 5) == []  # the API server and its engine processes are all gone
    assert port_is_free(port)


def test_a_port_in_use_is_one_line_and_starts_nothing(home, capsys, monkeypatch):
    """`serve --port` on a port something else holds: one line naming it and what holds it, exit 1, no vLLM."""
    import socket

    from commands.main import main

    monkeypatch.setenv("RUBRICRL_HOME", str(home))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"port {port} is taken (something else is using it)" in err
    assert not (home / "logs").exists() and not (home / "server.json").exists()
