"""How a field of a settings dataclass becomes a command-line flag (`rubricrl.config.add_config_arguments`): its
type and converter, and its help: the docstring under the field, its default and its bounds (`metadata={"min": 1}`)."""

import argparse
import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

import yaml


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field (`x: int = 1` then `\"\"\"what x is\"\"\"`), for the command-line help."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for statement, following in zip(body, body[1:]):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[statement.target.id] = " ".join(following.value.value.split())
    return docs


def add_field(group, f: dataclasses.Field, hint: Any, doc: str) -> None:
    names = [f"--{f.name}"] + ([f"--{f.name.replace('_', '-')}"] if "_" in f.name else [])
    default = default_of(f)
    shown = "" if default is dataclasses.MISSING else f" (default: {default!r})"
    if bounds_of(f):
        shown += f" ({bounds_of(f)})"
    required = " (required)" if default is dataclasses.MISSING else ""
    text = (doc + shown + required).strip().replace("%", "%%")  # argparse %-formats help texts
    kwargs: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": text}
    inner, optional = _unwrap_optional(hint)
    origin = typing.get_origin(inner)
    if inner is bool:
        group.add_argument(*names, type=_to_bool, nargs="?", const=True, metavar="BOOL", **kwargs)
        if default is True:
            group.add_argument(
                f"--no-{f.name.replace('_', '-')}",
                f"--no_{f.name}",
                action="store_const",
                const=False,
                dest=f.name,
                default=argparse.SUPPRESS,
                help=f"set {f.name} to false",
            )
    elif origin is typing.Literal:
        group.add_argument(*names, choices=typing.get_args(inner), **kwargs)
    elif origin is list:
        group.add_argument(*names, nargs="+", type=typing.get_args(inner)[0], **kwargs)
    elif inner is dict or origin is dict:  # repeated flags add up ("extend"): each item sets one key
        kwargs["help"] += " (KEY=VALUE items, values read as YAML: quote a name like 'yes' or '1.5' as \"'1.5'\")"
        group.add_argument(*names, nargs="+", action="extend", type=_key_value, metavar="KEY=VALUE", **kwargs)
    else:
        convert = inner if inner in (int, float, str, Path) else str
        group.add_argument(*names, type=_or_none(convert) if optional else convert, **kwargs)


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def bounds_of(f: dataclasses.Field) -> str:
    """`at least 1`, `at most 5`, `0 to 1` from a field's metadata, or "" when it has no bounds."""
    low, high = f.metadata.get("min"), f.metadata.get("max")
    if low is not None and high is not None:
        return f"{low} to {high}"
    return f"at least {low}" if low is not None else f"at most {high}" if high is not None else ""


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _to_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _or_none(convert):
    def parse(text: str):
        return None if text.lower() in ("none", "null") else convert(text)

    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its errors
    return parse


def _key_value(text: str) -> tuple[list[str], Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. judge.model=gpt-4.1-mini), got {text!r}")
    try:
        parsed = yaml.safe_load(value) if value else ""
    except yaml.YAMLError:
        parsed = value
    return key.split("."), parsed
