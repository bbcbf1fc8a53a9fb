"""YAML configs mapped onto dataclasses, with errors that name the file, the key and what is accepted."""

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
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


def dataclass_from_dict(cls: type, data: dict[str, Any], where: str) -> Any:
    """Instantiate `cls` from a mapping, rejecting unknown keys and values of the wrong basic type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        if not _matches(value, hints[key]):
            raise ConfigError(f"{where}.{key}: expected {_describe(hints[key])}, got {value!r}")
    try:
        return cls(**data)
    except ValueError as error:  # the class's own checks (__post_init__) say what is wrong; say where
        raise ConfigError(f"{where}: {error}") from error


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
    return str(hint).replace("typing.", "")
