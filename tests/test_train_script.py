"""The training command end to end on the tiny model: from YAML and from flags, saving, and resuming."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

from trl_pods.train import main

CPU = [
    "--use_cpu",
    "true",
    "--bf16",
    "false",
    "--gradient_checkpointing",
    "false",
    "--report_to",
    "none",
    "--disable_tqdm",
    "true",
    "--max_completion_length",
    "6",
]


def _flags(model, out, *extra):
    return [
        "--model_name_or_path",
        str(model),
        "--output_dir",
        str(out),
        "--task",
        "arithmetic",
        "--reward_funcs",
        "arithmetic",
        "--pods_n",
        "8",
        "--pods_m",
        "4",
        "--per_device_train_batch_size",
        "4",
        "--logging_steps",
        "1",
        *CPU,
        *extra,
    ]


def _logged_steps(out: Path) -> list[int]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [entry["step"] for entry in history if "loss" in entry]


def test_trains_from_flags_and_saves_everything(tiny_model_path, tmp_path):
    """Flags alone run 2 PODS steps and save the model, all arguments, metrics and the log history."""
    out = tmp_path / "run"
    main(_flags(tiny_model_path, out, "--max_steps", "2", "--save_strategy", "no"))
    for name in ("model.safetensors", "config.json", "run_args.json", "train_results.json", "trainer_state.json"):
        assert (out / name).exists(), name
    args = json.loads((out / "run_args.json").read_text())
    assert args["training"]["pods_n"] == 8 and args["script"]["task"] == "arithmetic"
    assert _logged_steps(out) == [1, 2]


def test_trains_from_a_yaml_recipe_with_flag_overrides(tiny_model_path, tmp_path):
    """A YAML --config sets the arguments and flags override it (here pods_n 8 -> 12), through the console script."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "model_name_or_path": str(tiny_model_path),
                "task": "arithmetic",
                "reward_funcs": ["arithmetic"],
                "pods_n": 8,
                "pods_m": 4,
                "per_device_train_batch_size": 4,
                "max_steps": 2,
                "save_strategy": "no",
                "output_dir": str(tmp_path / "run"),
                "logging_steps": 1,
            }
        )
    )
    command = [sys.executable, "-m", "trl_pods.cli", "train", "--config", str(recipe), "--pods_n", "12", *CPU]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    args = json.loads((tmp_path / "run" / "run_args.json").read_text())
    assert args["training"]["pods_n"] == 12 and args["training"]["max_steps"] == 2


def test_resume_continues_at_the_right_step(tiny_model_path, tmp_path):
    """--resume_from_checkpoint last continues after the checkpoint's step: no step repeated or skipped."""
    out = tmp_path / "run"
    main(_flags(tiny_model_path, out, "--max_steps", "2", "--save_steps", "2"))
    assert (out / "checkpoint-2").is_dir()
    main(_flags(tiny_model_path, out, "--max_steps", "4", "--save_steps", "2", "--resume_from_checkpoint", "last"))
    assert _logged_steps(out) == [1, 2, 3, 4]
    assert json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
