"""Kill a training process for real (SIGKILL) after a checkpoint, resume it, and compare with an uninterrupted run:
it continues at the right step with the same RNG, prompts, rollouts per prompt (adaptive waves) and kept indices, and
no step is lost or repeated."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


ADAPTIVE = ["--pods_generation", "adaptive", "--pods_n_initial", "4"]
GENERATION = {
    "fixed": ["--reward_funcs", "helpers.slow_token_sum_reward"],
    # 1 for a token sum divisible by 10: most groups of 4 are all 0 and get a second wave
    "adaptive": ["--reward_funcs", "helpers.slow_rare_reward", *ADAPTIVE],
}


def _command(model, out, *extra):
    return [
        sys.executable, "-m", "trl_pods.cli", "train", "--model_name_or_path", str(model), "--output_dir", str(out),
        "--task", "arithmetic", "--pods_n", "8", "--pods_m", "4",
        "--per_device_train_batch_size", "4", "--max_steps", "4", "--save_steps", "2", "--logging_steps", "1",
        "--learning_rate", "0.01", "--max_completion_length", "6", "--use_cpu", "true", "--bf16", "false",
        "--gradient_checkpointing", "false", "--report_to", "none", "--disable_tqdm", "true",
        "--pods_down_sampler", "random", *extra,
    ]  # fmt: skip


def _env():
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}


def _checkpoint_complete(checkpoint: Path) -> bool:
    try:  # trainer_state.json is written last, after the weights, optimizer and RNG states
        return json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 2
    except (OSError, ValueError, KeyError):
        return False


def _selections(out: Path) -> dict[tuple[int, int], dict]:
    """Per (optimizer step, generation): the last recorded selection (a resumed run re-records the killed step)."""
    records = [json.loads(line) for line in (out / "pods_selections.jsonl").read_text().splitlines()]
    return {(r["global_step"], r["generation"]): r for r in records}


def _losses(out: Path) -> dict[int, float]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [e["step"] for e in history if "loss" in e]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {steps}"
    return {e["step"]: e["loss"] for e in history if "loss" in e}


@pytest.mark.parametrize("generation", ["fixed", "adaptive"])
def test_killed_run_resumes_exactly(tiny_model_path, tmp_path, generation):
    """SIGKILL after checkpoint-2 and resume: the same selections (with adaptive generation, the same waves) and
    losses as the uninterrupted run."""
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    options = GENERATION[generation]
    subprocess.run(
        _command(tiny_model_path, reference, *options), env=_env(), check=True, capture_output=True, timeout=600
    )

    process = subprocess.Popen(
        _command(tiny_model_path, killed, *options), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not _checkpoint_complete(killed / "checkpoint-2"):
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its checkpoint"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "checkpoint-4").exists(), "the run finished before it was killed"

    resume = _command(tiny_model_path, killed, *options, "--resume_from_checkpoint", "last")
    subprocess.run(resume, env=_env(), check=True, capture_output=True, timeout=600)

    expected, resumed = _selections(reference), _selections(killed)
    assert sorted(expected) == sorted(resumed) == [(step, 0) for step in range(4)]
    for key in expected:
        for field in ("prompts", "rewards", "generated", "kept"):
            assert resumed[key][field] == expected[key][field], (key, field)
    if generation == "adaptive":
        counts = [count for record in expected.values() for count in record["generated"]]
        assert 8 in counts and 4 in counts, f"both one-wave and topped-up groups must occur: {counts}"
    assert _losses(killed) == _losses(reference), "the resumed run diverged from the uninterrupted one"
