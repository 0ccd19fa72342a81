"""Train with PODS: `accelerate launch --config_file recipes/accelerate/X.yaml scripts/train_pods.py --config R.yaml`.

Same as the `trl-pods train` command; see `trl_pods/train.py` for the arguments.
"""

from trl_pods.train import main

if __name__ == "__main__":
    main()
