"""Real DeepSpeed ZeRO-2/3 PODS training on CPU through the project's accelerate configs, 1 and 2 processes, full
and LoRA; the saved model reloads and generates. Only what a CPU needs is overridden: the process count, no bf16,
and the gloo backend (`--ddp_backend gloo`; without a backend accelerate counts one process)."""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import accelerate_launch, worker_env
from safetensors.torch import load_file

RECIPES = Path(__file__).parent.parent / "recipes" / "accelerate"
SCRIPT = Path(__file__).parent.parent / "scripts" / "train_pods.py"
pytestmark = pytest.mark.slow


def _launch(model, out: Path, stage: int, processes: int, *options: str) -> None:
    """`accelerate launch` the training script with a ZeRO recipe on CPU: PODS 8 -> 4, 4 kept rows per process."""
    command = [
        *accelerate_launch(RECIPES / f"zero{stage}.yaml", processes), str(SCRIPT),
        "--model_name_or_path", str(model), "--task", "arithmetic", "--output_dir", str(out), "--pods_n", "8",
        "--pods_m", "4", "--per_device_train_batch_size", "4", "--max_completion_length", "6",
        "--learning_rate", "0.01", "--bf16", "false", "--gradient_checkpointing", "false", "--report_to", "none",
        "--save_strategy", "no", "--disable_tqdm", "true", "--ddp_backend", "gloo", *options,
    ]  # fmt: skip
    result = subprocess.run(command, env=worker_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_training_saves_a_model_that_reloads_and_generates(tiny_model_path, tmp_path, stage, lora):
    """accelerate launch --config_file recipes/accelerate/zero{2,3}.yaml on 2 processes (the recipes' multi-process
    setting; 1-process ZeRO-3 runs in the tests below) trains PODS; weights change; the saved model reloads."""
    processes = 2
    out = tmp_path / "run"
    lora_options = ["--use_peft", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"] if lora else []
    _launch(tiny_model_path, out, stage, processes, "--reward_funcs", "helpers.token_sum_reward", "--max_steps", "2",
            *lora_options)  # fmt: skip
    launch = json.loads((out / "run_args.json").read_text())["launch"]
    assert launch == {
        "distributed_type": "DEEPSPEED", "num_processes": processes, "device": "cpu", "mixed_precision": "no",
        "weights_dtype": "float32",
    }  # fmt: skip
    selections = [json.loads(line) for line in (out / "pods_selections.jsonl").read_text().splitlines()]
    assert len(selections) == 2 and all(len(s["prompts"]) == processes for s in selections), "one digest per rank"

    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    if lora:
        from peft import AutoPeftModelForCausalLM

        adapter = load_file(out / "adapter_model.safetensors")
        assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k), "LoRA B matrices never moved"
        model = AutoPeftModelForCausalLM.from_pretrained(out)
    else:
        before = load_file(Path(tiny_model_path) / "model.safetensors")
        after = load_file(out / "model.safetensors")
        assert any(not torch.equal(before[k], after[k]) for k in before), "weights did not change"
        model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_model_path)
    inputs = tokenizer("What is 1 plus 2?", return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] > inputs["input_ids"].shape[1]


def test_zero3_adaptive_generation_with_one_rank_topping_up(tiny_model_path, tmp_path):
    """ZeRO-3 shards the weights, so HF generate is a collective on every rank; with adaptive generation a rank that
    has nothing to top up still generates (padding) in every wave. The run finishes, the ranks keep whole groups,
    and some generation topped up one rank's group only."""
    out = tmp_path / "run"
    adaptive = ["--pods_generation", "adaptive", "--pods_n_initial", "4", "--reward_funcs", "helpers.rare_reward"]
    _launch(tiny_model_path, out, 3, 2, "--max_steps", "4", *adaptive)
    selections = [json.loads(line) for line in (out / "pods_selections.jsonl").read_text().splitlines()]
    assert len(selections) == 4
    assert any(sorted(s["generated"]) == [4, 8] for s in selections), [s["generated"] for s in selections]


LAYOUTS = {  # process count and options of tests/multiprocess_run.py
    "rounds": (1, ["--chunk-size", "4"]),
    "waves": (1, ["--adaptive", "--reward", "sevens-constant"]),
    "budgeted-2-processes": (
        2,
        ["--budgeted", "--reward", "zero-solved", "--prompts", "4", "--prompts-per-step", "4", "--steps", "3"],
    ),
    "screened-2-processes": (2, ["--dynamic", "screened", "--reward", "sevens-constant"]),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_zero3_gathers_weights_once_per_generation(tiny_model_path, tmp_path, layout):
    """ZeRO-3: TRL gathers the full weights around each generate call, so rounds of 4 sequences out of 16
    (pods_generation_chunk_size) gathered them 4 times per generation, and adaptive waves once per wave. They are
    gathered once per generation, and training still works. Budgeted generation on 2 processes: one generate call
    (a collective under ZeRO-3) per generation, both ranks agreeing on every allocation and spending their own share,
    so neither pads. Screened generation on 2 processes: the pilot and the commit (two collective calls) share one
    gather."""
    processes, options = LAYOUTS[layout]
    command = [
        *accelerate_launch(RECIPES / "zero3.yaml", processes), str(Path(__file__).with_name("multiprocess_run.py")),
        str(tiny_model_path), str(tmp_path), *options,
    ]  # fmt: skip
    result = subprocess.run(command, env=worker_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(processes)]
    steps = 3 if layout.startswith("budgeted") else 2
    for record in ranks:
        assert len(record["records"]) == steps, "one generation of 2 prompts per step"
        assert record["weight_gathers"] == [1] * steps
    if layout == "waves":
        waves = [entry["pods/waves"] for entry in ranks[0]["logs"] if "pods/waves" in entry]
        assert max(waves) > 1, "a generation with top-up waves"
    if layout.startswith("budgeted"):
        counts = [[record["counts"] for record in rank["records"]] for rank in ranks]
        assert counts[0] == counts[1] and counts[0][0] == [6] * 4 and sorted(counts[0][2]) != [6] * 4
        assert all(sum(c[:2]) == sum(c[2:]) == 12 for c in counts[0]), "each rank spends its own share"
        padding = [e["pods/rollouts_padding"] for e in ranks[0]["logs"] if "pods/rollouts_padding" in e]
        assert padding == [0.0] * 3
    if layout.startswith("screened"):
        calls = [e["pods/generation_calls"] for e in ranks[0]["logs"] if "pods/generation_calls" in e]
        assert calls == [2.0] * steps and ranks[0]["records"][0]["kept"] == ranks[1]["records"][0]["kept"]
