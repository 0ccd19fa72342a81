"""Exact resume: what a checkpoint needs beyond TRL's to continue a generation cycle with the same rollouts.

Beside its RNG state each process saves ``pods_state_{process_index}.pt``: the position in the generation cycle
(TRL's micro-step counter), the buffered micro-batches of the current generation (still to be trained on when
`steps_per_generation > gradient_accumulation_steps` or `num_iterations > 1`), the count behind
`pods/tokens_generated` and what the generation mode keeps across generations (`GenerationMode.state_dict`: with
budgeted generation the prompts' reward history, so that the resumed run allocates as the uninterrupted one). With HF
generate, a resumed run then generates the same rollouts
as an uninterrupted one; with vLLM the engine's sampling state is not in the checkpoint, so a resumed run continues
correctly but re-samples.

A ``save_only_model`` checkpoint, for which Trainer saves no RNG state, gets the PODS state too
(`save_model_only_state`), so a run resumed from it continues at its position; it has no optimizer, scheduler or RNG
state, and the resume says so in one warning.

A checkpoint is complete only with every process's state: Trainer marks it complete when process 0 writes
``trainer_state.json``, so every process waits for the others after saving its own (`save_state`), and a resume that
finds the state of some processes but not of others refuses the checkpoint rather than letting the processes take
different positions and wait on each other for ever (`state_source`). Only the position in the generation cycle
differs between processes; a run resumed with more processes than saved it gives the new ones process 0's state.

A run that resumes at a later epoch also needs that epoch's prompt order (`prompt_order.EpochReplay`); a refill run
also the prompts its epoch has drawn and where the epoch began, since its epochs end when their prompts run out
(`refill_position`, `prompt_order.DrawingSampler`). A run that resumes with other draw settings than the checkpoint
was saved with (read from its ``training_args.bin`` without running any of its code: `saved_settings`) says so in
one warning (`changed_draws`): refill's default became sized draws in 0.2.0, so the same command resumed an older
refill checkpoint drawing differently.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import zipfile
from typing import Any

import torch
from accelerate.utils import gather_object
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .prompt_order import DrawingSampler

logger = logging.getLogger(__name__)

RESUME_STATE = "pods_state_{}.pt"  # per process index, beside a checkpoint's RNG states


def cycle_layout(trainer: Any) -> list[int]:
    """What the saved position means something for: steps per generation, iterations, accumulation, processes."""
    return [
        trainer.args.steps_per_generation,
        trainer.num_iterations,
        trainer.args.gradient_accumulation_steps,
        trainer.accelerator.num_processes,
    ]


def save_state(trainer: Any, output_dir: str, model_only: bool = False) -> None:
    """Save this process's PODS state into the checkpoint folder ``output_dir`` (whole or not at all), then wait for
    every process to have saved its own, before Trainer completes the checkpoint. ``model_only``: a
    ``save_only_model`` checkpoint, which holds no optimizer, scheduler or RNG state (`load_state` says so)."""
    state = {
        "layout": cycle_layout(trainer),
        "step": trainer._step,
        "buffered_inputs": trainer._buffered_inputs,
        "tokens_generated": trainer._tokens_generated,
        "model_only": model_only,
    }
    if trainer._pods_mode is not None:
        state["mode"] = trainer._pods_mode.state_dict()
    if isinstance(trainer._epoch_replay, DrawingSampler):
        state["draws"] = trainer._epoch_replay.state()
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, RESUME_STATE.format(trainer.accelerator.process_index))
    torch.save(state, f"{path}.partial")
    os.replace(f"{path}.partial", path)
    trainer.accelerator.wait_for_everyone()


def save_model_only_state(trainer: Any, trial: Any) -> None:
    """`save_state` for a ``save_only_model`` checkpoint, where Trainer saves no RNG state (beside which PODS's state
    goes): into the checkpoint's folder, before Trainer saves the model and completes the checkpoint there."""
    folder = os.path.join(trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")
    save_state(trainer, folder, model_only=True)


def state_source(found: list[bool], saved_by: int | None, checkpoint: str) -> list[int | None]:
    """Per process, the process whose saved state it restores (None: nothing to restore, e.g. a GRPOTrainer
    checkpoint).

    Args:
        found: per process of this run, whether the checkpoint holds its state.
        saved_by: the number of processes that saved the checkpoint (read from a state it holds), when only some
            processes found theirs.
        checkpoint: the checkpoint's path, for the error.

    Raises:
        ValueError: the checkpoint was saved by as many processes as this run has and lacks some of their states.
    """
    if all(found) or not any(found):
        return [i if present else None for i, present in enumerate(found)]
    missing = [i for i, present in enumerate(found) if not present]
    if saved_by == len(found):
        files = ", ".join(RESUME_STATE.format(i) for i in missing)
        raise ValueError(
            f"Checkpoint {checkpoint} is incomplete: it was saved by {saved_by} processes but lacks the PODS state of "
            f"process {missing} ({files}), so the processes would resume at different positions. The run was "
            "probably stopped while saving it: resume from an earlier checkpoint (resume_from_checkpoint=<its path>)."
        )
    first = found.index(True)  # a run with more processes: the new ones take a saved state, whose position and
    # buffered rows are discarded with the other layout (`load_state`), so all processes resume alike
    return [i if present else first for i, present in enumerate(found)]


def _read(trainer: Any, checkpoint: str) -> dict[str, Any] | None:
    """The `save_state` this process restores from ``checkpoint`` (`state_source`), or None. Every process calls it."""
    index = trainer.accelerator.process_index
    found = gather_object([os.path.isfile(os.path.join(checkpoint, RESUME_STATE.format(index)))])
    saved_by = None
    if any(found) and not all(found):
        saved_by = _load(trainer, checkpoint, found.index(True))["layout"][3]
    source = state_source(found, saved_by, checkpoint)[index]
    return None if source is None else _load(trainer, checkpoint, source)


def _load(trainer: Any, checkpoint: str, process: int) -> dict[str, Any]:
    path = os.path.join(checkpoint, RESUME_STATE.format(process))
    device = trainer.accelerator.device  # "cpu:0" under torchrun with gloo, which torch.load cannot map to
    return torch.load(path, map_location="cpu" if device.type == "cpu" else device, weights_only=True)


DRAW_SETTINGS = ("pods_generation", "pods_draw_coverage", "pods_max_prompt_ratio", "pods_max_draws")
"""The settings that decide which prompts a generation mode draws."""


class _Record:
    """Any object of a pickle `saved_settings` reads: its constructor's arguments and its state, nothing run."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)


class _Records(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        return _Record  # never the class named: nothing of the file runs

    def persistent_load(self, pid: Any) -> None:
        return None  # tensors: none wanted


def saved_settings(checkpoint: str) -> dict[str, Any]:
    """The fields of the training config that ``checkpoint``'s ``training_args.bin`` holds (a `torch.save` of it),
    read as plain records so that none of the file's code runs; {} where there is none or it cannot be read."""
    try:
        with zipfile.ZipFile(os.path.join(checkpoint, TRAINING_ARGS_NAME)) as archive:
            data = next(name for name in archive.namelist() if name.endswith("/data.pkl"))
            record = _Records(io.BytesIO(archive.read(data))).load()
    except (OSError, StopIteration, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError):
        return {}
    return {key: value for key, value in vars(record).items() if key != "args"} if isinstance(record, _Record) else {}


def _draws(settings: dict[str, Any]) -> dict[str, Any]:
    """`DRAW_SETTINGS` as a config holds them; a refill config with ``pods_draw_coverage`` unset was saved before
    0.2.0, when unset meant exactly the missing groups (0 now)."""
    draws = {name: settings.get(name) for name in DRAW_SETTINGS}
    if draws["pods_generation"] == "refill" and draws["pods_draw_coverage"] is None:
        draws["pods_draw_coverage"] = 0.0
    return draws


def changed_draws(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """The warning for a run of a drawing mode (refill, auto, screened) resumed with other draw settings than the
    checkpoint's (``saved``, as `saved_settings` reads them; ``now``: the run's), or None."""
    before, after = _draws(saved), _draws(now)
    drawing = {"refill", "auto", "screened"} & {before["pods_generation"], after["pods_generation"]}
    changed = [f"{name} {before[name]!r} -> {after[name]!r}" for name in DRAW_SETTINGS if before[name] != after[name]]
    if not saved or not drawing or not changed:
        return None
    return (
        f"Resuming with other draw settings than the checkpoint was saved with ({', '.join(changed)}; refill drew "
        "exactly the missing groups by default before trl_pods 0.2.0): this run draws its prompts differently from "
        "the run it continues; give the saved settings to draw as it did."
    )


def load_state(trainer: Any, checkpoint: str) -> None:
    """Restore what `save_state` saved in ``checkpoint``, after a warning where the draw settings changed
    (`changed_draws`). A checkpoint without it (e.g. GRPOTrainer's) or saved with another cycle layout starts a new
    generation, as TRL does; the token count and the mode's state are restored in the latter."""
    if trainer.accelerator.is_main_process:
        warning = changed_draws(saved_settings(checkpoint), vars(trainer.args))
        if warning is not None:
            logger.warning(warning)
    state = _read(trainer, checkpoint)
    if state is None:
        return
    if state.get("model_only") and trainer.accelerator.is_main_process:
        logger.warning(
            "Resuming from %s, a save_only_model checkpoint: the run continues at its step and prompts, but with a "
            "new optimizer, learning-rate schedule and random state (none is in it), so it trains differently from "
            "the uninterrupted run.",
            checkpoint,
        )
    trainer._tokens_generated = state["tokens_generated"]
    if trainer._pods_mode is not None and state.get("mode"):
        trainer._pods_mode.load_state_dict(state["mode"])
    if state["layout"] != cycle_layout(trainer):
        logger.warning(
            "Resuming with steps_per_generation, num_iterations, gradient_accumulation_steps or the number of "
            "processes changed (%s, was %s): the saved generation is discarded and a new one starts, as in TRL.",
            cycle_layout(trainer),
            state["layout"],
        )
        return
    trainer._step, trainer._buffered_inputs = state["step"], state["buffered_inputs"]


def refill_position(trainer: Any, checkpoint: str | None, position: tuple[int, int]) -> tuple[int, int]:
    """Where a refill run resumes (`prompt_order.DrawingSampler`): the epoch and the micro-steps into it at which the
    checkpoint's run stood, in place of the Trainer's ``position``, which assumes TRL's ``len(dataloader)`` steps per
    epoch (a refill epoch ends sooner); the epoch's draws are restored. A checkpoint without them keeps ``position``;
    one saved with another cycle layout keeps its epoch but not its draws (its batches differ)."""
    state = None if checkpoint is None else _read(trainer, checkpoint)
    if state is None or "draws" not in state:
        return position
    draws = state["draws"]
    trainer._epoch_replay.resume(draws if state["layout"] == cycle_layout(trainer) else {**draws, "drawn": 0})
    args = trainer.args
    steps = 0 if args.ignore_data_skip else (trainer.state.global_step - draws["first_step"])
    return draws["epoch"], steps * args.gradient_accumulation_steps
