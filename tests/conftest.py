import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest  # noqa: E402
from tiny_model import build_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A real tiny Qwen2 model + BPE tokenizer saved to disk, built once per test session."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))
