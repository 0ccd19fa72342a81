"""Several `trl-pods train` runs in turn in one launch: `python tests/train_runs.py ARGS + ARGS + ...`, or the same
under torchrun. Each is `trl_pods.train.run` of its own arguments (its own trainer and output folder); the processes,
their imports and their process group are set up once, which costs more than a test's short run (about 7 s of imports
a process). The processes then leave as `trl-pods train` does."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from helpers import exit_together, split_runs  # noqa: E402

from trl_pods.train import run  # noqa: E402

if __name__ == "__main__":
    for argv in split_runs(sys.argv[1:]):
        run(argv)
    exit_together()
