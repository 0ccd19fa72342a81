"""trl_pods: PODS (Policy Optimization with Down-Sampling) for Hugging Face TRL."""

from .cpu import quiet_trl_deprecations
from .down_sampling import get_down_sampler, list_down_samplers, register_down_sampler

quiet_trl_deprecations()  # TRL 1.16 uses names transformers deprecates: a warning on every run, nobody can act on it

__version__ = "0.1.0"

__all__ = [
    "PODSAsyncGRPOConfig",
    "PODSAsyncGRPOTrainer",
    "PODSConfig",
    "PODSGRPOTrainer",
    "get_down_sampler",
    "list_down_samplers",
    "register_down_sampler",
]


def __getattr__(name: str):
    # The config and trainer import TRL; keep `import trl_pods.down_sampling` free of it.
    if name == "PODSConfig":
        from .config import PODSConfig

        return PODSConfig
    if name == "PODSGRPOTrainer":
        from .trainer import PODSGRPOTrainer

        return PODSGRPOTrainer
    if name in ("PODSAsyncGRPOConfig", "PODSAsyncGRPOTrainer"):  # TRL's experimental asynchronous trainer
        from . import async_grpo

        return getattr(async_grpo, name)
    raise AttributeError(f"module 'trl_pods' has no attribute {name!r}")
