"""POST a chat completion request and return its JSON body: one aiohttp session per client, bounded retries.

aiohttp, not the openai SDK: ~0.2 ms of CPU a request against ~0.8 ms, which bounds throughput at a few hundred in
flight (benches/synthesis_throughput.py at 256: efficiency 0.75 against 0.44). Retries follow the SDK: connection
errors, 408, 409, 429 and 5xx (an `x-should-retry` header overrides the status), at most `max_retries`, after a
Retry-After / retry-after-ms of <= 60 s, else 0.5 s x 2^retry up to 8 s, less up to 25% jitter. A timeout is resent
once, at once, with the limit doubled (counted in `max_retries`): at the same limit it times out again, and each
resend adds load (retried like a connection error, the SDK's way, a 16-query CPU synthesis sent each request 6 times
and took 19 minutes). A failure of the endpoint's own (no connection, 5xx, timeout) is resent at once to another
endpoint in rotation (endpoints.py), else after the backoff; requests out on an ejected endpoint are resent likewise
(TakenOut). After UNANSWERED_CALLS unconnected calls in a row a pool counts as down and each call gets one attempt
until one is answered, so a dead server ends a run in one backoff, not one per call.
"""

import asyncio
import email.utils
import json
import random
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from rubricrl.llm.endpoints import Pool

INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER = 60.0
RETRIED_STATUSES = {408, 409, 429}
TIMEOUT_RESENDS = 1
# Not an answer too slow but no connection at all: retried like the other connection errors.
CONNECT_TIMEOUTS = getattr(aiohttp, "ConnectionTimeoutError", ())  # aiohttp >= 3.10
NO_CONNECTION = (aiohttp.ClientConnectorError, *([CONNECT_TIMEOUTS] if CONNECT_TIMEOUTS else []))
UNANSWERED_CALLS = 3  # calls in a row that never connected before a pool counts as down (see Unreachable)


class TransportError(RuntimeError):
    """The request failed for good: an error status, or a transport fault still there after the last retry."""


class TransportTimeout(TransportError):
    """No answer within the time limit, on the first try nor on the resend."""

    def __init__(self, limits: list[float]):
        tries = ", nor within ".join(f"{limit:g} s" for limit in limits)
        super().__init__(f"no answer within {tries}" + (" on a second try" if len(limits) > 1 else ""))


class TakenOut(Exception):
    """The endpoint a request was out on was taken out of rotation while another is in: it goes there instead."""


class Unreachable(TransportError):
    """No connection to any endpoint of a pool for UNANSWERED_CALLS calls in a row: later calls get one attempt."""


@dataclass(frozen=True)
class Answered:
    value: Any


@dataclass(frozen=True)
class GiveUp:
    error: TransportError


@dataclass(frozen=True)
class Retry:
    """Send it again after `wait` seconds (0: at once, e.g. to another endpoint): one of the call's retries."""

    wait: float


@dataclass(frozen=True)
class Move:
    """Its endpoint was taken out of rotation with it out: resent at once elsewhere, not one of its retries (the
    request did nothing wrong)."""


Outcome = Answered | GiveUp | Retry | Move


@dataclass
class _Call:
    """One post_json call: the request and what its attempts so far have seen."""

    pool: Pool
    path: str
    data: bytes
    headers: dict[str, str]
    retries: int
    attempt: int = 0
    """This attempt's number, 0 for the first."""
    moves: int = 0
    """Resends off endpoints taken out of rotation with it out."""
    timed_out: list[float] = field(default_factory=list)
    """The time limits it got no answer within; each resend has twice the last."""
    failed_on: set[str] = field(default_factory=set)
    """The endpoints that failed it for their own sake: the next attempt goes to another when there is one."""

    def after_fault(self, endpoint, fault: Exception, limit: float) -> Outcome:
        """What follows a transport fault: no answer in time, no connection, a dropped connection."""
        if isinstance(fault, TimeoutError) and not isinstance(fault, CONNECT_TIMEOUTS):
            self.timed_out.append(limit)
            if len(self.timed_out) > TIMEOUT_RESENDS or self.attempt == self.retries:
                return GiveUp(TransportTimeout(self.timed_out))
            return Retry(0.0)  # no backoff: the server has had `limit` seconds already
        pool = self.pool
        error = f"{type(fault).__name__}: {fault}" if str(fault) else type(fault).__name__
        if len(pool.endpoints) > 1:
            error += f" (at {endpoint.url})"
        # The last attempt, or the pool was taken for down meanwhile: no more retries for this call.
        if isinstance(fault, NO_CONNECTION) and (
            self.attempt == self.retries or pool.unanswered_calls >= UNANSWERED_CALLS
        ):
            pool.unanswered_calls += 1
            if pool.unanswered_calls >= UNANSWERED_CALLS:
                return GiveUp(
                    Unreachable(
                        f"no connection to {pool.urls} for {pool.unanswered_calls} calls in a row "
                        f"(last: {error}); is the server up?"
                    )
                )
        return self.after_failure(endpoint.url, error)

    def after_failure(self, url: str, error: str, *, retry: bool = True, wait: float | None = None) -> Outcome:
        """Give up (an error not worth retrying, or the last attempt), or send it again: at once to another
        endpoint when `url` failed it for its own sake, else after the server's `wait` or the backoff."""
        if not retry or self.attempt == self.retries:
            return GiveUp(TransportError(f"{error} (after {self.attempt + 1} attempt(s))" if retry else error))
        if url in self.failed_on and self.pool.has_another(frozenset(self.failed_on)):
            return Retry(0.0)  # another endpoint takes it now
        return Retry(wait if wait is not None else _backoff(self.attempt))


class Transport:
    def __init__(self, *, timeout: float, max_retries: int):
        self.timeout = timeout
        self.max_retries = max_retries
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}

    async def post_json(self, pool: Pool, path: str, body: dict[str, Any], api_key: str) -> Any:
        """The decoded JSON body of a 2xx answer from one of `pool`'s endpoints (`path` after its base URL). A 2xx
        body that is not JSON raises json.JSONDecodeError (the caller decides whether to ask again); error statuses
        and exhausted retries raise TransportError, TransportTimeout when the last try timed out, Unreachable when
        the pool has stopped answering."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        data = json.dumps(body, ensure_ascii=False).encode()
        # Nothing connected for several calls in a row: a dead server. One attempt each (instant when refused)
        # instead of a minute of backoff per call; the first answer ends this.
        retries = 0 if pool.unanswered_calls >= UNANSWERED_CALLS else self.max_retries
        call = _Call(pool, path, data, headers, retries)
        while True:
            match await self._attempt(call):
                case Answered(value):
                    return value
                case GiveUp(error):
                    raise error
                case Retry(wait):
                    call.attempt += 1
                    if wait:
                        await asyncio.sleep(wait)
                case Move():
                    call.moves += 1

    async def _attempt(self, call: _Call) -> Outcome:
        """Send the call once, to the pool's endpoint for it, and judge what came back."""
        pool = call.pool
        # A slot is held while a request is out, not while waiting to retry.
        endpoint = await pool.acquire(frozenset(call.failed_on))
        limit = self.timeout * 2 ** len(call.timed_out)
        started = time.monotonic()
        try:
            send = self._send(endpoint.url + call.path, call.data, call.headers, limit)
            if len(pool.endpoints) > 1:
                send = _movable(send, pool, endpoint)
            status, content, response_headers, retry = await send
        except TakenOut:
            endpoint.record_moved()
            pool.release(endpoint)
            call.failed_on.add(endpoint.url)
            if call.moves < len(pool.endpoints):  # (a bound, in case endpoints keep being taken out in turn)
                return Move()
            return call.after_failure(endpoint.url, f"taken out of rotation with this request out (at {endpoint.url})")
        except (aiohttp.ClientError, TimeoutError) as fault:
            endpoint.record(0.0, answered=False, fault=True)
            pool.release(endpoint)
            call.failed_on.add(endpoint.url)
            return call.after_fault(endpoint, fault, limit)
        except BaseException:  # cancelled while out: the slot is freed, the attempt not judged
            pool.release(endpoint)
            raise
        answered = status < 300
        endpoint.record(time.monotonic() - started, answered=answered, fault=status >= 500)
        pool.release(endpoint)
        pool.unanswered_calls = 0
        if answered:
            return Answered(json.loads(content))
        if status >= 500:
            call.failed_on.add(endpoint.url)
        error = f"HTTP {status}: {content[:1000].decode('utf-8', 'replace')}"
        return call.after_failure(endpoint.url, error, retry=retry, wait=_retry_after(response_headers))

    async def _send(self, url: str, data: bytes, headers: dict[str, str], limit: float):
        """One POST: (status, body, headers, whether an error status is worth retrying)."""
        # a host that drops packets is known in 10 s, not after the whole limit (it counts as no connection)
        timeout = aiohttp.ClientTimeout(total=limit, sock_connect=min(limit, 10.0))
        session = self._open()
        async with session.post(url, data=data, headers=headers, timeout=timeout, proxy=self._proxy(url)) as response:
            content = await response.read()
            return response.status, content, response.headers, _should_retry(response)

    def _open(self) -> aiohttp.ClientSession:
        """Created on first use, inside the running loop (aiohttp binds to it). No connection limit of its own:
        the endpoints' bounds limit the calls, and every concurrent call keeps its connection alive. The proxy
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


async def _movable(send, pool: Pool, endpoint) -> Any:
    """`send`'s result, unless `endpoint` is taken out of rotation while it is out (endpoints.py cancels it then,
    when another endpoint can take it): TakenOut, so that it is resent at once instead of waiting for its own fault.
    A cancellation of the caller itself (Ctrl-C, a timeout around the call) stays a cancellation."""
    task = asyncio.ensure_future(send)
    endpoint.sending[task] = pool
    try:
        return await task
    except asyncio.CancelledError:
        if task in endpoint.moving and not asyncio.current_task().cancelling():
            raise TakenOut() from None
        raise
    finally:
        del endpoint.sending[task]
        endpoint.moving.discard(task)


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
