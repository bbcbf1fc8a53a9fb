"""Where a command's wall time went: seconds per named phase, in the order the phases first ran (a phase entered
again adds to its total). Training commands write it beside their other figures, so a slow run says why."""

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Stopwatch:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        return {name: round(seconds, 2) for name, seconds in self.seconds.items()}
