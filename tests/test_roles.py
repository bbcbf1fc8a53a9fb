"""Role resolution: CLI blanket < config defaults < the role's own entry; config errors say where and what."""

import pytest

from rubricrl.config import ConfigError, load_yaml
from rubricrl.llm import Role, bind_local, resolve_roles


def test_cli_flags_point_every_role_at_one_endpoint():
    roles = resolve_roles(["writer", "judge"], base_url="http://gpu:8000/v1", model="qwen")
    assert roles["writer"] == roles["judge"] == Role(model="qwen", base_url="http://gpu:8000/v1")


def test_config_roles_override_cli_flags_and_defaults():
    config = {
        "defaults": {"temperature": 0.2, "max_tokens": 512},
        "roles": {"judge": {"base_url": "https://api.example.com/v1", "model": "big", "temperature": 0.0}},
    }
    roles = resolve_roles(["writer", "judge"], config, base_url="http://gpu:8000/v1", model="qwen")
    assert roles["writer"] == Role(model="qwen", base_url="http://gpu:8000/v1", temperature=0.2, max_tokens=512)
    assert roles["judge"] == Role(model="big", base_url="https://api.example.com/v1", temperature=0.0, max_tokens=512)
    assert roles["judge"].sampling_params() == {"temperature": 0.0, "max_tokens": 512}


def test_roles_without_endpoint_are_bound_to_the_local_server():
    roles = resolve_roles(["writer", "judge"], {"roles": {"judge": {"base_url": "http://x/v1", "model": "m"}}})
    assert roles["writer"].is_local and not roles["judge"].is_local
    bound = bind_local(roles, "http://127.0.0.1:8750/v1", "SmolLM2-135M-Instruct")
    assert bound["writer"] == Role(model="SmolLM2-135M-Instruct", base_url="http://127.0.0.1:8750/v1", api_key_env="")
    assert bound["judge"] == roles["judge"]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"roles": {"judge": {"temprature": 0.1}}}, r"cfg.yaml: roles.judge: unknown key\(s\) \['temprature'\]"),
        ({"roles": {"judge": {"temperature": "hot"}}}, r"roles.judge.temperature: expected .*float.*, got 'hot'"),
        ({"roles": {"judge": {"base_url": "http://x/v1"}}}, "role 'judge' points at http://x/v1 but names no model"),
        ({"role": {}}, r"unknown key\(s\) \['role'\]"),
        ({"roles": {"judge": {"stop": ["a", 3]}}}, r"roles.judge.stop: expected"),
    ],
)
def test_config_mistakes_are_named(config, message):
    with pytest.raises(ConfigError, match=message):
        resolve_roles(["judge"], config, source="cfg.yaml")


def test_local_server_is_never_sent_the_users_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-key-of-the-user")
    bound = bind_local(resolve_roles(["judge"]), "http://127.0.0.1:8750/v1", "SmolLM2-135M-Instruct")
    assert bound["judge"].api_key() == "EMPTY"


def test_roles_this_command_does_not_use_are_reported(capsys):
    roles = resolve_roles(["judge"], {"roles": {"juge": {"model": "m"}}}, source="cfg.yaml")
    assert roles["judge"].is_local
    assert "cfg.yaml: roles ['juge'] are not used by this command" in capsys.readouterr().err


def test_load_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("llm: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: invalid YAML"):
        load_yaml(bad)
    with pytest.raises(ConfigError, match=r"missing.yaml: cannot read config"):
        load_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_yaml(tmp_path / "list.yaml")


def test_shipped_config_resolves(tmp_path):
    from pathlib import Path

    config = load_yaml(Path(__file__).resolve().parents[1] / "configs" / "tiny-cpu.yaml")
    roles = resolve_roles(["chat"], config["llm"], source="tiny-cpu.yaml")
    assert roles["chat"].is_local and roles["chat"].max_tokens
