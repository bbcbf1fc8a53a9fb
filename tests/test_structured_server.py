"""The rubric writer's schema on the real local server: every child of an n request is finished, valid, compact JSON.

Issue 21's "unenforced schema" was an answer cut off at max_tokens: the grammar had held (on every child of an n
request too), but the answer ran out of tokens (vLLM's default JSON grammar allows any whitespace between tokens, and
SmolLM2 sometimes spends its budget on it), and the parser reported the criteria that had closed inside the
unfinished answer as keys the schema forbids.
"""

import json
import re
import urllib.request

import pytest

from rubricrl.llm import StructuredOutputError, json_schema_format, parse_structured
from rubricrl.prompts import format_conversation
from synthesis.config import SynthesisConfig
from synthesis.criteria import criteria_schema, weight_rules
from synthesis.stages import RUBRIC

# One criterion at most: the schema synth sends, with the token budget synth gives it on a CPU (240 tokens), and a
# quick answer. The indented template invites whitespace, which the server's grammar must not let through.
CONFIG = SynthesisConfig(min_criteria=1, max_criteria=1)
SCHEMA = criteria_schema(CONFIG, CONFIG.max_criteria)
INDENTED = json.dumps(
    {"criteria": [{"title": "Names the cause", "description": "Says why.", "weight": 5}]}, indent=24
).replace("\n", "\n\n")  # blank lines and deep indents: whitespace to copy
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def rubric_prompt() -> str:
    conversation = format_conversation([{"role": "user", "content": "How do I boil an egg?"}])
    return RUBRIC.render(
        conversation=conversation,
        min_criteria="1",
        max_criteria="1",
        category_field="",
        reference="Cover the egg with water, boil it 9 minutes, then cool it in cold water.",
        weight_rules=weight_rules(CONFIG),
    )


def test_a_cut_off_answer_is_reported_as_cut_off_not_as_forbidden_keys():
    """The reply that failed med-03: a rubric cut off at max_tokens after one complete criterion."""
    reply = '{\n  "criteria": [\n    {"title": "Dose", "description": "Gives the dose.", "weight": 5},\n    {"tit'
    with pytest.raises(
        StructuredOutputError,
        match=r"^the reply's JSON is cut off .*max_tokens.*"
        r"'description', 'title', 'weight' were unexpected",
    ):
        parse_structured(reply, criteria_schema(SynthesisConfig(), 6))
    with pytest.raises(StructuredOutputError, match=r"^the reply's JSON is cut off"):
        parse_structured('{"criteria": [{"title": "Dose", "descr', SCHEMA)
    with pytest.raises(StructuredOutputError, match="^no JSON object"):  # braces in prose that close: not cut off
        parse_structured("Use {braces} and [brackets] as you like.", SCHEMA)


@pytest.mark.model
def test_every_child_of_an_n_request_is_finished_compact_valid_json(local_server):
    budget = CONFIG.cpu_max_tokens()["rubric_writer"]
    body = {
        "model": local_server.model,
        "n": 4,
        "temperature": 1.0,
        "max_tokens": budget,
        "messages": [{"role": "user", "content": f"{rubric_prompt()}\nIndent it exactly like this:\n{INDENTED}"}],
        "response_format": json_schema_format(SCHEMA, "rubric"),
    }
    base_url = local_server.base_url.split(",")[0]
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        choices = json.load(response)["choices"]
    assert len(choices) == 4
    for choice in choices:
        text = choice["message"]["content"]
        skeleton = STRING.sub('""', text)  # the JSON outside its strings
        assert not re.search(r"\s", skeleton), (
            f"the server's JSON grammar lets whitespace through, so the schema's bounds do not bound an answer: start "
            f"it with `rubricrl serve` (serve.py STRUCTURED_OUTPUTS); reply {text[:200]!r}"
        )
        assert choice["finish_reason"] == "stop", f"cut off at {budget} tokens: {text[-200:]!r}"
        assert parse_structured(text, SCHEMA) == json.loads(text)
