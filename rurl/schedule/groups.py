"""The groups of a generation batch that dynamic sampling keeps (rurl/schedule/dynamic_sampling.py), as plain data:
which keys of TRL's `_generate_and_score_completions` output are cut by row and how they are padded, a group cut out of
a batch, trimmed of its padding to be sent to another process, and which kept groups each process trains on. No trainer
state: every process computes the same from the same inputs."""

import itertools
from typing import Any

import torch

LEFT_PADDED = {"prompt_ids": "pad", "prompt_mask": 0}
RIGHT_PADDED = {
    "completion_ids": "pad",
    "completion_mask": 0,
    "old_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,
    "importance_sampling_ratio": 1.0,
    "tool_mask": 1,
}
PER_ROW = {"advantages", "generated_at"}
"""The keys of `_generate_and_score_completions`' output that dynamic sampling knows how to cut and join."""


def assign(order: list[tuple], wanted: int, processes: int) -> list[list[tuple]]:
    """Which kept groups each process trains on: its own first (nothing to send), then other processes' surplus in
    `order`, then, when the kept groups are too few, repeats of them in `order`. Pure: every process computes it
    alike from the same `order`."""
    own = [[s for s in order if s[1] == p] for p in range(processes)]
    assignment = [groups[:wanted] for groups in own]
    surplus = [s for groups in own for s in groups[wanted:]]
    for groups in assignment:
        while len(groups) < wanted and surplus:
            groups.append(surplus.pop(0))
    for process, groups in enumerate(assignment):  # repeats: of the process's own kept groups when it has any
        source = itertools.cycle(own[process] or order)
        while len(groups) < wanted:
            groups.append(next(source))
    return assignment


def trimmed(group: dict[str, Any]) -> dict[str, Any]:
    """A group on the CPU without the padding its batch gave it (prompts are padded on the left, completions on the
    right): what is sent to another process. `DynamicSampler._joined` pads it again."""
    prompt = int(group["prompt_mask"].sum(dim=1).max())
    completion = max(1, int(group["completion_mask"].sum(dim=1).max()))
    out = {}
    for key, value in group.items():
        if torch.is_tensor(value) and value.dim() == 2 and key in LEFT_PADDED:
            value = value[:, value.shape[1] - prompt :]
        elif torch.is_tensor(value) and value.dim() == 2 and key in RIGHT_PADDED:
            value = value[:, :completion]
        out[key] = value.cpu() if torch.is_tensor(value) else value
    return out


def by_process(values: list, processes: int) -> list[list]:
    """A list gathered over the processes (equal parts, in process order) cut back into its parts."""
    per = len(values) // processes
    return [values[p * per : (p + 1) * per] for p in range(processes)]


def group_rows(output: dict[str, Any], rows: slice) -> dict[str, Any]:
    return {key: value if key == "num_items_in_batch" else value[rows] for key, value in output.items()}
