"""What a synthesis run does: the method, its roles, its stages and their bounds. Loaded from the `synthesis:`
section of a config (configs/synthesis/*.yaml); documented field by field."""

from dataclasses import dataclass, field
from typing import ClassVar, Literal


@dataclass
class SynthesisConfig:
    config_section: ClassVar[str] = "synthesis"

    method: Literal["coarse_to_fine", "rar"] = "coarse_to_fine"
    """coarse_to_fine: reference -> responses A, B -> N candidate rubrics -> merge -> difficulty evolution.
    rar (Rubrics as Rewards): reference -> one rubric with categories (Essential / Important / Optional /
    Pitfall), pitfalls as negative points; the same pipeline with the other stages off."""
    rubric_roles: list[str] = field(default_factory=lambda: ["rubric_writer"])
    """One role per candidate rubric (N >= 1; the paper uses two different models)."""
    contrast: bool = True
    """Write responses A and B (roles response_a, response_b) for difficulty evolution."""
    contrast_pool: int = 0
    """0: A and B are two responses. N >= 2: the paper's pick by consensus: N responses from response_a, graded
    against the merged rubric (role judge, per criterion), and the two best are A and B."""
    aggregate: bool = True
    """Merge the N candidates (role aggregator); with one candidate it is passed through without a call."""
    evolve: bool = True
    """Add stricter criteria that separate excellent answers from A and B (role evolver)."""
    weights: Literal["0-10", "signed"] = "signed"
    """0-10: RubricHub's weights (1..10; a weight of 0 would count nothing), no penalties.
    signed: -10..10 without 0, penalties kept negative."""
    min_criteria: int = 7
    """At least this many criteria asked of each candidate rubric."""
    max_criteria: int = 20
    """At most this many criteria asked of each candidate rubric (the schema bounds the list)."""
    max_new_criteria: int = 5
    """Difficulty evolution adds at most this many."""
    cap: int | None = None
    """Export at most this many criteria per query (highest |points| first); None: all."""
    attempts: int = 3
    """Tries per stage when a model's output is malformed; then the query fails (and is retried next run)."""

    def __post_init__(self) -> None:
        if not self.rubric_roles:
            raise ValueError("rubric_roles needs at least one role")
        if not 1 <= self.min_criteria <= self.max_criteria <= 50:
            raise ValueError("need 1 <= min_criteria <= max_criteria <= 50")
        if self.attempts < 1 or self.max_new_criteria < 0 or (self.cap is not None and self.cap < 1):
            raise ValueError("need attempts >= 1, max_new_criteria >= 0, and cap >= 1 (or no cap)")
        if self.contrast_pool == 1 or self.contrast_pool < 0 or (self.contrast_pool and not self.contrast):
            raise ValueError("contrast_pool is 0 (off) or a pool of N >= 2 responses, with contrast: true")
        if self.evolve and not self.contrast:
            raise ValueError("evolve needs the contrast responses: set contrast: true or evolve: false")
        if self.method == "rar" and (self.contrast or self.evolve or len(self.rubric_roles) > 1):
            raise ValueError("method 'rar' is a single pass: set contrast: false, evolve: false and one rubric role")

    @property
    def roles(self) -> list[str]:
        """Every role this configuration calls."""
        names = ["reference", *self.rubric_roles]
        if self.contrast:
            names += ["response_a", "judge"] if self.contrast_pool else ["response_a", "response_b"]
        if self.aggregate and len(self.rubric_roles) > 1:
            names.append("aggregator")
        if self.evolve:
            names.append("evolver")
        return names

    def cpu_max_tokens(self) -> dict[str, int]:
        """max_tokens for roles on the embedded model on a CPU that set none: free text short (the model rambles
        otherwise), rubric answers long enough to close their JSON at the criteria asked for."""
        rubric = min(1200, 150 + 90 * self.max_criteria)
        budgets = {
            "reference": 192,
            "response_a": 160,
            "response_b": 160,
            "judge": 400,
            "aggregator": rubric,
            "evolver": min(600, 150 + 90 * self.max_new_criteria),
        }
        return {**budgets, **{role: rubric for role in self.rubric_roles}}

    @property
    def weight_bounds(self) -> tuple[int, int]:
        return (1, 10) if self.weights == "0-10" else (-10, 10)
