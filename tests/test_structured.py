"""The tolerant extractor and schema bounds, on replies shaped like those of real endpoints."""

import pytest

from rubricrl.llm import StructuredOutputError, json_schema_format, parse_structured

pytestmark = pytest.mark.pure

RUBRIC_SCHEMA = {
    "type": "array",
    "maxItems": 20,
    "items": {
        "type": "object",
        "properties": {
            "criterion": {"type": "string", "maxLength": 300},
            "points": {"type": "integer", "minimum": -10, "maximum": 10},
        },
        "required": ["criterion", "points"],
    },
}
ANY_OBJECT = {"type": "object"}


def test_fenced_array_followed_by_prose_with_closing_bracket():
    reply = (
        "Here is the rubric:\n```json\n"
        '[{"criterion": "Mentions dosage [mg]", "points": 5}, {"criterion": "Avoids jargon", "points": 2}]\n'
        "```\nI weighted dosage highest (see [1]). Let me know if you want changes]."
    )
    assert parse_structured(reply, RUBRIC_SCHEMA) == [
        {"criterion": "Mentions dosage [mg]", "points": 5},
        {"criterion": "Avoids jargon", "points": 2},
    ]


def test_bare_json_with_prose_around_it_and_braces_in_strings():
    reply = 'My verdict: {"met": true, "why": "it says \\"}\\" literally {x}"} -- done}'
    assert parse_structured(reply, ANY_OBJECT) == {"met": True, "why": 'it says "}" literally {x}'}


def test_first_schema_valid_value_wins_over_earlier_invalid_ones():
    reply = 'Example format: [1, 2]. Answer: [{"criterion": "Is correct", "points": 3}]'
    assert parse_structured(reply, RUBRIC_SCHEMA) == [{"criterion": "Is correct", "points": 3}]


def test_fence_without_language_tag():
    assert parse_structured('```\n{"a": 1}\n```', ANY_OBJECT) == {"a": 1}


def test_no_json_and_truncated_json_raise_with_the_reply():
    with pytest.raises(StructuredOutputError, match="no JSON"):
        parse_structured("I cannot answer that.", RUBRIC_SCHEMA)
    # A cut-off array must not come back as its first complete element, nor as a shortened list.
    with pytest.raises(StructuredOutputError, match="is not of type 'array'"):
        parse_structured('[{"criterion": "Is correct", "points": 3}, {"criter', RUBRIC_SCHEMA)


def test_schema_mismatch_names_the_place():
    with pytest.raises(StructuredOutputError, match=r"at 0/points: 99 is greater than the maximum of 10"):
        parse_structured('[{"criterion": "x", "points": 99}]', RUBRIC_SCHEMA)


@pytest.mark.parametrize(
    "schema, missing",
    [
        ({"type": "integer"}, "minimum"),
        (
            {
                "type": "object",
                "properties": {"why": {"type": "string"}},
                "required": ["why"],
                "additionalProperties": False,
            },
            r"\$\.why: a string needs 'maxLength'",
        ),
        ({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}, "additionalProperties"),
        ({"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": False}, "every property"),
        ({"type": "array", "items": {"type": "boolean"}}, "maxItems"),
        ({"type": "array", "maxItems": 3, "items": {"type": "number", "minimum": 0}}, r"\$\[\]: a number"),
    ],
)
def test_unbounded_schemas_are_refused(schema, missing):
    with pytest.raises(ValueError, match=missing):
        json_schema_format(schema)


def test_bounded_schema_becomes_response_format():
    schema = {**RUBRIC_SCHEMA, "items": {**RUBRIC_SCHEMA["items"], "additionalProperties": False}}
    fmt = json_schema_format(schema, "rubric")
    assert fmt == {"type": "json_schema", "json_schema": {"name": "rubric", "schema": schema, "strict": True}}
    assert json_schema_format({"type": "string", "enum": ["yes", "no"]})  # an enum is bounded already
