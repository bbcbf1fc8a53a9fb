"""Prompt files, rendered one way, strictly: text files beside their stage (`synthesis/prompts/`, `grading/prompts/`)
with `{{name}}` placeholders, so JSON examples keep their single braces. A placeholder without a value, or a value
without a placeholder, fails rendering, so a typo never ships a half-filled prompt. The hash of each prompt's text is
recorded with every output it produces.
"""

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class PromptError(KeyError):
    pass


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str

    @property
    def placeholders(self) -> set[str]:
        return set(PLACEHOLDER.findall(self.text))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def render(self, **values: str) -> str:
        missing = self.placeholders - set(values)
        unused = set(values) - self.placeholders
        if missing or unused:
            raise PromptError(f"prompt {self.name}: missing values for {sorted(missing)}, unused {sorted(unused)}")
        # One pass with a function: a value that itself contains {{x}} is inserted verbatim, never re-rendered.
        return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), self.text)


@cache
def load_prompt(path: Path) -> Prompt:
    return Prompt(name=f"{path.parent.parent.name}/{path.name}", text=path.read_text(encoding="utf-8").strip() + "\n")


def format_conversation(messages: list[dict[str, str]]) -> str:
    """Chat messages as prompt text, one "role: content" block each."""
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)
