"""Asking a judge in HealthBench's layout (`grading.judge_layout: healthbench`), to measure a judge exactly as
HealthBench's grader asks it (simple-evals `healthbench_eval.py`, `GRADER_TEMPLATE`; its meta-evaluation sends the
same).

One user message, no system message: the template with `<<conversation>>` replaced by the conversation and the answer
as its last assistant turn (each turn `role: content`, turns separated by a blank line) and `<<rubric_item>>` by the
criterion's text (the meta-evaluation's rows hold the criterion alone; HealthBench's own eval prefixes its points,
`[5] ...`, which a template may carry itself). The verdict is read from the answer's JSON `criteria_met`, as
HealthBench reads it (the structured-output schema asks for the same keys). The template is a file given by path
(`grading.judge_prompt`): HealthBench's own is the string `GRADER_TEMPLATE` in simple-evals' `healthbench_eval.py`,
which can be saved to a file as it is.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

from rubricrl.config import ConfigError

SLOTS = ("<<conversation>>", "<<rubric_item>>")


@dataclass(frozen=True)
class OneMessagePrompt:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def messages(self, conversation: list[dict[str, str]], response: str, criterion: str) -> list[dict[str, str]]:
        turns = [*conversation, {"role": "assistant", "content": response}]
        convo = "\n\n".join(f"{turn['role']}: {turn['content']}" for turn in turns)
        return [{"role": "user", "content": self.text.replace(SLOTS[0], convo).replace(SLOTS[1], criterion)}]


def load_layout_prompt(path: str | None) -> OneMessagePrompt:
    """The template file, holding both slots; a clear error naming the file otherwise."""
    if path is None:
        raise ConfigError(
            "grading.judge_layout healthbench needs grading.judge_prompt: a template file in HealthBench's layout "
            f"(with {' and '.join(SLOTS)}; HealthBench's own is GRADER_TEMPLATE in simple-evals' healthbench_eval.py)"
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read judge prompt {path}: {getattr(error, 'strerror', None) or error}") from error
    missing = [slot for slot in SLOTS if slot not in text]
    if missing:
        raise ConfigError(f"judge prompt {path}: a healthbench-layout template must hold {' and '.join(missing)}")
    return OneMessagePrompt(str(path), text)
