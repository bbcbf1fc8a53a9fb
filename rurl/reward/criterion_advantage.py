"""Criterion-level advantages (rurl.criterion_advantage): a group's advantages computed from its completions'
verdicts criterion by criterion, instead of from the one weighted rubric score.

The rubric score is a weighted sum of verdicts, s_i = sum_c w_c m_ic with w_c = p_c / P+ (a criterion's points over
the rubric's positive points; a penalty's weight is negative), and each mode is one way to turn it into advantages:

- none: TRL's GRPO advantages of the rubric score (the default; nothing here changes them):
  A_i = (s_i - mean_g s) / std_g s, scaled as GRPOConfig's scale_rewards says.
- decoupled, GDPO (arXiv 2601.05242; TRL's multi_objective_aggregation "normalize_then_sum" with one reward per
  criterion): each criterion is normalized within its group before the weighted sum, which is then normalized over the
  batch: d_i = sum_c w_c (m_ic - mean_g m_c) / (std_g m_c + 1e-4), A_i = d_i / (std_batch d + 1e-4). A criterion met
  by one completion of eight moves it as much as one met by half of them, and a group that differs on a 10-point
  criterion moves ten times as far as one that differs on a 1-point criterion. scale_rewards does not apply (as in
  TRL's normalize_then_sum); `none` is refused.
- discriminating (POW3R's idea, arXiv 2605.20164, as we read it): the rubric score with each criterion's weight
  multiplied by the spread of its verdicts in the group, q_i = sum_c |p_c| sd_g(m_c) sign_c m_ic / sum_c |p_c|
  sd_g(m_c), then centred and scaled as TRL does the rubric score (scale_rewards).

A completion the integrity check vetoed, or that holds no answer (its reasoning never closed), has no verdicts: in
both criterion-level modes its score is set below its group's lowest judged completion by the judged ones' range (by
1 when they tie), so it trains strictly below every judged completion of its group, whatever their verdicts (one
judged and three vetoed: the judged one's advantage is positive, the others' equal and negative, as TRL's scalar
gives them). A group of vetoed completions alone has nothing to compare: advantages 0. (Under `none` such a
completion gets the rubric's lowest score, 0 with clipped rewards, and ties with a judged one that scored as low.)
A verdict left undecided is left out of its criterion's statistics (TRL's NaN) and moves its completion neither way;
an unscored completion (None) keeps advantage 0 and stays out of its group's.

What the run logs as its reward stays the rubric score. Logged per step, whatever the mode: the share of the
(group, criterion) pairs whose verdicts do not vary within the group (`rubric/flat_criteria`) and the share of
groups whose advantages are all zero (`rubric/zero_advantage_groups`): the groups dynamic sampling leaves out."""

import statistics
from typing import Literal

Mode = Literal["none", "decoupled", "discriminating"]
MODES = ("none", "decoupled", "discriminating")
Row = list[tuple[int, float | None]] | str | None
"""A completion's (points, credit) per criterion in rubric order (grading/batch.py verdict_rows); "floor" for one
the integrity check vetoed or that holds no answer; None: unscored."""
EPSILON = 1e-4
"""TRL's guard against a zero std, in each criterion's normalization and the advantages' scaling."""


def criterion_scores(rows: list[Row], group_size: int, mode: Mode) -> tuple[list[float | None], dict[str, float]]:
    """Per completion (None: unscored) the mode's score, computed group by group (`group_size` consecutive rows,
    every completion of a group graded against the same criteria), and the flat-criteria share (mode none: that
    share alone, every score 0). Decoupled scores are centred on their group."""
    scores: list[float | None] = []
    flat = counted = 0
    for start in range(0, len(rows), group_size):
        group = rows[start : start + group_size]
        judged = [r if isinstance(r, list) else None for r in group]
        points = next((r for r in judged if r is not None), [])
        positive = sum(p for p, _ in points if p > 0)
        total = [0.0] * len(group)
        norm = 0.0
        for c, (p, _) in enumerate(points):
            decided = [
                (i, r[c][1]) for i, r in enumerate(judged) if r is not None and c < len(r) and r[c][1] is not None
            ]
            if len(decided) < 2:
                continue
            counted += 1
            mets = [float(met) for _, met in decided]
            mean, spread = statistics.fmean(mets), statistics.pstdev(mets)
            flat += spread == 0
            if mode == "decoupled" and positive:
                std = statistics.stdev(mets)  # TRL's nanstd: the sample std
                for (i, _), met in zip(decided, mets):
                    total[i] += p / positive * (met - mean) / (std + EPSILON)
            elif mode == "discriminating":
                weight = abs(p) * spread
                norm += weight
                sign = 1.0 if p > 0 else -1.0
                verdicts = dict(zip((i for i, _ in decided), mets))
                for i, row in enumerate(judged):  # an undecided verdict counts as the group's mean: neither way
                    if row is not None:
                        total[i] += weight * sign * verdicts.get(i, mean)
        if mode == "discriminating":
            total = [t / norm if norm else 0.0 for t in total]
        scores += _with_floor(group, total, centred=mode == "decoupled")
    return scores, {"rubric/flat_criteria": flat / counted if counted else 0.0}


def _with_floor(group: list[Row], total: list[float], centred: bool) -> list[float | None]:
    """The group's scores: the judged completions' own, each floor completion below the lowest of them by their range
    (1 when they tie); None for the unscored. `centred`: less the mean of the scored ones."""
    judged = [t for r, t in zip(group, total) if isinstance(r, list)]
    if judged:
        low, high = min(judged), max(judged)
        floor = low - (high - low or 1.0)
    else:  # vetoed completions alone: all alike
        floor = 0.0
    scores = [t if isinstance(r, list) else floor if r == "floor" else None for r, t in zip(group, total)]
    scored = [s for s in scores if s is not None]
    if centred and scored:
        mean = statistics.fmean(scored)
        scores = [None if s is None else s - mean for s in scores]
    return scores


def scaling(mode: Mode, scale_rewards: str) -> str:
    """How a mode's scores are scaled into advantages: decoupled over the batch (GDPO), the others as scale_rewards."""
    return "batch" if mode == "decoupled" else scale_rewards


def advantages(scores: list[float | None], group_size: int, scale: str) -> tuple[list[float], float]:
    """Centred on each group's mean (over its scored completions) and scaled as GRPOConfig's scale_rewards (group,
    batch or none: TRL's sample std, plus 1e-4); 0 for an unscored completion. Returns them and the share of groups
    whose advantages are all zero."""
    scored_all = [s for s in scores if s is not None]
    batch_std = statistics.stdev(scored_all) if len(scored_all) > 1 else 0.0
    out: list[float] = []
    for start in range(0, len(scores), group_size):
        group = scores[start : start + group_size]
        scored = [s for s in group if s is not None]
        mean = statistics.fmean(scored) if scored else 0.0
        std = statistics.stdev(scored) if len(scored) > 1 else 0.0
        divisor = {"group": std + EPSILON, "batch": batch_std + EPSILON}.get(scale, 1.0)
        out += [0.0 if s is None else (s - mean) / divisor for s in group]
    flat = flat_groups(out, group_size)
    return out, sum(flat) / len(flat) if flat else 0.0


def flat_groups(values: list[float], group_size: int) -> list[bool]:
    """Per group: whether its advantages are all zero (it teaches nothing: dynamic sampling leaves it out)."""
    return [all(abs(v) < 1e-9 for v in values[i : i + group_size]) for i in range(0, len(values), group_size)]
