"""Reasoning models behind a reasoning parser, against replies shaped as vLLM's (`content` beside `reasoning` or
the older `reasoning_content`, usage with `completion_tokens_details.reasoning_tokens`): the answer is the content
alone, the reasoning is kept and cached with it, reasoning tokens are counted, and a reply without content is an
error that says what to change, asked again only when a new sample can differ, and never cached."""

from pathlib import Path

import pytest
import yaml

from rubricrl.llm import EmptyAnswer, LLMClient, LLMError, ResponseCache, Role
from rubricrl.llm.cache import cache_key
from tests.helpers import ask, run

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
VERDICT = {
    "type": "object",
    "properties": {"verdict": {"type": "boolean"}},
    "required": ["verdict"],
    "additionalProperties": False,
}


def judge(server, **role):
    return {"judge": Role(base_url=server.base_url, model="fake", **role)}


def thought(content, *, field="reasoning", finish_reason="stop", tokens=None):
    reply = {
        "content": content,
        field: 'The user asks about rest. {"verdict": false} might fit, but...',
        "finish_reason": finish_reason,
    }
    return reply if tokens is None else {**reply, "reasoning_tokens": tokens}


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])  # vLLM >= 0.11 / vLLM <= 0.10, DeepSeek
def test_the_answer_is_the_content_alone_and_the_reasoning_is_kept(fault_server, field):
    fault_server.reply = thought("Rest and fluids.", field=field)
    result, _ = run(ask(judge(fault_server), "judge", "What helps a cold?"))
    assert result.text == "Rest and fluids." and result.texts == ["Rest and fluids."]
    assert result.reasoning.startswith("The user asks about rest.")


def test_a_plain_reply_has_no_reasoning(fault_server):
    result, usage = run(ask(judge(fault_server), "judge", "hi", n=2))
    assert result.texts == ["ok", "ok"] and result.reasonings == [None, None] and usage.reasoning_tokens == 0


def test_structured_answers_are_parsed_from_the_content_not_the_reasoning(fault_server):
    fault_server.reply = thought('{"verdict": true}')  # the reasoning holds other JSON
    result, _ = run(ask(judge(fault_server), "judge", "Is it met?", schema=VERDICT))
    assert result.value == {"verdict": True} and "verdict" in result.reasoning


def test_reasoning_tokens_are_counted_apart(fault_server):
    fault_server.reply = thought("yes", tokens=4)
    _, usage = run(ask(judge(fault_server), "judge", "q", n=2))
    assert usage.completion_tokens == 10 and usage.reasoning_tokens == 8  # the server's sum over both choices


def test_chat_each_keeps_each_roles_reasoning(fault_server):
    fault_server.reply = thought("an answer")
    roles = {
        "a": Role(base_url=fault_server.base_url, model="fake", temperature=1.0),
        "b": Role(base_url=fault_server.base_url, model="fake", temperature=0.5),
    }

    async def both():
        async with LLMClient(roles) as client:
            return await client.chat_each(["a", "b"], "q")

    answers = run(both())
    assert [a.text for a in answers] == ["an answer"] * 2 and all(a.reasoning for a in answers)


def test_a_cache_hit_returns_the_same_answer_and_reasoning(fault_server, tmp_path):
    fault_server.reply = thought("Rest.", tokens=3)
    cache = ResponseCache(tmp_path / "cache")
    first, _ = run(ask(judge(fault_server), "judge", "q", cache=cache))
    second, usage = run(ask(judge(fault_server), "judge", "q", cache=cache))
    assert fault_server.count == 1 and second.cached == 1 and usage.reasoning_tokens == 0
    assert (second.text, second.reasoning) == (first.text, first.reasoning)


def test_a_reply_cut_off_while_reasoning_is_an_error_not_retried_and_not_cached(fault_server, tmp_path):
    fault_server.reply = thought(None, finish_reason="length", tokens=64)
    cache = ResponseCache(tmp_path / "cache")
    roles = judge(fault_server, temperature=1.0, max_tokens=64, reasoning_effort="high")
    with pytest.raises(EmptyAnswer) as error:
        run(ask(roles, "judge", "q", cache=cache))
    assert error.value.finish_reason == "length" and error.value.reasoning.startswith("The user asks")
    message = str(error.value)
    for part in (
        "role 'judge'",
        "fake",
        fault_server.base_url,
        "finish_reason 'length'",
        "spent its tokens reasoning",
        "raise the role's max_tokens (now 64) or lower its reasoning effort (reasoning_effort, now high)",
    ):
        assert part in message, message
    assert fault_server.count == 1  # the same budget would run out again: not asked twice
    assert fault_server.requests[0]["reasoning_effort"] == "high"
    fault_server.reply = thought("Rest.")  # a rerun (say, with a larger budget on the server side) asks again
    result, _ = run(ask(roles, "judge", "q", cache=cache))
    assert result.text == "Rest." and result.cached == 0 and fault_server.count == 2


def test_a_sampled_empty_answer_is_asked_again_for_that_sample_only(fault_server):
    replies = iter(["first", {"content": None, "reasoning": "hmm", "finish_reason": "stop"}, "again"])
    fault_server.reply = lambda body: next(replies)
    result, usage = run(ask(judge(fault_server, temperature=1.0), "judge", "q", n=2))
    assert result.texts == ["first", "again"] and usage.retries == 1
    assert [r["n"] for r in fault_server.requests] == [2, 1]


def test_an_answer_that_stays_empty_fails_after_bounded_tries(fault_server):
    fault_server.reply = {"content": "  \n"}  # whitespace is no answer either
    with pytest.raises(
        LLMError,
        match=r"no answer \(empty content, finish_reason 'stop'\) \(3 tries\): the model "
        "answered nothing",
    ):
        run(ask(judge(fault_server, temperature=0.7), "judge", "q"))
    assert fault_server.count == 3  # 1 + invalid_answer_retries (2)


@pytest.mark.parametrize("role", [{"temperature": 0.0}, {"temperature": 1.0, "seed": 7}])
def test_greedy_or_seeded_empty_answers_fail_at_once(fault_server, role):
    fault_server.reply = thought("", finish_reason="stop")
    with pytest.raises(LLMError, match="the whole reply is reasoning .* --reasoning-parser"):
        run(ask(judge(fault_server, **role), "judge", "q", schema=VERDICT))
    assert fault_server.count == 1  # the same request would give the same reply


def test_an_empty_answer_cached_by_an_older_version_is_asked_again(fault_server, tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    cache.put(cache_key("fake", [{"role": "user", "content": "q"}], {}, 0), {"text": "", "finish_reason": "stop"})
    result, _ = run(ask(judge(fault_server), "judge", "q", cache=cache))
    assert result.text == "ok" and result.cached == 0 and fault_server.count == 1


def test_a_policy_may_take_no_answer_as_its_result(fault_server, tmp_path):
    """allow_empty: "" with the reasoning and finish_reason beside it, not asked again (that would pick the
    answers that did finish) and not cached."""
    fault_server.reply = thought(None, finish_reason="length")
    cache = ResponseCache(tmp_path / "cache")
    for _ in range(2):
        result, _ = run(ask(judge(fault_server, temperature=1.0), "judge", "q", cache=cache, allow_empty=True))
        assert (result.text, result.finish_reasons, result.cached) == ("", ["length"], 0) and result.reasoning
    assert fault_server.count == 2
    with pytest.raises(ValueError, match="allow_empty is for free text"):
        run(ask(judge(fault_server), "judge", "q", schema=VERDICT, allow_empty=True))


def test_reasoning_effort_is_checked():
    with pytest.raises(ValueError, match="reasoning_effort must be one of none, minimal, low, medium"):
        Role(reasoning_effort="mid")


def test_every_preset_with_a_gpt_oss_role_sets_its_reasoning_effort():
    checked = 0
    for path in sorted(CONFIGS.rglob("*.yaml")):
        llm = (yaml.safe_load(path.read_text()) or {}).get("llm") or {}
        defaults = {"model": llm.get("model"), **(llm.get("defaults") or {})}
        for name, entry in (llm.get("roles") or {}).items():
            role = {**defaults, **(entry or {})}
            if "gpt-oss" in str(role.get("model")):
                checked += 1
                assert role.get("reasoning_effort") in ("low", "medium", "high"), f"{path.name}: roles.{name}"
    assert checked >= 2  # dapo.yaml and rubrichub-dapo.yaml
