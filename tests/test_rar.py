"""RaR rubrics: categories from the description, weights as points, and the two pitfall conventions normalised
so that a pitfall's negative points land on the responses that make the mistake."""

import json

import pytest

from grading.dataset import load_rubric_rows
from grading.rar import criteria_from_rar
from grading.rubric import RubricError, rubric_from_items
from grading.scores import explicit_score

pytestmark = pytest.mark.pure

MEDICINE = [  # RaR-Medicine style: the pitfall text names the mistake
    {
        "title": "Urgent care",
        "description": "Essential Criteria: Advises emergency care for chest pain with sweating.",
        "weight": 5,
    },
    {"title": "Aspirin", "description": "Important Criteria: Mentions chewing aspirin if not allergic.", "weight": 3},
    {"title": "Reassurance", "description": "Optional Criteria: Offers brief reassurance.", "weight": 1},
    {
        "title": "Misses urgency",
        "description": "Pitfall Criteria: Does not mention that symptoms need urgent evaluation.",
        "weight": -2,
    },
]
SCIENCE = [  # RaR-Science style: the pitfall text names what to avoid
    {"title": "Formula", "description": "Essential Criteria: Uses F = m a to compute the force.", "weight": 5},
    {"title": "Units", "description": "Pitfall Criteria: Avoids confusing mass with weight.", "weight": -1},
]


def test_categories_and_points():
    criteria = criteria_from_rar(MEDICINE, "med.jsonl:1")
    assert [(c["category"], c["points"]) for c in criteria] == [
        ("Essential", 5),
        ("Important", 3),
        ("Optional", 1),
        ("Pitfall", -2),
    ]
    assert criteria[0]["criterion"] == "Advises emergency care for chest pain with sweating."


def test_mistake_pitfall_keeps_its_text():
    assert criteria_from_rar(MEDICINE, "m")[3]["criterion"] == "Does not mention that symptoms need urgent evaluation."


def test_avoidance_pitfall_is_rewritten_to_name_the_mistake():
    criteria = criteria_from_rar(SCIENCE, "s")
    assert criteria[1] == {
        "criterion": "Fails to meet this: Avoids confusing mass with weight.",
        "points": -1,
        "category": "Pitfall",
    }


def test_both_conventions_penalise_the_response_that_makes_the_mistake():
    # A good science answer uses F = ma and keeps mass and weight apart: the rewritten pitfall does not hold.
    science = rubric_from_items(criteria_from_rar(SCIENCE, "s"), "s")
    good, bad = [True, False], [True, True]  # verdicts on the texts as normalised
    assert explicit_score([c.points for c in science.criteria], good).score == 1.0
    assert explicit_score([c.points for c in science.criteria], bad).score == pytest.approx(4 / 5)
    # Read literally, "Avoids confusing..." holds for the good answer and would cost it the point instead.
    literal = criteria_from_rar(SCIENCE, "s", pitfall_convention="mistake")
    assert literal[1]["criterion"] == "Avoids confusing mass with weight."


@pytest.mark.parametrize(
    "text, avoidance",
    [
        ("Does not confuse mass with weight.", True),
        ("Doesn't misstate the units.", True),
        ("Never divides by zero.", True),
        ("Does not mention the dosage limit.", False),
        ("Recommends aspirin for children.", False),
    ],
)
def test_auto_reads_the_opening_verb(text, avoidance):
    item = {"title": "t", "description": f"Pitfall Criteria: {text}", "weight": -1}
    assert criteria_from_rar([item], "r")[0]["criterion"].startswith("Fails to meet this") is avoidance


def test_forced_convention_overrides_auto():
    forced = criteria_from_rar(MEDICINE, "m", pitfall_convention="avoidance")
    assert forced[3]["criterion"].startswith("Fails to meet this: Does not mention")


@pytest.mark.parametrize(
    "items, message",
    [
        ([], "non-empty list"),
        ([{"title": "t", "weight": 3}], "item 0: needs a string 'description'"),
        (
            [{"title": "t", "description": "Essential Criteria: x", "weight": "5"}],
            "'weight' must be a non-zero integer",
        ),
        ([{"title": "t", "description": "Pitfall Criteria: Does not x", "weight": 2}], "pitfall must have a negative"),
    ],
)
def test_bad_items_are_named(items, message):
    with pytest.raises(RubricError, match=message):
        criteria_from_rar(items, "rar.jsonl:7")


def test_rar_rows_load_as_rubric_rows(tmp_path):
    path = tmp_path / "rar.jsonl"
    path.write_text(
        json.dumps(
            {"id": "q1", "question": "Why is F = ma?", "reference_answer": "Newton's second law.", "rubric": SCIENCE}
        )
        + "\n"
    )
    row = load_rubric_rows(path)["q1"]
    assert load_rubric_rows(path, "mistake")["q1"].rubric.criteria[1].text == "Avoids confusing mass with weight."
    assert row.reference == "Newton's second law." and [c.category for c in row.rubric.criteria] == [
        "Essential",
        "Pitfall",
    ]
    assert row.conversation == [{"role": "user", "content": "Why is F = ma?"}]
