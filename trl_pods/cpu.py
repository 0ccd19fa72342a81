"""Training without a GPU: the CPU threads, DeepSpeed told it runs on the CPU (and spared a build it does not use), and
the library warnings nobody can act on. `trl-pods train`, `eval` and `demo` set up a CPU run here, and so does
`PODSGRPOTrainer` itself, so that a run from Python behaves as one from the command line, with one exception: the
threads. They are the choice of whoever owns the process: the commands choose them (`set_cpu_threads`), a program
keeps its own (torch's default, or what it set with `torch.set_num_threads`, before or after importing trl_pods).

Threads matter most: beside a busy process on 2 cores, torch's default of one thread per core made the README's
Python quick start (SmolLM2-135M) take 61 s a step against 8.4 s with one thread, and 694 s against 12.8 s beside two
(README, Quick start; docs/benchmarks/cpu-threads.md, for the demo). A program gets the commands' choice with
``set_cpu_threads()``.

This module imports torch only inside the functions that need it: ``import trl_pods`` reads it for its warnings
filter, and must stay light (`trl_pods.flags`).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import warnings

__all__ = [
    "TRL_DEPRECATIONS",
    "cpu_threads",
    "leave_distributed_run",
    "quiet_trl_deprecations",
    "set_cpu_threads",
    "set_up_cpu",
]

logger = logging.getLogger(__name__)

TRL_DEPRECATIONS = r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated"
"""transformers' FutureWarnings about names that TRL 1.16 uses on every run (`GRPOConfig.gradient_checkpointing`, and
the checkpointing switches around each generation): nothing a user of `trl_pods` can change."""

PIN_MEMORY_WITHOUT_ACCELERATOR = r"'pin_memory' argument is set as true but no accelerator is found"
"""torch's UserWarning for TrainingArguments' default ``dataloader_pin_memory=True`` on a CPU, where pinning does
nothing."""


def quiet_trl_deprecations() -> None:
    """Hide `TRL_DEPRECATIONS` (on every machine: TRL's own use of deprecated names)."""
    warnings.filterwarnings("ignore", TRL_DEPRECATIONS, FutureWarning)


def cpu_threads() -> int:
    """Intra-op CPU threads of this process: ``OMP_NUM_THREADS`` when set, else every core this process may use but
    one (at least 1), shared among the processes of a multi-process launch on this host (``LOCAL_WORLD_SIZE``).

    Leaving a core free keeps another busy process from stalling the OpenMP threads of every matrix product: beside
    one busy process, 2 threads made the demo's step 2.5x slower than 1 thread on 2 cores, while 1 thread on the idle
    machine cost 1.2x (docs/benchmarks/cpu-threads.md).
    """
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, (len(os.sched_getaffinity(0)) - 1) // processes)


def set_cpu_threads() -> int:
    """Without an accelerator, run torch's intra-op work on `cpu_threads` threads; return the count torch uses. For the
    owner of the process: the `trl-pods` commands call it, `PODSGRPOTrainer` never does."""
    import torch

    if not torch.accelerator.is_available():
        torch.set_num_threads(cpu_threads())
    return torch.get_num_threads()


def set_up_cpu() -> None:
    """Without an accelerator: DeepSpeed told that it runs on the CPU (``DS_ACCELERATOR=cpu`` unless set), which it
    would otherwise find out with a warning on every run; under ``accelerate launch`` with a DeepSpeed config,
    `skip_deepspeed_shm_build`; and no warning that pinned memory does nothing here. The threads are left as they are
    (`set_cpu_threads`). With an accelerator: nothing."""
    import torch

    if torch.accelerator.is_available():
        return
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        skip_deepspeed_shm_build()
    warnings.filterwarnings("ignore", PIN_MEMORY_WITHOUT_ACCELERATOR, UserWarning)


def skip_deepspeed_shm_build() -> None:
    """Mark DeepSpeed's shared-memory communication op (``deepspeed_shm_comm``) unavailable in this process.

    On a CPU, DeepSpeed's communication backend compiles that C++ op when it starts (about 80 s on 2 cores, the first
    time on a machine) for one caller, ``inference_all_reduce`` (tensor-parallel inference), which falls back to
    torch.distributed's all-reduce without it; ZeRO training never calls it. DeepSpeed keeps its probe of which ops
    can be built in one dict, ``deepspeed.ops.__compatible_ops__``, and builds nothing it marks unavailable
    (tests/test_cpu.py)."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def leave_distributed_run() -> None:
    """End a finished distributed run (several processes, or one with TRL's colocate vLLM engine): the processes leave
    together, the non-daemon threads finish as at a plain exit (a `ThreadPoolExecutor` job, such as
    huggingface_hub's `run_as_future` uploads and several trackers' writes, was lost and the run exited 0), the exit
    handlers run (trackers, logging, and the colocate engine's shutdown, which destroys vLLM's
    process groups and the default one: run after the default group was gone it printed "Invalid process group
    specified" at the end of every successful colocate run), the process group is destroyed if still there, and
    where there is no accelerator the process then exits without the interpreter's teardown. In that teardown a
    native thread of the CPU backend aborted a rank ("terminate called without an active exception", exit -6) after
    the run had trained and saved everything: 2 of 16 two-process ZeRO-3 LoRA runs beside one or two busy processes
    on 2 cores, after `main` had returned on both ranks (0 of 16 since)."""
    import torch

    if not torch.distributed.is_initialized():
        return
    torch.distributed.barrier()
    threading._shutdown()  # as the interpreter's exit does first: executors' exit hooks, then a join of every thread
    atexit._run_exitfuncs()  # first: a colocate vLLM engine's shutdown destroys its process groups, the default too
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    if torch.accelerator.is_available():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
