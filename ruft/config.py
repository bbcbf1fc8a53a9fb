"""What a RuFT build does: which roles answer each query and how often, and which answers are kept. Loaded from the
`ruft:` section of a config (configs/ruft/*.yaml); documented field by field."""

from dataclasses import dataclass, field
from typing import ClassVar, Literal


@dataclass
class RuftConfig:
    config_section: ClassVar[str] = "ruft"

    candidates: dict[str, int] = field(default_factory=lambda: {"policy": 4})
    """Candidate roles (llm.roles) and how many answers each samples per query: K is their sum. Several models,
    as in the RubricHub paper, e.g. {policy: 4, strong: 2}. A count of 0 leaves the role out (--candidates
    policy=0 strong=4 on the command line, over a file's mapping)."""
    threshold: float | None = None
    """tau: a candidate scoring below it is never kept. Required, in [0, 1]: no value hides in code, and each
    preset says where its value comes from."""
    keep: int = 1
    """At most this many candidates >= tau per query, best first (1: the paper's Max/Threshold selection)."""
    keep_truncated: bool = False
    """Keep answers cut off at max_tokens too (an incomplete answer is a poor SFT target, so not by default)."""
    self_judging: bool = False
    """Let the judge grade candidates its own model wrote (refused otherwise: a model rates its own answers higher).
    On a CPU with one embedded model there is no other."""
    sft_completion: Literal["whole", "answer"] = "whole"
    """What a kept candidate's SFT completion holds: whole (its reasoning, between grading.reasoning_delimiters,
    and its answer: the policy keeps reasoning before it answers) or answer (the answer alone, which only the
    judge saw: it teaches answering without reasoning). Selection is on the answer's score either way; each SFT
    row says which in its `sft_completion` column."""

    def __post_init__(self) -> None:
        if self.sft_completion not in ("whole", "answer"):
            raise ValueError(f"sft_completion must be 'whole' or 'answer', got {self.sft_completion!r}")
        if not isinstance(self.candidates, dict) or not self.candidates:
            raise ValueError("candidates must map at least one role to a number of answers, e.g. {policy: 4}")
        for role, count in self.candidates.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"candidates.{role}: K per role must be an integer >= 0 (0: left out), got {count!r}")
        self.candidates = {role: count for role, count in self.candidates.items() if count}
        if not self.candidates:
            raise ValueError("candidates: at least one role must sample answers (K >= 1)")
        if self.threshold is None:
            raise ValueError("threshold (tau) is required: set ruft.threshold in the config or --threshold, in [0, 1]")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be within the score range [0, 1], got {self.threshold}")
        if self.keep < 1:
            raise ValueError(f"keep must be at least 1, got {self.keep}")

    @property
    def k(self) -> int:
        return sum(self.candidates.values())

    def cpu_max_tokens(self) -> dict[str, int]:
        """max_tokens for candidate roles on the embedded model on a CPU that set none."""
        return {role: 256 for role in self.candidates}
