"""Criteria as rubric writers produce them ({title, description, weight[, category]}): the JSON schema they answer
with, the weight rules they are told, how they are listed in a prompt, and their export to {criterion, points}."""

import re
from typing import Any

from synthesis.config import SynthesisConfig

CATEGORIES = ["Essential", "Important", "Optional", "Pitfall"]
# RaR's category weights: Essential 5, Important 3-4, Optional 1-2, Pitfall -1 or -2.
RAR_WEIGHT_RULES = (
    "Give each criterion a category and a weight: Essential (weight 5), Important (3 or 4), "
    "Optional (1 or 2), Pitfall (-1 or -2). A Pitfall criterion names a mistake a response could "
    'make ("Recommends ...", "Omits ..."), so that it holds when the response makes it.\n'
)


def weight_rules(config: SynthesisConfig) -> str:
    if config.method == "rar":
        return RAR_WEIGHT_RULES
    if config.weights == "0-10":
        return "Weights are integers from 1 (minor) to 10 (critical).\n"
    return (
        "Weights are integers from 1 (minor) to 10 (critical) for desirable behaviour, and from -1 to -10 for "
        "undesirable behaviour a response might show (a criterion with a negative weight names the mistake, "
        "so that it holds when the response makes it). Never use 0.\n"
    )


def criteria_schema(config: SynthesisConfig, max_items: int, min_items: int = 1) -> dict[str, Any]:
    low, high = config.weight_bounds
    properties: dict[str, Any] = {
        "title": {"type": "string", "maxLength": 80},
        "description": {"type": "string", "maxLength": 400},
        "weight": {"type": "integer", "minimum": low, "maximum": high},
    }
    if config.method == "rar":
        properties["category"] = {"type": "string", "enum": CATEGORIES}
    item = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    criteria = {"type": "array", "items": item, "minItems": min_items, "maxItems": max_items}
    return {
        "type": "object",
        "properties": {"criteria": criteria},
        "required": ["criteria"],
        "additionalProperties": False,
    }


# A description that is all one `<words>`: the prompt's answer template copied back (small models do), not a criterion.
TEMPLATE_ECHO = re.compile(r"\s*<[^\W\d_][\w ,'-]*>\s*")


def usable(criteria: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Criteria worth keeping: a non-zero weight and a description with words in it that is not the template.
    Weights become ints: JSON Schema's "integer" also admits 3.0, which the int32 `points` column does not."""
    kept = (c for c in criteria if c["weight"] != 0 and re.search(r"\w", c["description"]))
    return [{**c, "weight": int(c["weight"])} for c in kept if not TEMPLATE_ECHO.fullmatch(c["description"])]


def require_usable(value: dict[str, Any]) -> None:
    """A `check` for the client: a rubric answer without one usable criterion is sampled again, like malformed
    JSON (bounded), instead of failing its query at export with the same cached answer on every rerun."""
    if not usable(value["criteria"]):
        raise ValueError("no usable criterion (every one empty, weighted 0 or the answer template copied back)")


def listing(criteria: list[dict[str, Any]], label: str | None = None) -> str:
    prefix = f"[{label}] " if label else ""
    return "\n".join(f"{prefix}({c['weight']:+d}) {c['title']}: {c['description']}" for c in criteria)


def normalized_text(text: str) -> str:
    """Case, whitespace and punctuation folded: two criteria differing only there are one criterion."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


def export(criteria: list[dict[str, Any]], cap: int | None = None) -> list[dict[str, Any]]:
    """{criterion, points, ...detail} rows, deduplicated by normalized text (the one with the larger |points|
    stays: the more important reading of a penalty is the larger one too), at most `cap`, highest |points| first
    when capped, otherwise in the order written."""
    kept: dict[str, dict[str, Any]] = {}
    for c in criteria:
        key = normalized_text(c["description"])
        if key not in kept or abs(c["weight"]) > abs(kept[key]["points"]):
            kept[key] = {
                "criterion": c["description"].strip(),
                "points": c["weight"],
                "title": c["title"],
                "category": c.get("category"),
                "stage": c["stage"],
                "source": c["source"],
            }
    rows = list(kept.values())
    if cap is not None and len(rows) > cap:
        rows = sorted(rows, key=lambda r: -abs(r["points"]))[:cap]
    return rows
