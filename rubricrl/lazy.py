"""A command's work imported when the command runs, not when the parser is built: `rubricrl --help` and every
command's start-up stay free of torch, transformers, TRL, vLLM and datasets (tests/test_startup.py holds it)."""

import importlib
from collections.abc import Callable
from typing import Any


def when_called(module: str, name: str) -> Callable[..., Any]:
    """`module.name`, imported at its first call (a command's `run`, a merge, a card builder)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = f"{module}.{name}"
    return call
