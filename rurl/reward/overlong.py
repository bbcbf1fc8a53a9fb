"""DAPO's soft overlong punishment, applied by the rubric reward (rurl/reward/rubric_reward.py) on a completion's token
count."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Overlong:
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13): 0 up to max_length - buffer tokens, then growing
    linearly to `scale` at max_length (and beyond: a completion cut off there has no end)."""

    max_length: int
    buffer: int
    scale: float = 1.0

    def penalty(self, length: int) -> float:
        start = self.max_length - self.buffer
        if length <= start:
            return 0.0
        return self.scale * min(1.0, (length - start) / self.buffer)
