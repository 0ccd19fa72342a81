"""The `trl-pods` command: `trl-pods train ...`, `trl-pods eval ...`, `trl-pods demo`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

COMMANDS = {
    "train": ("trl_pods.train", "train a model with PODS (flags and/or --config recipe.yaml)"),
    "eval": ("trl_pods.evaluate", "accuracy and pass@k of a model or of every checkpoint of a run"),
    "demo": ("trl_pods.demo", "the offline default: train a small real model on CPU, no GPU and no Hub needed"),
}


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        usage = "\n".join(f"  {name:<6} {help_}" for name, (_, help_) in COMMANDS.items())
        print(
            f"usage: trl-pods {{{','.join(COMMANDS)}}} [args]\n\n{usage}\n\n`trl-pods COMMAND --help`: its arguments."
        )
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    import importlib

    module = importlib.import_module(COMMANDS[argv[0]][0])
    module.main(argv[1:])


if __name__ == "__main__":
    main()
