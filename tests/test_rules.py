"""Rule checks: each rule at its boundary, the word/sentence definitions, and every malformed rule rejected."""

import doctest

import pytest

from grading import rules
from grading.rubric import RubricError, rubric_from_items
from grading.rules import RULE_CHECKS, RuleError, check_rule, validate_rule

pytestmark = pytest.mark.pure

CASES = [
    # (rule, response, expected)
    ({"type": "max_words", "value": 5}, "one two three four five", True),
    ({"type": "max_words", "value": 5}, "one two three four five six", False),
    ({"type": "min_words", "value": 5}, "one two three four five", True),
    ({"type": "min_words", "value": 5}, "one two three four", False),
    ({"type": "max_words", "value": 0}, "  \n ", True),
    # Punctuation-only tokens are not words; contractions and hyphenated words are one word each.
    ({"type": "max_words", "value": 3}, "Don't — well-known ** ideas", True),
    # Non-Latin scripts: Cyrillic, Greek, and Hindi (whose vowel signs \w would split on) count per space.
    ({"type": "max_words", "value": 3}, "Привет, как дела?", True),
    ({"type": "min_words", "value": 4}, "Γεια σου κόσμε", False),
    ({"type": "max_words", "value": 2}, "हिन्दी भाषा", True),
    ({"type": "max_sentences", "value": 2}, "Pi is 3.14. It is irrational!", True),
    ({"type": "max_sentences", "value": 2}, "Pi is 3.14. It is irrational! Wow?", False),
    ({"type": "min_sentences", "value": 3}, "Version 2.0.1 is out... Update now?! Or wait", True),
    ({"type": "min_sentences", "value": 3}, "It costs 4.50 dollars. That is 1.5 times more", False),
    ({"type": "max_sentences", "value": 1}, "I have 3. You have 4.", False),  # a period after a digit still ends one
    ({"type": "min_sentences", "value": 2}, "今天天气很好。我们去公园吧！", True),  # full-width marks
    ({"type": "max_sentences", "value": 2}, "1. Eggs.\n2. Milk.", True),  # list numbers are not sentences
    ({"type": "max_chars", "value": 5}, "  héllo \n", True),  # surrounding whitespace is not counted
    ({"type": "max_chars", "value": 5}, "héllo!", False),
    ({"type": "min_chars", "value": 3}, " 日本語 ", True),
    ({"type": "min_chars", "value": 3}, " ab ", False),
    ({"type": "max_paragraphs", "value": 2}, "One.\n\n\n  \nTwo,\nstill two.", True),
    ({"type": "max_paragraphs", "value": 2}, "One.\r\n\r\nTwo.\n\nThree.", False),
    ({"type": "min_paragraphs", "value": 2}, "One line\nanother line", False),
    ({"type": "min_paragraphs", "value": 2}, "Первый абзац.\n\nВторой.", True),
    ({"type": "regex_required", "pattern": r"https?://"}, "see https://example.org", True),
    ({"type": "regex_required", "pattern": r"https?://"}, "see example.org", False),
    ({"type": "regex_required", "pattern": r"https?://"}, "see HTTPS://example.org", False),
    ({"type": "regex_required", "pattern": r"https?://", "flags": ["IGNORECASE"]}, "see HTTPS://example.org", True),
    ({"type": "regex_required", "pattern": r"^Answer:"}, "Intro\nAnswer: 4", False),
    ({"type": "regex_required", "pattern": r"^Answer:", "flags": ["MULTILINE"]}, "Intro\nAnswer: 4", True),
    ({"type": "regex_required", "pattern": r"start.end", "flags": ["DOTALL", "IGNORECASE"]}, "START\nend", True),
    ({"type": "regex_forbidden", "pattern": r"\bI\b"}, "We think so.", True),
    ({"type": "regex_forbidden", "pattern": r"\bI\b"}, "I think so.", False),
    ({"type": "contains_all", "keywords": ["paris", "FRANCE"]}, "Paris is in France.", True),
    ({"type": "contains_all", "keywords": ["paris", "FRANCE"], "case_sensitive": True}, "Paris is in France.", False),
    ({"type": "contains_all", "keywords": ["Paris", "Berlin"]}, "Paris is in France.", False),
    ({"type": "contains_all", "keywords": ["straße"]}, "STRASSE 5", True),  # casefold, not lower
    ({"type": "contains_none", "keywords": ["sorry", "apolog"]}, "Here is the answer.", True),
    ({"type": "contains_none", "keywords": ["sorry", "apolog"]}, "I Apologize.", False),
    ({"type": "contains_none", "keywords": ["sorry"], "case_sensitive": True}, "SORRY", True),
    ({"type": "valid_json"}, '{"a": [1, 2.5, null]}', True),
    ({"type": "valid_json"}, '```json\n{"a": 1}\n```', True),
    ({"type": "valid_json"}, "  ```\n[1, 2]\n```\n", True),
    ({"type": "valid_json"}, "{'a': 1}", False),
    ({"type": "valid_json"}, '{"a": 1,}', False),
    ({"type": "valid_json"}, 'Here you go:\n```json\n{"a": 1}\n```', False),  # prose around the fence
    ({"type": "valid_json"}, "", False),
    ({"type": "valid_json"}, "[" * 100_000 + "]" * 100_000, False),  # too deep to parse: not confirmed, no crash
    ({"type": "all_lowercase"}, "hello, wörld 42!", True),
    ({"type": "all_lowercase"}, "hello, Wörld", False),
    ({"type": "all_lowercase"}, "42 ... 日本", False),  # no cased letter at all
    ({"type": "all_uppercase"}, "ÉTÉ 2024!", True),
    ({"type": "all_uppercase"}, "ÉTÉ 2024 ok", False),
    ({"type": "starts_with", "text": "Answer:"}, "\n  Answer: 42", True),
    ({"type": "starts_with", "text": "Answer:"}, "answer: 42", False),
    ({"type": "ends_with", "text": "Is there anything else?"}, "Done. Is there anything else?\n", True),
    ({"type": "ends_with", "text": "Is there anything else?"}, "Is there anything else? Bye.", False),
    ({"type": "no_commas"}, "No commas here; none at all.", True),
    ({"type": "no_commas"}, "One, two", False),
    ({"type": "no_commas"}, "一，二", False),
    ({"type": "bullet_count", "value": 3}, "Items:\n- a\n* b\n  + nested c", True),
    ({"type": "bullet_count", "value": 3}, "1. a\n2. b\n10. c\n11. d", False),
    ({"type": "bullet_count", "value": 0}, "-not a bullet\n**bold**\n---\n3.14 is pi", True),
    ({"type": "bullet_count", "min": 2}, "- a\n- b", True),
    ({"type": "bullet_count", "min": 2, "max": 3}, "- a", False),
    ({"type": "bullet_count", "max": 1}, "- a\n- b", False),
]


@pytest.mark.parametrize("rule, response, expected", CASES)
def test_rule_decides(rule, response, expected):
    validate_rule(rule)
    assert check_rule(rule, response) is expected


def test_every_rule_type_has_a_true_and_a_false_case():
    for kind in RULE_CHECKS:
        outcomes = {expected for rule, _, expected in CASES if rule["type"] == kind}
        assert outcomes == {True, False}, kind


def test_docstring_examples_hold():
    assert doctest.testmod(rules).failed == 0


@pytest.mark.parametrize(
    "rule, message",
    [
        ("max_words", "must be an object"),
        ({"value": 5}, "unknown rule type None; known types: max_words, min_words"),
        ({"type": "max_word", "value": 5}, "unknown rule type 'max_word'.*bullet_count"),
        ({"type": ["max_words"]}, "unknown rule type"),
        ({"type": "max_words"}, r"'max_words' is missing \['value'\]"),
        ({"type": "max_words", "value": 5, "min": 1}, r"'max_words' does not take \['min'\]; it takes \['value'\]"),
        ({"type": "valid_json", "strict": True}, r"does not take \['strict'\]; it takes no parameters"),
        ({"type": "max_words", "value": -1}, "'value' must be an integer >= 0, got -1"),
        ({"type": "max_words", "value": 5.0}, "'value' must be an integer >= 0, got 5.0"),
        ({"type": "max_words", "value": "5"}, "'value' must be an integer"),
        ({"type": "max_words", "value": True}, "'value' must be an integer"),
        ({"type": "min_chars", "value": None}, "'value' must be an integer"),
        ({"type": "regex_required", "pattern": ""}, "'pattern' must be a non-empty"),
        ({"type": "regex_required", "pattern": 3}, "'pattern' must be a non-empty"),
        ({"type": "regex_required", "pattern": "(unclosed"}, r"'pattern' '\(unclosed' does not compile: missing \)"),
        ({"type": "regex_forbidden", "pattern": "a", "flags": ["VERBOSE"]}, "'flags' must be a list drawn from"),
        ({"type": "regex_forbidden", "pattern": "a", "flags": "IGNORECASE"}, "'flags' must be a list"),
        ({"type": "contains_all", "keywords": []}, "'keywords' must be a non-empty list"),
        ({"type": "contains_all", "keywords": "paris"}, "'keywords' must be a non-empty list"),
        ({"type": "contains_none", "keywords": ["ok", ""]}, "non-empty strings"),
        ({"type": "contains_none", "keywords": ["ok"], "case_sensitive": "yes"}, "'case_sensitive' must be true or"),
        ({"type": "starts_with", "text": "  "}, "'text' must be a non-blank string"),
        ({"type": "ends_with"}, r"missing \['text'\]"),
        ({"type": "bullet_count"}, "either 'value' \\(exact\\) or 'min'/'max'"),
        ({"type": "bullet_count", "value": 2, "max": 3}, "either 'value'"),
        ({"type": "bullet_count", "min": 4, "max": 3}, r"'min' \(4\) is greater than 'max' \(3\)"),
        ({"type": "bullet_count", "min": -1}, "'min' must be an integer >= 0"),
    ],
)
def test_malformed_rules_are_rejected(rule, message):
    with pytest.raises(RuleError, match=message):
        validate_rule(rule)


def test_a_rubric_item_carries_its_rule():
    rubric = rubric_from_items(
        [{"criterion": "Under 5 words", "points": 2, "rule": {"type": "max_words", "value": 5}}], "f.jsonl:3"
    )
    (criterion,) = rubric.criteria
    assert criterion.rule == {"type": "max_words", "value": 5} and criterion.points == 2
    assert check_rule(criterion.rule, "Short and sweet.") is True


def test_a_bad_rule_in_a_rubric_names_where():
    items = [{"criterion": "Under 5 words", "points": 2, "rule": {"type": "max_words", "value": -5}}]
    with pytest.raises(RubricError, match="f.jsonl:3") as raised:
        rubric_from_items(items, "f.jsonl:3")
    assert "criterion 0" in str(raised.value) and "'value' must be an integer >= 0" in str(raised.value)
