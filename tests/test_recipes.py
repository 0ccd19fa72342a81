"""Every file under recipes/ loads and validates, so no recipe rots when the code or TRL changes."""

from pathlib import Path

import pytest
import yaml
from trl import ModelConfig, TrlParser

from trl_pods import PODSConfig
from trl_pods.train import ScriptArguments

RECIPES = Path(__file__).parent.parent / "recipes"
TRAINING = sorted(RECIPES.glob("*.yaml"))
ACCELERATE = sorted((RECIPES / "accelerate").glob("*.yaml"))


def test_the_recipe_set_is_complete():
    """The paper's settings each have a PODS recipe and its baseline, and the four accelerate configs exist."""
    names = {p.stem for p in TRAINING}
    for setting in ("gsm8k_qwen2.5-3b_lora", "math_qwen2.5-3b_lora", "gsm8k_qwen2.5-3b_full", "gsm8k_qwen2.5-7b_full"):
        assert any(n.startswith(setting) and n.endswith("pods") for n in names), setting
        assert any(n.startswith(setting) and "grpo" in n for n in names), setting
    assert {p.stem for p in ACCELERATE} == {"single_gpu", "multi_gpu", "zero2", "zero3"}


@pytest.mark.parametrize("recipe", TRAINING, ids=lambda p: p.stem)
def test_training_recipe_parses_and_validates(recipe, tmp_path):
    """The recipe parses into (ScriptArguments, PODSConfig, ModelConfig) and passes PODSConfig's validation
    (CPU overrides only: no bf16, no GPU)."""
    parser = TrlParser((ScriptArguments, PODSConfig, ModelConfig))
    script_args, config, model_args = parser.parse_args_and_config(
        args=["--config", str(recipe), "--use_cpu", "true", "--bf16", "false", "--output_dir", str(tmp_path)]
    )
    raw = yaml.safe_load(recipe.read_text())
    assert config.pods_n == raw["pods_n"] and config.pods_m == raw["pods_m"]
    assert model_args.model_name_or_path == raw["model_name_or_path"]
    assert script_args.task in ("gsm8k", "math")
    kind = "pods" if recipe.stem.endswith("pods") else "grpo"
    assert (config.pods_n > config.pods_m) == (kind == "pods")


@pytest.mark.parametrize("recipe", ACCELERATE, ids=lambda p: p.stem)
def test_accelerate_config_is_complete(recipe):
    """Accelerate configs name a distributed type, a process count and bf16; DeepSpeed ones a ZeRO stage."""
    config = yaml.safe_load(recipe.read_text())
    assert config["mixed_precision"] == "bf16" and config["num_processes"] >= 1
    if config["distributed_type"] == "DEEPSPEED":
        assert config["deepspeed_config"]["zero_stage"] == int(recipe.stem[-1])
