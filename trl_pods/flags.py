"""The command line checked before the heavy imports: a `trl-pods` command answers a mistyped flag, value or path in
a fraction of a second instead of after the 4-30 s that torch, transformers and TRL take to import.

A command's parser is built from dataclasses that import TRL and transformers, so it cannot be had without them. What
`check` needs of it is written down instead: a manifest (`manifest_of`) of every flag (its names, type, arity,
choices and default) and of the names some values may take (tasks, reward functions, down-samplers, generation
modes, loggers), saved by every run of the command in the package cache (`save`) under a key of this installation
(`manifest_key`: the trl_pods sources and the versions of the packages that declare flags). The next run of the
command checks its arguments against it (`precheck`, from `trl_pods.cli`) before importing anything heavy, and the
full parser checks them through the same function on its own manifest first (`trl_pods.parsing.CommandParser`), so
that both answer a mistake with the same line. Without a manifest of this installation (the first run after an
install, an upgrade or an edit of the sources) `precheck` passes everything on and the full parser answers.

`check` parses as the full parser does (argparse over the same flags, a YAML ``--config`` setting defaults), then
checks what the user gave that needs neither a model nor the data (`trl_pods.inputs`). Flags renamed in this release
still work, with a warning naming the new flag (`RENAMED`).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

import yaml

from .inputs import check_inputs, closest

__all__ = [
    "RENAMED",
    "UNKNOWN_FLAGS",
    "check",
    "did_you_mean",
    "load",
    "manifest_key",
    "manifest_of",
    "precheck",
    "save",
]

RENAMED = {"arithmetic_train_size": "task_train_size", "arithmetic_test_size": "task_test_size"}
"""Flags renamed in 0.2.0, and the flag that now does what each did: the old names still work, with a warning, until
the next release (CHANGELOG.md)."""

UNKNOWN_FLAGS = "unknown flags (--help-all lists all): {rest}"
"""The message of flags that no dataclass of a `CommandParser` has."""

DECLARING = ("trl", "transformers")
"""The packages whose dataclasses and registries a command's flags come from, beside trl_pods itself."""

HELP_FLAGS = ("-h", "--help", "--help-all")


# ----------------------------------------------------------------------------------------------------------------
# Suggestions
# ----------------------------------------------------------------------------------------------------------------


def did_you_mean(known: Iterable[str], message: str) -> str:
    """``message`` followed by "did you mean --FLAG?" for each ``--name`` in it that is not one of the ``known`` flag
    names (without dashes) but close to one, or was renamed to one (`RENAMED`)."""
    known = list(known)

    def guess(name: str) -> str | None:
        return RENAMED[name] if RENAMED.get(name) in known else closest(name, known, 0.8)

    guesses = [
        f"--{match}"
        for name in re.findall(r"(?<![\w-])--([\w-]+)", message)
        if name not in known and (match := guess(name))
    ]
    return f"{message} (did you mean {' or '.join(guesses)}?)" if guesses else message


# ----------------------------------------------------------------------------------------------------------------
# The manifest
# ----------------------------------------------------------------------------------------------------------------

_BOOL_TYPE = "string_to_bool"  # the type of a bool field in TRL's parser (a copy of transformers')
_KINDS = {
    argparse._StoreAction: "store",
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
}


def _kind(action: argparse.Action) -> str:
    """How `check` rebuilds ``action``: "store", "store_true" or "store_false", or "help" (not rebuilt).

    Raises:
        TypeError: an action it cannot rebuild (a parser that adds one must teach `check` to read it first).
    """
    if action.dest == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
        return "help"
    if type(action) not in _KINDS:
        raise TypeError(f"trl_pods.flags cannot check --{action.dest}, a {type(action).__name__}")
    return _KINDS[type(action)]


def _type_name(action: argparse.Action) -> str:
    """The type `check` converts a value with: int, float, bool (string_to_bool, TRL's copy of transformers'), choice
    (a choice mapping, make_choice_type_function), or str for any other (a value it takes as typed). A converter that
    TRL wraps to read "none" as None (``_accept_none``) keeps its inner type's name."""
    name = getattr(action.type, "__name__", None)
    if name in ("int", "float"):
        return name
    if name == _BOOL_TYPE:
        return "bool"
    if name == "<lambda>" and action.choices is not None:
        return "choice"
    return "str"


def _reads_none(action: argparse.Action) -> bool:
    """Whether ``action`` reads ``none`` (or ``null``) as None: TRL's parser does so for a ``T | None`` field whose
    ``T`` is not str."""
    try:
        return action.type is not None and action.type("none") is None
    except Exception:  # noqa: BLE001 (a converter that refuses "none" does not read it as None)
        return False


def _json(value: Any) -> Any:
    """``value`` as JSON holds it (an enum of str: its value), or its ``str`` where JSON cannot."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


def manifest_of(
    parser: argparse.ArgumentParser,
    command: str,
    names: Mapping[str, Sequence[str]] | None = None,
    config: bool = True,
) -> dict[str, Any]:
    """What `check` needs of ``parser``, as JSON: each flag's option strings, destination, kind, type, arity,
    constant, choices and default (taken before any ``set_defaults``), and ``names``: the names the values of some
    flags may take (``{"task": [...], ...}``; `trl_pods.inputs` reads them). ``config``: the parser reads a YAML
    ``--config`` (`trl.TrlParser`) and reports unknown flags as `UNKNOWN_FLAGS` rather than as argparse does."""
    flags = []
    for action in parser._actions:
        kind = _kind(action)
        flags.append(
            {
                "options": list(action.option_strings),
                "dest": action.dest,
                "kind": kind,
                "type": _type_name(action),
                "none": _reads_none(action),
                "nargs": action.nargs,
                "const": _json(action.const),
                "choices": None if action.choices is None else [_json(choice) for choice in action.choices],
                "default": _json(action.default),
                "required": action.required,
            }
        )
    return {
        "command": command,
        "prog": parser.prog,
        "config": config,
        "flags": flags,
        "names": {flag: list(values) for flag, values in (names or {}).items()},
    }


@functools.cache
def manifest_key() -> str:
    """This installation, in a few characters: the trl_pods sources, the versions of `DECLARING` and Python's (once
    a process: its sources do not change under it)."""
    digest = hashlib.sha256(f"{sys.version_info[:2]}".encode())
    for package in DECLARING:
        try:
            digest.update(f"{package}={metadata.version(package)};".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{package}=none;".encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + source.read_bytes())
    return digest.hexdigest()[:16]


def _path(command: str) -> Path:
    from .smollm2 import default_cache_dir

    return default_cache_dir() / "flags" / f"{command}-{manifest_key()}.json"


KEPT = 4
"""Manifests kept per command: those of the installations (or source versions) used last."""


def save(manifest: dict[str, Any]) -> None:
    """Keep ``manifest`` for this installation's next run of its command (written whole or not at all; a cache that
    cannot be written is left out), and the `KEPT` newest of the command's manifests."""
    path = _path(manifest["command"])
    if path.is_file():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".partial") as file:
            json.dump(manifest, file)
        os.replace(file.name, path)
        saved = sorted(path.parent.glob(f"{manifest['command']}-*.json"), key=lambda p: p.stat().st_mtime)
        for old in saved[:-KEPT]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def load(command: str) -> dict[str, Any] | None:
    """The manifest of ``command`` that a run on this installation saved, or None."""
    try:
        return json.loads(_path(command).read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------------------------------------------
# The check
# ----------------------------------------------------------------------------------------------------------------


class _Refused(Exception):
    """argparse's error, raised instead of printed (``check`` turns it into a ValueError)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


def _string_to_bool(value: str | bool) -> bool:
    """TRL's ``string_to_bool`` (`trl.scripts._hf_argparser`, a copy of transformers'), with its message
    (tests/test_flags.py compares the two)."""
    if isinstance(value, bool):
        return value
    if value.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if value.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {value} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


def _choice(choices: list) -> Callable[[str], Any]:
    """transformers' ``make_choice_type_function``: a value typed as a choice's string is that choice."""
    by_string = {str(choice): choice for choice in choices}
    return lambda value: by_string.get(value, value)


_TYPES = {"int": int, "float": float, "str": None, "bool": _string_to_bool}


def _or_none(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """``convert``, reading ``none`` and ``null`` (any case) as None, as TRL's ``_accept_none`` does."""

    def read(value: str) -> Any:
        return None if value.lower() in ("none", "null") else convert(value)

    read.__name__ = convert.__name__  # argparse names a converter that fails by it: "invalid int value"
    return read


def _parser(manifest: dict[str, Any], configured: set[str]) -> _Parser:
    """An argparse parser of the manifest's flags whose defaults are all left out, so that what it parses was given;
    a flag the YAML config sets is not required (as `trl.TrlParser` has it)."""
    parser = _Parser(prog=manifest["prog"], add_help=False, argument_default=argparse.SUPPRESS)
    for flag in manifest["flags"]:
        if flag["kind"] == "help":
            continue
        options: dict[str, Any] = {"dest": flag["dest"], "default": argparse.SUPPRESS}
        if flag["kind"] == "store":
            kind = _choice(flag["choices"]) if flag["type"] == "choice" else _TYPES[flag["type"]]
            kind = _or_none(kind) if flag["none"] and kind is not None else kind
            required = flag["required"] and flag["dest"] not in configured
            options.update(nargs=flag["nargs"], choices=flag["choices"], required=required)
            options.update({"type": kind} if kind is not None else {})
            options.update({"const": flag["const"]} if flag["nargs"] == "?" else {})
        parser.add_argument(*flag["options"], action=flag["kind"], **options)
    return parser


def _renamed(argv: list[str], known: set[str], warn: Callable[[str], None]) -> list[str]:
    """``argv`` with every renamed flag (`RENAMED`) under its new name, each said once through ``warn``."""
    renamed = []
    for arg in argv:
        flag, equals, value = arg.partition("=")
        old = flag[2:].replace("-", "_") if flag.startswith("--") else None
        if old in RENAMED and RENAMED[old] in known:
            warn(f"{flag} is now --{RENAMED[old]}; the old name goes in the next release.")
            arg = f"--{RENAMED[old]}{equals}{value}"
        renamed.append(arg)
    return renamed


def _read_config(argv: list[str]) -> tuple[list[str], str | None, dict[str, Any]]:
    """``argv`` without ``--config FILE`` (the first, as `trl.TrlParser` takes it), the file, and its mapping."""
    if "--config" not in argv:
        return argv, None, {}
    index = argv.index("--config")
    if index + 1 == len(argv):
        raise ValueError("--config needs a file: --config FILE.yaml.")
    path = argv[index + 1]
    try:
        config = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"--config {path}: no such file.") from None
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"--config {path} cannot be read as YAML ({' '.join(str(err).split())}).") from None
    if not isinstance(config, dict):
        raise ValueError(f"--config {path} must hold a YAML mapping of flags to values, not {type(config).__name__}.")
    config.pop("env", None)  # environment variables, which `trl.TrlParser` sets
    return argv[:index] + argv[index + 2 :], path, config


def check(
    manifest: dict[str, Any], argv: Sequence[str], warn: Callable[[str], None] | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Check a command line as the command's full parser reads it, and what it gives that can be checked without a
    model or the data (`trl_pods.inputs`).

    Args:
        manifest: the command's parser (`manifest_of`).
        argv: the arguments after the command.
        warn: says a renamed flag was given (default: a line on stderr).

    Returns:
        ``argv`` with renamed flags under their new names, and every flag's value (the default, the YAML config's, or
        the command line's); ``argv`` unchanged and no values when it asks for help.

    Raises:
        ValueError: what is wrong, naming what was typed.
    """
    argv = list(argv)
    if any(arg in HELP_FLAGS for arg in argv):
        return argv, {}
    known = {flag["dest"] for flag in manifest["flags"]}
    warn = warn or (lambda line: print(f"{manifest['prog']}: warning: {line}", file=sys.stderr, flush=True))
    argv = _renamed(argv, known, warn)
    args, path, config = _read_config(argv) if manifest["config"] else (argv, None, {})
    parser = _parser(manifest, set(config))
    unknown_keys = [f"--{key}" for key in config if key not in known]
    if unknown_keys:
        raise ValueError(f"--config sets unknown flags (--help-all lists all): {', '.join(unknown_keys)}.")
    try:
        if manifest["config"]:
            given, unknown = parser.parse_known_args(args)
            if unknown:
                raise ValueError(UNKNOWN_FLAGS.format(rest=unknown))
        else:
            given = parser.parse_args(args)
    except _Refused as err:
        raise ValueError(str(err)) from None
    defaults = {flag["dest"]: flag["default"] for flag in manifest["flags"] if flag["default"] != argparse.SUPPRESS}
    values = {**defaults, **config, **vars(given), "config": path}
    check_inputs(manifest["command"], values, list(dict.fromkeys([*config, *vars(given)])), manifest["names"])
    return argv, values


def precheck(command: str, argv: Sequence[str]) -> list[str]:
    """`check` ``argv`` against the manifest a run of ``command`` saved on this installation: a mistake is one line
    ``<command>: error: <message>`` and exit status 2, before anything heavy is imported. Returns ``argv`` with renamed
    flags under their new names (unchanged without a manifest)."""
    manifest = load(command)
    if manifest is None:
        return list(argv)
    try:
        return check(manifest, argv)[0]
    except ValueError as err:
        known = [option[2:] for flag in manifest["flags"] for option in flag["options"] if option.startswith("--")]
        message = did_you_mean(known, " ".join(str(err).split()))
        print(f"{manifest['prog']}: error: {message}", file=sys.stderr)
        sys.exit(2)
