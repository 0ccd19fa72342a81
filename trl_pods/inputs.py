"""What a `trl-pods` command's user gave it that can be checked without a model or the data: the names of tasks,
rewards, rules and loggers, the folders and files it reads, where it writes, LoRA settings, and the checkpoint a run
resumes from. Each mistake is a ValueError naming what was typed and what to give instead.

`check_inputs` runs these checks on a command line (`trl_pods.flags.check`) before anything heavy is imported; the
Python entry points (`trl_pods.train.train`, `trl_pods.evaluate`) call the folder and file checks themselves. This
module imports nothing heavy: names that live in heavy modules come in ``names`` (`trl_pods.flags.manifest_of`).

A checkpoint is complete once Trainer has written its ``trainer_state.json``, the last file it saves (after the
weights, the optimizer, and every process's RNG and PODS state: `trl_pods.resume.save_state` waits for all of them);
a run killed while saving leaves a ``checkpoint-N`` folder without it. ``--resume_from_checkpoint last`` takes the
newest complete checkpoint and says which it skipped (`last_checkpoint`).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "LAST",
    "check_data_file",
    "check_inputs",
    "check_loggers",
    "check_model",
    "check_output_dir",
    "check_run_folder",
    "checkpoint_step",
    "checkpoints",
    "closest",
    "fresh_folder",
    "is_complete",
    "last_checkpoint",
    "resume_checkpoint",
    "unknown_value",
]

LAST = ("last", "latest", "true", "True")
"""``--resume_from_checkpoint`` values that mean the newest complete checkpoint in ``--output_dir``."""

_CHECKPOINT = re.compile(r"checkpoint-(\d+)")

LOGGERS = {
    "tensorboard": ("tensorboard", ("tensorboard", "tensorboardX")),
    "wandb": ("wandb", ("wandb",)),
    "trackio": ("trackio", ("trackio",)),
    "mlflow": ("mlflow", ("mlflow",)),
    "comet_ml": ("comet-ml", ("comet_ml",)),
    "clearml": ("clearml", ("clearml",)),
    "swanlab": ("swanlab", ("swanlab",)),
    "dvclive": ("dvclive", ("dvclive",)),
    "codecarbon": ("codecarbon", ("codecarbon",)),
}
"""``--report_to`` loggers: ``{name: (the package to install, the modules transformers imports, any of them)}``."""

DOTTED = " or a dotted import path 'my_package.module.fn'"


# ----------------------------------------------------------------------------------------------------------------
# Names
# ----------------------------------------------------------------------------------------------------------------


def closest(value: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The name of ``known`` closest to ``value`` (difflib's ratio of at least ``cutoff``), or None."""
    matches = difflib.get_close_matches(value, list(known), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def unknown_value(what: str, value: str, known: Sequence[str], listed: int = 12) -> str:
    """The message for a ``value`` that is none of the ``known`` names of ``what`` (e.g. "down-sampler"): the closest
    name, and the names themselves when there are at most ``listed`` of them (else how many there are)."""
    guess = closest(value, known)
    hint = f" (did you mean {guess!r}?)" if guess else ""
    names = f"known: {', '.join(known)}" if len(known) <= listed else f"{len(known)} known"
    return f"Unknown {what} {value!r}{hint}; {names}."


def _is_known(value: str, known: Sequence[str]) -> bool:
    """Whether ``value`` is one of ``known``, where ``prefix:<name>`` stands for any ``prefix:`` + a name."""
    patterns = [name.removesuffix("<name>") for name in known if name.endswith("<name>")]
    return (value in known and not value.endswith("<name>")) or any(
        value.startswith(prefix) and len(value) > len(prefix) for prefix in patterns
    )


def check_name(flag: str, what: str, value: Any, known: Sequence[str] | None, dotted: bool = False) -> None:
    """Raise ValueError for a ``value`` (or values) of ``--flag`` that is none of the ``known`` names of ``what``
    (None: not checked here); with ``dotted``, a dotted import path is left to the importer."""
    if known is None or value is None:
        return
    for name in value if isinstance(value, list) else [value]:
        if not (_is_known(name, known) or (dotted and "." in name)):
            message = unknown_value(what, name, known)
            raise ValueError(f"{message[:-1]};{DOTTED}." if dotted else message)


def check_loggers(report_to: str | list[str] | None, known: Sequence[str] | None) -> None:
    """Raise ValueError for a ``--report_to`` logger transformers does not know (``known``), or one whose package is
    not installed (a 34-line traceback once the model had loaded)."""
    loggers = [report_to] if isinstance(report_to, str) else list(report_to or [])
    check_name("report_to", "logger", loggers, known)
    for name in loggers:
        package, modules = LOGGERS.get(name, (None, ()))
        if package is not None and not any(importlib.util.find_spec(module) for module in modules):
            raise ValueError(
                f"--report_to {name}: the {name} logger needs the package {package}, which is not installed: "
                f"pip install {package} (or drop --report_to {name})."
            )


def check_lora(values: Mapping[str, Any], given: Sequence[str]) -> None:
    """Raise ValueError for LoRA settings given without ``--use_peft``: TRL then trains the whole model (2.1 GB saved
    for one step of SmolLM2 where an adapter was meant; on a 7B model, out of memory)."""
    lora = [name for name in given if name.startswith("lora_") or name in ("use_rslora", "use_dora")]
    if lora and not values.get("use_peft"):
        typed = ", ".join(f"--{name} {_shown(values[name])}" for name in lora)
        raise ValueError(
            f"{typed} set up a LoRA adapter, which trains only with --use_peft true; without it the whole model "
            "trains: add --use_peft true, or drop the LoRA flags."
        )


def _shown(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


# ----------------------------------------------------------------------------------------------------------------
# Folders and files
# ----------------------------------------------------------------------------------------------------------------


def check_model(flag: str, name: str) -> None:
    """Raise ValueError when ``name`` is neither a local folder nor a name the Hub could hold (a mistyped path)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(name).is_dir():  # as transformers reads it: "~" unexpanded
        return
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ValueError(f"--{flag} {name}: no such folder (nor a Hub model name, 'owner/name').") from None


def check_data_file(flag: str, path: str | None, task: str, generated: bool) -> None:
    """Raise ValueError for a data path given to a ``generated`` task, or a missing local data file."""
    if path and generated:
        raise ValueError(f"--{flag}: the {task} task is generated, not read from a file; drop --{flag}.")
    if path and Path(path).suffix.lower() in (".jsonl", ".json", ".parquet") and not Path(path).is_file():
        raise ValueError(f"--{flag} {path}: no such file.")


def checkpoint_step(folder: Path) -> int | None:
    """The step of a ``checkpoint-<step>`` folder's name (None for another name)."""
    match = _CHECKPOINT.fullmatch(folder.name)
    return int(match.group(1)) if match else None


def is_complete(checkpoint: Path) -> bool:
    """Whether ``checkpoint`` holds the ``trainer_state.json`` that Trainer writes last, whole."""
    try:
        return isinstance(json.loads((checkpoint / "trainer_state.json").read_text()), dict)
    except (OSError, ValueError):
        return False


def checkpoints(output_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """The ``checkpoint-<step>`` folders of ``output_dir``, oldest first: the complete ones and the incomplete ones."""
    found = sorted(
        (path for path in Path(output_dir).iterdir() if path.is_dir() and checkpoint_step(path) is not None),
        key=checkpoint_step,
    )
    complete = [path for path in found if is_complete(path)]
    return complete, [path for path in found if path not in complete]


def last_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[Path]]:
    """The newest complete ``checkpoint-<step>`` in ``output_dir`` (None: none), and the newer incomplete ones, newest
    first."""
    complete, incomplete = checkpoints(output_dir)
    newest = complete[-1] if complete else None
    skipped = [path for path in incomplete if newest is None or checkpoint_step(path) > checkpoint_step(newest)]
    return newest, skipped[::-1]


def _incomplete(checkpoints: list[Path]) -> str:
    names = ", ".join(path.name for path in checkpoints)
    return f"{names} {'is' if len(checkpoints) == 1 else 'are'} incomplete (the run stopped while saving)"


def resume_checkpoint(value: str | None, output_dir: str | None) -> tuple[str | None, str | None]:
    """The checkpoint ``--resume_from_checkpoint value`` resumes from (None: the run does not resume), and the line
    that says which newer checkpoints `last` skipped as incomplete (None: none).

    Raises:
        ValueError: a folder that is not there or is incomplete, or ``last`` with no complete checkpoint.
    """
    if value is None:
        return None, None
    if value in LAST:
        folder = Path(output_dir) if output_dir is not None else None
        checkpoint, skipped = last_checkpoint(folder) if folder is not None and folder.is_dir() else (None, [])
        if checkpoint is None:
            found = f" ({_incomplete(skipped)})" if skipped else ""
            raise ValueError(f"--resume_from_checkpoint {value}: no complete checkpoint in {output_dir}{found}.")
        note = f"resuming from {checkpoint.name}: {_incomplete(skipped)}, skipped" if skipped else None
        return str(checkpoint), note
    if not Path(value).is_dir():
        raise ValueError(f"--resume_from_checkpoint {value}: no such folder.")
    if checkpoint_step(Path(value)) is not None and not is_complete(Path(value)):
        raise ValueError(
            f"--resume_from_checkpoint {value}: {_incomplete([Path(value)])}: give an earlier checkpoint, or "
            "--resume_from_checkpoint last for the newest complete one."
        )
    return value, None


def fresh_folder(wanted: Path) -> Path:
    """``wanted`` if it is missing or empty, else the first of ``wanted-2``, ``wanted-3``, ... that is."""
    folder, number = wanted, 1
    while folder.exists() and any(folder.iterdir()):
        number += 1
        folder = wanted.with_name(f"{wanted.name}-{number}")
    return folder


def _overlap(output: Path, path: Path) -> str | None:
    """How ``output`` and an input ``path`` overlap: "is", "holds" or "is inside" (None: they do not)."""
    if output == path:
        return "is"
    if output in path.parents:
        return "holds"
    if path in output.parents:
        return "is inside"
    return None


def check_output_dir(output_dir: str, resuming: bool, overwrite: bool, inputs: Mapping[str, str | None]) -> None:
    """Raise ValueError for an ``output_dir`` that already holds files, unless the run resumes (``resuming``) or
    ``overwrite`` (``--overwrite_output_dir``) empties it first: two runs in one folder mixed their
    ``pods_selections.jsonl`` and left one's evaluations beside the other's weights. ``overwrite`` never empties the
    working folder, a folder above it or the home folder, nor a folder that is, holds or lies inside one of the run's
    ``inputs`` (``{flag: path}``: the model, data files, the checkpoint, the config file): given the model's folder as
    ``--output_dir``, the weights were deleted before the run failed on the missing tokenizer."""
    folder = Path(output_dir)
    if overwrite and not resuming:
        resolved, here = folder.resolve(), Path.cwd().resolve()
        if resolved in (here, *here.parents, Path.home().resolve()):
            raise ValueError(
                f"--overwrite_output_dir would empty --output_dir {output_dir}, which is the working folder, a folder "
                "above it or the home folder: give a folder of its own for the run."
            )
        for flag, path in inputs.items():
            how = _overlap(resolved, Path(path).resolve()) if path is not None and Path(path).exists() else None
            if how is not None:
                raise ValueError(
                    f"--overwrite_output_dir would empty --output_dir {output_dir}, which {how} {flag} {path}, an "
                    "input of the run: give the run a folder of its own."
                )
    if resuming or overwrite or folder == fresh_folder(folder):
        return
    raise ValueError(
        f"--output_dir {output_dir} already holds files (an earlier run?): give a new folder ({fresh_folder(folder)} "
        "is free), --resume_from_checkpoint to continue that run, or --overwrite_output_dir true to empty it first."
    )


def check_run_folder(values: Mapping[str, Any]) -> None:
    """`check_output_dir` for the values of a `trl-pods train` command line (``output_dir``, ``overwrite_output_dir``,
    ``resume_from_checkpoint``), whose inputs are its model, data files, checkpoint and YAML ``config`` (each may be
    missing or None)."""
    resume = values["resume_from_checkpoint"]
    read = ("model_name_or_path", "dataset_path", "eval_dataset_path", "resume_from_checkpoint", "config")
    inputs = {f"--{flag}": values.get(flag) for flag in read if values.get(flag) not in LAST}
    check_output_dir(values["output_dir"], resume is not None, values["overwrite_output_dir"], inputs)


# ----------------------------------------------------------------------------------------------------------------
# A command's inputs
# ----------------------------------------------------------------------------------------------------------------


def _check_task(values: Mapping[str, Any], names: Mapping[str, list[str]]) -> bool:
    """Check ``--task`` and, for the arithmetic task, ``--arithmetic_difficulty``; return whether it is generated."""
    task = values["task"]
    check_name("task", "task", task, names.get("task"))
    if task == "arithmetic":
        check_name("arithmetic_difficulty", "--arithmetic_difficulty", values["arithmetic_difficulty"],
                   names.get("arithmetic_difficulty"))  # fmt: skip
    return task not in names.get("hub_tasks", [task])


def _train_inputs(values: Mapping[str, Any], given: Sequence[str], names: Mapping[str, list[str]]) -> None:
    generated = _check_task(values, names)
    check_name("reward_funcs", "reward function", values["reward_funcs"], names.get("reward_funcs"), dotted=True)
    check_name("pods_down_sampler", "down-sampler", values["pods_down_sampler"], names.get("pods_down_sampler"), True)
    check_name("pods_generation", "generation mode", values["pods_generation"], names.get("pods_generation"), True)
    check_lora(values, given)
    check_loggers(values["report_to"], names.get("report_to"))
    if values["output_dir"] is not None:  # else transformers' default, which `trl_pods.train` checks
        check_run_folder(values)
    if values["model_name_or_path"] is not None:
        check_model("model_name_or_path", values["model_name_or_path"])
    for flag in ("dataset_path", "eval_dataset_path"):
        check_data_file(flag, values[flag], values["task"], generated)
    resume_checkpoint(values["resume_from_checkpoint"], values["output_dir"])


def _eval_inputs(values: Mapping[str, Any], given: Sequence[str], names: Mapping[str, list[str]]) -> None:
    generated = _check_task(values, names)
    check_name("reward", "reward function", values["reward"], names.get("reward_funcs"), dotted=True)
    for flag in ("model_name_or_path", "base_model"):
        if values[flag] is not None:
            check_model(flag, values[flag])
    if values["run_dir"] is not None and not Path(values["run_dir"]).is_dir():
        raise ValueError(f"--run_dir {values['run_dir']}: no such folder.")
    check_data_file("dataset_path", values["dataset_path"], values["task"], generated)


_COMMANDS = {"train": _train_inputs, "eval": _eval_inputs}


def check_inputs(
    command: str, values: Mapping[str, Any], given: Sequence[str], names: Mapping[str, list[str]]
) -> None:
    """Check what a command line gives ``command`` (``values`` of every flag, ``given``: those the user set, in the
    YAML ``--config`` or on the command line, in that order), with the ``names`` its values may take.

    Raises:
        ValueError: what is wrong and which flag to change.
    """
    if command in _COMMANDS:
        _COMMANDS[command](values, given, names)
