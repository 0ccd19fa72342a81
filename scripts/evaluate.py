"""Evaluate a model or every checkpoint of a run: `python scripts/evaluate.py --run_dir runs/... --task gsm8k`.

Same as the `trl-pods eval` command; see `trl_pods/evaluate.py` for the arguments.
"""

from trl_pods.evaluate import main

if __name__ == "__main__":
    main()
