import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import gc  # noqa: E402
import shutil  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from tiny_model import build_tiny_model  # noqa: E402


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
    """Each test module starts without another module's colocate vLLM engine or its distributed leftovers. TRL's
    colocate init sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and vLLM creates the default
    process group, which the engine destroys whenever it is garbage-collected: a later module's trainer would build
    DDP on that process group and lose it mid-setup ("Default process group has not been initialized"). At the end
    of a module its engines are collected now and the variables restored."""
    from vllm_standin import DISTRIBUTED_ENV

    saved = {key: os.environ.get(key) for key in DISTRIBUTED_ENV}
    had_process_group = torch.distributed.is_initialized()
    yield
    gc.collect()
    if torch.distributed.is_initialized() and not had_process_group:
        torch.distributed.destroy_process_group()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
