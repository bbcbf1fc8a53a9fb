"""The response cache: a repeated call costs zero requests, keys cover what shapes an answer (and nothing else),
and the cache survives many writers and a SIGKILL with every finished call in it."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rubricrl.llm import ResponseCache, Role
from rubricrl.llm.cache import cache_key
from tests.fault_server import FaultServer
from tests.helpers import ask, run

ROOT = Path(__file__).resolve().parents[1]


def role(server, **params):
    return {"judge": Role(base_url=server.base_url, model="fake", **params)}


def test_repeated_request_makes_zero_server_calls(fault_server, cache):
    first, usage1 = run(ask(role(fault_server), "judge", "What is 2+2?", cache=cache))
    second, usage2 = run(ask(role(fault_server), "judge", "What is 2+2?", cache=cache))
    assert fault_server.count == 1
    assert second.texts == first.texts and second.cached == 1 and first.cached == 0
    assert (usage2.requests, usage2.cache_hits, usage2.prompt_tokens) == (0, 1, 0)


def test_key_ignores_endpoint_and_key_but_not_model_messages_params(cache, monkeypatch):
    monkeypatch.setenv("KEY_A", "a")
    monkeypatch.setenv("KEY_B", "b")
    with FaultServer(reply="from A") as a, FaultServer(reply="from B") as b:
        run(ask({"judge": Role(base_url=a.base_url, model="m", api_key_env="KEY_A")}, "judge", "q", cache=cache))
        moved = {"judge": Role(base_url=b.base_url, model="m", api_key_env="KEY_B")}
        result, _ = run(ask(moved, "judge", "q", cache=cache))
        assert result.text == "from A" and b.count == 0  # same model elsewhere: served from the cache
        run(ask({"judge": Role(base_url=b.base_url, model="other")}, "judge", "q", cache=cache))
        run(ask(moved, "judge", "q2", cache=cache))
        run(ask(moved, "judge", "q", cache=cache, temperature=0.7))
        assert b.count == 3  # another model, other messages, other sampling parameters: all asked


def test_n_samples_are_cached_per_index(fault_server, cache):
    run(ask(role(fault_server, temperature=1.0), "judge", "q", n=2, cache=cache))
    result, usage = run(ask(role(fault_server, temperature=1.0), "judge", "q", n=3, cache=cache))
    assert len(result.texts) == 3 and result.cached == 2
    assert [r.get("n") for r in fault_server.requests] == [2, 1]  # only the missing third sample was asked for


def test_no_cache_means_every_call_is_sent(fault_server):
    run(ask(role(fault_server), "judge", "q", cache=None))
    run(ask(role(fault_server), "judge", "q", cache=None))
    assert fault_server.count == 2


def test_clear_empties_the_cache(fault_server, cache):
    run(ask(role(fault_server), "judge", "q", cache=cache))
    assert len(cache) == 1
    assert cache.clear() == 1 and len(cache) == 0
    run(ask(role(fault_server), "judge", "q", cache=cache))
    assert fault_server.count == 2


def test_cache_key_is_stable_and_order_insensitive_in_params():
    messages = [{"role": "user", "content": "q"}]
    key = cache_key("m", messages, {"temperature": 0.5, "max_tokens": 9}, 0)
    assert key == cache_key("m", messages, {"max_tokens": 9, "temperature": 0.5}, 0)
    assert key != cache_key("m", messages, {"max_tokens": 9, "temperature": 0.5}, 1)


WRITER = textwrap.dedent("""
    import asyncio, sys
    from rubricrl.llm import LLMClient, ResponseCache, Role
    base_url, cache_path, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    async def main():
        roles = {"judge": Role(base_url=base_url, model="fake")}
        async with LLMClient(roles, cache=ResponseCache(cache_path), concurrency=8) as client:
            async def one(i):
                await client.chat("judge", f"{tag} question {i}")
                print(f"{tag} question {i}", flush=True)  # printed only once the answer is in the cache
            await asyncio.gather(*(one(i) for i in range(count)))

    asyncio.run(main())
""")


def start_writer(base_url, cache_path, tag, count):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, base_url, str(cache_path), tag, str(count)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def cached_questions(cache_path, questions):
    cache = ResponseCache(cache_path)
    try:
        return {q for q in questions if cache.get(cache_key("fake", [{"role": "user", "content": q}], {}, 0))}
    finally:
        cache.close()


@pytest.mark.slow  # a subprocess SIGKILLed mid-run: out of make test-fast
def test_sigkill_leaves_a_readable_cache_with_every_finished_call(tmp_path):
    cache_path = tmp_path / "responses"
    with FaultServer(latency=0.02) as server:
        writer = start_writer(server.base_url, cache_path, "killed", 2000)
        finished = [writer.stdout.readline().strip() for _ in range(150)]
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    assert sqlite3.connect(cache_path / "index.sqlite").execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert cached_questions(cache_path, finished) == set(finished)
    assert len(ResponseCache(cache_path)) < 2000  # it really was cut off mid-run


def test_concurrent_writer_processes_lose_nothing(tmp_path):
    cache_path = tmp_path / "responses"
    with FaultServer() as server:
        writers = [start_writer(server.base_url, cache_path, f"w{i}", 100) for i in range(4)]
        outputs = [w.communicate()[0].split("\n") for w in writers]
    assert all(w.returncode == 0 for w in writers)
    questions = {line for out in outputs for line in out if line}
    assert len(questions) == 400
    assert cached_questions(cache_path, questions) == questions


def test_identical_calls_in_flight_share_one_request_and_rerun_agrees(fault_server, cache):
    import asyncio
    import itertools

    from rubricrl.llm import LLMClient

    counter = itertools.count()
    fault_server.reply = lambda body: f"answer {next(counter)}"
    fault_server.latency = 0.1

    async def four_at_once():
        async with LLMClient(role(fault_server, temperature=1.0), cache=cache) as client:
            return [r.text for r in await asyncio.gather(*(client.chat("judge", "q") for _ in range(4)))]

    first = run(four_at_once())
    assert fault_server.count == 1 and first == ["answer 0"] * 4
    assert run(four_at_once()) == first and fault_server.count == 1


def test_first_writer_wins(cache):
    key = cache_key("m", [{"role": "user", "content": "q"}], {}, 0)
    assert cache.put(key, {"text": "first"}) == {"text": "first"}
    assert cache.put(key, {"text": "second"}) == {"text": "first"}
    cache.flush()
    assert cache.put(key, {"text": "third"}) == {"text": "first"}


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from rubricrl.llm import ResponseCache
    from rubricrl.llm.cache import cache_key
    cache = ResponseCache(sys.argv[1])
    for i in range(int(sys.argv[2])):
        cache.put(cache_key("m", [], {}, i), {"text": f"answer {i}"})
    os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close
""")


def test_answers_of_a_killed_writer_are_recovered_and_a_cut_off_record_dropped(tmp_path):
    path = tmp_path / "responses"
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path), "50"], cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL
    [segment] = path.glob("segment-*.log")
    whole = segment.stat().st_size
    with open(segment, "ab") as f:  # a record the kill cut off halfway
        f.write(b"\x01" * 30)
    cache = ResponseCache(path)
    assert [cache.get(cache_key("m", [], {}, i)) for i in range(50)] == [{"text": f"answer {i}"} for i in range(50)]
    assert segment.stat().st_size == whole and len(cache) == 50
    cache.put(cache_key("m", [], {}, 50), {"text": "answer 50"})  # appends after the last whole record
    cache.close()
    assert ResponseCache(path).get(cache_key("m", [], {}, 50)) == {"text": "answer 50"}


def test_other_processes_see_answers_after_a_flush_and_deletes_stay_deleted(tmp_path):
    writer, reader = ResponseCache(tmp_path / "c"), ResponseCache(tmp_path / "c")
    keep, drop = cache_key("m", [], {}, 0), cache_key("m", [], {}, 1)
    writer.put(keep, {"text": "kept"})
    writer.put(drop, {"text": "invalid"})
    assert writer.get(keep) == {"text": "kept"}  # visible to its writer at once
    writer.delete([drop])
    assert reader.get(keep) == {"text": "kept"} and reader.get(drop) is None
    assert ResponseCache(tmp_path / "c").get(drop) is None  # still gone for a later process


def test_seeded_role_asks_each_missing_sample_with_its_own_seed(fault_server, cache):
    run(ask(role(fault_server, temperature=1.0, seed=7), "judge", "q", n=3, cache=cache))
    assert sorted(r["seed"] for r in fault_server.requests) == [7, 8, 9]
    assert all(r.get("n") == 1 for r in fault_server.requests)


def test_int_and_float_parameters_are_one_request(fault_server, cache):
    run(ask(role(fault_server, temperature=1), "judge", "q", cache=cache))
    run(ask(role(fault_server), "judge", "q", cache=cache, temperature=1.0, top_p=None))
    assert fault_server.count == 1


def test_n_below_one_is_refused(fault_server):
    with pytest.raises(ValueError, match="n must be at least 1"):
        run(ask(role(fault_server), "judge", "q", n=0))


def test_a_corrupted_index_is_rebuilt_from_the_segments(tmp_path):
    cache = ResponseCache(tmp_path / "c")
    keys = [cache_key("m", [], {}, i) for i in range(20)]
    for i, key in enumerate(keys):
        cache.put(key, {"text": f"answer {i}"})
    cache.close()
    (tmp_path / "c" / "index.sqlite").write_bytes(b"this is not a database" * 100)
    rebuilt = ResponseCache(tmp_path / "c")
    assert [rebuilt.get(key) for key in keys] == [{"text": f"answer {i}"} for i in range(20)] and len(rebuilt) == 20


def test_a_busy_index_is_an_error_not_a_corruption_to_rebuild(tmp_path, monkeypatch):
    cache = ResponseCache(tmp_path / "c")
    cache.put(cache_key("m", [], {}, 0), {"text": "kept"})
    cache.close()
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
    monkeypatch.setattr(ResponseCache, "_connect_index", lambda self: (_ for _ in ()).throw(busy))
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        ResponseCache(tmp_path / "c")
    monkeypatch.undo()  # the index another process had open is still there, entries and all
    assert read_back(tmp_path / "c", [cache_key("m", [], {}, 0)]) == [{"text": "kept"}]


OPENER = textwrap.dedent("""
    import sys, time
    from rubricrl.llm.cache import ResponseCache, cache_key
    path, tag, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    time.sleep(max(0.0, start - time.time()))  # every process opens the fresh directory at the same instant
    cache = ResponseCache(path)
    for i in range(200):
        cache.put(cache_key("m", [], {"tag": tag}, i), {"text": f"{tag} {i}"})
    cache.close()
""")


def test_processes_opening_a_fresh_cache_at_once_all_write_and_nothing_is_lost(tmp_path):
    import time

    start, tags = time.time() + 2.0, [f"p{i}" for i in range(6)]
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(tmp_path / "c"), tag, str(start)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in tags
    ]
    errors = [opener.communicate(timeout=120)[1] for opener in openers]
    assert [opener.returncode for opener in openers] == [0] * 6, errors
    keys = [cache_key("m", [], {"tag": tag}, i) for tag in tags for i in range(200)]
    assert read_back(tmp_path / "c", keys) == [{"text": f"{tag} {i}"} for tag in tags for i in range(200)]


def test_records_written_before_the_preset_dictionary_are_still_read(tmp_path, monkeypatch):
    import json
    import zlib

    from rubricrl.llm import cache as cache_module

    path = tmp_path / "c"
    keys = [cache_key("m", [], {}, i) for i in range(10)]

    def verdict(i):
        return {
            "text": json.dumps({"explanation": f"The response mentions fact {i}.", "criteria_met": True}),
            "finish_reason": "stop",
        }  # noqa: E731

    old_format = lambda value: zlib.compress(json.dumps(value, ensure_ascii=False).encode())  # noqa: E731
    with monkeypatch.context() as patch:  # a cache written by the previous version: plain zlib records
        patch.setattr(cache_module, "_compress", old_format)
        old = ResponseCache(path)
        for i, key in enumerate(keys[:5]):
            old.put(key, verdict(i))
        old.close()
    new = ResponseCache(path)
    for i, key in enumerate(keys[5:], 5):  # appended to the same segment, in the new format
        new.put(key, verdict(i))
    new.close()
    [segment] = path.glob("segment-*.log")
    data, offset, first_bytes, sizes = segment.read_bytes(), 0, [], []
    while offset < len(data):
        _, length, _ = cache_module.HEADER.unpack_from(data, offset)
        first_bytes.append(data[offset + cache_module.HEADER.size])
        sizes.append(length)
        offset += cache_module.HEADER.size + length
    assert first_bytes == [0x78] * 5 + [0x01] * 5  # really both formats on disk
    assert max(sizes[5:]) < min(sizes[:5])  # the dictionary pays on verdicts this short
    assert read_back(path, keys) == [verdict(i) for i in range(10)]
    (path / "index.sqlite").write_bytes(b"not a database" * 100)  # rebuilt from the segments: both formats again
    assert read_back(path, keys) == [verdict(i) for i in range(10)]


def read_back(path, keys) -> list:
    """What a later process reads, closed after: an instance left to the garbage collector closes its index
    connection whenever the collector runs, and that close can remove the -wal file by name, even a newer index's."""
    cache = ResponseCache(path)
    try:
        return [cache.get(key) for key in keys]
    finally:
        cache.close()
