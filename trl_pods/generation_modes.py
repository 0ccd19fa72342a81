"""The registry of generation modes (`pods_generation`): a name, or a dotted import path, to a mode's class.

A mode (`trl_pods.waves.GenerationMode`) is built from the `PODSConfig` once per trainer and decides, wave by wave,
which prompts get how many rollouts. Built in:

* ``"fixed"``: ``pods_n`` rollouts per prompt, one call (`waves.FixedMode`);
* ``"adaptive"``: waves topping up prompts without contrast (`adaptive.AdaptiveMode`);
* ``"budgeted"``: counts allocated from each prompt's history, one call (`budget.BudgetedMode`);
* ``"refill"``: DAPO's dynamic sampling, further prompts drawn for groups without contrast (`refill.RefillMode`);
* ``"screened"``: a pilot of a larger pool, then the rest for the chosen prompts (`screening.ScreenedMode`);
* ``"auto"``: refill at ``pods_n`` rollouts per prompt whose prompts per call and calls per step are chosen from the
  costs measured on the run and the contrast rate it observes (`auto.AutoMode`).

A mode of your own subclasses `GenerationMode` and takes the config in its constructor:

    from trl_pods.generation_modes import register_generation_mode
    register_generation_mode("my_mode", MyMode)        # then PODSConfig(..., pods_generation="my_mode")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._lookup import resolve
from .adaptive import AdaptiveMode
from .auto import AutoMode
from .budget import BudgetedMode
from .refill import RefillMode
from .screening import ScreenedMode
from .waves import FixedMode, GenerationMode

__all__ = ["GENERATION_MODES", "build_generation_mode", "get_generation_mode", "register_generation_mode"]

ModeFactory = Callable[[Any], GenerationMode]

GENERATION_MODES: dict[str, ModeFactory] = {
    "fixed": FixedMode,
    "adaptive": AdaptiveMode,
    "budgeted": BudgetedMode,
    "refill": RefillMode,
    "screened": ScreenedMode,
    "auto": AutoMode,
}


def register_generation_mode(name: str, factory: ModeFactory) -> None:
    """Register ``factory(config) -> GenerationMode`` (e.g. a `GenerationMode` subclass) under ``name``, usable as
    `pods_generation`."""
    GENERATION_MODES[name] = factory


def get_generation_mode(name: str) -> ModeFactory:
    """The factory registered under ``name``, or imported from the dotted path ``name``."""
    return resolve(name, GENERATION_MODES, "generation mode")


def build_generation_mode(config: Any) -> GenerationMode:
    """The mode of ``config.pods_generation``, built from ``config``; refuses a factory that returns no mode."""
    mode = get_generation_mode(config.pods_generation)(config)
    if not isinstance(mode, GenerationMode):
        raise TypeError(
            f"pods_generation={config.pods_generation!r} built a {type(mode).__name__}, not a "
            "trl_pods.waves.GenerationMode: subclass it (first_wave, next_wave, chosen, metrics)."
        )
    return mode
