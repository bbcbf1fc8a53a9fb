"""Which judges `eval` and `ruft build` refuse as grading answers of their own model, decided from the settings as
the command parses them, with no server up: the same model name at any endpoint, and one server however its address
is written (a role naming no model there gets the one it serves), the local server included. Different models pass,
at one endpoint or at two."""

import json

import pytest

from commands.main import build_parser
from rubricrl.config import ConfigError, parse_settings
from rubricrl.llm.self_judging import check_judge_apart
from rubricrl.serving.discovery import LOCAL_SERVER_ENV

pytestmark = pytest.mark.pure


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """No server advertised, none named in the environment: each case sets what it needs."""
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(LOCAL_SERVER_ENV, raising=False)
    return tmp_path / "home"


def eval_settings(*flags: str):
    """The LLM settings `rubricrl eval FLAGS` parses."""
    args, _ = build_parser().parse_known_args(["eval", "--rubrics", "r.jsonl", "--output-dir", "out", *flags])
    return parse_settings(args, command="eval")[2]


def refusal(*flags: str) -> str | None:
    try:
        check_judge_apart(eval_settings(*flags), "judge", ["policy"], False, "--self_judging")
    except ConfigError as error:
        return str(error)
    return None


def roles(policy: str | None, judge: str | None, policy_model: str | None = "m", judge_model: str | None = None):
    """--roles for a policy and a judge at these endpoints (None: no base_url) naming these models (None: none)."""
    given = {
        "policy.base_url": policy,
        "policy.model": policy_model,
        "judge.base_url": judge,
        "judge.model": judge_model,
    }
    return ["--roles", *(f"{key}={value}" for key, value in given.items() if value is not None)]


REFUSED = {
    "localhost-and-127.0.0.1": roles("http://localhost:8000/v1", "http://127.0.0.1:8000/v1"),
    "127.x-and-upper-case-localhost": roles("http://127.1.2.3:8000/v1", "HTTP://LocalHost:8000/v1"),
    "::1-and-0.0.0.0": roles("http://[::1]:8000/v1", "http://0.0.0.0:8000/v1"),
    "trailing-slash": roles("http://gpu:8000/v1/", "http://gpu:8000/v1"),
    "host-case": roles("http://GPU:8000/v1", "http://gpu:8000/v1"),
    "default-port-80": roles("http://gpu:80/v1", "http://gpu/v1"),
    "default-port-443": roles("https://api.example.com:443/v1", "https://api.example.com/v1"),
    "missing-v1": roles("http://gpu:8000", "http://gpu:8000/v1"),
    "both-name-no-model": roles("http://localhost:8000/v1", "http://127.0.0.1:8000/v1", policy_model=None),
    "implicit-local-and-its-default-address": roles(None, "http://localhost:8750/v1", policy_model=None),
    "same-model-at-two-hosts": roles("http://gpu-a:8000/v1", "http://gpu-b:8000/v1", "Qwen/Qwen3-4B", "qwen/qwen3-4b/"),
    "judge-inherits-the-model-at-its-own-host": [
        "--base-url",
        "http://gpu-a:8000/v1",
        "--model",
        "m",
        "--roles",
        "judge.base_url=http://gpu-b:8000/v1",
    ],
    "embedded-model-by-name-elsewhere": roles("http://gpu:8000/v1", None, "SmolLM2-135M-Instruct"),
}

PASSED = {
    "different-models-at-one-endpoint": roles("http://gpu:8000/v1", "http://gpu:8000/v1", "small", "big"),
    "different-models-at-two-hosts": roles("http://gpu-a:8000/v1", "http://gpu-b:8000/v1", "small", "big"),
    "one-host-two-ports": roles("http://localhost:8000/v1", "http://localhost:8001/v1"),
    "two-paths-of-a-gateway": roles("https://gw.example.com/a/v1", "https://gw.example.com/b/v1", None),
    "a-checkpoint-judged-by-the-embedded-model": roles(None, None, "runs/ruft-model", None),
}


@pytest.mark.parametrize("flags", REFUSED.values(), ids=REFUSED.keys())
def test_a_judge_of_the_policys_model_is_refused_in_one_line_unless_told(flags):
    error = refusal(*flags)
    assert error is not None and len(error.splitlines()) == 1
    assert "roles 'policy' and 'judge'" in error and "--self_judging" in error
    check_judge_apart(eval_settings(*flags), "judge", ["policy"], True, "--self_judging")  # told: no error


@pytest.mark.parametrize("flags", PASSED.values(), ids=PASSED.keys())
def test_a_judge_of_another_model_passes(flags):
    assert refusal(*flags) is None


def test_the_refusal_names_the_model_and_both_endpoints():
    error = refusal(*roles("http://gpu-a:8000/v1", "http://gpu-b:8000/v1", "Qwen/Qwen3-4B", "qwen/qwen3-4b"))
    assert "Qwen/Qwen3-4B at http://gpu-a:8000/v1 and qwen/qwen3-4b at http://gpu-b:8000/v1" in error
    error = refusal(*roles(None, "http://127.0.0.1:8750/v1", None))
    assert "SmolLM2-135M-Instruct (the embedded model) at the local server (http://127.0.0.1:8750/v1)" in error


def test_the_local_server_is_where_a_command_would_find_it_running_or_not(home, monkeypatch):
    """A role with no base_url is the local server at the address $RUBRICRL_LOCAL_SERVER names, or the one
    `rubricrl serve` advertises for its model: nothing answers at either here."""
    monkeypatch.setenv(LOCAL_SERVER_ENV, "http://127.0.0.1:9123/v1")
    assert refusal(*roles(None, "http://localhost:9123/v1", None)) is not None
    assert refusal(*roles(None, "http://localhost:9555/v1", None)) is None
    home.mkdir(parents=True, exist_ok=True)
    served = {"base_url": "http://127.0.0.1:9555/v1", "model": "SmolLM2-135M-Instruct", "pid": 1}
    (home / "server.json").write_text(json.dumps(served))
    assert refusal(*roles(None, "http://localhost:9555/v1", None)) is not None
    (home / "server.json").write_text(json.dumps({**served, "model": "another"}))  # serves another model
    assert refusal(*roles(None, "http://localhost:9555/v1", None)) is None
