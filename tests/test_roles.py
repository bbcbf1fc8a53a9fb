"""Role resolution: defaults < the role's own entry; config errors say where and what; a base_url without a model
takes the one the endpoint serves."""

import pytest

from rubricrl.config import ConfigError, load_yaml
from rubricrl.llm import LLMSettings, Role, bind_local, open_llm, resolve_roles


def test_defaults_point_every_role_at_one_endpoint():
    settings = LLMSettings(base_url="http://gpu:8000/v1", model="qwen")
    roles = resolve_roles(["writer", "judge"], settings.role_defaults())
    assert roles["writer"] == roles["judge"] == Role(model="qwen", base_url="http://gpu:8000/v1")


def test_role_entries_override_defaults():
    settings = LLMSettings(
        base_url="http://gpu:8000/v1",
        model="qwen",
        defaults={"temperature": 0.2, "max_tokens": 512},
        roles={"judge": {"base_url": "https://api.example.com/v1", "model": "big", "temperature": 0.0}},
    )
    roles = resolve_roles(["writer", "judge"], settings.role_defaults(), settings.roles)
    assert roles["writer"] == Role(model="qwen", base_url="http://gpu:8000/v1", temperature=0.2, max_tokens=512)
    assert roles["judge"] == Role(model="big", base_url="https://api.example.com/v1", temperature=0.0, max_tokens=512)
    assert roles["judge"].sampling_params() == {"temperature": 0.0, "max_tokens": 512}


def test_roles_without_endpoint_are_bound_to_the_local_server():
    roles = resolve_roles(["writer", "judge"], {}, {"judge": {"base_url": "http://x/v1", "model": "m"}})
    assert roles["writer"].is_local and not roles["judge"].is_local
    bound = bind_local(roles, "http://127.0.0.1:8750/v1", "SmolLM2-135M-Instruct")
    assert bound["writer"] == Role(model="SmolLM2-135M-Instruct", base_url="http://127.0.0.1:8750/v1", api_key_env="")
    assert bound["judge"] == roles["judge"]


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"judge": {"temprature": 0.1}}, r"cfg.yaml: roles.judge: unknown key\(s\) \['temprature'\]"),
        ({"judge": {"temperature": "hot"}}, r"roles.judge.temperature: expected .*float.*, got 'hot'"),
        ({"judge": ["model"]}, r"llm.roles must map role names to settings"),
        ({"judge": {"stop": ["a", 3]}}, r"roles.judge.stop: expected"),
    ],
)
def test_config_mistakes_are_named(entries, message):
    with pytest.raises(ConfigError, match=message):
        resolve_roles(["judge"], {}, entries, source="cfg.yaml")


def test_a_base_url_without_a_model_takes_the_one_it_serves(fault_server):
    settings = LLMSettings(base_url=fault_server.base_url)
    with open_llm(settings, ["judge"]) as session:
        assert session.roles["judge"].model == "fake"  # the one model its /models lists
    # Nothing answers there: said as such, not as a missing model name.
    with pytest.raises(ConfigError, match=r"endpoint http://127.0.0.1:9/v1 \(roles \['judge'\]\) does not answer"):
        with open_llm(LLMSettings(base_url="http://127.0.0.1:9/v1"), ["judge"]):
            pass


def test_local_server_is_never_sent_the_users_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-key-of-the-user")
    bound = bind_local(resolve_roles(["judge"], {}), "http://127.0.0.1:8750/v1", "SmolLM2-135M-Instruct")
    assert bound["judge"].api_key() == "EMPTY"


def test_roles_this_command_does_not_use_are_reported(capsys):
    roles = resolve_roles(["judge"], {}, {"juge": {"model": "m"}}, source="cfg.yaml")
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
    llm = LLMSettings(**config["llm"])
    roles = resolve_roles(["chat", "judge"], llm.role_defaults(), llm.roles, source="tiny-cpu.yaml")
    assert roles["chat"].is_local and roles["chat"].temperature == 0.7 and roles["judge"].temperature == 0.0


def test_roles_on_the_embedded_model_get_cpu_budgets_unless_they_set_their_own(fault_server, capsys):
    settings = LLMSettings(
        base_url=fault_server.base_url,
        model="SmolLM2-135M-Instruct",
        roles={"writer": {"max_tokens": 50}, "other": {"model": "big"}},
    )
    with open_llm(settings, ["judge", "writer", "chat", "other"], cpu_budgets={"judge": 400}) as session:
        tokens = {name: role.max_tokens for name, role in session.roles.items()}
    assert tokens == {"judge": 400, "writer": 50, "chat": 256, "other": None}
    assert session.budget_note().startswith(
        "max_tokens for the embedded model on CPU (roles without their own): judge 400, chat 256"
    )
    assert "judge 400" in capsys.readouterr().err


def test_an_endpoint_that_does_not_answer_is_one_line_before_any_call():
    with pytest.raises(
        ConfigError, match=r"endpoint http://127.0.0.1:9/v1 \(roles \['judge', 'writer'\]\) does not answer"
    ):
        with open_llm(LLMSettings(base_url="http://127.0.0.1:9/v1", model="m"), ["writer", "judge"]):
            pass


def test_a_role_no_command_reads_is_an_error_naming_it_while_a_role_a_config_names_is_not(tmp_path, capsys):
    """A config shared by commands may set roles the running one does not read; `writer` (no command reads it: a
    typo for rubric_writer would leave that role on its defaults) is a one-line error, from the file or a flag,
    before any call. A name the config gives in synthesis.rubric_roles or ruft.candidates is a role."""
    from commands.main import main

    rubrics, responses = tmp_path / "rubrics.jsonl", tmp_path / "responses.jsonl"
    rubrics.write_text('{"id": "a", "question": "q", "rubrics": [{"criterion": "c", "points": 1}]}\n')
    responses.write_text('{"id": "a", "response": "r"}\n')
    config = tmp_path / "shared.yaml"
    config.write_text(
        "synthesis: {rubric_roles: [writer_a]}\nruft: {candidates: {strong: 4}}\n"
        "llm:\n  base_url: http://127.0.0.1:9/v1\n  roles: {writer_a: {model: a}, strong: {model: b}, evolver: {}}\n"
    )
    grade = ["grade", "--rubrics", str(rubrics), "--responses", str(responses), "--output", str(tmp_path / "g.jsonl")]
    assert main([*grade, "--config", str(config), "--roles", "writer.model=x"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--roles ['writer']: no command reads a role of that name" in err
    assert "rubric_writer" in err
    config.write_text(config.read_text().replace("evolver: {}", "writer: {}"))
    assert main([*grade, "--config", str(config)]) == 2
    assert f"{config}: llm.roles ['writer']" in capsys.readouterr().err
    config.write_text(config.read_text().replace("writer: {}", "evolver: {}"))
    assert main([*grade, "--config", str(config)]) == 2  # got past the roles: the endpoint does not answer
    assert "does not answer" in capsys.readouterr().err


def test_every_command_that_calls_a_model_lists_its_roles_in_its_help():
    from commands.help import ROLES, all_commands
    from commands.main import build_parser
    from rubricrl.llm.roles import ROLE_NAMES

    helps = {name: command.format_help() for name, command in all_commands(build_parser())}
    for name in ["synth", "grade", "eval", "ruft build", "rurl train", "probe", "reward serve", "chat"]:
        assert "roles (llm.roles, --roles NAME.KEY=VALUE):" in helps[name], name
    listed = " ".join(ROLES.values())
    assert all(role in listed for role in ROLE_NAMES)  # each fixed role is read by a command that says so
