"""Where rubricrl keeps what outlives a run: the converted embedded model, the response cache, server state."""

import os
from pathlib import Path


def rubricrl_home() -> Path:
    """`$RUBRICRL_HOME`, default `~/.cache/rubricrl`; created on first use."""
    home = Path(os.environ.get("RUBRICRL_HOME") or Path.home() / ".cache" / "rubricrl").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home
