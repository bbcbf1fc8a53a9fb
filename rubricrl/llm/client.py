"""The one LLM client: every model call of every stage goes through `LLMClient.chat` or `LLMClient.chat_each`.

Async, against any OpenAI-compatible chat completions API; roles (endpoint, model, sampling) are chosen by name.
Calls spread over a role's endpoints, at most `concurrency` in flight on each over all roles (endpoints.py,
`endpoint_stats()`). Retries are bounded (transport.py): a timed-out request is resent once with twice the time, then
fails saying what to raise or lower; the timeout is 600 s by default (the openai SDK's: an 8192-token answer from a
busy GPU server takes minutes); a 200 that is not a valid chat completion is retried a bounded number of times.
`schema=` asks for a bounded JSON schema (structured.py) and resamples a reply that does not parse. n > 1 samples
are cached per index (cache.py: an answered call is never sent again); usage is counted per role, reasoning tokens
apart. From a reasoning model the answer is `content` alone, the reasoning (`reasoning`, or `reasoning_content` in
vLLM <= 0.10 and DeepSeek) kept beside it; no content is an error saying why (`replies.empty_answer`), never "".
"""

import asyncio
import json
import math
import time
from collections.abc import Callable
from typing import Any

from rubricrl.aio import gather_or_cancel
from rubricrl.llm.cache import ResponseCache, cache_key
from rubricrl.llm.calls import spend_call, tallied_request
from rubricrl.llm.endpoints import EndpointStats, Router
from rubricrl.llm.replies import (
    EndpointUnreachable,
    InvalidAnswer,
    LLMError,
    checked_choices,
    empty_answer,
    reasoning_of,
    redacted,
)
from rubricrl.llm.results import ChatResult, Message, Usage
from rubricrl.llm.roles import Role
from rubricrl.llm.structured import StructuredOutputError, json_schema_format, parse_structured
from rubricrl.llm.transport import Transport, TransportError, TransportTimeout, Unreachable


class LLMClient:
    def __init__(
        self,
        roles: dict[str, Role],
        *,
        cache: ResponseCache | None = None,
        concurrency: int = 16,
        timeout: float = 600.0,
        max_retries: int = 5,
        invalid_answer_retries: int = 2,
    ):
        for name, role in roles.items():
            if role.is_local or role.model is None:
                raise ValueError(f"role '{name}' has no endpoint or model: bind it to a server first (bind_local)")
        if concurrency < 1 or timeout <= 0 or max_retries < 0 or invalid_answer_retries < 0:
            raise ValueError(
                f"LLMClient needs concurrency >= 1, timeout > 0 and retries >= 0, got {concurrency}, "
                f"{timeout}, {max_retries}, {invalid_answer_retries}"
            )
        self.roles, self.cache = roles, cache
        self.invalid_answer_retries = invalid_answer_retries
        self.usage: dict[str, Usage] = {name: Usage() for name in roles}
        self._transport = Transport(timeout=timeout, max_retries=max_retries)
        self._router = Router(concurrency)
        self._pools = {name: self._router.pool(role.endpoints) for name, role in roles.items()}
        self._in_flight: dict[str, asyncio.Future] = {}  # identical calls running now share one request (cache on)

    async def chat(
        self,
        role: str,
        messages: str | list[Message],
        *,
        n: int = 1,
        schema: dict[str, Any] | None = None,
        schema_name: str = "output",
        check: Callable[[Any], None] | None = None,
        allow_empty: bool = False,
        **params: Any,
    ) -> ChatResult:
        """Ask `role` for n answers to `messages` (a string is one user message); `params` override its sampling.
        With `schema` each answer is validated JSON, in `result.parsed`; one that does not parse, or that `check(value)`
        rejects with ValueError (what a schema cannot say, e.g. one verdict per id), is sampled again. A reply without
        content raises EmptyAnswer; with `allow_empty` (not with a schema) it comes back as "" with its reasoning and
        finish_reason, neither asked again nor cached: for a policy whose "no answer" is a result to score."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        messages = _as_messages(messages)
        started = time.monotonic()
        request = self._request_params(role, params, schema, schema_name)
        samples, parsed = await self._chat(role, messages, request, n, schema, check, allow_empty)
        return ChatResult(
            texts=[s["text"] for s in samples],
            finish_reasons=[s["finish_reason"] for s in samples],
            messages=messages,
            role=role,
            model=self.roles[role].model,
            cached=sum(s["cached"] for s in samples),
            parsed=parsed,
            seconds=time.monotonic() - started,
            reasonings=[s.get("reasoning") for s in samples],
            top_logprobs=[s.get("top_logprobs") for s in samples],
        )

    async def chat_each(
        self,
        roles: list[str],
        messages: str | list[Message],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "output",
        check: Callable[[Any], None] | None = None,
        allow_empty: bool = False,
        **params: Any,
    ) -> list[ChatResult]:
        """One answer from each of `roles` (in order; a role may appear more than once), other arguments as in
        `chat`. The cache key ignores the role name and the endpoint, so roles whose requests would be identical
        (same model, sampling parameters and response format) would all get the first one's answer: they share
        one call with n = their number instead, sent to the first one's endpoints, its usage counted there, and
        each takes its own sample."""
        if "n" in params:
            raise ValueError("chat_each gives one answer per role; ask chat(role, ..., n=...) for several")
        messages = _as_messages(messages)
        requests = [self._request_params(role, params, schema, schema_name) for role in roles]
        same: dict[str, list[int]] = {}
        for i, (role, request) in enumerate(zip(roles, requests)):
            same.setdefault(json.dumps([self.roles[role].model, request], sort_keys=True), []).append(i)
        groups = list(same.values())

        async def ask(members: list[int]) -> tuple[list[dict], list[Any], float]:
            started = time.monotonic()
            first = members[0]
            samples, parsed = await self._chat(
                roles[first], messages, requests[first], len(members), schema, check, allow_empty
            )
            return samples, parsed, time.monotonic() - started

        answers: list[ChatResult] = [None] * len(roles)  # type: ignore[list-item]
        for members, (samples, parsed, seconds) in zip(groups, await gather_or_cancel(map(ask, groups))):
            for k, i in enumerate(members):
                answers[i] = ChatResult(
                    texts=[samples[k]["text"]],
                    finish_reasons=[samples[k]["finish_reason"]],
                    messages=messages,
                    role=roles[i],
                    model=self.roles[roles[i]].model,
                    cached=int(samples[k]["cached"]),
                    parsed=parsed[k : k + 1],
                    seconds=seconds,
                    reasonings=[samples[k].get("reasoning")],
                    top_logprobs=[samples[k].get("top_logprobs")],
                )
        return answers

    def _request_params(self, role: str, params: dict[str, Any], schema, schema_name: str) -> dict[str, Any]:
        """The request fields beyond model, messages and n: the role's sampling parameters overridden by the
        call's, and the response format (part of the cache key)."""
        spec = self.roles[role]
        request = _normalized({**spec.sampling_params(), **params})
        if schema is not None and spec.structured_outputs:
            request["response_format"] = json_schema_format(schema, schema_name)
        return request

    async def _chat(self, role, messages, request, n, schema, check, allow_empty) -> tuple[list[dict], list[Any]]:
        """n samples, and with `schema` their validated values."""
        if allow_empty and schema is not None:
            raise ValueError("allow_empty is for free text: an empty reply is never valid JSON")
        spec = self.roles[role]
        samples = await self._samples(role, spec, messages, request, list(range(n)), allow_empty)
        if schema is None:
            return samples, []
        return samples, await self._parse_samples(role, spec, messages, request, schema, check, samples, n)

    async def _parse_samples(self, role, spec, messages, request, schema, check, samples, n) -> list[Any]:
        """Validate each sample; replace one that does not parse with a fresh sample (index n, n+1, ...).
        Greedy decoding without a seed would only repeat the same answer, so it gets no replacement. When a sample
        stays invalid to the end, the invalid answers are dropped from the cache: a rerun then tries afresh
        instead of replaying the same failure."""
        deterministic = request.get("temperature") == 0 and "seed" not in request
        retries = 0 if deterministic else self.invalid_answer_retries
        parsed, next_index, rejected = [], n, []
        for i, sample in enumerate(samples):
            for attempt in range(retries + 1):
                try:
                    value = parse_structured(sample["text"], schema)
                    if check is not None:
                        try:
                            check(value)
                        except ValueError as error:
                            raise StructuredOutputError(f"rejected: {error}", sample["text"]) from error
                    parsed.append(value)
                    break
                except StructuredOutputError as error:
                    rejected.append(sample["key"])
                    if attempt == retries:
                        if self.cache is not None:
                            self.cache.delete(rejected)
                        cut = (
                            f" (the last one stopped at max_tokens={request.get('max_tokens', 'not set')}: raise "
                            "the role's max_tokens)"
                            if sample.get("finish_reason") == "length"
                            else ""
                        )
                        raise LLMError(
                            f"role '{role}' ({spec.model}): no valid JSON after {attempt + 1} samples{cut}: {error}"
                        ) from error
                    self.usage[role].retries += 1
                    sample = (await self._samples(role, spec, messages, request, [next_index]))[0]
                    samples[i] = sample
                    next_index += 1
        return parsed

    async def _samples(self, role, spec, messages, request, indices: list[int], allow_empty=False) -> list[dict]:
        """The samples at `indices`: from the cache, from an identical request in flight (cache on), or asked for."""
        keys = [cache_key(spec.model, messages, request, i) for i in indices]
        found: dict[str, dict] = {}
        for key in keys if self.cache is not None else []:
            hit = self.cache.get(key)
            if hit is not None and not hit["text"].strip():  # stored before empty answers were refused: ask again
                self.cache.delete([key])
            elif hit is not None:
                found[key] = {**hit, "cached": True, "key": key}
        self.usage[role].cache_hits += len(found)
        sharing = self.cache is not None  # cache off: every call asked on its own (a sampling judge's draws)
        waiting = {k: self._in_flight[k] for k in keys if sharing and k not in found and k in self._in_flight}
        mine = [(i, key) for i, key in zip(indices, keys) if key not in found and key not in waiting]
        if mine:
            futures = {key: asyncio.get_running_loop().create_future() for _, key in mine}
            self._in_flight.update(futures if sharing else {})
            try:
                fresh = await self._ask(role, spec, messages, request, [i for i, _ in mine], allow_empty)
                if self.cache is not None:  # first writer wins: what the cache holds is the answer; no answer, or
                    fresh = [  # one without the logprobs asked for (another endpoint may send them), is never stored
                        self.cache.put(key, sample) if _storable(sample) else sample
                        for (_, key), sample in zip(mine, fresh)
                    ]
                for (_, key), stored in zip(mine, fresh):
                    found[key] = {**stored, "cached": False, "key": key}
                    futures[key].set_result(stored)
            except BaseException as error:
                for future in futures.values():
                    if not future.done():
                        future.set_exception(error)
                        future.exception()  # retrieved here: the waiters re-raise it themselves
                raise
            finally:
                for key in futures:
                    self._in_flight.pop(key, None)
        for key, future in waiting.items():
            found[key] = {**await future, "cached": True, "key": key}
        for k, key in enumerate(keys if not allow_empty else []):  # an identical call that allowed it answered empty
            if not found[key]["text"].strip():
                raise empty_answer(role, spec, request, found[key], k, len(keys))
        return [found[key] for key in keys]

    async def _ask(self, role, spec, messages, request, indices: list[int], allow_empty: bool) -> list[dict]:
        """Fresh samples for `indices`: one request with n = len(indices), or, for a seeded role, one request per
        index with seed + index (what vLLM gives the i-th child of an n request), so samples never repeat."""
        if "seed" not in request:
            return await self._request(role, spec, messages, request, len(indices), allow_empty)
        answers = await gather_or_cancel(
            self._request(role, spec, messages, {**request, "seed": request["seed"] + i}, 1, allow_empty)
            for i in indices
        )
        return [answer[0] for answer in answers]

    async def _request(self, role, spec, messages, request, n, allow_empty: bool) -> list[dict]:
        """n fresh samples from one request, none without an answer. Empty choices are asked for again (those
        alone, a bounded number of times) only when a new sample can differ: greedy or seeded decoding repeats the
        reply, and one cut at `length` (a reasoning model that spent max_tokens thinking) nearly always runs out again,
        each try at the whole budget's cost, so those fail at once saying what to change. The error comes before the
        cache, so a rerun asks again instead of replaying it. With `allow_empty` replies are returned as they came."""
        body = {"model": spec.model, "messages": messages, "n": n, **request}
        body.update(body.pop("extra_body", None) or {})
        samples = await self._post(role, spec, body, n)
        if allow_empty:
            return samples
        resample = request.get("temperature") != 0 and "seed" not in request
        for attempt in range(1, self.invalid_answer_retries + 1):
            empty = [i for i, s in enumerate(samples) if not s["text"].strip()]
            if not resample or not empty or any(samples[i]["finish_reason"] == "length" for i in empty):
                break
            self.usage[role].retries += len(empty)
            for i, sample in zip(empty, await self._post(role, spec, {**body, "n": len(empty)}, len(empty))):
                samples[i] = {**sample, "attempts": attempt + 1}
        for i, sample in enumerate(samples):
            if not sample["text"].strip():
                raise empty_answer(role, spec, body, sample, i, n)
            sample.pop("attempts", None)
        return samples

    async def _post(self, role, spec, body, n) -> list[dict]:
        """One chat completion request (transport faults are retried by the transport); a 200 whose body is not
        a chat completion with n choices is asked for again, a bounded number of times."""
        for attempt in range(self.invalid_answer_retries + 1):
            spend_call(f"role '{role}' ({spec.model})")  # counted for the question asked (rubricrl/llm/calls.py)
            key = spec.api_key()  # a missing key: no request, nothing tallied
            try:
                with tallied_request():  # in the batch's tally (rubricrl/llm/calls.py), answered or failed
                    response = await self._transport.post_json(self._pools[role], "/chat/completions", body, key)
                    choices = checked_choices(response, n)
                break
            except (InvalidAnswer, json.JSONDecodeError, UnicodeDecodeError) as error:
                if attempt == self.invalid_answer_retries:
                    raise LLMError(
                        redacted(
                            f"role '{role}' ({spec.model} at {spec.base_url}): invalid response "
                            f"body after {attempt + 1} attempts: {error!r}",
                            spec,
                        )
                    ) from None
                self.usage[role].retries += 1
            except TransportTimeout as error:
                raise LLMError(
                    f"role '{role}' ({spec.model} at {spec.base_url}): {error}: the server is slow or the "
                    "answer long; raise the timeout (--timeout, or `timeout:` in the config's llm section) "
                    f"or lower the role's max_tokens (now {body.get('max_tokens', 'not set')})"
                ) from None
            except Unreachable as error:
                raise EndpointUnreachable(f"role '{role}' ({spec.model} at {spec.base_url}): {error}") from None
            except TransportError as error:  # some gateways echo the key in their error body: it is cut out
                raise LLMError(redacted(f"role '{role}' ({spec.model} at {spec.base_url}): {error}", spec)) from None
        self.usage[role].count(response)
        samples = []
        for c in choices:
            sample = {
                "text": c["message"].get("content") or "",
                "finish_reason": c.get("finish_reason"),
                "reasoning": reasoning_of(c["message"]),
            }
            if "logprobs" in body:  # asked for: kept (and cached) with the sample, absent if the server sent none
                sample["top_logprobs"] = top_logprobs(c.get("logprobs"))
            samples.append(sample)
        return samples

    def endpoint_stats(self) -> dict[str, EndpointStats]:
        """Per endpoint URL: requests sent, failed, mean latency, times taken out of rotation (a live view)."""
        return self._router.stats()

    def endpoint_summary(self) -> str | None:
        """One line per endpoint for a command's summary; None when a single endpoint never failed."""
        stats = list(self.endpoint_stats().values())
        if len(stats) <= 1 and not any(s.failures for s in stats):
            return None
        return "\n".join(f"endpoint {s.line()}" for s in stats)

    async def aclose(self) -> None:
        if self.cache is not None:
            self.cache.flush()  # other processes see this run's answers now
        await self._transport.close()

    async def __aenter__(self) -> "LLMClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _as_messages(messages: str | list[Message]) -> list[Message]:  # a string is one user message
    return [{"role": "user", "content": messages}] if isinstance(messages, str) else list(messages)


def _storable(sample: dict[str, Any]) -> bool:
    return bool(sample["text"].strip()) and sample.get("top_logprobs", ()) is not None


def top_logprobs(logprobs: Any) -> list[dict[str, float]] | None:
    """A chat choice's `logprobs` as one {token text: logprob} per generated position (the chosen token and its
    alternatives); None when the server sent none (an endpoint that does not support them). Distinct tokens that
    decode to the same text have their probabilities summed, never one overwriting the other; the chosen token
    counts once (servers list it among the alternatives too)."""
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list) or not logprobs["content"]:
        return None
    positions = []
    for position in logprobs["content"]:
        entries = [(t["token"], t["logprob"]) for t in position.get("top_logprobs") or ()]
        if (position["token"], position["logprob"]) not in entries:
            entries.append((position["token"], position["logprob"]))
        summed: dict[str, float] = {}
        for token, logprob in entries:
            summed[token] = _log_add(summed[token], logprob) if token in summed else logprob
        positions.append(summed)
    return positions


def _log_add(a: float, b: float) -> float:
    """log(e^a + e^b) without underflow (servers send -9999 or -inf for masked tokens)."""
    high, low = max(a, b), min(a, b)
    return high if low == -math.inf else high + math.log1p(math.exp(low - high))


FLOAT_PARAMS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")


def _normalized(request: dict[str, Any]) -> dict[str, Any]:
    """Drop unset parameters and make floats floats, so that `temperature: 1` from YAML and `temperature=1.0`
    in code are one request (and one cache key)."""
    request = {name: value for name, value in request.items() if value is not None}
    for name in FLOAT_PARAMS:
        if isinstance(request.get(name), int):
            request[name] = float(request[name])
    return request
