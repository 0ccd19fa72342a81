"""Train with PODS: `accelerate launch --config_file recipes/accelerate/X.yaml scripts/train_pods.py --config R.yaml`.

Same as the `trl-pods train` command (its flags checked before the heavy imports); see `trl_pods/train.py` for the
arguments.
"""

import sys

from trl_pods.cli import run_command

if __name__ == "__main__":
    run_command("train", sys.argv[1:])
