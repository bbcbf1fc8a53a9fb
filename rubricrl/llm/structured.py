"""Structured outputs: bounded JSON schemas sent as `response_format`, and a tolerant JSON extractor.

`json_schema_format` refuses unbounded integers, strings and arrays: a small model can run to max_tokens inside one
unbounded value, while bounds let vLLM's grammar close in time. Whitespace must be bounded too: vLLM's default
xgrammar (`any_whitespace=True`) is not, and SmolLM2 at temperature 1 sometimes fills max_tokens with it (2 of 64
rubric answers at 690 tokens cut off, one 4,810 of 5,708 characters whitespace), so our servers use compact JSON
(serve.py `STRUCTURED_OUTPUTS`). Strings near maxLength can still outrun a small budget (2 of 56 compact answers at
690 tokens); such an answer is reported as cut off, not by the nested values that closed inside it.
Without schema support, `parse_structured` takes the first JSON value satisfying the schema: the whole reply, then
```json fences, then each value decoding from a `{` or `[`. `raw_decode` stops at one value's end, so prose after it
(even with `]` or `}`) cannot corrupt the result, as it would a greedy regex.
"""

import functools
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema

FENCED_BLOCK = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()


class StructuredOutputError(ValueError):
    """The model's reply holds no JSON value that satisfies the schema."""

    def __init__(self, reason: str, text: str):
        super().__init__(f"{reason}; reply began: {text[:300]!r}")
        self.reason = reason
        self.text = text


def json_schema_format(schema: dict[str, Any], name: str = "output") -> dict[str, Any]:
    """The `response_format` for a chat request that must answer with `schema`."""
    check_bounded(schema)
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def check_bounded(schema: dict[str, Any], path: str = "$") -> None:
    """Raise ValueError naming the first integer, number, string or array in `schema` that has no bound, or the
    first object that is open (strict mode's rules: no additional properties, every property required)."""
    kind = schema.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind}
    fixed = "enum" in schema or "const" in schema
    if kinds & {"integer", "number"} and not fixed and not ("minimum" in schema and "maximum" in schema):
        raise ValueError(f"schema {path}: a {kind} needs both 'minimum' and 'maximum'")
    if "string" in kinds and not fixed and "maxLength" not in schema:
        raise ValueError(f"schema {path}: a string needs 'maxLength'")
    if "array" in kinds and "maxItems" not in schema:
        raise ValueError(f"schema {path}: an array needs 'maxItems'")
    if "object" in kinds:  # what strict mode (OpenAI) requires, and what keeps a grammar from adding keys
        if schema.get("additionalProperties") is not False:
            raise ValueError(f"schema {path}: an object needs 'additionalProperties': false")
        if set(schema.get("required") or ()) != set(schema.get("properties") or {}):
            raise ValueError(f"schema {path}: an object must list every property in 'required'")
    for key, sub in (schema.get("properties") or {}).items():
        check_bounded(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        check_bounded(schema["items"], f"{path}[]")
    for keyword in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(keyword) or []):
            check_bounded(sub, f"{path}.{keyword}[{i}]")
    for key, sub in (schema.get("$defs") or {}).items():
        check_bounded(sub, f"{path}.$defs.{key}")


def _json_values(text: str) -> Iterator[Any]:
    """Every JSON object or array in `text`, most likely first: whole reply, fenced blocks, then embedded; lazily,
    so a reply that is one valid JSON value is decoded once."""
    try:
        value = json.loads(text.strip())
        if isinstance(value, (dict, list)):
            yield value
    except ValueError:
        pass
    for block in FENCED_BLOCK.findall(text):
        yield from (v for v in _decode_all(block) if isinstance(v, (dict, list)))
    yield from (v for v in _decode_all(text) if isinstance(v, (dict, list)))


def _decode_all(text: str) -> list[Any]:
    """Values decoded at each '{' or '[' that starts one, skipping over the inside of each value found."""
    values, i = [], 0
    while True:
        starts = [p for p in (text.find("{", i), text.find("[", i)) if p >= 0]
        if not starts:
            return values
        start = min(starts)
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            i = start + 1
            continue
        values.append(value)
        i = end


def parse_structured(text: str, schema: dict[str, Any]) -> Any:
    """The first JSON value in `text` that validates against `schema`; StructuredOutputError if none does."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = []
    for value in _json_values(text):
        if validator.is_valid(value):
            return value
        from jsonschema.exceptions import best_match  # loaded with the validator

        errors.append(best_match(validator.iter_errors(value)))
    cut_off = _ends_inside_json(text)
    if not errors:
        raise StructuredOutputError(CUT_OFF if cut_off else "no JSON object or array in the reply", text)
    where = "/".join(str(p) for p in errors[0].absolute_path) or "top level"
    mismatch = f"JSON does not match the schema at {where}: {errors[0].message}"
    # A cut-off answer's only complete values are the ones nested in it (e.g. one criterion of a rubric), which
    # fail the schema at its top level: say first that the answer is unfinished.
    raise StructuredOutputError(f"{CUT_OFF}; a value nested in it: {mismatch}" if cut_off else mismatch, text)


CUT_OFF = "the reply's JSON is cut off before its end (the answer ran to max_tokens?)"


def _ends_inside_json(text: str) -> bool:
    """Whether the first JSON object or array in `text` is still open at its end (brackets counted outside
    strings): an answer cut off at max_tokens, whatever closed inside it."""
    starts = [p for p in (text.find("{"), text.find("[")) if p >= 0]
    if not starts:
        return False
    depth, in_string, escaped = 0, False, False
    for char in text[min(starts) :]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return False
    return True


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> "jsonschema.protocols.Validator":
    """One validator per schema (building one walks the whole schema). jsonschema is loaded here, with the first
    structured answer, not with the package: it takes 0.05 s, which every command and run would wait for."""
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(schema_json))
