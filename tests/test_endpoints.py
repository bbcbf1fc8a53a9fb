"""Several endpoints behind one role: calls spread by least outstanding requests with a bound per endpoint, an
endpoint that keeps failing is taken out and its calls finish on the others, it comes back after a cool-down, and
when all are down the error is clear and later calls fail at once. Also the dead-endpoint checks before a run,
and local replicas advertised as one endpoint."""

import asyncio
import json
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from commands.main import main
from rubricrl.config import ConfigError
from rubricrl.llm import EndpointUnreachable, LLMClient, LLMError, LLMSettings, Role, open_llm, resolve_roles
from rubricrl.llm import endpoints as endpoints_module
from rubricrl.serving.discovery import LOCAL_SERVER_ENV, find_running, free_port, port_is_free
from rubricrl.serving.replicas import Replicas
from tests.fault_server import Fault, FaultServer, schema_reply
from tests.helpers import DATA, run

ROOT = Path(__file__).resolve().parents[1]


def dead_url() -> str:
    """A port nothing listens on: connections are refused."""
    return f"http://127.0.0.1:{free_port()}/v1"


class Peak:
    """Counts the requests a fault server is answering at once."""

    def __init__(self, server: FaultServer, seconds: float = 0.05):
        self.now = self.peak = 0
        self._lock = threading.Lock()
        server.reply = self.reply
        self.seconds = seconds

    def reply(self, body):
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.seconds)
        with self._lock:
            self.now -= 1
        return schema_reply(body)


async def burst(role: Role, count: int, **options) -> tuple[list, LLMClient]:
    async with LLMClient({"judge": role}, **options) as client:
        results = await asyncio.gather(*(client.chat("judge", f"question {i}") for i in range(count)))
    return results, client


def test_calls_spread_over_endpoints_each_within_its_bound():
    with FaultServer() as a, FaultServer() as b, FaultServer() as c:
        peaks = [Peak(s) for s in (a, b, c)]
        role = Role(base_url=[a.base_url, b.base_url, c.base_url], model="fake")
        results, client = run(burst(role, 60, concurrency=3))
    assert [r.text for r in results] == [f"answer to: question {i}" for i in range(60)]  # each its own answer
    # spread over all three (least outstanding: a third each when their latency is equal; 13-24 seen on a loaded
    # machine, where a server's thread runs late)
    assert a.count + b.count + c.count == 60 and min(a.count, b.count, c.count) >= 8
    assert [p.peak for p in peaks] == [3, 3, 3]  # the bound is per endpoint: 9 in flight in all
    stats = client.endpoint_stats()
    assert [stats[s.base_url].requests for s in (a, b, c)] == [a.count, b.count, c.count]
    assert all(s.failures == 0 and s.mean_latency >= 0.05 for s in stats.values())
    assert client.endpoint_summary().count("\n") == 2


def test_least_outstanding_sends_new_calls_to_the_idle_endpoint():
    with FaultServer() as slow, FaultServer() as fast:
        Peak(slow, seconds=0.5)
        Peak(fast, seconds=0.01)
        role = Role(base_url=[slow.base_url, fast.base_url], model="fake")
        run(burst(role, 40, concurrency=4))
    assert slow.count <= 8 and fast.count >= 32  # the slow one holds its calls, the fast one takes the rest


def test_a_dead_endpoint_is_taken_out_and_its_calls_finish_elsewhere():
    with FaultServer() as a, FaultServer() as b:
        dead = dead_url()
        role = Role(base_url=[a.base_url, dead, b.base_url], model="fake")
        started = time.monotonic()
        results, client = run(burst(role, 30, concurrency=4, max_retries=2))
    assert len(results) == 30 and a.count + b.count == 30  # nothing lost, nothing asked twice
    assert time.monotonic() - started < 3  # resent at once, no backoff while others are up
    out = client.endpoint_stats()[dead]
    # At most its slots at the start, then the failures that take it out; none after.
    assert out.failures == out.requests <= 4 + endpoints_module.FAILURES_TO_EJECT - 1
    assert out.ejected == 1 and not out.in_rotation
    assert "out of rotation now" in client.endpoint_summary()


def test_an_endpoint_answering_5xx_is_taken_out_and_comes_back_after_its_cool_down(monkeypatch):
    clock = [time.monotonic()]  # the clock the cool-down is read on: it moves only when the test moves it
    monkeypatch.setattr(endpoints_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    with FaultServer() as good, FaultServer() as flaky:
        flaky.script = [Fault(503)] * 3  # then healthy again
        role = Role(base_url=[good.base_url, flaky.base_url], model="fake")

        async def two_rounds():
            async with LLMClient({"judge": role}, concurrency=1) as client:  # one at a time: "in a row" is exact
                await asyncio.gather(*(client.chat("judge", f"first {i}") for i in range(10)))
                taken_out = client.endpoint_stats()[flaky.base_url].in_rotation is False
                served_before = flaky.count
                taken_out_at = clock[0]
                clock[0] = taken_out_at + endpoints_module.COOL_DOWN / 2
                still_out = client.endpoint_stats()[flaky.base_url].in_rotation is False
                clock[0] = taken_out_at + endpoints_module.COOL_DOWN  # the cool-down is over, to the last bit
                await asyncio.gather(*(client.chat("judge", f"second {i}") for i in range(10)))
                return taken_out and still_out, served_before, client.endpoint_stats()[flaky.base_url]

        taken_out, served_before, stats = run(two_rounds())
    assert taken_out and served_before == 3  # three 503s in a row, then no more calls during the cool-down
    assert flaky.count > served_before and stats.in_rotation  # probed after the cool-down, and back
    assert stats.failures == 3 and stats.ejected == 1


def test_an_endpoint_that_never_answers_is_taken_out_and_its_calls_finish_elsewhere():
    with FaultServer(reply=schema_reply) as good, FaultServer() as hung:
        hung.script = [Fault(delay=5.0)] * 40  # accepts every connection, answers nothing in time
        role = Role(base_url=[hung.base_url, good.base_url], model="fake")
        started = time.monotonic()
        results, client = run(burst(role, 20, concurrency=2, timeout=0.3, max_retries=2))
        seconds = time.monotonic() - started
    assert [r.text for r in results] == [f"answer to: question {i}" for i in range(20)]
    assert good.count == 20  # every call answered there, none twice
    stats = client.endpoint_stats()[hung.base_url]
    # Timed out three times in a row (its first two calls, then one more), then out: no more calls go there.
    assert stats.ejected == 1 and not stats.in_rotation and stats.failures == stats.requests <= 4
    assert seconds < 2.5  # one timeout's worth, not one per call


def test_calls_out_on_an_endpoint_when_it_is_taken_out_move_to_the_others_at_once():
    with FaultServer(reply=schema_reply, latency=0.2) as good, FaultServer() as sick:
        # Two calls hang there, then it answers 503 at once: three of those take it out, and the two hung calls
        # are resent to the good endpoint then, not after their 30 s timeout. The good one answers in 0.2 s, so its
        # slots stay busy while the sick one's free at once: calls keep going to the sick one until it is out (with
        # instant answers the good one took every call on a busy machine, and the hung ones answered after 20 s).
        sick.script = [Fault(delay=20.0)] * 2 + [Fault(503)] * 10
        role = Role(base_url=[sick.base_url, good.base_url], model="fake")
        started = time.monotonic()
        results, client = run(burst(role, 12, concurrency=4, timeout=30, max_retries=3))
        seconds = time.monotonic() - started
    assert [r.text for r in results] == [f"answer to: question {i}" for i in range(12)]
    stats = client.endpoint_stats()[sick.base_url]
    assert stats.ejected == 1 and stats.failures == stats.requests  # 2 hung (moved) + the 503s (3, or 4 in flight)
    assert good.count == 12 and seconds < 3


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_a_call_its_caller_cancels_as_its_endpoint_is_taken_out_stays_cancelled(turns):
    """Ctrl-C, a timeout around the call or a task group giving up, just as the endpoint goes: never resent."""
    from rubricrl.llm.transport import Transport

    async def cancel_as_it_moves(hung, good):
        pool = endpoints_module.Router(limit=4).pool([hung.base_url, good.base_url])
        transport = Transport(timeout=30, max_retries=2)
        call = asyncio.ensure_future(transport.post_json(pool, "/chat/completions", {"model": "fake"}, ""))
        while hung.count == 0:  # out on the hung endpoint
            await asyncio.sleep(0.01)
        for _ in range(endpoints_module.FAILURES_TO_EJECT):
            pool.endpoints[0].record(0.0, answered=False, fault=True)  # taken out: the call is being moved
        for _ in range(turns):
            await asyncio.sleep(0)
        call.cancel()
        try:
            with pytest.raises(asyncio.CancelledError):
                await call
        finally:
            await transport.close()
        return pool.endpoints[0].sending

    with FaultServer() as hung, FaultServer(reply=schema_reply) as good:
        hung.script = [Fault(delay=3.0)]
        assert run(cancel_as_it_moves(hung, good)) == {} and good.count == 0


def test_a_moved_call_keeps_its_retries_even_with_none():
    """Moving a request off an endpoint taken out is not one of its retries: with max_retries 0, a slow but good
    request out on an endpoint that then answers three 503s is answered elsewhere, not failed."""
    with FaultServer(reply=schema_reply) as flaky, FaultServer(reply=schema_reply, latency=0.3) as steady:
        flaky.script = [Fault(delay=2.0)] + [Fault(503)] * 3
        role = Role(base_url=[flaky.base_url, steady.base_url], model="fake")

        async def staggered():
            async with LLMClient({"judge": role}, concurrency=8, max_retries=0) as client:

                async def one(i):
                    # question 0 first, alone long enough to be the one the slow fault holds on a loaded machine
                    await asyncio.sleep(0.3 + 0.05 * i if i else 0.0)
                    try:
                        return (await client.chat("judge", f"question {i}")).text
                    except LLMError as error:
                        return str(error)

                return await asyncio.gather(*(one(i) for i in range(8))), client.endpoint_stats()

        answers, stats = run(staggered())
    assert answers[0] == "answer to: question 0"  # the slow one, moved when its endpoint was taken out
    assert stats[flaky.base_url].ejected == 1


def test_a_new_call_takes_a_free_slot_that_the_waiter_ahead_of_it_avoids():
    pool = endpoints_module.Router(limit=1).pool(["http://a:1/v1", "http://b:1/v1"])
    a, b = pool.endpoints

    async def arrive():
        assert {await pool.acquire(), await pool.acquire()} == {a, b}  # both busy; b hangs, never released
        pool.release(a)  # a's call failed there (a 503): resent, avoiding a
        retry = asyncio.ensure_future(pool.acquire(frozenset([a.url])))
        await asyncio.sleep(0)
        got = await asyncio.wait_for(pool.acquire(), 1.0)  # a new call, behind the retry in the queue
        retry.cancel()
        return got

    assert run(arrive()) is a


def test_a_call_waiting_for_a_slot_gets_one_when_a_cool_down_ends(monkeypatch):
    monkeypatch.setattr(endpoints_module, "COOL_DOWN", 0.2)
    router = endpoints_module.Router(limit=1)
    pool = router.pool(["http://a:1/v1", "http://b:1/v1"])
    a, b = pool.endpoints

    async def wait_for_a_slot():
        for _ in range(endpoints_module.FAILURES_TO_EJECT):
            b.record(0.0, answered=False, fault=True)
        assert not b.in_rotation(time.monotonic())
        held = await pool.acquire()  # a's only slot, never released: as if a hung
        started = time.monotonic()
        got = await asyncio.wait_for(pool.acquire(), 2.0)  # nothing is released: only b's cool-down ending helps
        return held, got, time.monotonic() - started

    held, got, seconds = run(wait_for_a_slot())
    assert held is a and got is b and 0.1 < seconds < 1.0


def test_a_waiter_avoiding_the_free_endpoint_does_not_hold_up_those_behind_it():
    router = endpoints_module.Router(limit=1)
    pool = router.pool(["http://a:1/v1", "http://b:1/v1"])
    a, b = pool.endpoints

    async def queue():
        first, second = await pool.acquire(), await pool.acquire()  # both slots taken
        assert {first, second} == {a, b}
        retry = asyncio.ensure_future(pool.acquire(frozenset([a.url])))  # failed on a: waits for b
        fresh = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        pool.release(a)  # a frees first: the retry keeps waiting for b, the call behind it takes a
        await asyncio.sleep(0)
        served = (retry.done(), fresh.done() and fresh.result() is a)
        pool.release(b)
        return served, await asyncio.wait_for(retry, 1.0)

    (retry_done, fresh_got_a), retry_got = run(queue())
    assert not retry_done and fresh_got_a and retry_got is b


def test_all_endpoints_dead_is_a_clear_error_then_later_calls_fail_at_once():
    role = Role(base_url=[dead_url(), dead_url()], model="fake")

    async def calls():
        async with LLMClient({"judge": role}, max_retries=1) as client:
            errors = []
            for i in range(4):
                started = time.monotonic()
                try:
                    await client.chat("judge", f"q{i}")
                except LLMError as error:
                    errors.append((error, time.monotonic() - started))
            return errors, client.endpoint_stats()

    errors, stats = run(calls())
    assert len(errors) == 4
    first, _ = errors[0]
    assert not isinstance(first, EndpointUnreachable)
    assert f"role 'judge' (fake at {role.base_url})" in str(first) and "after 2 attempt(s)" in str(first)
    assert "ClientConnectorError" in str(first)
    # Three calls in a row without a connection: the endpoints are taken for down, one attempt per call.
    last, seconds = errors[3]
    assert isinstance(last, EndpointUnreachable) and seconds < 0.5
    assert f"no connection to {role.base_url} for 4 calls in a row" in str(last) and "is the server up?" in str(last)
    assert sum(s.requests for s in stats.values()) == 3 * 2 + 1


def test_a_pool_taken_for_down_answers_again_as_soon_as_its_server_does(fault_server):
    role = Role(base_url=fault_server.base_url, model="fake")

    async def call():
        async with LLMClient({"judge": role}) as client:
            client._pools["judge"].unanswered_calls = 99  # as after a run of refused connections
            result = await client.chat("judge", "hi")
            return result, client._pools["judge"].unanswered_calls

    result, unanswered = run(call())
    assert result.text == "ok" and unanswered == 0


def test_cache_key_does_not_depend_on_the_endpoint_that_answered(cache):
    with FaultServer(reply=schema_reply) as a, FaultServer(reply=schema_reply) as b, FaultServer() as c:
        first, _ = run(burst(Role(base_url=[a.base_url, b.base_url], model="fake"), 10, cache=cache))
        again, client = run(burst(Role(base_url=c.base_url, model="fake"), 10, cache=cache))
    assert a.count + b.count == 10 and c.count == 0
    assert [r.text for r in again] == [r.text for r in first] and all(r.cached == 1 for r in again)


def test_endpoint_forms_list_commas_and_file(tmp_path):
    urls = ["http://gpu1:8000/v1", "http://gpu2:8000/v1"]
    (tmp_path / "endpoints.txt").write_text("# judges\nhttp://gpu1:8000/v1/\n\nhttp://gpu2:8000/v1  # second\n")
    forms = [urls, ",".join(urls), f"@{tmp_path / 'endpoints.txt'}", "http://gpu1:8000/v1, http://gpu2:8000/v1"]
    assert {Role(base_url=form).base_url for form in forms} == {",".join(urls)}
    assert Role(base_url=urls).endpoints == urls
    assert Role(base_url="http://one:8000/v1/").endpoints == ["http://one:8000/v1"]


@pytest.mark.parametrize(
    "base_url, message",
    [
        ("http://a:1/v1,gpu2:8000", r"'gpu2:8000' is not an endpoint URL"),
        (["http://a:1/v1", "http://a:1/v1"], r"an endpoint is named twice"),
        ("@/nonexistent/endpoints.txt", r"cannot read the endpoint file /nonexistent/endpoints.txt"),
        ("http://a:1/v1,", r"'' is not an endpoint URL"),
    ],
)
def test_bad_endpoint_lists_are_named(base_url, message):
    with pytest.raises(ConfigError, match=r"cfg.yaml: roles.judge: base_url: " + message):
        resolve_roles(["judge"], {}, {"judge": {"base_url": base_url}}, source="cfg.yaml")
    with pytest.raises(ValueError, match=r"base_url \(--base-url\): " + message):
        LLMSettings(base_url=base_url)


def test_open_llm_checks_every_endpoint_once_and_names_the_dead(capsys):
    with FaultServer() as a, FaultServer() as b:
        dead = dead_url()
        with open_llm(LLMSettings(base_url=f"{a.base_url},{dead},{b.base_url}"), ["judge", "writer"]) as session:
            assert session.roles["judge"].model == "fake" and session.roles["judge"].endpoints[1] == dead
        err = capsys.readouterr().err
        assert err.count(dead) == 1 and "calls go to the other endpoints" in err
    dead2 = dead_url()
    with pytest.raises(ConfigError, match=rf"endpoints {dead}, {dead2} \(roles \['judge'\]\) do not answer"):
        with open_llm(LLMSettings(base_url=[dead, dead2], model="m"), ["judge"]):
            pass


def cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_chat_and_synth_against_a_dead_endpoint_are_one_line_before_any_call(capsys, tmp_path):
    dead = dead_url()
    for argv in (
        ["chat", "hi", "--base-url", dead],
        ["chat", "hi", "--base-url", dead, "--model", "m"],
        [
            "synth",
            "--input",
            str(DATA / "healthbench_sample" / "healthbench_oss_eval_30.jsonl"),
            "--output-dir",
            str(tmp_path / "out"),
            "--base-url",
            dead,
        ],
    ):
        started = time.monotonic()
        code, err = cli(capsys, *argv)
        assert code == 2 and err.startswith(f"rubricrl: error: command line: endpoint {dead} (roles [")
        assert "does not answer: [Errno 111] Connection refused" in err and err.count("\n") == 1
        assert time.monotonic() - started < 5
    assert not (tmp_path / "out" / "final.jsonl").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--concurrency", "0"], "concurrency (--concurrency) must be at least 1, got 0"),
        (["--concurrency", "-3"], "concurrency (--concurrency) must be at least 1, got -3"),
        (["--timeout", "0"], "timeout (--timeout) must be above 0 (seconds), got 0.0"),
        (["--max-retries", "-1"], "max_retries (--max-retries) must be at least 0, got -1"),
        (["--roles", "chat.max_tokens=0"], "roles.chat: max_tokens must be at least 1, got 0"),
        (["--defaults", "temperature=-1"], "llm.defaults: temperature must be at least 0, got -1"),
        (["--defaults", "top_p=1.5"], "llm.defaults: top_p must be in (0, 1], got 1.5"),
        (["--defaults", "temprature=1"], "llm.defaults: unknown key(s) ['temprature']"),
    ],
)
def test_bad_llm_values_are_one_line_errors_before_any_call(capsys, flags, message):
    code, err = cli(capsys, "chat", "hi", "--base-url", dead_url(), "--model", "m", *flags)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def fake_vllm(self):
    """The canned server in place of vLLM: replicas start in a second, the plumbing is the same."""
    return [
        sys.executable,
        str(ROOT / "benches" / "canned_server.py"),
        "--port",
        str(self.port),
        "--latency",
        "0.01",
        "--jitter",
        "0",
        "--model",
        self.served_name,
    ]


def test_replicas_start_on_consecutive_ports_and_serve_as_one_endpoint(monkeypatch, tmp_path):
    from rubricrl.serving.discovery import advertise, withdraw
    from rubricrl.serving.server import LocalServer

    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path))
    monkeypatch.setattr(LocalServer, "command", fake_vllm)
    port = free_port()
    while not (port_is_free(port + 1) and port_is_free(port + 2)):
        port = free_port()
    replicas = Replicas(3, port=port)
    with replicas as endpoint:
        urls = [f"http://127.0.0.1:{p}/v1" for p in (port, port + 1, port + 2)]
        assert endpoint.base_url == ",".join(urls) and endpoint.model == "SmolLM2-135M-Instruct"
        advertise(endpoint)
        assert find_running() == endpoint  # found again as one endpoint, as commands look for it
        role = Role(base_url=endpoint.base_url, model=endpoint.model)
        results, client = run(burst(role, 30, concurrency=2))
        assert sum(s.requests for s in client.endpoint_stats().values()) == 30
        assert min(s.requests for s in client.endpoint_stats().values()) >= 7
        replicas.servers[1].stop()  # one replica down: the others are still found
        assert find_running().base_url == f"{urls[0]},{urls[2]}"
        assert not replicas.alive()
        withdraw(endpoint)
    assert all(port_is_free(p) for p in replicas.ports)


def test_a_server_the_environment_names_is_reused_though_this_home_advertises_none(monkeypatch, tmp_path):
    from rubricrl.serving.server import LocalServer

    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path))
    monkeypatch.setattr(LocalServer, "command", fake_vllm)
    with LocalServer() as endpoint:
        assert endpoint.base_url != "http://127.0.0.1:8750/v1"
        monkeypatch.setenv(LOCAL_SERVER_ENV, endpoint.base_url)
        assert find_running() == replace(endpoint, pid=None)


def test_cancelled_calls_give_their_slots_back():
    with FaultServer(latency=0.2) as a, FaultServer(latency=0.2) as b:
        role = Role(base_url=[a.base_url, b.base_url], model="fake")

        async def cancel_then_call():
            async with LLMClient({"judge": role}, concurrency=1) as client:
                calls = asyncio.gather(*(client.chat("judge", f"q{i}") for i in range(6)))  # 2 out, 4 waiting
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(calls, 0.05)
                pool = client._pools["judge"]
                in_flight = [e.in_flight for e in pool.endpoints]
                started = time.monotonic()
                await client.chat("judge", "after")
                return in_flight, time.monotonic() - started

        in_flight, seconds = run(cancel_then_call())
    assert in_flight == [0, 0] and seconds < 0.4  # no slot leaked: the next call goes out at once


def test_gpu_replicas_get_equal_shares_of_the_visible_gpus(monkeypatch):
    from rubricrl.errors import UserError
    from rubricrl.serving import replicas

    monkeypatch.setattr(replicas, "vllm_on_cpu", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert replicas.gpu_shares(2) == ["0,1", "2,3"] and replicas.gpu_shares(4) == ["0", "1", "2", "3"]
    with pytest.raises(UserError, match="--replicas 5 needs a GPU per replica at least, and 4 are visible"):
        replicas.gpu_shares(5)
    monkeypatch.setattr(replicas, "vllm_on_cpu", lambda: True)  # the CPU build: every replica shares the CPU
    assert replicas.gpu_shares(3) == [None, None, None]


def test_calls_still_retrying_stop_once_the_pool_is_taken_for_down(monkeypatch):
    from rubricrl.llm import transport

    monkeypatch.setattr(transport, "_backoff", lambda attempt: 0.2)
    role = Role(base_url=dead_url(), model="fake")

    async def calls():
        async with LLMClient({"judge": role}, max_retries=5) as client:

            async def late():
                await asyncio.sleep(0.5)
                return await client.chat("judge", "late")

            early = [client.chat("judge", f"q{i}") for i in range(3)]
            results = await asyncio.gather(*early, late(), return_exceptions=True)
            return results, client.endpoint_stats()[role.base_url].requests

    results, requests = run(calls())
    assert all(isinstance(r, LLMError) for r in results)
    # The three early calls use their 6 attempts and end together: the endpoint is taken for down, and the late
    # call, still retrying, ends at its next refused attempt instead of using its own six.
    assert isinstance(results[3], EndpointUnreachable) and requests < 3 * 6 + 6


def test_base_url_flag_takes_several_endpoints_or_none(tmp_path):
    import argparse

    from rubricrl.config import add_config_arguments, parse_settings

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, [LLMSettings])
    (tmp_path / "cfg.yaml").write_text("llm:\n  base_url: [http://a:1/v1, http://b:1/v1]\n")
    (llm,) = parse_settings(parser.parse_args(["--config", str(tmp_path / "cfg.yaml")]), command="chat")
    assert Role(base_url=llm.base_url).endpoints == ["http://a:1/v1", "http://b:1/v1"]
    (llm,) = parse_settings(parser.parse_args(["--base-url", "http://c:1/v1,http://d:1/v1"]), command="chat")
    assert llm.role_defaults()["base_url"] == "http://c:1/v1,http://d:1/v1"
    (llm,) = parse_settings(
        parser.parse_args(["--config", str(tmp_path / "cfg.yaml"), "--base-url", "none"]), command="chat"
    )
    assert llm.base_url is None  # the embedded model again


def down_after(server: FaultServer, requests: int):
    """A reply function: valid answers, and the server goes down as the given request comes in. At or past it: two
    requests in flight may both be counted before either is answered (the count goes 11 -> 13 under load)."""

    def reply(body):
        if server.count >= requests and not server.down:
            server.go_down()
        return schema_reply(body)

    return reply


@pytest.mark.parametrize("command", ["synth", "ruft build", "grade"])
def test_a_server_going_down_mid_run_ends_the_command_with_one_line_and_a_rerun_finishes(
    command, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("RUBRICRL_HOME", str(tmp_path / "home"))
    ids = [f"q{i:03d}" for i in range(20)]
    rubric = [{"criterion": "Recommends rest.", "points": 5}, {"criterion": "Mentions fluids.", "points": 3}]
    rows = [{"id": i, "question": f"Question {i}: what helps a cold?", "rubrics": rubric} for i in ids]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "responses.jsonl").write_text(
        "".join(json.dumps({"id": i, "response": "Rest, drink."}) + "\n" for i in ids)
    )
    out = tmp_path / "out"
    flags = {
        "synth": ["synth", "--input", str(data), "--output-dir", str(out)],
        "ruft build": [
            "ruft",
            "build",
            "--rubrics",
            str(data),
            "--output-dir",
            str(out),
            "--threshold",
            "0",
            "--self_judging",
        ],
        "grade": [
            "grade",
            "--rubrics",
            str(data),
            "--responses",
            str(tmp_path / "responses.jsonl"),
            "--output",
            str(out / "graded.jsonl"),
        ],
    }[command]

    def run_against(server):
        return main(
            [*flags, "--base-url", server.base_url, "--model", "fake", "--concurrency", "2", "--max-retries", "2"]
        )

    with FaultServer() as server:
        server.reply = down_after(server, 12)
        started = time.monotonic()
        code = run_against(server)
        seconds = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and seconds < 8  # a few refused connections, not a timeout or a backoff per query
    errors = [line for line in err.splitlines() if line.startswith("rubricrl: error:")]
    assert len(errors) == 1 and "is the server up?" in errors[0] and "Traceback" not in err
    with FaultServer(reply=schema_reply) as server:  # the server is back: the same command finishes the work
        assert run_against(server) == 0
    finished = {"synth": out / "final.jsonl", "ruft build": out / "queries.jsonl", "grade": out / "graded.jsonl"}
    assert sorted(json.loads(line)["id"] for line in finished[command].read_text().splitlines()) == ids


def test_a_cpu_server_runs_its_model_in_the_engine_process_on_all_cores_but_one(monkeypatch):
    """vLLM's worker process busy-polls a core for 1 s after each step (benches/server_cpu.py): on the CPU build the
    local server runs the model in the engine's process, its threads on every core but the scheduler's; what the
    user set wins, and a user who asks for the worker gets vLLM's own thread binding."""
    import rubricrl.serving.server as server

    monkeypatch.setattr(server, "vllm_on_cpu", lambda: True)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    env = server.LocalServer(port=1).environment()
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and env["OMP_NUM_THREADS"] == str(max(1, cores - 1))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert server.LocalServer(port=1).environment()["OMP_NUM_THREADS"] == "3"
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    env = server.LocalServer(port=1).environment()
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1" and "OMP_NUM_THREADS" not in env
    monkeypatch.setattr(server, "vllm_on_cpu", lambda: False)  # CUDA: vLLM's defaults
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in server.LocalServer(port=1).environment()


@pytest.mark.parametrize(
    "config, context",
    [
        ({"max_position_embeddings": 2048}, 2048),
        ({"max_position_embeddings": 32768}, 8192),
        ({"n_positions": 1024}, 1024),
        ({"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 4096),
        ({"text_config": {"max_position_embeddings": 4096}}, 4096),
        ({}, 8192),
    ],
    ids=["2048", "32768-capped", "n_positions", "rope-linear", "text_config", "none-given"],
)
def test_a_policy_folder_is_served_with_its_own_context_at_most_the_cap(config, context, tmp_path):
    """`eval --policy FOLDER` serves the folder with the context its config.json gives (vLLM refuses one longer than
    the model's), at most 8,192 tokens; `rubricrl serve --max-model-len` still says what it is told."""
    from rubricrl.serving.policy_model import local_policy
    from rubricrl.serving.server import LocalServer

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **config}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    folder = local_policy(str(tmp_path))

    def asked(server: LocalServer) -> int:
        command = server.command()
        return int(command[command.index("--max-model-len") + 1])

    assert asked(LocalServer(str(folder), port=1)) == context
    assert asked(LocalServer(str(folder), port=1, max_model_len=1024)) == 1024
