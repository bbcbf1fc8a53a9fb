"""The first launch on a fresh machine: every rank of a `torchrun` launch asks for shared state at once."""

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from rubricrl.serving.discovery import served_models

ROOT = Path(__file__).resolve().parents[1]

# A stand-in for vLLM that answers GET /v1/models with the served name (the preamble of this suite forbids starting
# a second real vLLM on these 2 cores); what is under test is which process starts it and how long it stays up.
MODELS_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, name = int(sys.argv[1]), sys.argv[2]
class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": name}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Models).serve_forever()
"""

# One process of a launch: asks for the local server of a model folder, reports it, waits for the test's word,
# then checks the server still answers (another process may have started it, and may be done already).
USER_SCRIPT = """
import sys
import rubricrl.serving.server as serve
serve.LocalServer.command = lambda self: [sys.executable, sys.argv[2], str(self.port), self.served_name]
with serve.local_endpoint(sys.argv[1]) as endpoint:
    print(endpoint.base_url, flush=True)
    sys.stdin.readline()
    print("answers" if serve.served_models(endpoint.base_url) else "gone", flush=True)
"""


def test_processes_of_one_launch_share_one_local_server_until_the_last_is_done(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "models_server.py").write_text(MODELS_SERVER)
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    home = tmp_path / "home"
    env = {**os.environ, "RUBRICRL_HOME": str(home), "LOCAL_WORLD_SIZE": "2", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(tmp_path / "user.py"), str(model), str(tmp_path / "models_server.py")]
    ranks = [
        subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        urls = [_line(rank) for rank in ranks]
        assert urls[0] == urls[1]
        for rank in ranks:  # the first to finish may be the one that started it: it must wait for the other
            rank.stdin.write("go\n")
            rank.stdin.flush()
            assert _line(rank) == "answers"
        errors = [rank.communicate(timeout=60)[1] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    assert [rank.returncode for rank in ranks] == [0, 0], errors
    assert sum("starting one for the processes of this launch" in err for err in errors) == 1, errors
    assert sum("using the local server another process of this launch started" in err for err in errors) == 1
    assert len(list((home / "logs").glob("vllm-*.log"))) == 1  # one server started
    assert not served_models(urls[0]) and not list((home / "servers").glob("*.json"))  # stopped and withdrawn


def _line(process: subprocess.Popen, timeout: float = 60) -> str:
    """The next line of a process's stdout, or a failure past `timeout` seconds (a lock that never frees)."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        pytest.fail(f"no line from pid {process.pid} within {timeout} s")
    return process.stdout.readline().strip()


def test_a_gpu_launch_does_not_start_a_local_server_beside_its_policies(tmp_path, monkeypatch):
    """On GPUs the launch's processes would share a server that inherits their GPUs and takes GPU 0 beside process
    0's policy (out of memory on an 8-GPU node): refused in one line saying how to serve the judge instead."""
    import rubricrl.serving.server as serve
    from rubricrl.errors import UserError

    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path))  # no advertised server
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setattr(serve, "vllm_on_cpu", lambda: False)  # a CUDA vLLM build
    monkeypatch.setattr(serve, "find_running", lambda model=None: None)
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES=7 rubricrl serve"):
        with serve.local_endpoint():
            pass
    assert not (tmp_path / "servers").exists()  # nothing started, nothing recorded
