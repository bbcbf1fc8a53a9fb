"""One config system for every command: defaults < --config file < flags, the same way everywhere; the resolved
settings are written beside the output and load back; TRL's own config fields parse the way `trl sft` reads them."""

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import yaml

from rubricrl.config import ConfigError, add_config_arguments, parse_settings, resolved
from rubricrl.config_flags import field_docs
from rubricrl.llm import LLMSettings, resolve_roles

pytestmark = pytest.mark.pure  # the config system alone: TRL's configs are parsed in tests/test_training.py


@dataclass
class Paths:
    input: Path
    """Where the queries are."""
    limit: int | None = None
    """Only the first N."""


@dataclass
class Knobs:
    config_section: ClassVar[str] = "knobs"

    mode: Literal["a", "b"] = "a"
    """Which way."""
    samples: int = 1
    evolve: bool = True
    writers: list[str] = field(default_factory=lambda: ["writer"])
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.samples < 1:
            raise ValueError("samples must be at least 1")


def parse(argv: list[str], tmp_path: Path, config: dict | None = None, groups=(Paths, Knobs, LLMSettings)):
    parser = argparse.ArgumentParser(prog="test", exit_on_error=False)
    add_config_arguments(parser, list(groups))
    if config is not None:
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
        argv = [*argv, "--config", str(tmp_path / "c.yaml")]
    return parse_settings(parser.parse_args(argv), command="test")


@pytest.fixture(autouse=True)
def sections(monkeypatch):
    monkeypatch.setattr("rubricrl.config.SECTIONS", ("knobs", "llm", "other"))


def test_defaults_then_file_then_flags(tmp_path):
    paths, knobs, llm = parse(["--input", "q.jsonl"], tmp_path)
    assert (paths.input, paths.limit, knobs.mode, knobs.evolve, llm.timeout) == (
        Path("q.jsonl"),
        None,
        "a",
        True,
        600.0,
    )

    config = {
        "input": "from-file.jsonl",
        "limit": 5,
        "knobs": {"mode": "b", "samples": 3, "evolve": False},
        "llm": {"timeout": 30, "roles": {"judge": {"model": "big", "temperature": 0.0}}},
    }
    paths, knobs, llm = parse([], tmp_path, config)
    assert (paths.input, paths.limit, knobs.mode, knobs.samples, knobs.evolve) == (
        Path("from-file.jsonl"),
        5,
        "b",
        3,
        False,
    )
    assert llm.timeout == 30 and llm.roles == {"judge": {"model": "big", "temperature": 0.0}}

    argv = [
        "--limit",
        "7",
        "--samples",
        "5",
        "--evolve",
        "--mode",
        "a",
        "--roles",
        "judge.temperature=0.5",
        "rubric_writer.max_tokens=64",
        "--timeout",
        "99",
        "--no-cache",
        "--input",
        "cli.jsonl",
    ]
    paths, knobs, llm = parse(argv, tmp_path, config)
    assert (paths.input, paths.limit, knobs.mode, knobs.samples, knobs.evolve) == (Path("cli.jsonl"), 7, "a", 5, True)
    # a mapping flag is merged into the file's mapping: judge keeps its model, its temperature is the flag's
    assert llm.roles == {"judge": {"model": "big", "temperature": 0.5}, "rubric_writer": {"max_tokens": 64}}
    assert llm.timeout == 99.0 and llm.cache is False


def test_repeated_mapping_flags_add_up_and_mistakes_are_named(tmp_path):
    _, _, llm = parse(["--input", "q", "--roles", "judge.model=a", "--roles", "judge.temperature=0"], tmp_path)
    assert llm.roles == {"judge": {"model": "a", "temperature": 0}}
    with pytest.raises(ConfigError, match=r"c.yaml: llm.roles: expected a mapping, got \['judge'\]"):
        parse(["--input", "q", "--roles", "judge.model=x"], tmp_path, {"llm": {"roles": ["judge"]}})
    with pytest.raises(ConfigError, match=r"llm.roles: cannot set judge.model: judge holds 'big'"):
        parse(["--input", "q", "--roles", "judge.model=x"], tmp_path, {"llm": {"roles": {"judge": "big"}}})
    with pytest.raises(ConfigError, match=r"c.yaml: input: expected Path, got 3"):
        parse([], tmp_path, {"input": 3})
    with pytest.raises(ConfigError, match=r"not inside llm.defaults"):
        parse(["--input", "q", "--defaults", "model=m"], tmp_path)


def test_dashes_and_underscores_and_lists(tmp_path):
    paths, knobs, _ = parse(["--input", "q", "--roles", "judge.b=1", "--extra", "x=1", "y=[1, 2]"], tmp_path)
    assert knobs.extra == {"x": 1, "y": [1, 2]}
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_config_arguments(parser, [Paths, Knobs])
    args = parser.parse_args(["--input", "q", "--writers", "w1", "w2", "--evolve", "false"])
    _, knobs = parse_settings(args, command="test")
    assert knobs.writers == ["w1", "w2"] and knobs.evolve is False


@pytest.mark.parametrize(
    "config, argv, message",
    [
        ({"knobs": {"samples": "3"}}, ["--input", "q"], r"c.yaml: knobs.samples: expected int, got '3'"),
        ({"knobs": {"sampels": 3}}, ["--input", "q"], r"c.yaml: knobs: unknown key\(s\) \['sampels'\]"),
        ({"limt": 3}, ["--input", "q"], r"c.yaml: unknown key\(s\) \['limt'\] for `rubricrl test`"),
        ({"knobs": {"samples": 0}}, ["--input", "q"], r"c.yaml: knobs: samples must be at least 1"),
        ({"knobs": ["a"]}, ["--input", "q"], r"c.yaml: knobs: expected a mapping"),
        (None, [], r"`rubricrl test` needs --input \(or the key\(s\) \['input'\] in --config\)"),
        (None, ["--input", "q", "--samples", "0"], r"^--samples must be at least 1"),  # the flag is where
    ],
)
def test_mistakes_name_the_file_key_or_flag(tmp_path, config, argv, message):
    with pytest.raises(ConfigError, match=message):
        parse(argv, tmp_path, config)


def test_a_shared_file_may_hold_sections_other_commands_use(tmp_path):
    paths, _, _ = parse([], tmp_path, {"input": "q", "other": {"anything": 1}})
    assert paths.input == Path("q")


def test_bad_flag_values_are_refused_by_the_parser(tmp_path):
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        parse(["--input", "q", "--mode", "c"], tmp_path)
    with pytest.raises(argparse.ArgumentError, match="expected KEY=VALUE"):
        parse(["--input", "q", "--roles", "judge"], tmp_path)


def test_resolved_settings_load_back_to_the_same_settings(tmp_path):
    config = {"input": "q.jsonl", "knobs": {"mode": "b"}, "llm": {"roles": {"judge": {"model": "big"}}}}
    first = parse(["--samples", "4", "--base-url", "http://gpu:8000/v1"], tmp_path, config)
    written = resolved(first)
    assert written["input"] == "q.jsonl" and written["knobs"]["samples"] == 4 and written["llm"]["base_url"]
    again = parse([], tmp_path, written)
    assert again == first


def test_help_comes_from_the_field_docstrings():
    assert field_docs(Paths) == {"input": "Where the queries are.", "limit": "Only the first N."}
    assert "Seconds one request may take" in field_docs(LLMSettings)["timeout"]


def test_roles_combine_the_same_way_for_every_command(tmp_path):
    """defaults < role entry; at each level the flags win over the file. --base-url/--model are the defaults level."""
    config = {
        "llm": {
            "model": "file-default",
            "defaults": {"temperature": 0.2},
            "roles": {"judge": {"model": "file-judge", "base_url": "http://judge/v1"}},
        }
    }
    _, _, llm = parse(["--input", "q", "--model", "cli-model", "--base-url", "http://gpu/v1"], tmp_path, config)
    roles = resolve_roles(["writer", "judge"], llm.role_defaults(), llm.roles)
    assert (roles["writer"].model, roles["writer"].base_url, roles["writer"].temperature) == (
        "cli-model",
        "http://gpu/v1",
        0.2,
    )
    assert (roles["judge"].model, roles["judge"].base_url) == ("file-judge", "http://judge/v1")  # more specific
    _, _, llm = parse(["--input", "q", "--roles", "judge.model=cli-judge"], tmp_path, config)
    assert resolve_roles(["judge"], llm.role_defaults(), llm.roles)["judge"].model == "cli-judge"


@dataclass
class Outputs:
    output_dir: Path
    output: Path | None = None
    limit: int | None = field(default=None, metadata={"min": 0})
    share: float = field(default=0.5, metadata={"min": 0, "max": 1})


def test_bounds_and_output_paths_are_one_line_errors_naming_the_flag_or_key(tmp_path):
    """Values that would hang, traceback or write into the wrong place are refused before any work: the message names
    the flag when the command line set the value, the file and key when the config did."""
    groups = (Outputs,)
    assert parse(["--output-dir", str(tmp_path), "--limit", "0"], tmp_path, groups=groups)[0].limit == 0
    with pytest.raises(ConfigError, match=r"^--limit: expected at least 0, got -1$"):
        parse(["--output-dir", str(tmp_path), "--limit", "-1"], tmp_path, groups=groups)
    with pytest.raises(ConfigError, match=r"c.yaml: share: expected 0 to 1, got 1.5$"):
        parse(["--output-dir", str(tmp_path)], tmp_path, {"share": 1.5}, groups=groups)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match=r"--output-dir .*a-file: exists and is a file, not a folder"):
        parse(["--output-dir", str(tmp_path / "a-file")], tmp_path, groups=groups)
    with pytest.raises(ConfigError, match=r"--output .*: is a folder; give a file name"):
        parse(["--output-dir", str(tmp_path), "--output", str(tmp_path)], tmp_path, groups=groups)
    with pytest.raises(ConfigError, match=r"--output .*a-file/g.jsonl: .*a-file is a file, not a folder"):
        parse(
            ["--output-dir", str(tmp_path), "--output", str(tmp_path / "a-file" / "g.jsonl")], tmp_path, groups=groups
        )


def test_a_misspelt_section_or_key_is_named_with_a_suggestion(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown key\(s\) \['knbos'\] for `rubricrl test` \(did you mean 'knobs'\?\)"
    ):
        parse(["--input", "q"], tmp_path, {"knbos": {"mode": "b"}})
    with pytest.raises(
        ConfigError, match=r"c.yaml: knobs: unknown key\(s\) \['samples_'\] \(did you mean 'samples'\?\)"
    ):
        parse(["--input", "q"], tmp_path, {"knobs": {"samples_": 2}})
