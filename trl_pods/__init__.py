"""trl_pods: PODS (Policy Optimization with Down-Sampling) for Hugging Face TRL.

Importing the package imports neither torch nor TRL (the names below load on first use), so that the `trl-pods`
command answers a mistyped command line at once (`trl_pods.flags`).
"""

import importlib

from .cpu import quiet_trl_deprecations

quiet_trl_deprecations()  # TRL 1.16 uses names transformers deprecates: a warning on every run, nobody can act on it

__version__ = "0.2.0"

_MODULES = {
    "PODSAsyncGRPOConfig": ".async_grpo",  # TRL's experimental asynchronous trainer
    "PODSAsyncGRPOTrainer": ".async_grpo",
    "PODSConfig": ".config",
    "PODSGRPOTrainer": ".trainer",
    "get_down_sampler": ".down_sampling",
    "list_down_samplers": ".down_sampling",
    "register_down_sampler": ".down_sampling",
    "set_cpu_threads": ".cpu",  # without a GPU, the threads the commands take (a program's own choice otherwise)
}
"""The module of each public name, imported when the name is first used."""

__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name], __name__), name)
    raise AttributeError(f"module 'trl_pods' has no attribute {name!r}")
