"""vLLM engine sizing for N rollouts per prompt (pure arithmetic, no vLLM import).

TRL sizes the colocate engine for the rows it *trains* on: ``max_num_seqs = per_device_train_batch_size x
vllm_tensor_parallel_size x steps_per_generation``. PODS generates ``pods_n / pods_m`` times more rows per generation,
so an engine sized that way decodes them in ``pods_n / pods_m`` sequential waves. These functions give the sizes that
let one engine step hold every rollout of a generation batch.
"""

from __future__ import annotations

# TRL 1.16 builds the colocate engine with max_num_batched_tokens=4096, and vLLM refuses max_num_seqs above it.
TRL_COLOCATE_MAX_NUM_BATCHED_TOKENS = 4096


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
