"""Rubrics as Rewards (RaR) rubrics: `rubric: [{title, description, weight}]`, the category leading the description
("Essential Criteria: ...", likewise Important, Optional, Pitfall), pitfalls with negative weights (-1, -2).

A criterion's points apply when its text holds, so the two conventions of pitfall texts score opposite ways. Naming
the mistake (RaR-Medicine: "Pitfall Criteria: Does not mention that symptoms need urgent care") holds when the
response errs, and the negative points apply as they stand. Naming what to avoid (RaR-Science: "Pitfall Criteria:
Avoids confusing mass with weight") holds for a good response, which the penalty would then hit, so such texts are
rewritten as "Fails to meet this: <text>", keeping their negative points. `pitfall_convention="auto"` decides per
item by the opening verb (Avoid/Avoids/Refrains/Never ...); "mistake" or "avoidance" forces one reading for a whole
dataset (`--rar-pitfalls`).
"""

import re
from typing import Any, Literal

from grading.rubric import RubricError

CATEGORY_PREFIX = re.compile(r"^\s*(Essential|Important|Optional|Pitfall)\s+Criteri(?:a|on)\s*:\s*", re.I)
# Avoidance phrasings: "Avoids ...", "Refrains from ...", "Never ...", and "Does not" + a verb of error ("Does not
# confuse mass with weight"). "Does not" + a verb of omission ("Does not mention ...") names the mistake itself.
AVOIDANCE = re.compile(
    r"^(?:avoids?|refrains?|steers? clear|never|(?:does not|doesn't|do not)\s+(?:make|commit|fall|confuse|conflate|"
    r"mix|misstate|misinterpret|misidentify|misapply|misuse|overstate|exaggerate|contradict|introduce))\b",
    re.I,
)
PitfallConvention = Literal["auto", "mistake", "avoidance"]


def criteria_from_rar(items: Any, where: str, pitfall_convention: PitfallConvention = "auto") -> list[dict[str, Any]]:
    """RaR items as `{criterion, points, category}` mappings in this harness's convention."""
    if not isinstance(items, list) or not items:
        raise RubricError(f"{where}: 'rubric' must be a non-empty list of {{title, description, weight}} items")
    criteria = []
    for i, item in enumerate(items):
        at = f"{where}: rubric item {i}"
        if not isinstance(item, dict) or not isinstance(item.get("description"), str):
            raise RubricError(f"{at}: needs a string 'description'")
        weight = item.get("weight")
        if isinstance(weight, float) and weight.is_integer():
            weight = int(weight)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight == 0:
            raise RubricError(f"{at}: 'weight' must be a non-zero integer, got {weight!r}")
        match = CATEGORY_PREFIX.match(item["description"])
        category = match.group(1).capitalize() if match else None
        text = item["description"][match.end() if match else 0 :].strip()
        if category == "Pitfall" and weight > 0:
            raise RubricError(f"{at}: a pitfall must have a negative weight, got {weight}")
        if weight < 0 and _names_avoidance(text, pitfall_convention):
            text = f"Fails to meet this: {text}"
        criteria.append({"criterion": text, "points": weight, "category": category})
    return criteria


def _names_avoidance(text: str, convention: PitfallConvention) -> bool:
    if convention == "auto":
        return bool(AVOIDANCE.match(text))
    return convention == "avoidance"
