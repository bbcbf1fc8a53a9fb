"""`rubricrl eval --policy FOLDER`: a checkpoint on this machine is served by a local vLLM server for the run (a LoRA
adapter merged into its base first), answers the rubrics, is graded by the judge's own endpoint, and its server is
gone afterwards, whether the run ends well, on an error or on Ctrl-C. A policy that is not there, a folder with no
model, an adapter without its base and a server that does not come up in time are one line each, and leave no
server. The policy is a tiny random model (what it writes does not matter here); the judge is scripted."""

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from commands.main import main
from rubricrl.serving.discovery import free_port
from tests.fault_server import FaultServer, schema_reply
from tests.helpers import group_gone, tiny_policy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RUBRICS = [
    {"id": "a", "question": "Name a fruit.", "rubrics": [{"criterion": "Names a fruit.", "points": 5}]},
    {"id": "b", "question": "Name a colour.", "rubrics": [{"criterion": "Names a colour.", "points": 3}]},
]


@pytest.fixture(scope="module")
def tiny():
    return tiny_policy()  # built beside the suite's embedded model, before a test's own RUBRICRL_HOME is set


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "home"


@pytest.fixture
def rubrics(tmp_path):
    path = tmp_path / "rubrics.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in RUBRICS))
    return path


def eval_argv(rubrics: Path, out: Path, policy: str, judge_url: str, *extra: str) -> list[str]:
    """The command a user types: the policy a folder, the judge an endpoint and model of its own."""
    return [
        "eval",
        "--rubrics",
        str(rubrics),
        "--output-dir",
        str(out),
        "--policy",
        policy,
        "--roles",
        f"judge.base_url={judge_url}",
        "judge.model=judge",
        "policy.max_tokens=8",
        *extra,
    ]


def lora_adapter(base: Path, folder: Path) -> Path:
    """A LoRA adapter of `base` as a training checkpoint holds one: adapter weights and adapter_config.json (which
    names the base), no config.json; moved off zero so that merging changes the weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.add_(0.01)
    model.save_pretrained(folder)
    return folder


def server_pid(stderr: str) -> int:
    found = re.search(r"local server \(pid (\d+)\) ready", stderr)
    assert found, stderr
    return int(found.group(1))


def test_a_lora_checkpoint_is_merged_served_graded_by_its_judge_and_its_server_stopped(
    tiny, home, rubrics, tmp_path, capsys
):
    adapter = lora_adapter(tiny, tmp_path / "checkpoint-2")
    with FaultServer(reply=schema_reply) as judge:
        assert main(eval_argv(rubrics, tmp_path / "eval", str(adapter), judge.base_url)) == 0
        asked = [" ".join(m["content"] for m in body["messages"]) for body in judge.requests]
    err = capsys.readouterr().err
    assert group_gone(server_pid(err)) and "stopping the local server this command started" in err
    merged = next((home / "merged").iterdir())
    assert merged.name.startswith("checkpoint-2@") and (merged / "config.json").is_file()
    records = [json.loads(line) for line in (tmp_path / "eval" / "graded.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["a", "b"]
    assert all(r["provenance"]["policy_model"] == str(adapter) and not r.get("policy_error") for r in records)
    # each answer the served policy wrote reached the judge with its question; the judge's endpoint saw no policy call
    for record, row in zip(sorted(records, key=lambda r: r["id"]), RUBRICS):
        assert any(row["question"] in text and record["response"] in text for text in asked)
    assert all(body["model"] == "judge" and body.get("response_format") for body in judge.requests)


def test_an_error_mid_run_stops_the_policy_server(tiny, home, rubrics, tmp_path, capsys):
    """The judge's endpoint is down: found out after the policy's server is up; one line, and the server is gone."""
    down = f"http://127.0.0.1:{free_port()}/v1"
    assert main(eval_argv(rubrics, tmp_path / "eval", str(tiny), down)) == 2
    err = capsys.readouterr().err
    error = [line for line in err.splitlines() if line.startswith("rubricrl: error:")]
    assert len(error) == 1 and down in error[0] and "does not answer" in error[0]
    assert group_gone(server_pid(err))


def test_ctrl_c_mid_run_stops_the_policy_server(tiny, home, rubrics, tmp_path):
    """Ctrl-C while the judge is grading: exit 130, the rerun hint, and the policy's server gone."""
    release = threading.Event()
    with FaultServer(reply=lambda body: release.wait(120) and schema_reply(body)) as judge:  # grading hangs
        command = subprocess.Popen(
            [sys.executable, "-m", "commands", *eval_argv(rubrics, tmp_path / "eval", str(tiny), judge.base_url)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a suite run in the background ignores it
        )
        deadline = time.monotonic() + 300
        while not judge.requests:
            assert command.poll() is None and time.monotonic() < deadline, command.stderr.read()
            time.sleep(0.2)
        command.send_signal(signal.SIGINT)
        _, err = command.communicate(timeout=120)
        release.set()
    assert command.returncode == 130 and "interrupted (Ctrl-C)" in err
    assert group_gone(server_pid(err))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp, tiny: str(tmp / "runs" / "missing"), "no such folder"),
        (lambda tmp, tiny: "./missing-model", "no such folder"),
        (lambda tmp, tiny: _file(tmp / "model.bin"), "a file, not a model folder"),
        (lambda tmp, tiny: _folder(tmp / "empty"), "holds no model"),
        (lambda tmp, tiny: _folder(tmp / "config-only", {"config.json": "{}"}), "no weights"),
        (
            lambda tmp, tiny: _folder(tmp / "adapter", {"adapter_config.json": '{"base_model_name_or_path": null}'}),
            "names no base model; give it with --policy-base",
        ),
        (
            lambda tmp, tiny: _folder(
                tmp / "adapter", {"adapter_config.json": json.dumps({"base_model_name_or_path": str(tmp / "gone")})}
            ),
            "whose base model",
        ),
    ],
    ids=["missing", "missing-relative", "file", "empty", "no-weights", "no-base", "base-not-there"],
)
def test_a_policy_that_cannot_be_served_is_one_line_before_any_call(make, message, tmp_path, home, rubrics, capsys):
    policy = make(tmp_path, None)
    with FaultServer(reply=schema_reply) as judge:
        assert main(eval_argv(rubrics, tmp_path / "eval", policy, judge.base_url)) == 2
        assert judge.count == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"rubricrl: error: --policy {policy}: ") and message in err
    assert not (tmp_path / "home" / "logs").exists()  # no server was started


def test_a_policy_server_that_does_not_come_up_in_time_is_one_line_and_stopped(tiny, home, rubrics, tmp_path, capsys):
    with FaultServer(reply=schema_reply) as judge:
        argv = eval_argv(rubrics, tmp_path / "eval", str(tiny), judge.base_url, "--server-timeout", "1")
        assert main(argv) == 2
        assert judge.count == 0
    err = capsys.readouterr().err.strip().splitlines()
    error = [line for line in err if line.startswith("rubricrl: error:")]
    assert len(error) == 1 and "did not come up within 1 s" in error[0] and "--server-timeout" in error[0]
    log = Path(error[0].rsplit("its log: ", 1)[1])
    port = int(re.search(r"vllm-(\d+)\.log", log.name).group(1))
    from rubricrl.serving.discovery import port_is_free

    deadline = time.monotonic() + 30
    while not port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert port_is_free(port)
    ps = subprocess.run(["pgrep", "-f", f"[-]-port {port}"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", "the server's processes outlived the command"


def test_policy_base_without_a_policy_is_an_error(tmp_path, rubrics, capsys):
    argv = ["eval", "--rubrics", str(rubrics), "--output-dir", str(tmp_path / "e"), "--policy-base", "x"]
    assert main(argv) == 2
    assert "policy_base is the base of a LoRA adapter given as --policy" in capsys.readouterr().err


def _file(path: Path) -> str:
    path.write_bytes(b"weights")
    return str(path)


def _folder(path: Path, files: dict[str, str] | None = None) -> str:
    path.mkdir(parents=True)
    for name, text in (files or {}).items():
        (path / name).write_text(text)
    return str(path)
