"""What a machine without a GPU gets without asking: `PODSConfig` trains in float32 where TRL's bf16 default cannot
run (and keeps TRL's default where it can), and `trl-pods train`, `eval`, `demo` and `PODSGRPOTrainer` from Python
choose their CPU threads and tell DeepSpeed it runs on the CPU, unless the user chose."""

import os
import re
import subprocess
import sys

import pytest
import torch

from trl_pods import PODSConfig
from trl_pods.cpu import cpu_threads, set_cpu_threads, set_up_cpu


def test_podsconfig_trains_in_float32_where_bf16_cannot_run(tmp_path):
    """The README's Python quick start failed on a laptop: `PODSConfig(...)` raised transformers' "Your setup doesn't
    support bf16/gpu" (TRL defaults bf16 to True). Without a bf16 GPU an unset bf16 is now False; a bf16 the user asked
    for, or bf16 autocast on the CPU with use_cpu, is left to TRL and transformers."""
    from transformers.utils import is_torch_bf16_gpu_available

    if is_torch_bf16_gpu_available():
        pytest.skip("this machine has a GPU with bf16")
    assert PODSConfig(output_dir=str(tmp_path), pods_n=4, pods_m=2, per_device_train_batch_size=2).bf16 is False
    assert PODSConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is True  # TRL's meaning: bf16 autocast on CPU
    with pytest.raises(ValueError, match="doesn't support bf16/gpu"):
        PODSConfig(output_dir=str(tmp_path), bf16=True)


def test_podsconfig_keeps_trls_bf16_default_on_a_bf16_gpu(tmp_path, monkeypatch):
    """Where bf16 runs (simulated: transformers told there is a bf16 GPU), an unset bf16 stays TRL's default, True."""
    monkeypatch.setattr("transformers.utils.is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")  # restored after the test, whatever the config sets
    assert PODSConfig(output_dir=str(tmp_path)).bf16 is True


@pytest.mark.parametrize(
    ("env", "cores", "processes", "expected"),
    [(None, 2, None, 1), (None, 1, None, 1), (None, 16, None, 15), ("3", 2, None, 3), (None, 16, "2", 7)],
)
def test_cpu_threads_leave_a_core_free_unless_the_user_chose(monkeypatch, env, cores, processes, expected):
    """One core is left to other processes (2 cores -> 1 thread) and the rest is shared among the processes of a
    launch on this host; OMP_NUM_THREADS, when set, wins."""
    for name, value in (("OMP_NUM_THREADS", env), ("LOCAL_WORLD_SIZE", processes)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    assert cpu_threads() == expected


def test_set_up_cpu_tells_deepspeed_and_the_commands_choose_the_threads(monkeypatch):
    """`trl-pods train` took torch's default threads: 98.5 s per step of the README's CPU run on the shared 2-core box
    (2 threads) against 4.8 s with one. The commands now set `cpu_threads` (`set_cpu_threads`); `set_up_cpu`, which
    `PODSGRPOTrainer` calls too, sets DS_ACCELERATOR=cpu (unless set) so that DeepSpeed does not warn on every run that
    it found no GPU, and leaves the threads alone."""
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator")
    threads = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("DS_ACCELERATOR", "unset")  # so that the value set_up_cpu sets is undone after the test
    monkeypatch.delenv("DS_ACCELERATOR")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    try:
        torch.set_num_threads(5)
        set_up_cpu()
        assert torch.get_num_threads() == 5 and os.environ["DS_ACCELERATOR"] == "cpu"
        assert set_cpu_threads() == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_set_up_cpu_spares_deepspeed_under_accelerate_the_build_of_an_op_training_never_calls(monkeypatch):
    """On a CPU, DeepSpeed's communication backend compiled its shared-memory op (``deepspeed_shm_comm``, about 80 s
    on 2 cores) at the first ZeRO run on a machine, for tensor-parallel inference only. Under ``accelerate launch``
    with a DeepSpeed config (``ACCELERATE_USE_DEEPSPEED=true``) `set_up_cpu` marks the op unavailable, and DeepSpeed
    then builds nothing: its `build_shm_op` returns None, as where the op cannot be built. Without DeepSpeed in the
    launch nothing is marked (and nothing of DeepSpeed imported for it)."""
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator")
    ops = pytest.importorskip("deepspeed.ops")
    from deepspeed.comm.torch import build_shm_op

    compatible = ops.__compatible_ops__
    assert compatible["deepspeed_shm_comm"], "DeepSpeed would build the op on this Linux CPU"
    monkeypatch.setitem(compatible, "deepspeed_shm_comm", True)  # restored after the test
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))  # threads stay as they are
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    set_up_cpu()
    assert compatible["deepspeed_shm_comm"]
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    set_up_cpu()
    assert not compatible["deepspeed_shm_comm"] and build_shm_op() is None


PROGRAM_THREADS = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))  # the program's first line, before trl_pods is imported
before = torch.get_num_threads()
from peft import LoraConfig
from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.arithmetic import arithmetic_reward
from trl_pods.tasks import load_task

config = PODSConfig(output_dir="run", pods_n=4, pods_m=2, per_device_train_batch_size=2, max_completion_length=4,
                    max_steps=1, report_to=[], disable_tqdm=True, save_strategy="no")
trainer = PODSGRPOTrainer(model=sys.argv[2], reward_funcs=arithmetic_reward, args=config,
                          train_dataset=load_task("arithmetic", n_train=8),
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
trainer.train()
print("threads", before, torch.get_num_threads())
"""


def test_a_program_keeps_its_own_threads_through_the_trainer(tiny_model_path, tmp_path):
    """`PODSGRPOTrainer` set `cpu_threads` (cores - 1) unless the count looked chosen: a script whose first line was
    ``torch.set_num_threads(1)`` (set before importing trl_pods, so taken for torch's default) went to 7 threads on 8
    cores, and so did any count equal to torch's default. The threads are now the process owner's: a program that
    set every core before importing trl_pods (both cases the old rule overrode, to cores - 1) trains on them; only the
    commands set `cpu_threads`. A real process, as a user runs it."""
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator")
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("one core: every rule gives 1 thread")
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    argv = [sys.executable, "-c", PROGRAM_THREADS, str(cores), str(tiny_model_path)]
    result = subprocess.run(argv, cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = result.stdout.split("threads ")[1].split()[:2]
    assert after == before == str(cores), (before, after)


QUICK_START = """
import torch
from peft import LoraConfig
from trl_pods import PODSConfig, PODSGRPOTrainer
from trl_pods.arithmetic import arithmetic_reward
from trl_pods.cpu import cpu_threads, set_cpu_threads
from trl_pods.tasks import load_task

set_cpu_threads()  # as the README's quick start: the program chooses the commands' threads
config = PODSConfig(output_dir="run", pods_n=4, pods_m=2, per_device_train_batch_size=2, max_completion_length=8,
                    max_steps=1, report_to=[], disable_tqdm=True)
trainer = PODSGRPOTrainer(model=MODEL, reward_funcs=arithmetic_reward, args=config,
                          train_dataset=load_task("arithmetic"),
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
trainer.train()
print("threads", torch.get_num_threads(), cpu_threads())
"""


def test_python_api_on_a_cpu_behaves_as_the_command_line(tiny_model_path, tmp_path):
    """The README's Python quick start ran on torch's default threads (61 s a step beside another process, against
    8.4 s on one thread) and printed 7 library warnings; `trl-pods train` chose its threads and printed none of them.
    `PODSGRPOTrainer` now sets up a CPU run as the command does (DeepSpeed told it runs on the CPU, none of TRL's
    deprecation warnings nor torch's pin-memory warning), and the quick start takes the command's threads with
    `set_cpu_threads` (`cpu_threads`, OMP_NUM_THREADS unset here), which the trainer keeps."""
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator")
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "DS_ACCELERATOR")}
    code = QUICK_START.replace("MODEL", repr(str(tiny_model_path)))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1"},
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    threads, expected = result.stdout.split("threads ")[1].split()[:2]
    assert threads == expected
    output = result.stdout + result.stderr
    assert not re.search(r"Warning|\[WARNING\]", output), output[-3000:]


LEAVER = """
import atexit, os, sys, torch
from trl_pods.cpu import leave_distributed_run
torch.distributed.init_process_group("gloo")
rank = torch.distributed.get_rank()
atexit.register(lambda: open(os.path.join(sys.argv[1], f"exit-handler-{rank}"), "w").close())
engine_group = torch.distributed.new_group()


def engine_shutdown():  # as a colocate vLLM engine's shutdown: its own group, then the default one
    torch.distributed.destroy_process_group(engine_group)
    torch.distributed.destroy_process_group()


atexit.register(engine_shutdown)
leave_distributed_run()
print("still running after leave_distributed_run", flush=True)
"""


def test_a_finished_cpu_run_of_two_processes_leaves_after_its_exit_handlers(tmp_path):
    """`trl-pods train` ends a multi-process CPU run with `leave_distributed_run`: both ranks leave with status 0
    without the interpreter's teardown (where a native backend thread aborted finished ZeRO-3 runs), and the exit
    handlers (trackers, logging) still run on each rank first, while the process groups exist: a colocate vLLM
    engine's shutdown destroys its groups and the default one, and printed "Invalid process group specified" when the
    default group had been destroyed before it."""
    from helpers import torchrun, worker_env

    script = tmp_path / "leaver.py"
    script.write_text(LEAVER)
    result = subprocess.run([*torchrun(2), str(script), str(tmp_path)], env=worker_env(), capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "still running" not in result.stdout
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("exit-handler-*")) == ["exit-handler-0", "exit-handler-1"]


PENDING_UPLOAD = """
import concurrent.futures, os, sys, time, torch
from trl_pods.cpu import leave_distributed_run
torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=0, world_size=1)


def upload():  # as huggingface_hub's run_as_future: a job of a ThreadPoolExecutor, still running at the end
    time.sleep(1.0)
    open(os.path.join(sys.argv[1], "uploaded"), "w").close()


concurrent.futures.ThreadPoolExecutor(1).submit(upload)
leave_distributed_run()
"""


def test_leaving_a_distributed_run_waits_for_pending_thread_work(tmp_path):
    """`leave_distributed_run` ran the exit handlers and then `os._exit(0)` without waiting for non-daemon threads:
    a `ThreadPoolExecutor` job (huggingface_hub's `run_as_future` uploads, several trackers) was lost and the run
    said success. A plain exit waits for it; leaving a distributed run now does too."""
    from helpers import free_port

    script = tmp_path / "pending.py"
    script.write_text(PENDING_UPLOAD)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(script), str(tmp_path), str(free_port())], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "uploaded").exists(), "the pending job was lost"
