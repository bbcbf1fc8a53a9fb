"""The reward table of `rurl train`: the rubric reward first, then the functions `reward_funcs` names, resolved as
`trl grpo --reward_funcs` resolves them (trl/scripts/grpo.py in TRL 1.16: its registry of `trl.rewards`, with
get_soft_overlong_punishment at the script's values, or a dotted import path looked up from the working directory).

TRL sums the weighted rewards with nansum and leaves a completion out of the advantage only when every function
returned None (grpo_trainer.py, `unscorable_mask`): a None from the rubric reward beside a number from another
function would become a scored completion, paid for a format alone. RubricGRPOTrainer therefore marks the whole row
None when the rubric reward is None (`unscored_rows`), so the judge's failures never turn into rewards.
"""

import importlib
import os
import sys
from collections.abc import Callable

from rubricrl.config import ConfigError


def trl_registry() -> dict[str, Callable]:
    """`trl grpo`'s reward names, with the values its script uses."""
    from trl.rewards import (
        accuracy_reward,
        get_soft_overlong_punishment,
        reasoning_accuracy_reward,
        think_format_reward,
    )

    return {
        "accuracy_reward": accuracy_reward,
        "reasoning_accuracy_reward": reasoning_accuracy_reward,
        "think_format_reward": think_format_reward,
        "get_soft_overlong_punishment": get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256),
    }


def extra_reward_funcs(names: list[str]) -> list[Callable]:
    """The functions `names` name, in order; a name that is neither TRL's nor importable is one line."""
    registry = trl_registry() if names else {}
    functions = []
    for name in names:
        if name in registry:
            functions.append(registry[name])
            continue
        if "." not in name:
            raise ConfigError(
                f"reward_funcs: unknown reward function {name!r}: one of {sorted(registry)} or a dotted "
                "import path (my_lib.rewards.my_reward)"
            )
        module_path, attribute = name.rsplit(".", 1)
        sys.path.insert(0, os.getcwd())  # as trl grpo does: a module beside the run
        try:
            function = getattr(importlib.import_module(module_path), attribute)
        except (ImportError, AttributeError) as error:
            raise ConfigError(f"reward_funcs: cannot import {name!r}: {error}") from None
        finally:
            sys.path.remove(os.getcwd())
        if not callable(function):
            raise ConfigError(f"reward_funcs: {name!r} is not a function")
        functions.append(function)
    return functions


def unscored_rows(rewards_per_func):
    """Rows (completions) whose rubric reward (column 0) is NaN, made NaN in every column: TRL then leaves them out
    of the baseline and gives them no advantage, as it does when every function returned None."""
    import torch

    rewards_per_func[torch.isnan(rewards_per_func[:, 0])] = torch.nan
    return rewards_per_func
