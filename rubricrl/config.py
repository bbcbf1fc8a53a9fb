"""Settings for every command, one way: dataclasses, a YAML file for values, the command line last.

A command's settings are a few dataclasses (its arguments; groups such as `SynthesisConfig`, `LLMSettings`), each
field set by, later winning: 1. the default; 2. `--config FILE` (YAML), where a group reads its `config_section`
(`synthesis:`, `llm:`, ...) and the command's arguments, with a training command's TRL `SFTConfig`/`GRPOConfig`/
`ModelConfig` fields as `trl sft --config` reads them, are top-level keys (sections a command does not use are
skipped, unknown top-level keys refused); 3. the command line: `--field value` (or `--field-name`), `--no-field`,
several values for a list, `KEY=VALUE` items merged into a mapping (`--roles judge.model=gpt-4.1-mini`; YAML values).
This is `TrlParser`'s (`HfArgumentParser`'s) behaviour, written out as the core install lacks TRL and transformers
(whose parser alone costs ~0.9 s to import); training commands use `TrlParser` itself (`parse_trl`). The resolved
values (API keys named, never held) go beside every output (`resolved`, `write_resolved`), loadable with `--config`.
"""

import argparse
import dataclasses
import difflib
import importlib
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from rubricrl.config_flags import add_field, bounds_of, default_of, field_docs
from rubricrl.errors import UserError
from rubricrl.runs.jsonl import write_whole

# Sections a shared config file may hold; a command skips those it does not use.
SECTIONS = ("llm", "synthesis", "grading", "ruft", "rurl")


class ConfigError(UserError, ValueError):
    """A config value is missing, unknown or of the wrong type; the message says where and what to do."""


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys to values, got {type(data).__name__}")
    return data


def dataclass_from_dict(cls: type, data: dict[str, Any], where: str, flags: frozenset[str] = frozenset()) -> Any:
    """Instantiate `cls` from a mapping, rejecting unknown keys, values of the wrong basic type and numbers outside
    a field's bounds (`metadata={"min": 1}`). `where` names the mapping (`file: section`), or ends with ":" for the
    top level of a file; keys in `flags` came from the command line, and their errors name the flag."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"{where.rstrip(':')}: unknown key(s) {unknown}{did_you_mean(unknown, known)}; known: {sorted(known)}"
        )
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        named = flag_name(key) if key in flags else _at(where, key)
        if hints[key] is Path or hints[key] == Path | None:  # a path in YAML is a string
            value = Path(value) if isinstance(value, str) else value
        if not _matches(value, hints[key]):
            raise ConfigError(f"{named}: expected {_describe(hints[key])}, got {value!r}")
        low, high = known[key].metadata.get("min"), known[key].metadata.get("max")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if (low is not None and value < low) or (high is not None and value > high):
                raise ConfigError(f"{named}: expected {bounds_of(known[key])}, got {value!r}")
        values[key] = value
    try:
        return cls(**values)
    except ValueError as error:  # the class's own checks (__post_init__) say what is wrong; say where
        message = str(error)
        # A message about one value set by a flag (`threshold must be ...`) names the flag, and the flag says where
        # ("command line: ruft:" would say no more); any other message keeps its place and its words.
        subject = re.match(r"(\w+) (must|needs)\b", message)
        if subject and subject.group(1) in flags:
            raise ConfigError(flag_name(subject.group(1)) + message[len(subject.group(1)) :]) from error
        if where == "command line:":
            raise ConfigError(message) from error
        raise ConfigError(f"{where.rstrip(':')}: {message}") from error


def did_you_mean(unknown: list[str], known: Any) -> str:
    """` (did you mean 'grading'?)` for the first unknown name close to a known one, else nothing."""
    for name in unknown:
        close = difflib.get_close_matches(name, list(known), n=1)
        if close:
            return f" (did you mean {close[0]!r}?)"
    return ""


def flag_name(field_name: str) -> str:
    """The flag the help shows for a field: `--query-column` for `query_column`."""
    return "--" + field_name.replace("_", "-")


def check_paths(settings: Any, where: str, flags: frozenset[str] = frozenset()) -> None:
    """Output paths that cannot work, before any model call: an `output_dir` (or `*_dir` output) that is a file,
    an `output` file that is a folder or sits under a file."""
    for f, _hint in _fields(type(settings)):
        value = getattr(settings, f.name)
        if not isinstance(value, Path):
            continue
        named = flag_name(f.name) if f.name in flags else _at(where, f.name)
        if f.name == "output_dir" and value.exists() and not value.is_dir():
            raise ConfigError(f"{named} {value}: exists and is a file, not a folder; choose a folder")
        if f.name == "output":
            if value.is_dir():
                raise ConfigError(f"{named} {value}: is a folder; give a file name (e.g. {value / 'graded.jsonl'})")
            parent = next((p for p in value.parents if p.exists()), None)
            if parent is not None and not parent.is_dir():
                raise ConfigError(f"{named} {value}: {parent} is a file, not a folder")


# --- the command line ---------------------------------------------------------------------------------------------


def add_config_arguments(
    parser: argparse.ArgumentParser,
    groups: list[type],
    trl_types: list[str] = (),
    shares_file_with: list[str] = (),
) -> None:
    """`--config` and one flag per field of each dataclass in `groups` (help from the fields' docstrings). Flags
    default to "not given" (argparse.SUPPRESS), so that `parse_settings` knows what the command line set.
    `trl_types` (e.g. "trl.SFTConfig", imported only when the command runs) are TRL's own dataclasses: their fields
    come as top-level keys and the flags this parser does not know, read by `parse_trl`. `shares_file_with` names
    TRL dataclasses whose top-level keys this command skips (a preset that serves `ruft build` and `ruft train`)."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="YAML file of settings (flags win over it; default: none, the built-in defaults)",
    )
    parser.set_defaults(config_groups=groups, trl_types=list(trl_types), shares_file_with=list(shares_file_with))
    if trl_types:
        trl = "trl grpo" if any("GRPO" in name for name in trl_types) else "trl sft"
        parser.epilog = (
            f"TRL's {' and '.join(trl_types)} fields are accepted too, as top-level keys of --config "
            f"and as flags (--learning_rate 1e-5), exactly as `{trl} --config` takes them."
        )
    for cls in groups:
        section = getattr(cls, "config_section", None)
        group = parser.add_argument_group(f"{section}: (config section)" if section else "arguments")
        docs = field_docs(cls)
        for f, hint in _fields(cls):
            add_field(group, f, hint, docs.get(f.name, ""))


def parse_settings(args: argparse.Namespace, *, command: str, trl_defaults: dict[str, Any] | None = None) -> list[Any]:
    """The command's dataclasses (`args.config_groups`), each field from defaults < `--config` file < flags, then
    TRL's (`args.trl_types`, from `trl_defaults` < the remaining top-level keys < `args.trl_argv`, the flags ours do
    not know).
    Raises ConfigError naming the file and key, or the flag, and what is wrong."""
    groups = args.config_groups
    file = load_yaml(args.config) if args.config else {}
    source = config_source(args)
    flat_keys = {f.name for cls in groups if not getattr(cls, "config_section", None) for f, _ in _fields(cls)}
    unknown = sorted(k for k in file if k not in flat_keys and k not in SECTIONS)
    trl_types = [_import(name) for name in getattr(args, "trl_types", [])]
    if unknown and getattr(args, "shares_file_with", None):
        skipped = {f.name for name in args.shares_file_with for f in dataclasses.fields(_import(name))}
        unknown = [key for key in unknown if key not in skipped]
    if unknown and not trl_types:
        raise ConfigError(
            f"{source}: unknown key(s) {unknown} for `rubricrl {command}`"
            f"{did_you_mean(unknown, [*flat_keys, *SECTIONS])}; it takes {sorted(flat_keys)} and the "
            f"sections {list(SECTIONS)}"
        )
    settings = []
    for cls in groups:
        section = getattr(cls, "config_section", None)
        if section:
            from_file = file.get(section) or {}
        else:
            from_file = {k: v for k, v in file.items() if k in flat_keys}
        where = f"{source}: {section}" if section else f"{source}:"
        if not isinstance(from_file, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(from_file).__name__}")
        values = dict(from_file)
        flags = frozenset(f.name for f, _ in _fields(cls) if hasattr(args, f.name))
        for f, _hint in _fields(cls):
            if not hasattr(args, f.name):
                continue
            given = getattr(args, f.name)
            if isinstance(given, list) and given and isinstance(given[0], tuple):  # KEY=VALUE items onto the mapping
                base = values.get(f.name) or {}
                if not isinstance(base, dict):
                    raise ConfigError(f"{_at(where, f.name)}: expected a mapping, got {base!r:.100}")
                try:
                    given = _merged(base, given)
                except ConfigError as error:
                    raise ConfigError(f"{_at(where, f.name)}: {error}") from None
            values[f.name] = given
        missing = [f.name for f, _ in _fields(cls) if default_of(f) is dataclasses.MISSING and f.name not in values]
        if missing:
            needed = ", ".join(flag_name(name) for name in missing)
            raise ConfigError(f"`rubricrl {command}` needs {needed} (or the key(s) {missing} in --config)")
        instance = dataclass_from_dict(cls, values, where, flags)
        check_paths(instance, where, flags)
        settings.append(instance)
    for instance in settings:  # checks of one section against the others (a role named in another section)
        if hasattr(instance, "check_across"):
            instance.check_across([file, resolved(settings)], source)
    if trl_types:
        rest = {k: v for k, v in file.items() if k not in flat_keys}
        settings += parse_trl(trl_types, {**(trl_defaults or {}), **rest}, getattr(args, "trl_argv", []), source=source)
    return settings


def config_source(args: argparse.Namespace) -> str:
    """Where the settings came from, for error messages."""
    return str(args.config) if args.config else "command line"


def parse_trl(trl_types: list[type], file: dict[str, Any], argv: list[str], source: str = "config") -> list[Any]:
    """TRL's own dataclasses (e.g. `SFTConfig`, `ModelConfig`) from the top-level keys of a config file and the
    flags that are not ours, exactly as `trl sft --config FILE ...` reads them (TrlParser: file values become
    defaults, flags win, unknown keys are errors)."""
    from trl import TrlParser

    parser = TrlParser(trl_types)
    leftover = parser.set_defaults_with_config(**{k: v for k, v in file.items() if k not in SECTIONS})
    if leftover:
        raise ConfigError(
            f"{source}: key(s) {leftover[::2]} are neither rubricrl's nor fields of {[t.__name__ for t in trl_types]}"
        )
    try:
        return list(parser.parse_args_into_dataclasses(args=argv))
    except (ValueError, SystemExit) as error:  # argparse exits on an unknown or malformed flag
        raise ConfigError(f"{source}: TRL settings: {error or 'see the message above'}") from None


def _import(name: str) -> type:
    """`trl.SFTConfig` -> the class: TRL loads only when a training command runs, not for `rubricrl --help`."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


# --- the resolved config --------------------------------------------------------------------------------------------


def resolved(settings: list[Any], **extra: Any) -> dict[str, Any]:
    """The settings as one config mapping (top-level fields, then sections), loadable again with --config."""
    out: dict[str, Any] = {}
    for instance in settings:
        values = {f.name: _plain(getattr(instance, f.name)) for f, _ in _fields(type(instance))}
        section = getattr(instance, "config_section", None)
        if section:
            out[section] = values
        else:
            out.update(values)
    out.update({key: _plain(value) for key, value in extra.items()})
    return out


def write_resolved(path: Path, config: dict[str, Any]) -> Path:
    """`config.yaml` (or the given name) beside an output: what produced it, loadable with --config."""
    return write_whole(
        path,
        "# resolved settings (defaults < --config file < flags); rerun with --config this file\n"
        + yaml.safe_dump(config, sort_keys=False, allow_unicode=True),
    )


def _at(where: str, key: str) -> str:
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --- helpers --------------------------------------------------------------------------------------------------------


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.init]


def _merged(base: dict[str, Any], items: list[tuple[list[str], Any]]) -> dict[str, Any]:
    """`base` with each (path, value) set, nested mappings copied, never changed in place."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for path, value in items:
        node = out
        for key in path[:-1]:
            if node.get(key) is not None and not isinstance(node[key], dict):
                raise ConfigError(f"cannot set {'.'.join(path)}: {key} holds {node[key]!r:.100}, not a mapping")
            node[key] = dict(node.get(key) or {})
            node = node[key]
        node[path[-1]] = value
    return out


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is not None:
        return isinstance(value, origin) and (
            origin is not list or all(_matches(v, typing.get_args(hint)[0]) for v in value)
        )
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
