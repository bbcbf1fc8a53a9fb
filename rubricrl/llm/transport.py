"""POST a chat completion request and return its JSON body: one aiohttp session per client, bounded retries.

Why aiohttp directly and not the openai SDK: the SDK spends ~0.8 ms of CPU per request (httpx request objects,
the URL parsed three times, merged headers, option models, then a translation to aiohttp), against ~0.2 ms here.
At a few hundred calls in flight against a fast server that CPU bounds throughput
(benches/synthesis_throughput.py at 256 calls in flight: efficiency 0.44 through the SDK, 0.75 here).

Retries. Connection errors, 408, 409, 429 and 5xx are retried (an `x-should-retry` header overrides the status)
up to `max_retries` times, after the server's Retry-After / retry-after-ms when it gives one of at most 60 s,
else 0.5 s x 2^retry capped at 8 s, less up to 25% jitter (the openai SDK's policy). A request that got no
answer within the timeout is resent once only, at once, with the limit doubled: at the same limit a slow server
or a long answer times out again, and every resend of a long generation adds load (resent like connection
errors, the SDK's way, a 16-query synthesis on a CPU server sent each request 6 times and took 19 minutes).
The resend counts against `max_retries` like any other.
"""

import asyncio
import email.utils
import json
import random
import time
import urllib.parse
import urllib.request
from typing import Any

import aiohttp

INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER = 60.0
RETRIED_STATUSES = {408, 409, 429}
TIMEOUT_RESENDS = 1
# Not an answer too slow but no connection at all: retried like the other connection errors.
CONNECT_TIMEOUTS = getattr(aiohttp, "ConnectionTimeoutError", ())  # aiohttp >= 3.10


class TransportError(RuntimeError):
    """The request failed for good: an error status, or a transport fault still there after the last retry."""


class TransportTimeout(TransportError):
    """No answer within the time limit, on the first try nor on the resend."""

    def __init__(self, limits: list[float]):
        tries = ", nor within ".join(f"{limit:g} s" for limit in limits)
        super().__init__(f"no answer within {tries}" + (" on a second try" if len(limits) > 1 else ""))


class Transport:
    def __init__(self, *, timeout: float, max_retries: int, semaphore: asyncio.Semaphore):
        self.timeout = timeout
        self.max_retries = max_retries
        self.semaphore = semaphore
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}

    async def post_json(self, url: str, body: dict[str, Any], api_key: str) -> Any:
        """The decoded JSON body of a 2xx answer. A 2xx body that is not JSON raises json.JSONDecodeError (the
        caller decides whether to ask again); error statuses and exhausted retries raise TransportError,
        TransportTimeout when the last try timed out."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        data = json.dumps(body, ensure_ascii=False).encode()
        limit, timed_out = self.timeout, []
        for attempt in range(self.max_retries + 1):
            wait = None
            try:
                timeout = aiohttp.ClientTimeout(total=limit)
                # The semaphore is held while a request is out, not while waiting to retry.
                async with self.semaphore, self._open().post(url, data=data, headers=headers, timeout=timeout,
                                                             proxy=self._proxy(url)) as response:  # fmt: skip
                    content = await response.read()
                    if response.status < 300:
                        return json.loads(content)
                    error = f"HTTP {response.status}: {content[:1000].decode('utf-8', 'replace')}"
                    retry = _should_retry(response)
                    wait = _retry_after(response.headers)
            except (aiohttp.ClientError, TimeoutError) as fault:
                if isinstance(fault, TimeoutError) and not isinstance(fault, CONNECT_TIMEOUTS):
                    timed_out.append(limit)
                    if len(timed_out) > TIMEOUT_RESENDS or attempt == self.max_retries:
                        raise TransportTimeout(timed_out) from None
                    limit *= 2  # no backoff: the server has had `limit` seconds already
                    continue
                error = f"{type(fault).__name__}: {fault}" if str(fault) else type(fault).__name__
                retry = True
            if not retry or attempt == self.max_retries:
                raise TransportError(f"{error} (after {attempt + 1} attempt(s))" if retry else error)
            await asyncio.sleep(wait if wait is not None else _backoff(attempt))
        raise AssertionError("unreachable")

    def _open(self) -> aiohttp.ClientSession:
        """Created on first use, inside the running loop (aiohttp binds to it). No connection limit of its own:
        the semaphore bounds the calls, and every concurrent call keeps its connection alive. The proxy
        variables are read once per URL (_proxy), not on every request as aiohttp's trust_env would (0.25 ms each)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._session

    def _proxy(self, url: str) -> str | None:
        """The proxy the environment sets for `url` (HTTPS_PROXY, HTTP_PROXY, NO_PROXY), as the SDK honoured them."""
        if url not in self._proxies:
            parts = urllib.parse.urlsplit(url)
            bypass = urllib.request.proxy_bypass_environment(parts.hostname or "")
            self._proxies[url] = None if bypass else urllib.request.getproxies_environment().get(parts.scheme)
        return self._proxies[url]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _should_retry(response: aiohttp.ClientResponse) -> bool:
    override = response.headers.get("x-should-retry")
    if override in ("true", "false"):
        return override == "true"
    return response.status in RETRIED_STATUSES or response.status >= 500


def _retry_after(headers) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, or Retry-After in seconds or as an HTTP date), when
    within reason; None otherwise."""
    seconds = None
    try:
        if "retry-after-ms" in headers:
            seconds = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            value = headers["retry-after"]
            try:
                seconds = float(value)
            except ValueError:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and 0 <= seconds <= MAX_RETRY_AFTER else None


def _backoff(attempt: int) -> float:
    return min(INITIAL_RETRY_DELAY * 2.0**attempt, MAX_RETRY_DELAY) * (1 - 0.25 * random.random())
