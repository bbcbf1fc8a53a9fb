"""Transport faults against a local fault-injecting server: every fault is retried a bounded number of times,
Retry-After is honoured, a timed-out request is resent once with twice the time, and a call that cannot succeed
raises LLMError instead of returning something. Also chat_each: identical requests of several roles share one
call."""

import itertools
import time

import pytest

from rubricrl.llm import LLMError, Role
from tests.fault_server import Fault
from tests.helpers import ask, run

SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 200}},
    "required": ["verdict", "reason"],
    "additionalProperties": False,
}


def roles_for(server, **role):
    return {"judge": Role(base_url=server.base_url, model="fake", **role)}


def test_429_with_retry_after_is_waited_out_then_succeeds(fault_server):
    fault_server.script = [Fault(429, headers={"Retry-After": "1"})]
    started = time.monotonic()
    result, usage = run(ask(roles_for(fault_server), "judge", "hi"))
    assert result.text == "ok"
    assert fault_server.count == 2
    assert time.monotonic() - started >= 0.95  # waited the second the server asked for


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retried(fault_server, status):
    fault_server.script = [Fault(status), Fault(status)]
    result, usage = run(ask(roles_for(fault_server), "judge", "hi"))
    assert result.text == "ok"
    assert fault_server.count == 3
    assert usage.requests == 1  # one successful call; the SDK's retries are not double-counted


def test_persistent_503_gives_up_after_bounded_attempts(fault_server):
    fault_server.script = [Fault(503, headers={"Retry-After": "0"})] * 10
    with pytest.raises(LLMError, match="503"):
        run(ask(roles_for(fault_server), "judge", "hi", max_retries=2))
    assert fault_server.count == 3  # 1 + max_retries


def test_client_error_is_not_retried(fault_server):
    fault_server.script = [Fault(400)]
    with pytest.raises(LLMError, match="400"):
        run(ask(roles_for(fault_server), "judge", "hi"))
    assert fault_server.count == 1


def test_persistent_503_is_still_retried_the_default_max_retries_times(fault_server):
    fault_server.script = [Fault(503, headers={"Retry-After": "0"})] * 10
    with pytest.raises(LLMError, match="503"):
        run(ask(roles_for(fault_server), "judge", "hi", timeout=5.0))
    assert fault_server.count == 6  # 1 + the default max_retries (5)


def test_timed_out_request_is_resent_once_with_twice_the_time(fault_server):
    # Seconds, not tenths: three test processes load the 2 cores, and a request can wait 0.3 s to be read at all.
    fault_server.script = [Fault(delay=3.0), Fault(delay=3.0)]  # past the first limit (2 s), within the second
    started = time.monotonic()
    result, _ = run(ask(roles_for(fault_server), "judge", "hi", timeout=2.0))
    assert result.text == "ok" and fault_server.count == 2
    assert time.monotonic() - started >= 5.0  # 2 s given up on, then the 3 s answer waited for


def test_always_slow_endpoint_is_sent_twice_and_the_error_names_the_knobs(fault_server):
    fault_server.script = [Fault(delay=10.0)] * 5
    started = time.monotonic()
    with pytest.raises(LLMError) as error:
        run(ask(roles_for(fault_server, max_tokens=64), "judge", "hi", timeout=1.0))  # max_retries 5: not used up
    assert fault_server.count == 2 and time.monotonic() - started < 6.0  # 1 s + 2 s, not 5 retries of 10 s
    message = str(error.value)
    assert (
        f"role 'judge' (fake at {fault_server.base_url}): no answer within 1 s, nor within 2 s on a second "
        "try: the server is slow or the answer long" in message
    )
    assert "raise the timeout (--timeout, or `timeout:` in the config's llm section)" in message
    assert "lower the role's max_tokens (now 64)" in message


def test_timeout_without_retries_is_not_resent(fault_server):
    fault_server.script = [Fault(delay=5.0)] * 5
    with pytest.raises(LLMError, match=r"no answer within 1 s: .* max_tokens \(now not set\)"):
        run(ask(roles_for(fault_server), "judge", "hi", timeout=1.0, max_retries=0))
    assert fault_server.count == 1


@pytest.mark.parametrize(
    "fault",
    [
        Fault(body=b"<html>502 Bad Gateway</html>"),
        Fault(body=b'{"id": "cmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mess'),
        Fault(body=b'{"id": "cmpl-1", "object": "chat.completion", "choices": []}'),
        Fault(body=b'{"id": "cmpl-1", "object": "chat.completion"}'),
        Fault(body=b'{"choices": [{"index": 0, "message": null}]}'),
        Fault(body=b"[1, 2]"),
        Fault(cut_connection=True),
    ],
    ids=["html", "truncated-json", "no-choices", "choices-missing", "null-message", "json-list", "cut-connection"],
)
def test_malformed_body_is_retried_then_succeeds(fault_server, fault):
    fault_server.script = [fault]
    result, _ = run(ask(roles_for(fault_server), "judge", "hi"))
    assert result.text == "ok"
    assert fault_server.count == 2


def test_malformed_body_every_time_raises(fault_server):
    fault_server.script = [Fault(body=b"garbage")] * 10
    with pytest.raises(LLMError, match="invalid response"):
        run(ask(roles_for(fault_server), "judge", "hi", invalid_answer_retries=2))
    assert fault_server.count == 3


def test_api_key_is_sent_but_never_appears_in_errors(fault_server, monkeypatch):
    secret = "sk-test-DO-NOT-LEAK-1234567890"
    monkeypatch.setenv("RUBRICRL_TEST_KEY", secret)
    fault_server.script = [Fault(401)]
    role = Role(
        base_url=fault_server.base_url.replace("127.0.0.1", "localhost"), model="fake", api_key_env="RUBRICRL_TEST_KEY"
    )
    with pytest.raises(LLMError, match="injected 401") as error:
        run(ask({"judge": role}, "judge", "hi"))
    assert fault_server.headers[0]["authorization"] == f"Bearer {secret}"
    # The server quoted the key back in its error body; neither the error nor its chain may carry it.
    assert "you sent Bearer ***" in str(error.value)
    assert error.value.__cause__ is None and error.value.__suppress_context__
    assert secret not in str(error.value) and secret not in repr(role.public())


def test_remote_endpoint_without_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("MY_PROVIDER_KEY", raising=False)
    role = Role(base_url="https://api.example.invalid/v1", model="m", api_key_env="MY_PROVIDER_KEY")
    with pytest.raises(ValueError, match="set the environment variable MY_PROVIDER_KEY"):
        run(ask({"judge": role}, "judge", "hi"))


def test_schema_reply_from_endpoint_without_schema_support(fault_server):
    fault_server.reply = 'Sure:\n```json\n{"verdict": true, "reason": "covers [a] and [b]"}\n```\nNote: see [1].'
    result, _ = run(ask(roles_for(fault_server, structured_outputs=False), "judge", "grade", schema=SCHEMA))
    assert result.value == {"verdict": True, "reason": "covers [a] and [b]"}
    assert "response_format" not in fault_server.requests[0]


def test_schema_is_sent_as_response_format(fault_server):
    fault_server.reply = '{"verdict": false, "reason": "no"}'
    result, _ = run(ask(roles_for(fault_server), "judge", "grade", schema=SCHEMA))
    assert result.value == {"verdict": False, "reason": "no"}
    sent = fault_server.requests[0]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == SCHEMA


def test_off_schema_answer_is_sampled_again_bounded(fault_server, cache):
    replies = iter(['{"verdict": "yes"}', "I think it is fine.", '{"verdict": true, "reason": "ok"}'])
    fault_server.reply = lambda body: next(replies)
    result, usage = run(ask(roles_for(fault_server), "judge", "grade", schema=SCHEMA, cache=cache))
    assert result.value == {"verdict": True, "reason": "ok"}
    assert fault_server.count == 3 and usage.retries == 2
    # The rerun replays the same three cached samples: zero new calls, same verdict.
    again, usage = run(ask(roles_for(fault_server), "judge", "grade", schema=SCHEMA, cache=cache))
    assert again.value == result.value and fault_server.count == 3 and usage.cache_hits == 3


def test_off_schema_every_time_raises_and_the_rerun_tries_afresh(fault_server, cache):
    fault_server.reply = "no JSON here"
    with pytest.raises(LLMError, match="no valid JSON after 3 samples"):
        run(ask(roles_for(fault_server), "judge", "grade", schema=SCHEMA, invalid_answer_retries=2, cache=cache))
    assert fault_server.count == 3 and len(cache) == 0  # known-bad answers are not kept to be replayed
    fault_server.reply = '{"verdict": true, "reason": "ok"}'
    result, _ = run(ask(roles_for(fault_server), "judge", "grade", schema=SCHEMA, cache=cache))
    assert result.value["verdict"] is True and fault_server.count == 4


def test_greedy_decoding_is_not_resampled(fault_server):
    fault_server.reply = "no JSON here"
    with pytest.raises(LLMError, match="no valid JSON after 1 samples"):
        run(ask(roles_for(fault_server, temperature=0.0), "judge", "grade", schema=SCHEMA))
    assert fault_server.count == 1  # the same prompt, greedily decoded, would only repeat the same answer


def test_concurrency_is_bounded(fault_server):
    import asyncio
    import threading

    from rubricrl.llm import LLMClient

    active, peak, lock = [0], [0], threading.Lock()

    def reply(body):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return "ok"

    fault_server.reply = reply

    async def burst():
        async with LLMClient(roles_for(fault_server), concurrency=3) as client:
            await asyncio.gather(*(client.chat("judge", f"q{i}") for i in range(20)))

    run(burst())
    assert fault_server.count == 20 and peak[0] == 3


def test_retry_after_ms_and_http_date_are_honoured(fault_server):
    import email.utils

    in_a_second = email.utils.formatdate(time.time() + 1.5, usegmt=True)  # whole seconds: waits 0.5-1.5 s
    fault_server.script = [
        Fault(503, headers={"Retry-After": in_a_second}),
        Fault(429, headers={"retry-after-ms": "600"}),
    ]
    started = time.monotonic()
    result, _ = run(ask(roles_for(fault_server), "judge", "hi"))
    assert result.text == "ok" and fault_server.count == 3
    assert time.monotonic() - started >= 1.0


def test_x_should_retry_header_overrides_the_status(fault_server):
    fault_server.script = [Fault(500, headers={"x-should-retry": "false"})]
    with pytest.raises(LLMError, match="500"):
        run(ask(roles_for(fault_server), "judge", "hi"))
    assert fault_server.count == 1
    fault_server.script = [Fault(400, headers={"x-should-retry": "true"})]
    assert run(ask(roles_for(fault_server), "judge", "hi"))[0].text == "ok"


async def each(roles: dict[str, Role], names: list[str], messages, *, cache=None, **kwargs):
    """chat_each through a fresh client; returns (results, usage per role)."""
    from rubricrl.llm import LLMClient

    async with LLMClient(roles, cache=cache) as client:
        return await client.chat_each(names, messages, **kwargs), client.usage


def test_chat_each_gives_identical_roles_one_call_and_a_sample_each(fault_server, cache):
    counter = itertools.count()
    fault_server.reply = lambda body: f"answer {next(counter)}"  # called once per choice
    same = Role(base_url=fault_server.base_url, model="fake", temperature=1.0)
    roles = {"a": same, "b": same, "c": Role(base_url=fault_server.base_url, model="fake", temperature=0.5)}
    results, usage = run(each(roles, ["a", "b", "c", "a"], "hi", cache=cache))
    assert [r.role for r in results] == ["a", "b", "c", "a"]
    assert len({r.text for r in results}) == 4 and all(len(r.texts) == 1 for r in results)
    # a, b and a again: one request with n=3 (three separate ones would share one cache entry, one answer)
    assert sorted(body.get("n", 1) for body in fault_server.requests) == [1, 3]
    assert (usage["a"].requests, usage["b"].requests, usage["c"].requests) == (1, 0, 1)
    again, _ = run(each(roles, ["a", "b", "c", "a"], "hi", cache=cache))
    assert [r.text for r in again] == [r.text for r in results] and all(r.cached == 1 for r in again)
    assert fault_server.count == 2


def test_chat_each_validates_each_answer_and_keeps_different_requests_apart(fault_server):
    fault_server.reply = '{"verdict": true, "reason": "ok"}'
    roles = {
        "a": Role(base_url=fault_server.base_url, model="fake"),
        "b": Role(base_url=fault_server.base_url, model="fake", structured_outputs=False),
        "c": Role(base_url=fault_server.base_url, model="other"),
    }
    results, _ = run(each(roles, ["a", "b", "c"], "grade", schema=SCHEMA))
    assert [r.value for r in results] == [{"verdict": True, "reason": "ok"}] * 3
    assert [r.model for r in results] == ["fake", "fake", "other"]
    assert fault_server.count == 3 and all(body["n"] == 1 for body in fault_server.requests)
    with pytest.raises(ValueError, match="one answer per role"):
        run(each(roles, ["a"], "grade", n=2))
