"""The client against the real vLLM server running the embedded model."""

import asyncio
import json

import pytest

from rubricrl.llm import LLMClient, Role
from tests.helpers import ask, count_posts, run

pytestmark = pytest.mark.model

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 80},
        "confidence": {"type": "integer", "minimum": 1, "maximum": 10},
        "keywords": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 20}},
    },
    "required": ["answer", "confidence", "keywords"],
    "additionalProperties": False,
}


@pytest.fixture
def roles(local_server):
    return {"chat": Role(base_url=local_server.base_url, model=local_server.model, max_tokens=48, temperature=0.7)}


def test_chat_answers_and_counts_tokens(roles):
    result, usage = run(ask(roles, "chat", "Name one primary colour."))
    assert result.text.strip() and result.finish_reasons[0] in ("stop", "length")
    assert result.messages == [{"role": "user", "content": "Name one primary colour."}]
    assert usage.requests == 1 and usage.prompt_tokens > 5 and 0 < usage.completion_tokens <= 48


def test_structured_output_is_schema_valid_every_time(roles):
    async def many():
        async with LLMClient(roles, concurrency=10) as client:
            questions = [f"In JSON, answer: what is {i} + {i}?" for i in range(10)]
            return await asyncio.gather(
                # 250: room for the longest answer the schema allows (80 + 3 x 20 characters, a token each at worst,
                # and the JSON around them); at 120 an unlucky sample was cut, and asked again (one fresh-clone run)
                *(client.chat("chat", q, schema=ANSWER_SCHEMA, max_tokens=250) for q in questions)
            ), client.usage["chat"]

    results, usage = run(many())
    for result in results:
        assert set(result.value) == {"answer", "confidence", "keywords"}
        assert 1 <= result.value["confidence"] <= 10 and len(result.value["keywords"]) <= 3
    assert usage.retries == 0  # the grammar made every first answer valid


def test_n_samples_come_back_distinct(roles):
    result, usage = run(ask(roles, "chat", "Write a four-word story.", n=4, temperature=1.0))
    assert len(result.texts) == 4 and len(set(result.texts)) > 1
    assert usage.requests == 1


def test_repeated_call_never_reaches_the_server(roles, cache, local_server, monkeypatch):
    posted = count_posts(monkeypatch)
    first, _ = run(ask(roles, "chat", "Say a random animal.", cache=cache))
    assert len(posted) == 1  # the spy sees a real call (else the check below would be vacuous)
    second, usage = run(ask(roles, "chat", "Say a random animal.", cache=cache))
    assert len(posted) == 1
    assert second.text == first.text and usage.cache_hits == 1 and usage.requests == 0


def test_sixteen_concurrent_calls_all_answer(roles):
    async def burst():
        async with LLMClient(roles, concurrency=16) as client:
            return await asyncio.gather(*(client.chat("chat", f"Count to {i}.", max_tokens=16) for i in range(16)))

    results = run(burst())
    assert len(results) == 16 and all(r.text for r in results)


def test_cli_chat_against_the_running_server(local_server, tmp_path, capsys):
    from commands.main import main

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(ANSWER_SCHEMA))
    code = main(
        [
            "chat",
            "Answer in JSON: what colour is the sky?",
            "--base-url",
            local_server.base_url,
            "--model",
            local_server.model,
            "--schema",
            str(schema),
            "--max-tokens",
            "120",
            "--no-cache",
        ]
    )
    assert code == 0
    assert set(json.loads(capsys.readouterr().out)) == {"answer", "confidence", "keywords"}
