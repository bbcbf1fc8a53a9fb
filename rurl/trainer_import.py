"""RubricGRPOTrainer, imported without vLLM when the run does not generate with it.

TRL 1.16's grpo_trainer.py imports trl/generation/vllm_generation.py, which imports vLLM's engine whenever vLLM is
installed (`if is_vllm_available(): from vllm import LLM, ...`): on this 2-core machine 4 s and 160 MiB of every
`rurl train` process that generates with transformers (`use_vllm: false`, the CPU presets) and never touches it.
vLLM is hidden from that one import the way Python hides a module, a None in sys.modules (`importlib.util.find_spec`
then answers None, so TRL's own check says not installed), and is visible again at once after it. If a later TRL
imported vLLM lazily, nothing would change but the saving.

A process keeps the trainer it imported first: one that trained without vLLM and is then asked for it (two runs in
one notebook kernel) is refused in one line instead of failing inside TRL.
"""

import importlib.util
import sys

from rubricrl.config import ConfigError

GENERATION = "trl.generation.vllm_generation"


def rubric_trainer_class(use_vllm: bool) -> type:
    """rurl.trainer.RubricGRPOTrainer, its TRL imported without vLLM unless `use_vllm`."""
    generation = sys.modules.get(GENERATION)
    installed = "vllm" in sys.modules or importlib.util.find_spec("vllm") is not None
    if use_vllm and installed and generation is not None and not hasattr(generation, "LLM"):
        raise ConfigError(
            "use_vllm: this process imported TRL's trainer without vLLM for an earlier run (use_vllm false); "
            "run this one in a new process"
        )
    hide = not use_vllm and installed and generation is None and "vllm" not in sys.modules
    if hide:
        sys.modules["vllm"] = None  # type: ignore[assignment]
    try:
        from rurl.trainer import RubricGRPOTrainer
    finally:
        if hide and sys.modules.get("vllm", ...) is None:
            del sys.modules["vllm"]
    return RubricGRPOTrainer
