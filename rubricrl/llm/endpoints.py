"""Several endpoints behind one role: calls spread by least outstanding requests, a concurrency bound per endpoint,
and an endpoint that keeps failing taken out of rotation for a cool-down.

`base_url` may name several endpoints of one model: a YAML list, comma-separated URLs (as on the command line), or
`@FILE`, a URL a line (`#` comments), all read by `endpoint_urls`. An attempt takes the endpoint in rotation with the
fewest requests out (ties: the one asked least), at most `limit` each, or waits its turn. FAILURES_TO_EJECT failed
attempts in a row (no connection, 5xx, timeout) take an endpoint out for COOL_DOWN s, doubling up to MAX_COOL_DOWN;
then one request probes it, and one success brings it back. Its failed and outstanding requests go at once to
another endpoint in rotation (counted in max_retries; not left to a hung server's 600 s timeout), else after the
usual backoff. With every endpoint out, all are tried at full bound, the usual retries deciding. The answering
endpoint is not in the cache key, so a replayed run gets the same answers.
"""

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

FAILURES_TO_EJECT = 3
COOL_DOWN = 5.0
MAX_COOL_DOWN = 60.0


def endpoint_urls(base_url: str | list[str], where: str = "base_url") -> list[str]:
    """The endpoints `base_url` names (a URL, URLs separated by commas, a list of them, or @FILE), each an http(s)
    URL without a trailing slash; raises ValueError naming the bad one."""
    items = base_url if isinstance(base_url, list) else [base_url]
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{where}: expected URLs, got {item!r:.100}")
        item = item.strip()
        if item.startswith("@"):
            try:
                lines = Path(item[1:]).expanduser().read_text().splitlines()
            except OSError as error:
                raise ValueError(f"{where}: cannot read the endpoint file {item[1:]}: {error.strerror}") from None
            listed = [url for url in (line.split("#", 1)[0].strip() for line in lines) if url]
            if not listed:
                raise ValueError(f"{where}: the endpoint file {item[1:]} names no URL")
            urls += endpoint_urls(listed, f"{where} (file {item[1:]})")
            continue
        urls += [part.strip().rstrip("/") for part in item.split(",")]
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{where}: {url!r} is not an endpoint URL (e.g. http://host:8000/v1)")
    if len(set(urls)) != len(urls):
        raise ValueError(f"{where}: an endpoint is named twice in {urls}")
    return urls


@dataclass
class EndpointStats:
    """Counts of one endpoint since the client opened (`LLMClient.endpoint_stats()`)."""

    url: str
    requests: int = 0
    """HTTP requests sent (every attempt; cache hits send none)."""
    failures: int = 0
    """Of those, the ones that got no usable answer: no connection, no answer in time, an error status."""
    seconds: float = 0.0
    """Total time of the answered ones."""
    ejected: int = 0
    """Times it was taken out of rotation."""
    in_rotation: bool = True

    @property
    def mean_latency(self) -> float:
        answered = self.requests - self.failures
        return self.seconds / answered if answered else 0.0

    def line(self) -> str:
        out = "" if self.in_rotation else ", out of rotation now"
        ejected = f", taken out {self.ejected}x" if self.ejected else ""
        return (
            f"{self.url}: {self.requests} requests, {self.failures} failed, {self.mean_latency:.2f} s mean"
            f"{ejected}{out}"
        )


class Endpoint:
    def __init__(self, url: str, limit: int):
        self.url = url
        self.limit = limit
        self.in_flight = 0
        self.stats = EndpointStats(url)
        self.failures_in_a_row = 0
        self.down_until = 0.0  # out of rotation until then (monotonic clock)
        self.probing = False  # back from a cool-down: one request at a time until one succeeds
        self.cool_down = COOL_DOWN
        self.pools: list[Pool] = []
        self.sending: dict[asyncio.Task, Pool] = {}  # requests out on it that can move (transport.py: movable)
        self.moving: set[asyncio.Task] = set()  # of those, the ones cancelled to be resent elsewhere

    def in_rotation(self, now: float) -> bool:
        return self.down_until <= now

    def record(self, seconds: float, *, answered: bool, fault: bool) -> None:
        """One attempt's outcome. `fault`: no connection, 5xx or no answer in time (an error status like 400 or
        429 says the endpoint is up)."""
        self.stats.requests += 1
        if answered:
            self.stats.seconds += seconds
        else:
            self.stats.failures += 1
        if not fault:
            self.failures_in_a_row, self.probing, self.cool_down = 0, False, COOL_DOWN
            return
        self.failures_in_a_row += 1
        now = time.monotonic()
        if (self.probing or self.failures_in_a_row >= FAILURES_TO_EJECT) and self.in_rotation(now):
            self.down_until = now + self.cool_down
            self.stats.ejected += 1
            # Calls waiting for a slot are handed one when a release frees it; nothing is released when the
            # endpoints in rotation hang, so the end of the cool-down hands out this endpoint's slots itself.
            asyncio.get_running_loop().call_later(self.cool_down, self._hand_over)
            self.cool_down = min(2 * self.cool_down, MAX_COOL_DOWN)
            self.probing = True
            # Its requests still out go elsewhere now, where their pool has an endpoint that is neither out nor
            # probing (a probe takes one request at a time): a hung server would hold them until their timeout.
            for task, pool in list(self.sending.items()):
                if pool.steady_other(self) and task.cancel():
                    self.moving.add(task)

    def record_moved(self) -> None:
        """A request moved off this endpoint when it was taken out: sent, not answered, no fault of its own."""
        self.stats.requests += 1
        self.stats.failures += 1

    def _hand_over(self) -> None:
        for pool in self.pools:
            pool._hand_over()


class Pool:
    """The endpoints of one role (roles naming the same endpoints share a pool; an endpoint, and its bound, is
    shared by every pool that names it)."""

    def __init__(self, endpoints: list[Endpoint]):
        self.endpoints = endpoints
        self._waiters: deque[tuple[asyncio.Future, frozenset[str]]] = deque()
        self.unanswered_calls = 0
        """Calls in a row that ended without ever connecting (transport.py stops retrying after a few)."""

    @property
    def urls(self) -> str:
        return ",".join(e.url for e in self.endpoints)

    def _choose(self, avoid: frozenset[str]) -> Endpoint | None:
        """The endpoint for the next attempt, or None when it must wait for a slot. `avoid`: endpoints this request
        already failed on, left out while another is in rotation."""
        now = time.monotonic()
        in_rotation = [e for e in self.endpoints if e.in_rotation(now)]
        probes_one_at_a_time = len(self.endpoints) > 1 and bool(in_rotation)
        usable = in_rotation or self.endpoints  # all out: they are all tried, at their full bound
        fresh = [e for e in usable if e.url not in avoid] or usable
        free = [e for e in fresh if e.in_flight < (1 if probes_one_at_a_time and e.probing else e.limit)]
        return min(free, key=lambda e: (e.in_flight, e.stats.requests)) if free else None

    def steady_other(self, endpoint: Endpoint) -> bool:
        """Whether another endpoint is in rotation and not probing: where `endpoint`'s requests can move."""
        now = time.monotonic()
        return any(e is not endpoint and e.in_rotation(now) and not e.probing for e in self.endpoints)

    def has_another(self, avoid: frozenset[str]) -> bool:
        """Whether an endpoint in rotation is left beside those in `avoid`: a failed attempt is then resent at once."""
        now = time.monotonic()
        return any(e.in_rotation(now) and e.url not in avoid for e in self.endpoints)

    async def acquire(self, avoid: frozenset[str] = frozenset()) -> Endpoint:
        endpoint = self._choose(avoid) if not self._waiters else None
        if endpoint is not None:
            endpoint.in_flight += 1
            return endpoint
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((waiter, avoid))
        self._hand_over()  # a waiter ahead of this one may wait for another endpoint than the one that is free
        try:
            return await waiter  # handed a slot by release(), already counted
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot in the meantime: give it back
                self.release(waiter.result())
            elif (waiter, avoid) in self._waiters:  # (_hand_over drops cancelled ones it meets first)
                self._waiters.remove((waiter, avoid))
            raise

    def release(self, endpoint: Endpoint) -> None:
        endpoint.in_flight -= 1
        endpoint._hand_over()

    def _hand_over(self) -> None:
        """Give free slots to the waiters, in order. A waiter that avoids the endpoints it failed on may find no
        slot where another waiter would: it keeps its place, and the ones behind it are served."""
        skipped = []  # put back in front, in order: only these are moved (thousands may wait behind them)
        while self._waiters:
            waiter, avoid = self._waiters[0]
            if waiter.done():  # cancelled
                self._waiters.popleft()
                continue
            endpoint = self._choose(avoid)
            if endpoint is None:
                if not avoid:  # no slot for a waiter that takes any endpoint: none for those behind it either
                    break
                skipped.append(self._waiters.popleft())
                continue
            self._waiters.popleft()
            endpoint.in_flight += 1
            waiter.set_result(endpoint)
        self._waiters.extendleft(reversed(skipped))


class Router:
    """Every endpoint a client talks to, each with its own bound, and the pools of the roles."""

    def __init__(self, limit: int):
        self.limit = limit
        self._endpoints: dict[str, Endpoint] = {}
        self._pools: dict[tuple[str, ...], Pool] = {}

    def pool(self, urls: list[str]) -> Pool:
        key = tuple(urls)
        if key not in self._pools:
            endpoints = [self._endpoints.setdefault(url, Endpoint(url, self.limit)) for url in urls]
            pool = self._pools[key] = Pool(endpoints)
            for endpoint in endpoints:
                endpoint.pools.append(pool)
        return self._pools[key]

    def stats(self) -> dict[str, EndpointStats]:
        now = time.monotonic()
        for endpoint in self._endpoints.values():
            endpoint.stats.in_rotation = endpoint.in_rotation(now)
        return {url: endpoint.stats for url, endpoint in self._endpoints.items()}
