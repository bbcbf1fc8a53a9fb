"""Rule checks: rubric criteria decided in code, with no judge call (IFEval-style instruction constraints).

A criterion may carry `rule={"type": NAME, **params}`; its check answers what a judge verdict would: does the
criterion's text hold for this response? For a penalty ("Includes a URL", -3) True means the undesirable behaviour is
present; the sign lives on the criterion. RULE_CHECKS maps type names to checks `(response, *, params) -> bool`, and
validate_rule reads a rule's parameters off its check's signature, so check and schema cannot drift apart.

Counting rules share these definitions:
- word: a whitespace-separated token with a letter or digit ("don't", "3.14"; a lone "-" is none). Not `\\w+`, which
  leaves out combining marks and so splits Hindi or Arabic words at their vowel signs. Scripts without spaces
  (Chinese, Japanese, Thai) count a whole run as one word: these rules are not meant for them.
- sentence: text with a letter between terminal punctuation (. ! ? and full-width 。 ． ！ ？); a period between
  digits (3.14) is no break, abbreviations ("e.g.", "Dr.") are, a known limitation.
- paragraph: non-blank text between blank lines.
"""

import inspect
import json
import re
from collections.abc import Callable, Sequence
from functools import reduce
from operator import or_
from typing import Any

# A period counts as a break unless it has a digit on both sides; a run of marks ("?!", "...") is one break.
SENTENCE_END = re.compile(r"(?:[!?。．！？]|(?<!\d)\.|\.(?!\d))+")
# `\s*` spans several blank lines and the `\r` of Windows line ends.
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# A markdown list item: "- ", "* ", "+ " or "1. " (indented items count), followed by some text.
BULLET_LINE = re.compile(r"^[ \t]*(?:[-*+]|\d+\.)[ \t]+\S", re.MULTILINE)
# The whole response wrapped in one fence, with or without a language tag (```json ... ```).
CODE_FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*)\n[ \t]*```", re.DOTALL)
REGEX_FLAGS = {"IGNORECASE": re.IGNORECASE, "MULTILINE": re.MULTILINE, "DOTALL": re.DOTALL}


class RuleError(ValueError):
    """A rule is malformed (unknown type, missing or invalid parameter)."""


def count_words(response: str) -> int:
    """Words as defined in the module docstring.

    >>> count_words("Don't panic — it's 3.14, not π.")
    6
    """
    return sum(1 for token in response.split() if any(char.isalnum() for char in token))


def count_sentences(response: str) -> int:
    """Sentences as defined in the module docstring.

    >>> count_sentences("Pi is 3.14. Really?! Yes。")
    3
    """
    # Requiring a letter keeps list numbers ("1. Eggs" -> "1", "Eggs") and stray punctuation from counting.
    return sum(1 for part in SENTENCE_END.split(response) if any(char.isalpha() for char in part))


def count_paragraphs(response: str) -> int:
    """Paragraphs as defined in the module docstring.

    >>> count_paragraphs("One.\\n\\n\\nTwo,\\nstill two.\\n")
    2
    """
    return sum(1 for part in PARAGRAPH_BREAK.split(response) if part.strip())


def compile_pattern(pattern: str, flags: Sequence[str]) -> re.Pattern[str]:
    return re.compile(pattern, reduce(or_, (REGEX_FLAGS[name] for name in flags), re.NOFLAG))


def max_words(response: str, *, value: int) -> bool:
    """At most `value` words.

    >>> max_words("one two three", value=3), max_words("one two three", value=2)
    (True, False)
    """
    return count_words(response) <= value


def min_words(response: str, *, value: int) -> bool:
    """At least `value` words."""
    return count_words(response) >= value


def max_sentences(response: str, *, value: int) -> bool:
    """At most `value` sentences."""
    return count_sentences(response) <= value


def min_sentences(response: str, *, value: int) -> bool:
    """At least `value` sentences."""
    return count_sentences(response) >= value


def max_chars(response: str, *, value: int) -> bool:
    """At most `value` characters, leading and trailing whitespace not counted."""
    return len(response.strip()) <= value


def min_chars(response: str, *, value: int) -> bool:
    """At least `value` characters, leading and trailing whitespace not counted."""
    return len(response.strip()) >= value


def max_paragraphs(response: str, *, value: int) -> bool:
    """At most `value` paragraphs (separated by blank lines)."""
    return count_paragraphs(response) <= value


def min_paragraphs(response: str, *, value: int) -> bool:
    """At least `value` paragraphs (separated by blank lines)."""
    return count_paragraphs(response) >= value


def regex_required(response: str, *, pattern: str, flags: Sequence[str] = ()) -> bool:
    """The pattern matches somewhere.

    >>> regex_required("See HTTPS://x.org", pattern="https?://", flags=["IGNORECASE"])
    True
    """
    return compile_pattern(pattern, flags).search(response) is not None


def regex_forbidden(response: str, *, pattern: str, flags: Sequence[str] = ()) -> bool:
    """The pattern matches nowhere."""
    return compile_pattern(pattern, flags).search(response) is None


def contains_all(response: str, *, keywords: list[str], case_sensitive: bool = False) -> bool:
    """Every keyword appears as a substring ("cat" is found in "concatenate").

    >>> contains_all("Paris is in France", keywords=["paris", "France"])
    True
    """
    if not case_sensitive:  # casefold, not lower: "STRASSE" and "straße" are the same word
        response, keywords = response.casefold(), [keyword.casefold() for keyword in keywords]
    return all(keyword in response for keyword in keywords)


def contains_none(response: str, *, keywords: list[str], case_sensitive: bool = False) -> bool:
    """No keyword appears as a substring."""
    if not case_sensitive:
        response, keywords = response.casefold(), [keyword.casefold() for keyword in keywords]
    return not any(keyword in response for keyword in keywords)


def valid_json(response: str) -> bool:
    """The response, or the body of one code fence around all of it, parses as JSON.

    >>> valid_json('```json\\n{"a": [1, 2]}\\n```'), valid_json("{'a': 1}")
    (True, False)
    """
    text = response.strip()
    if fenced := CODE_FENCE.fullmatch(text):
        text = fenced.group(1)
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting too deep to parse, so not confirmed valid
        return False
    return True


def all_lowercase(response: str) -> bool:
    """At least one cased letter, and every cased letter is lowercase (digits and CJK are uncased).

    >>> all_lowercase("hello, wörld 42"), all_lowercase("Hello"), all_lowercase("42")
    (True, False, False)
    """
    return response.islower()  # str.islower is exactly this definition


def all_uppercase(response: str) -> bool:
    """At least one cased letter, and every cased letter is uppercase."""
    return response.isupper()


def starts_with(response: str, *, text: str) -> bool:
    """The stripped response starts with `text` (case-sensitive)."""
    # `text` is stripped too: validation rejects blank text, and " Answer:" could never match a stripped response.
    return response.strip().startswith(text.strip())


def ends_with(response: str, *, text: str) -> bool:
    """The stripped response ends with `text` (case-sensitive)."""
    return response.strip().endswith(text.strip())


def no_commas(response: str) -> bool:
    """No comma, ASCII or full-width (，)."""
    return "," not in response and "，" not in response


def bullet_count(response: str, *, value: int | None = None, min: int | None = None, max: int | None = None) -> bool:
    """Exactly `value` markdown list items, or between `min` and `max` (either bound may be left out).

    >>> bullet_count("Intro:\\n- a\\n  * nested\\n1. b\\n-not a bullet", value=3)
    True
    """
    count = len(BULLET_LINE.findall(response))
    if value is not None:
        return count == value
    return (min is None or count >= min) and (max is None or count <= max)


RULE_CHECKS: dict[str, Callable[..., bool]] = {
    "max_words": max_words,
    "min_words": min_words,
    "max_sentences": max_sentences,
    "min_sentences": min_sentences,
    "max_chars": max_chars,
    "min_chars": min_chars,
    "max_paragraphs": max_paragraphs,
    "min_paragraphs": min_paragraphs,
    "regex_required": regex_required,
    "regex_forbidden": regex_forbidden,
    "contains_all": contains_all,
    "contains_none": contains_none,
    "valid_json": valid_json,
    "all_lowercase": all_lowercase,
    "all_uppercase": all_uppercase,
    "starts_with": starts_with,
    "ends_with": ends_with,
    "no_commas": no_commas,
    "bullet_count": bullet_count,
}


def validate_param(name: str, value: Any) -> None:
    """Raise RuleError unless one parameter has the type and range its name promises (names mean one thing)."""
    if name in ("value", "min", "max"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise RuleError(f"'{name}' must be an integer >= 0, got {value!r}")
    elif name == "pattern":
        if not isinstance(value, str) or not value:
            raise RuleError(f"'pattern' must be a non-empty regular expression string, got {value!r}")
    elif name == "text":
        if not isinstance(value, str) or not value.strip():
            raise RuleError(f"'text' must be a non-blank string, got {value!r}")
    elif name == "keywords":
        if not isinstance(value, list) or not value or not all(isinstance(k, str) and k for k in value):
            raise RuleError(f"'keywords' must be a non-empty list of non-empty strings, got {value!r}")
    elif name == "case_sensitive":
        if not isinstance(value, bool):
            raise RuleError(f"'case_sensitive' must be true or false, got {value!r}")
    elif name == "flags":
        if not isinstance(value, list) or not all(isinstance(f, str) and f in REGEX_FLAGS for f in value):
            raise RuleError(f"'flags' must be a list drawn from {sorted(REGEX_FLAGS)}, got {value!r}")


def validate_rule(rule: Any) -> None:
    """Raise RuleError unless `rule` is `{"type": <a RULE_CHECKS name>, **params}` with the params that check takes."""
    if not isinstance(rule, dict):
        raise RuleError(f"a rule must be an object like {{'type': 'max_words', 'value': 100}}, got {rule!r:.200}")
    kind = rule.get("type")
    if not isinstance(kind, str) or kind not in RULE_CHECKS:
        raise RuleError(f"unknown rule type {kind!r}; known types: {', '.join(RULE_CHECKS)}")
    params = {name: value for name, value in rule.items() if name != "type"}
    accepted = list(inspect.signature(RULE_CHECKS[kind]).parameters.values())[1:]  # [0] is the response
    required = [p.name for p in accepted if p.default is inspect.Parameter.empty]
    if missing := [name for name in required if name not in params]:
        raise RuleError(f"'{kind}' is missing {missing}; it takes {[p.name for p in accepted] or 'no parameters'}")
    if extra := [name for name in params if name not in {p.name for p in accepted}]:
        raise RuleError(f"'{kind}' does not take {extra}; it takes {[p.name for p in accepted] or 'no parameters'}")
    for name, value in params.items():
        validate_param(name, value)
    if kind == "bullet_count" and ("value" in params) == ("min" in params or "max" in params):
        raise RuleError(f"'bullet_count' takes either 'value' (exact) or 'min'/'max' (a range), got {params}")
    if params.get("min", 0) > params.get("max", float("inf")):
        raise RuleError(f"'min' ({params['min']}) is greater than 'max' ({params['max']})")
    if "pattern" in params:
        try:
            compile_pattern(params["pattern"], params.get("flags", []))
        except re.error as error:
            raise RuleError(f"'pattern' {params['pattern']!r} does not compile: {error}") from error


def check_rule(rule: dict[str, Any], response: str) -> bool:
    """Whether the criterion's rule holds for the response (the rule was validated at load).

    >>> check_rule({"type": "max_words", "value": 2}, "three words here")
    False
    """
    return RULE_CHECKS[rule["type"]](response, **{name: value for name, value in rule.items() if name != "type"})
