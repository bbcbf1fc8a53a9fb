"""Criterion-level advantages (rurl.criterion_advantage): a group's advantages computed from its completions'
verdicts criterion by criterion, instead of from the one weighted rubric score.

- none: TRL's GRPO advantages of the rubric score (the default; nothing here runs).
- decoupled (GDPO's idea, arXiv 2601.05242, for a rubric's variable set of criteria): each criterion's verdicts are
  normalized within the group, (met - group mean) / group std, signed by its points (a penalty met counts against),
  and summed weighted by |points|; a criterion every completion of the group meets, or none does, adds nothing.
  A criterion met by one completion of eight then moves it as much as one met by half of them: no criterion's
  signal is drowned by another's spread.
- discriminating (POW3R's idea, arXiv 2605.20164, as we read it): the rubric score with each criterion's weight
  multiplied by the spread of its verdicts in the group (their standard deviation): the criteria that separate
  the group's completions carry the advantage, those met by all or none carry nothing.

Either reward is then centred on its group and scaled as GRPOConfig's scale_rewards says (group: by the group's std,
batch: by the batch's, none: not scaled), as TRL does for the rubric score; an unscored completion keeps advantage 0.
What the run logs as its reward stays the rubric score. Logged per step, whatever the mode: the share of the
(group, criterion) pairs whose verdicts do not vary within the group (`rubric/flat_criteria`) and the share of
groups whose advantages are all zero (`rubric/zero_advantage_groups`)."""

import statistics
from typing import Literal

Mode = Literal["none", "decoupled", "discriminating"]
MODES = ("none", "decoupled", "discriminating")
Row = list[tuple[int, float | None]] | str | None
"""A completion's (points, credit) per criterion in rubric order (grading/reward.py verdict_rows); "floor" for one
the integrity check vetoed or that holds no answer (it ties with its group's lowest score); None: unscored."""


def criterion_scores(rows: list[Row], group_size: int, mode: Mode) -> tuple[list[float | None], dict[str, float]]:
    """Per completion (None: unscored) the mode's reward, computed group by group (`group_size` consecutive rows,
    every completion of a group graded against the same criteria), and the flat-criteria share (mode none: that
    share alone, every score 0)."""
    scores: list[float | None] = []
    flat = counted = 0
    for start in range(0, len(rows), group_size):
        group = rows[start : start + group_size]
        total = [0.0] * len(group)
        norm = 0.0
        judged = [r if isinstance(r, list) else None for r in group]
        width = max((len(r) for r in judged if r is not None), default=0)
        for c in range(width):
            decided = [(i, r[c]) for i, r in enumerate(judged) if r is not None and c < len(r) and r[c][1] is not None]
            if len(decided) < 2:
                continue
            counted += 1
            points = decided[0][1][0]
            mets = [float(met) for _, (_, met) in decided]
            mean, spread = statistics.fmean(mets), statistics.pstdev(mets)
            sign = 1.0 if points > 0 else -1.0
            if spread == 0:
                flat += 1
            if mode == "none":  # the flat share alone: the advantages are TRL's
                continue
            if mode == "decoupled":
                norm += abs(points)
                if spread > 0:
                    for (i, _), met in zip(decided, mets):
                        total[i] += abs(points) * sign * (met - mean) / spread
            else:  # discriminating
                weight = abs(points) * spread
                norm += weight
                for (i, _), met in zip(decided, mets):
                    total[i] += weight * sign * met
        mine = [None if not isinstance(r, list) else (t / norm if norm else 0.0) for r, t in zip(group, total)]
        floor = min((m for m in mine if m is not None), default=0.0)
        scores += [floor if r == "floor" else m for r, m in zip(group, mine)]
    return scores, {"rubric/flat_criteria": flat / counted if counted else 0.0}


def advantages(scores: list[float | None], group_size: int, scale: str) -> tuple[list[float], float]:
    """Centred on each group's mean (over its scored completions) and scaled as GRPOConfig's scale_rewards; 0 for an
    unscored completion. Returns them and the share of groups whose advantages are all zero."""
    scored_all = [s for s in scores if s is not None]
    batch_std = statistics.stdev(scored_all) if len(scored_all) > 1 else 0.0
    out: list[float] = []
    zero = groups = 0
    for start in range(0, len(scores), group_size):
        group = scores[start : start + group_size]
        scored = [s for s in group if s is not None]
        mean = statistics.fmean(scored) if scored else 0.0
        std = statistics.stdev(scored) if len(scored) > 1 else 0.0  # TRL's nanstd: the sample std
        divisor = {"group": std + 1e-4, "batch": batch_std + 1e-4}.get(scale, 1.0)
        values = [0.0 if s is None else (s - mean) / divisor for s in group]
        groups += 1
        zero += all(abs(v) < 1e-9 for v in values)
        out += values
    return out, zero / groups if groups else 0.0
