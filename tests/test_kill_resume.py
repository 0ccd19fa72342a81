"""Kill a training process for real (SIGKILL) after a checkpoint, resume it, and compare with an uninterrupted run:
it continues at the right step with the same RNG, prompts, rollouts per prompt (adaptive waves, budgeted allocations
from the prompts' history) and kept indices, and
no step is lost or repeated, also when the checkpoint falls inside a generation cycle (num_iterations > 1,
steps_per_generation > GA).

The runs of each process count are made once, in a session fixture (`_kill_and_resume`): the uninterrupted runs in one
launch, the resumed ones in another (tests/train_runs.py), each killed run a `trl-pods train` launch of its own."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import REWARD_PAUSE, join_runs, torchrun, worker_env

pytestmark = pytest.mark.slow
RUNS = Path(__file__).with_name("train_runs.py")


def _command(model, out, max_steps, save_steps, *extra):
    """`trl-pods train`'s arguments for a short run on ``model`` saving to ``out``."""
    return [
        "--model_name_or_path", str(model), "--output_dir", str(out),
        "--task", "arithmetic", "--pods_n", "8", "--pods_m", "4",
        "--per_device_train_batch_size", "4", "--max_steps", str(max_steps), "--save_steps", str(save_steps),
        "--logging_steps", "1", "--learning_rate", "0.01", "--max_completion_length", "6", "--use_cpu", "true",
        "--bf16", "false",
        "--gradient_checkpointing", "false", "--report_to", "none", "--disable_tqdm", "true",
        "--pods_down_sampler", "random", *extra,
    ]  # fmt: skip


def _checkpoint_complete(checkpoint: Path, step: int) -> bool:
    try:  # trainer_state.json is written last, after the weights, optimizer and RNG states
        return json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    except (OSError, ValueError, KeyError):
        return False


def _selections(out: Path) -> dict[tuple[int, int], dict]:
    """Per (optimizer step, generation): the last recorded selection (a resumed run re-records the killed step)."""
    records = [json.loads(line) for line in (out / "pods_selections.jsonl").read_text().splitlines()]
    return {(r["global_step"], r["generation"]): r for r in records}


def _logged(out: Path) -> dict[int, dict[str, float]]:
    """Per optimizer step: the loss, the gradient norm and the cumulative token counts it logged (token counts
    only at steps that generate)."""
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [e["step"] for e in history if "loss" in e]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {steps}"
    keys = ("loss", "grad_norm", "num_tokens", "pods/tokens_generated")
    return {e["step"]: {k: e.get(k) for k in keys} for e in history if "loss" in e}


REWARD = ["--reward_funcs", "helpers.paused_token_sum_reward"]
LAYOUTS = {  # options, then a checkpoint step inside a generation cycle (generations every 1, 2 and 2 steps)
    "plain": (REWARD, 2),
    "num_iterations=2": ([*REWARD, "--num_iterations", "2"], 3),
    "steps_per_generation=2xGA": (
        [*REWARD, "--gradient_accumulation_steps", "2", "--steps_per_generation", "4"]
        + ["--per_device_train_batch_size", "2"],
        3,
    ),
    # 1 for a token sum divisible by 10: most groups of 4 are all 0 and get a second wave
    "adaptive": (["--reward_funcs", "helpers.paused_rare_reward", "--pods_generation", "adaptive"], 2),
    # both prompts ("0 + 3", always solved, and "7 + 5", a coin flip) every step: allocations from their history
    "budgeted": (
        ["--reward_funcs", "helpers.paused_even_solved_reward", "--pods_generation", "budgeted", "--pods_budget", "6"]
        + ["--task_train_size", "2", "--per_device_train_batch_size", "8"],
        2,
    ),
}


def _launch(processes: int, *program: str) -> list[str]:
    """The command of ``program`` (a script, or ``-m`` and a module, with its arguments) on ``processes`` processes."""
    return [*([sys.executable] if processes == 1 else torchrun(processes)), *program]


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process under it (torchrun gives its workers sessions of their own)."""
    for child in [*psutil.Process(process.pid).children(recursive=True), psutil.Process(process.pid)]:
        child.send_signal(signal.SIGKILL)
    process.wait()


def _run(command: list[str]) -> None:
    result = subprocess.run(command, env=worker_env(), capture_output=True, text=True, timeout=600)
    errors = [line for line in result.stderr.splitlines() if "Warning" not in line]
    assert result.returncode == 0, "\n".join(errors)[-6000:]


def kill_after_checkpoint(command: list[str], out: Path, checkpoint_step: int, max_steps: int) -> None:
    """Run ``command``, which writes its checkpoints to ``out``, and SIGKILL it (`_kill`) once the checkpoint of
    ``checkpoint_step`` is complete; the run must not have reached ``max_steps`` by then. Its paused rewards
    (`helpers.reward_pause`) take half a second, time to kill it between two steps."""
    env = {**worker_env(), REWARD_PAUSE: "0.5"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not _checkpoint_complete(out / f"checkpoint-{checkpoint_step}", checkpoint_step):
        assert process.poll() is None and time.monotonic() < deadline, f"{out}: the run ended before its checkpoint"
        time.sleep(0.02)
    _kill(process)
    assert not (out / f"checkpoint-{max_steps}").exists(), f"{out}: the run finished before it was killed"


def _kill_and_resume(root: Path, processes: int, runs: dict[str, tuple]) -> dict[str, tuple[Path, Path]]:
    """For each of ``runs`` (name -> (its `trl-pods train` arguments for an output folder, its checkpoint step, its
    last step)) on ``processes`` processes: run it to the end in ``root/name/reference``; run it again in
    ``root/name/killed``, SIGKILL it once the checkpoint of its checkpoint step is complete, and resume it from that
    checkpoint. Returns each run's two output folders."""
    folders = {name: (root / name / "reference", root / name / "killed") for name in runs}

    def in_one_launch(argvs: list[list[str]]) -> None:
        _run(_launch(processes, str(RUNS), *join_runs(argvs)))

    in_one_launch([arguments(folders[name][0]) for name, (arguments, *_) in runs.items()])
    for name, (arguments, checkpoint_step, max_steps) in runs.items():
        killed = folders[name][1]
        command = _launch(processes, "-m", "trl_pods.cli", "train", *arguments(killed))
        kill_after_checkpoint(command, killed, checkpoint_step, max_steps)
    resume = ["--resume_from_checkpoint", "last"]
    in_one_launch([[*arguments(folders[name][1]), *resume] for name, (arguments, *_) in runs.items()])
    return folders


def _assert_same_run(reference: Path, killed: Path) -> dict[tuple[int, int], dict]:
    expected, resumed = _selections(reference), _selections(killed)
    assert sorted(expected) == sorted(resumed)
    for key in expected:
        for field in ("prompts", "rewards", "kept", "generated"):
            assert resumed[key][field] == expected[key][field], (key, field)
    assert _logged(killed) == _logged(reference), "the resumed run diverged from the uninterrupted one"
    return expected


@pytest.fixture(scope="session")
def one_process_runs(tiny_model_path, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """`LAYOUTS`' runs on one process, killed after their checkpoint and resumed (`_kill_and_resume`), 2 steps on."""

    def run(options, checkpoint_step):
        max_steps = checkpoint_step + 2
        return (
            (lambda out: _command(tiny_model_path, out, max_steps, checkpoint_step, *options)),
            checkpoint_step,
            max_steps,
        )

    runs = {layout: run(*LAYOUTS[layout]) for layout in LAYOUTS}
    return _kill_and_resume(tmp_path_factory.mktemp("kill-resume-1"), 1, runs)


@pytest.mark.xdist_group("kill_resume_1")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_killed_run_resumes_exactly(one_process_runs, layout):
    """SIGKILL after a checkpoint, resume from it: the resumed run equals the uninterrupted one (selections, waves,
    losses, token counts), in every layout; with generations spanning several steps the checkpoint lies mid-cycle,
    and the run must carry on with the buffered rollouts rather than generate again."""
    checkpoint_step = LAYOUTS[layout][1]
    expected = _assert_same_run(*one_process_runs[layout])
    if layout == "adaptive":
        counts = [count for record in expected.values() for count in record["generated"]]
        assert 8 in counts and 4 in counts, f"both one-wave and topped-up groups must occur: {counts}"
    if layout == "budgeted":  # a resumed run that lost the history would spread the budget evenly (6, 6)
        after = [sorted(record["generated"]) for (step, _), record in expected.items() if step >= checkpoint_step]
        assert after == [[4, 8], [4, 8]], f"allocations after the checkpoint come from the history: {after}"


# Two processes, two trained prompts each per step, an epoch of 2 optimizer steps (8 training prompts; screened reads
# a pool of 2 prompts per trained prompt, so 16). The checkpoint at step 3 lies one step into epoch 1, so the resumed
# run skips a batch of a later epoch (accelerate's SkipBatchSampler around its BatchSamplerShard) and must still see
# epoch 1's order, then epoch 2's. Refill reads the prompts it draws from its epoch's order: with rare rewards most
# groups lack contrast, so its epochs of 24 prompts last fewer steps than TRL's 6, and the checkpoint lies after draws.
RARE = ["--reward_funcs", "helpers.paused_rare_reward"]
TWO_PROCESS_MODES = {
    "fixed": (["--reward_funcs", "helpers.paused_token_sum_reward"], 8),
    "adaptive": ([*RARE, "--pods_generation", "adaptive"], 8),
    "budgeted": (["--reward_funcs", "helpers.paused_even_solved_reward", "--pods_generation", "budgeted",
                  "--pods_budget", "6"], 8),
    "refill": ([*RARE, "--pods_generation", "refill", "--pods_max_draws", "3", "--pods_draw_coverage", "0"], 24),
    "auto": ([*RARE, "--pods_generation", "auto", "--pods_auto_costs", "call=1,rollout=0.001,step=0.5"], 48),
    "screened": ([*RARE, "--pods_generation", "screened", "--pods_screen_ratio", "2", "--pods_n_initial", "2"], 16),
}  # fmt: skip


@pytest.fixture(scope="session")
def two_process_runs(tiny_model_path, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """`TWO_PROCESS_MODES`' runs on 2 processes, 5 steps, killed after the checkpoint of step 3 and resumed
    (`_kill_and_resume`)."""

    def run(mode_options, train_size):
        options = [*mode_options, "--task_train_size", str(train_size), "--per_device_train_batch_size", "8"]
        return (lambda out: _command(tiny_model_path, out, 5, 3, *options)), 3, 5

    runs = {mode: run(*TWO_PROCESS_MODES[mode]) for mode in TWO_PROCESS_MODES}
    return _kill_and_resume(tmp_path_factory.mktemp("kill-resume-2"), 2, runs)


@pytest.mark.xdist_group("kill_resume_2")
@pytest.mark.parametrize("mode", list(TWO_PROCESS_MODES))
def test_killed_two_process_run_resumes_exactly_mid_epoch(two_process_runs, mode):
    """2 torchrun processes, SIGKILL one step into the second epoch, resume: every later step (the rest of epoch 1
    and epoch 2) trains on the uninterrupted run's prompts, rollouts and selections, with its losses. Guards the CPU
    crash loading the PODS state onto ``cpu:0``, and a resumed epoch replaying epoch 0's prompt order."""
    expected = _assert_same_run(*two_process_runs[mode])
    epochs = [sorted(expected[(step, 0)]["prompts"]) for step in range(5)]
    assert epochs[0] + epochs[1] != epochs[2] + epochs[3], "epochs 0 and 1 drew the same order: nothing is tested"
    counts = [count for record in expected.values() for count in record["generated"]]
    if mode == "adaptive":
        assert 8 in counts and 4 in counts, f"both one-wave and topped-up groups must occur: {counts}"
    if mode in ("refill", "auto"):  # some generation drew further prompts for its groups without contrast
        assert any(sum(c > 0 for c in record["generated"]) > 4 for record in expected.values()), expected
    if mode == "screened":  # pool prompts piloted only, and chosen ones committed
        assert {2, 8} <= set(counts), counts


def test_epoch_replay_gives_a_resumed_run_the_epochs_order():
    """TRL's RepeatSampler draws each epoch's order from a generator seeded once, so a sampler rebuilt on resume
    would replay epoch 0's order at epoch 2. Wrapped, epoch e yields the e-th order of the uninterrupted sequence."""
    from trl.trainer.utils import RepeatSampler

    from trl_pods.prompt_order import EpochReplay

    def sampler():
        return RepeatSampler(list(range(6)), mini_repeat_count=2, batch_size=3, seed=5)

    uninterrupted = sampler()
    orders = [list(uninterrupted) for _ in range(3)]
    assert orders[0] != orders[2]
    resumed = EpochReplay(sampler())
    resumed.set_epoch(2)
    assert list(resumed) == orders[2]
    continuing = EpochReplay(sampler())
    assert [list(continuing) for continuing.epoch in range(3)] == orders


def test_state_source_refuses_a_checkpoint_missing_some_processes_states():
    """Which saved PODS state each process restores: its own; none from a checkpoint without any (TRL's); with more
    processes than saved the checkpoint, the new ones take the first saved state (its position is discarded with the
    layout, the reward history and refill draws are shared); a checkpoint saved by as many processes as the run has
    but lacking some of their states is refused (its processes would resume at different positions and hang)."""
    from trl_pods.resume import state_source

    assert state_source([True, True], None, "ckpt") == [0, 1]
    assert state_source([False, False], None, "ckpt") == [None, None]
    assert state_source([True, True, False, False], 2, "ckpt") == [0, 1, 0, 0]
    with pytest.raises(ValueError, match=r"ckpt is incomplete.*process \[1, 2\] \(pods_state_1.pt, pods_state_2.pt\)"):
        state_source([True, False, False], 3, "ckpt")
