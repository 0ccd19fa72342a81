"""The argument parser of the `trl-pods` commands: a `trl.TrlParser` whose help a newcomer can read and whose user
errors fit on one line.

* The usage line names the command (``trl-pods train``), and ``--help`` opens with the command's description and
  its own argument groups (for training: the PODS and script flags and a few common ones); ``--help-all`` shows every
  flag, TRL's and transformers' included.
* A user error (a bad flag value, an unknown name, a missing or malformed ``--config`` file, a value a dataclass's
  ``__post_init__`` refuses) prints one line ``<command>: error: <message>`` and exits with status 2; an unknown flag
  close to a known one gets a "did you mean". The command line is first checked as `trl_pods.flags.check` checks it
  before the heavy imports, on this parser's manifest (saved for the next run, `trl_pods.flags.save`): unknown flags,
  values, names, folders and files, so that both checks answer alike, and a typo (``--pods_mm 4``) is reported before
  whatever the config would refuse without it. Only errors raised while the arguments are parsed and checked count as
  user errors: a crash later keeps its traceback.
* The ``--no_FLAG`` of a boolean flag that defaults to true says that it turns the flag off.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NoReturn

import yaml
from trl import TrlParser

from . import flags
from .flags import manifest_of

__all__ = ["CommandParser", "OneLineErrors", "Section", "one_line"]

Section = tuple[str, Iterable[str], bool]
"""An argument group of the help: ``(title, flag names (dataclass fields), shown by --help)``."""

USER_ERRORS = (ValueError, OSError, yaml.YAMLError)
"""What parsing and checking raise for input the user can fix."""

_REWRITES = {
    # transformers.TrainingArguments on a machine without a bf16-capable GPU; its advice (use_cpu) alone does not
    # say which flag caused it.
    "doesn't support bf16/gpu": (
        "--bf16 true needs a GPU with bf16, and this machine has none: drop --bf16 (trl-pods train then trains in "
        "float32, on the CPU when there is no GPU), or add --use_cpu true for bf16 autocast on the CPU."
    ),
    # HfArgumentParser's words for flags no dataclass has
    "Some specified arguments are not used by the HfArgumentParser: ": flags.UNKNOWN_FLAGS,
}
"""Messages reworded: ``{key found in the message: new message}``; ``{rest}`` is the text after the key."""


def one_line(error: BaseException) -> str:
    """The message of a user error on one line (whitespace collapsed), reworded where the raw one names no flag."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.strerror}: {error.filename}"
    message = " ".join(str(error).split()) or type(error).__name__
    for key, rewrite in _REWRITES.items():
        if key in message:
            return rewrite.format(rest=message.split(key, 1)[1])
    return message


def _flag_names(parser: argparse.ArgumentParser) -> list[str]:
    """The ``--`` flags of ``parser``, without the dashes."""
    return [option[2:] for action in parser._actions for option in action.option_strings if option[:2] == "--"]


class OneLineErrors(argparse.ArgumentParser):
    """A plain `argparse` parser (`trl-pods demo`'s) whose errors are one line, as `CommandParser`'s: ``<command>:
    error: <message>`` with a "did you mean" for a flag close to a known one, exit status 2, and no usage block.
    ``command`` names it for `trl_pods.flags`, which checks a later run's flags before the heavy imports with its
    `manifest` (saved by `parse_args`)."""

    def __init__(self, command: str, **kwargs):
        super().__init__(**kwargs)
        self.command = command

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {flags.did_you_mean(_flag_names(self), message)}\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # noqa: D102 (argparse's)
        flags.save(flags.manifest_of(self, self.command, config=False))
        return super().parse_args(args, namespace)


class _Help(argparse.Action):
    """``-h/--help`` (the command's own groups) or ``--help-all`` (every flag): print, then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, full: bool = False, help: str | None = None):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)
        self.full = full

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        parser._print_message(parser.format_help(full=self.full), sys.stdout)
        parser.exit()


class CommandParser(TrlParser):
    """`trl.TrlParser` for one `trl-pods` command, with ordered help sections and one-line user errors.

    Args:
        dataclass_types: The argument dataclasses, as for `TrlParser`; parsing is unchanged.
        prog: The command, e.g. ``"trl-pods train"``: the usage line and every error start with it.
        description: What the command does, printed first by ``--help``.
        sections: Help groups in the order shown. Flags named by no section go to a last group, ``other flags``,
            shown by ``--help-all`` only.
        names: The names some flags' values may take, checked with the command line (`trl_pods.flags.manifest_of`).
    """

    def __init__(
        self,
        dataclass_types: Sequence[type],
        prog: str,
        description: str,
        sections: Sequence[Section],
        names: Mapping[str, Sequence[str]] | None = None,
    ):
        value_names, usage = names, f"{prog} [--config FILE.yaml] [--FLAG VALUE ...]"
        super().__init__(dataclass_types, prog=prog, description=description, usage=usage, add_help=False)
        flags = list(self._optionals._group_actions)
        for action in flags:
            if isinstance(action, argparse._StoreFalseAction) and action.option_strings[0].startswith("--no_"):
                action.help = f"Turn --{action.dest} off (it is on by default)."
                action.default = argparse.SUPPRESS  # its own default (False) is never used, and --help showed it
        self._optionals._group_actions.clear()
        self._brief: list[argparse._ArgumentGroup] = []
        claimed: set[str] = set()
        for title, names, brief in [*sections, ("other flags", [a.dest for a in flags], False)]:
            wanted = set(names) - claimed
            group = self.add_argument_group(title)
            group._group_actions.extend(action for action in flags if action.dest in wanted)
            claimed |= wanted
            if brief:
                self._brief.append(group)
        shown = sum(len(group._group_actions) for group in self._brief)
        helps = self.add_argument_group("help")
        helps.add_argument("-h", "--help", action=_Help, help=f"show the {shown} flags above and exit")
        helps.add_argument("--help-all", action=_Help, full=True, help=f"show all {len(flags)} flags and exit")
        self._brief.append(helps)
        self.manifest = manifest_of(self, prog.removeprefix("trl-pods "), value_names)
        """What `trl_pods.flags.check` needs of this parser, taken before any ``set_defaults``."""
        self._checked: list[str] | None = None  # the command line `check_command_line` returned last

    def format_help(self, full: bool = False) -> str:
        """The help text: the command's own sections, or (``full``) every section."""
        groups = self._action_groups
        self._action_groups = [g for g in groups if g._group_actions and (full or g in self._brief)]
        try:
            return super().format_help()
        finally:
            self._action_groups = groups

    def error(self, message: str) -> NoReturn:
        """One line on stderr, ``<command>: error: <message>``, and exit status 2 (argparse's status)."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    def check_command_line(self, argv: Sequence[str] | None) -> list[str]:
        """`trl_pods.flags.check` on this parser's manifest (a user error: one `error` line), after saving the
        manifest for the next run; returns ``argv`` with renamed flags under their new names. The command line it
        returned last is not checked again."""
        argv = list(sys.argv[1:] if argv is None else argv)
        if argv == self._checked:
            return argv
        flags.save(self.manifest)
        try:
            self._checked = flags.check(self.manifest, argv)[0]
        except ValueError as err:
            self.error(flags.did_you_mean(_flag_names(self), one_line(err)))
        return self._checked

    def parse_checked(self, argv: Sequence[str] | None, check: Callable[..., None] | None = None) -> tuple:
        """`check_command_line`, `parse_args_and_config`, then ``check(*parsed)``; a user error of any ends in one
        `error` line."""
        argv = self.check_command_line(argv)
        try:
            parsed = self.parse_args_and_config(args=argv)
            if check is not None:
                check(*parsed)
        except USER_ERRORS as err:
            self.error(flags.did_you_mean(_flag_names(self), one_line(err)))
        return parsed
