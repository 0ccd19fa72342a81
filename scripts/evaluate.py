"""Evaluate a model or every checkpoint of a run: `python scripts/evaluate.py --run_dir runs/... --task gsm8k`.

Same as the `trl-pods eval` command (its flags checked before the heavy imports); see `trl_pods/evaluate.py` for the
arguments.
"""

import sys

from trl_pods.cli import run_command

if __name__ == "__main__":
    run_command("eval", sys.argv[1:])
