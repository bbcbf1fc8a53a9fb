"""The first launch on a fresh machine: every rank of a `torchrun` launch asks for shared state at once."""

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from rubricrl.serving.discovery import served_models
from rubricrl.serving.embedded_model import EMBEDDED_MODEL_NAME, MARKER
from tests.test_rurl_multiprocess_eval import run_launch

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 600
"""Seconds the launch may take (measured: about 60 s on the 2 shared cores); past it the whole launch is killed."""

# The start of `rurl train` / `ruft train` on each rank: TRL's config (which starts the gloo process group, as it
# does under torchrun), then base_model(), which prepares the embedded model. Rank 1 takes the preparation lock and,
# holding it, lets rank 0 go: rank 0 then asks while rank 1 converts, and the rank that converts is not rank 0 (the
# one rank transformers' save_pretrained writes from once a process group is up).
RANK_SCRIPT = """
import os, sys
import torch.distributed as dist
from trl import GRPOConfig, ModelConfig
import rubricrl.serving.embedded_model as embedded
from rubricrl.runs.training import base_model

rank = int(os.environ["RANK"])
def say(line):  # one write of the whole line: print's text and newline can interleave with the other rank's
    os.write(1, (line + "\\n").encode())
GRPOConfig(output_dir=sys.argv[1], use_cpu=True, bf16=False, report_to="none")
assert dist.is_initialized(), "TRL's config no longer starts the process group: this test must start it"
if rank == 0:
    dist.barrier()
else:
    download = embedded._download_gguf
    def download_after_barrier(*args):
        say(f"rank {rank} converts")
        dist.barrier()  # inside the lock: rank 0 asks now
        return download(*args)
    embedded._download_gguf = download_after_barrier
model = ModelConfig()
say(f"rank {rank} model {base_model(model)}")
"""


@pytest.mark.slow
def test_two_ranks_on_an_empty_home_both_get_the_model_converted_once(tmp_path):
    home = tmp_path / "home"
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = {**os.environ, "RUBRICRL_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        str(tmp_path / "out"),
    ]
    done = run_launch(command, env, DEADLINE)
    assert done.returncode == 0, done.stderr[-4000:]
    final = home / "models" / EMBEDDED_MODEL_NAME
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("rank")) == [
        f"rank 0 model {final}",
        "rank 1 converts",
        f"rank 1 model {final}",
    ]
    assert done.stderr.count("converting SmolLM2") == 1 and done.stderr.count("downloading") == 1
    for name in (MARKER, "config.json", "tokenizer.json", "chat_template.jinja", "model.safetensors"):
        assert (final / name).is_file(), name
    assert [p.name for p in (home / "models").iterdir() if p.name != ".prepare.lock"] == [EMBEDDED_MODEL_NAME]


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
