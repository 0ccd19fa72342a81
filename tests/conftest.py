import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import gc  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from tiny_model import build_tiny_model  # noqa: E402

from trl_pods.cpu import set_cpu_threads  # noqa: E402

set_cpu_threads()  # a test process takes the commands' threads (the trainer keeps a process's own): 1 on 2 cores


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A real tiny Qwen2 model + BPE tokenizer saved to disk, built once per test session."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture
def smollm2_cache(tiny_model_path, tmp_path):
    """A SmolLM2 cache (``TRL_PODS_CACHE``) holding the tiny test model, so that `trl_pods.smollm2.fetch_smollm2`
    returns it instead of building the 135M model."""
    from trl_pods import smollm2

    folder = tmp_path / "cache" / smollm2.MODEL_NAME
    shutil.copytree(tiny_model_path, folder)
    (folder / smollm2._MARKER).write_text("the tiny test model, standing in for SmolLM2\n")
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def real_vllm():
    """vLLM itself, for the tests on a real engine (marker `vllm`). They skip where vLLM cannot be imported, and fail
    instead when TRL_PODS_REQUIRE_VLLM=1 (CI's vLLM environment), so a broken engine install cannot pass as skipped."""
    try:
        import vllm
    except Exception as error:  # ImportError, or a CUDA-only build failing at import
        message = f"vLLM cannot be imported ({error!r}): build the test environment with scripts/build_vllm_cpu_env.sh"
        if os.environ.get("TRL_PODS_REQUIRE_VLLM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB per engine; vLLM-CPU's default takes far more
    return vllm


@pytest.fixture(scope="session")
def vllm_model_path(tmp_path_factory, real_vllm):
    """The tiny Qwen2 with head_dim 32, which vLLM's CPU attention needs."""
    from vllm_real import build_vllm_model

    return build_vllm_model(tmp_path_factory.mktemp("tiny-qwen2-vllm"))


@pytest.fixture(scope="session")
def tool_model_path(tmp_path_factory):
    """A tiny Qwen2 fine-tuned to call a calculator tool (`tool_model`), built once per test session (~45 s on one
    thread)."""
    from helpers import one_thread
    from tool_model import build_tool_model

    with one_thread():
        return build_tool_model(tmp_path_factory.mktemp("tiny-qwen2-tools"))


@pytest.fixture(scope="module", autouse=True)
def no_engine_outlives_its_module():
    """Each test module starts without another module's colocate vLLM engine or its distributed leftovers.

    An in-process vLLM engine, once garbage-collected, tears down vLLM's parallel groups and the default process group,
    whoever's they are by then; and vLLM freezes the heap as an engine starts, so an engine left unreachable then is
    collected only after a later unfreeze, at any moment, in the middle of another engine's start too. A module's
    engines are still held by its last test while its fixtures end: they are collected here, as the next module
    starts, before its tests start any engine. At the end of a module a default process group it created is destroyed,
    with vLLM's parallel groups of it, which a later engine would otherwise reuse ("Process group ... is not
    initialized in the world group map"), and the variables TRL's colocate init sets are restored (RANK, LOCAL_RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT: a later trainer would build DDP on them)."""
    from vllm_standin import DISTRIBUTED_ENV

    gc.unfreeze()
    gc.collect()
    saved = {key: os.environ.get(key) for key in DISTRIBUTED_ENV}
    had_process_group = torch.distributed.is_initialized()
    yield
    if torch.distributed.is_initialized() and not had_process_group:
        if "vllm" in sys.modules:  # with vLLM's parallel groups of it
            from trl_pods.vllm_engine import discard_engine

            discard_engine(None, created_process_group=True)
        else:
            torch.distributed.destroy_process_group()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
