"""The `trl-pods` command: `trl-pods train ...`, `trl-pods eval ...`, `trl-pods demo`.

A command's flags are checked before its module (and with it torch, transformers and TRL) is imported, against the
manifest its previous run saved (`trl_pods.flags.precheck`): a mistake is one `error:` line within a second.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from .flags import precheck
from .inputs import closest

COMMANDS = {
    "train": ("trl_pods.train", "train a model with PODS (flags and/or --config recipe.yaml)"),
    "eval": ("trl_pods.evaluate", "accuracy and pass@k of a model or of every checkpoint of a run"),
    "demo": ("trl_pods.demo", "the offline default: train a small real model on CPU, no GPU and no Hub needed"),
}


def unknown_command(command: str) -> str:
    """The one error line for a command `trl-pods` does not have: what was typed, the closest command, the list."""
    close = closest(command, COMMANDS)
    guess = f" (did you mean {close!r}?)" if close else ""
    return f"trl-pods: error: unknown command {command!r}{guess}; the commands: {', '.join(COMMANDS)}"


def run_command(command: str, argv: Sequence[str]) -> None:
    """Check ``argv`` (`trl_pods.flags.precheck`), then run ``command``'s ``main`` on it (renamed flags renamed).
    `scripts/train_pods.py` and `scripts/evaluate.py` come here too."""
    argv = precheck(command, argv)
    importlib.import_module(COMMANDS[command][0]).main(argv)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        print(unknown_command(argv[0]), file=sys.stderr)
        sys.exit(2)
    if not argv or argv[0] not in COMMANDS:
        usage = "\n".join(f"  {name:<6} {help_}" for name, (_, help_) in COMMANDS.items())
        print(
            f"usage: trl-pods {{{','.join(COMMANDS)}}} [args]\n\n{usage}\n\n`trl-pods COMMAND --help`: its arguments."
        )
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    run_command(argv[0], argv[1:])


if __name__ == "__main__":
    main()
