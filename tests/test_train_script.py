"""The training command end to end on the tiny model: from YAML and from flags, saving, and resuming; on a machine
without a GPU; the task's own reward and completion length; its help; and its one-line errors for user mistakes,
raised before any download or model load."""

import http.server
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import yaml
from helpers import free_port
from transformers.utils import is_torch_bf16_gpu_available

from trl_pods import train as train_module
from trl_pods.cpu import cpu_threads
from trl_pods.flags import precheck
from trl_pods.hub import hub_reachable, in_cache
from trl_pods.inputs import check_output_dir
from trl_pods.no_signal import FLAT_STEPS
from trl_pods.resume import saved_settings
from trl_pods.train import device_defaults, main, parse_arguments, parser

DATA = Path(__file__).parent / "data"
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


def test_trains_trl_grpo_trainer_itself_when_asked(tiny_model_path, tmp_path):
    """``train(..., trainer_class=trl.GRPOTrainer)`` trains TRL's own trainer, with a `trl.GRPOConfig`, on the data,
    rewards and model a PODS run gets (the benchmarks' baseline), and saves what a PODS run saves."""
    from trl import GRPOConfig, GRPOTrainer, ModelConfig

    from trl_pods.train import ScriptArguments, train

    out = tmp_path / "run"
    config = GRPOConfig(
        output_dir=str(out), num_generations=4, per_device_train_batch_size=4, max_steps=2, logging_steps=1,
        use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none", disable_tqdm=True,
        max_completion_length=6, save_strategy="no",
    )  # fmt: skip
    script_args = ScriptArguments(task="arithmetic", reward_funcs=["arithmetic"])
    trainer = train(script_args, config, ModelConfig(str(tiny_model_path)), trainer_class=GRPOTrainer)
    assert type(trainer) is GRPOTrainer and _logged_steps(out) == [1, 2]
    assert json.loads((out / "run_args.json").read_text())["training"]["num_generations"] == 4


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


def test_a_run_prints_no_library_noise_a_user_cannot_act_on(tiny_model_path, tmp_path):
    """Every `trl-pods train` run printed deepspeed's "Setting accelerator to CPU" warning and transformers'
    FutureWarnings about names TRL uses (`gradient_checkpointing`, `is_gradient_checkpointing`, ...). Without a GPU
    the command tells deepspeed it runs on the CPU, and those FutureWarnings are filtered by their message."""
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator")
    flags = _flags(tiny_model_path, tmp_path / "run", "--max_steps", "1", "--save_strategy", "no")
    cpu = {i for i, flag in enumerate(flags) if flag in ("--use_cpu", "--bf16", "--gradient_checkpointing")}
    flags = [flag for i, flag in enumerate(flags) if not (i in cpu or i - 1 in cpu)]  # TRL's defaults
    env = {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}
    result = subprocess.run(
        [sys.executable, "-m", "trl_pods.cli", "train", *flags], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Setting accelerator to CPU" not in result.stderr
    assert "FutureWarning" not in result.stderr, result.stderr[-3000:]


def test_resume_continues_at_the_right_step(tiny_model_path, tmp_path):
    """--resume_from_checkpoint last continues after the checkpoint's step: no step repeated or skipped."""
    out = tmp_path / "run"
    main(_flags(tiny_model_path, out, "--max_steps", "2", "--save_steps", "2"))
    assert (out / "checkpoint-2").is_dir()
    main(_flags(tiny_model_path, out, "--max_steps", "4", "--save_steps", "2", "--resume_from_checkpoint", "last"))
    assert _logged_steps(out) == [1, 2, 3, 4]
    assert json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4


def test_last_skips_an_incomplete_checkpoint_and_a_finished_run_trains_nothing(tiny_model_path, tmp_path, capsys):
    """A kill while a checkpoint was being saved left a partial ``checkpoint-N``, and ``--resume_from_checkpoint last``
    took it (the highest number) and crashed on every rank on its missing ``trainer_state.json``, the file Trainer
    writes last; the user had to find and delete it by hand. ``last`` now resumes from the newest complete checkpoint
    and says in one line which it skipped; the run then saves that step again, whole. Resumed from its final
    checkpoint, a run trained one step past ``--max_steps`` (at learning rate 0, a new checkpoint, "for 15 steps" of
    14); it now says the run is complete and trains nothing."""
    out = tmp_path / "run"
    flags = _flags(tiny_model_path, out, "--max_steps", "3", "--save_steps", "1")
    main(flags)
    state = out / "checkpoint-3" / "trainer_state.json"  # as a kill halfway through writing it leaves it
    state.write_text(state.read_text()[: len(state.read_text()) // 2])
    (out / "checkpoint-2" / "trainer_state.json").unlink()  # and one killed before writing it
    capsys.readouterr()
    main([*flags, "--resume_from_checkpoint", "last"])
    said = capsys.readouterr().out.splitlines()
    assert said[0] == (
        "trl-pods train: resuming from checkpoint-1: checkpoint-3, checkpoint-2 are incomplete (the run stopped while "
        "saving), skipped"
    ), said
    assert _logged_steps(out) == [1, 2, 3]
    assert json.loads(state.read_text())["global_step"] == 3  # saved again, whole
    main([*flags, "--resume_from_checkpoint", "last"])
    assert capsys.readouterr().out.splitlines() == [
        f"trl-pods train: {out / 'checkpoint-3'} is at step 3 of --max_steps 3: the run is complete, nothing to train "
        "(a larger --max_steps trains on from it)."
    ]
    assert not (out / "checkpoint-4").exists() and _logged_steps(out) == [1, 2, 3]


def test_resuming_a_refill_checkpoint_with_other_draw_settings_warns(tiny_model_path, tmp_path, caplog):
    """Refill's default became sized draws (``pods_draw_coverage`` 0.9, where unset had meant exactly the missing
    groups), so the same command resumed an older refill checkpoint drawing differently, without a word. The
    checkpoint's ``training_args.bin`` (here made as an older version saved it) says what it drew with, and the resume
    warns in one line naming the settings that changed; resumed as saved, it says nothing."""
    out = tmp_path / "run"
    refill = ["--pods_generation", "refill", "--task_train_size", "64", "--save_steps", "1"]
    main(_flags(tiny_model_path, out, "--max_steps", "1", *refill, "--pods_draw_coverage", "0"))
    saved = out / "checkpoint-1" / "training_args.bin"
    assert saved_settings(str(out / "checkpoint-1"))["pods_draw_coverage"] == 0.0
    older = torch.load(saved, weights_only=False)  # the test's own file
    older.pods_draw_coverage = older.pods_max_prompt_ratio = None  # refill's exact draws before 0.2.0
    torch.save(older, saved)
    resume = ["--resume_from_checkpoint", str(out / "checkpoint-1")]
    main(_flags(tiny_model_path, out, "--max_steps", "2", *refill, "--pods_draw_coverage", "0", *resume))
    assert not [r for r in caplog.records if r.name == "trl_pods.resume"]
    main(_flags(tiny_model_path, out, "--max_steps", "2", *refill, *resume))
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "trl_pods.resume"]
    assert warning.startswith(
        "Resuming with other draw settings than the checkpoint was saved with (pods_draw_coverage 0.0 -> 0.9, "
        "pods_max_prompt_ratio None -> 4; "
    ), warning


def test_the_saved_settings_are_read_without_running_the_files_code(tmp_path):
    """A checkpoint's ``training_args.bin`` is a pickle, which loading would run; its settings are read as plain
    records, so a file that would run a command runs nothing."""

    class Runs:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    (tmp_path / "checkpoint-1").mkdir()
    torch.save({"pods_n": Runs()}, tmp_path / "checkpoint-1" / "training_args.bin")
    assert saved_settings(str(tmp_path / "checkpoint-1")) == {} and not (tmp_path / "ran").exists()


def test_a_renamed_flag_works_for_one_more_release_and_says_its_new_name(tmp_path, monkeypatch, capsys):
    """``--arithmetic_train_size`` became ``--task_train_size`` (and the test size likewise), and old commands stopped
    with an error. The old names work until the next release, each with one warning line naming the new flag."""
    monkeypatch.setattr(train_module, "check_on_hub", lambda *args: None)
    argv = ["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--output_dir", str(tmp_path / "run"), "--task",
            "arithmetic", "--arithmetic_train_size", "30", "--arithmetic_test_size=7"]  # fmt: skip
    script_args, _, _ = parse_arguments(parser(), argv)
    assert (script_args.task_train_size, script_args.task_test_size) == (30, 7)
    assert capsys.readouterr().err.strip().splitlines() == [
        "trl-pods train: warning: --arithmetic_train_size is now --task_train_size; the old name goes in the next "
        "release.",
        "trl-pods train: warning: --arithmetic_test_size is now --task_test_size; the old name goes in the next "
        "release.",
    ]


def test_a_run_in_which_no_trained_group_had_contrast_says_so(tiny_model_path, tmp_path, capsys, caplog):
    """A run whose every rollout scored alike (``reasoning_gym:count_bits``: reward 0 everywhere, loss 0 on every step)
    ended like a healthy one. After `FLAT_STEPS` such steps it warns, and it ends with one line saying that nothing was
    learned and where to look (the task's settings, the base model's accuracy)."""
    out = tmp_path / "run"
    never = ["--reward_funcs", "helpers.never_solved_reward", "--save_strategy", "no"]
    main(_flags(tiny_model_path, out, "--max_steps", str(FLAT_STEPS), *never))
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert (
        last.startswith("trl-pods train: warning: no trained group had contrast") and "reasoning-gym-base.md" in last
    )
    warnings = [r.getMessage() for r in caplog.records if r.name == "trl_pods.no_signal"]
    assert len(warnings) == 1 and warnings[0].startswith(f"Steps 1-{FLAT_STEPS} trained no group with contrast")


def test_the_closing_eval_command_is_sized_for_a_cpu(monkeypatch):
    """The evaluation command a run printed took 9 minutes on a CPU for a reasoning-gym task (200 problems, two
    models), against 2 of training, silently. Without a GPU it now asks for `CPU_EVAL_PROBLEMS` problems and says so;
    a held-out set that small already, or a GPU, keeps the whole set. The reason was in parentheses after the command,
    which the shell refused when the line was pasted: it is a shell comment."""
    from trl import ModelConfig

    from trl_pods import PODSConfig
    from trl_pods.train import CPU_EVAL_PROBLEMS, ScriptArguments, eval_command

    training, model = PODSConfig(output_dir="runs/x", pods_n=4, pods_m=2), ModelConfig("m")
    monkeypatch.setattr("torch.accelerator.is_available", lambda: False)
    rg = eval_command(ScriptArguments(task="reasoning_gym:chain_sum"), training, model)
    assert rg.endswith(f"--max_problems {CPU_EVAL_PROBLEMS}  # the first {CPU_EVAL_PROBLEMS} of its 200 held-out "
                       "problems, for a CPU")  # fmt: skip
    words = shlex.split(rg, comments=True)  # as a shell reads the pasted line
    assert words[:2] == ["trl-pods", "eval"] and words[-2:] == ["--max_problems", str(CPU_EVAL_PROBLEMS)]
    assert "--max_problems" in eval_command(ScriptArguments(task="gsm8k"), training, model)
    assert "--max_problems" not in eval_command(ScriptArguments(task="arithmetic"), training, model)  # 50 already
    monkeypatch.setattr("torch.accelerator.is_available", lambda: True)
    assert "--max_problems" not in eval_command(ScriptArguments(task="reasoning_gym:chain_sum"), training, model)


def test_without_a_gpu_trains_in_float32_on_the_cpu_and_says_so(tiny_model_path, tmp_path, capsys):
    """On a CPU machine TRL's default bf16=True made transformers refuse to start ("assign use_cpu"), and with
    --use_cpu alone run_args.json claimed bf16. Without --use_cpu/--bf16 the run trains on the CPU in float32, on the
    threads the command chooses (`cpu_threads`), prints one line saying so, and run_args.json records the device and
    precision that really ran."""
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator")
    out = tmp_path / "run"
    flags = _flags(tiny_model_path, out, "--max_steps", "1", "--save_strategy", "no")
    cpu_flags = {i for i, flag in enumerate(flags) if flag in ("--use_cpu", "--bf16")}
    main([flag for i, flag in enumerate(flags) if not (i in cpu_flags or i - 1 in cpu_flags)])
    said = [line for line in capsys.readouterr().out.splitlines() if "no GPU" in line]
    assert torch.get_num_threads() == cpu_threads()  # the command chose them: it owns the process
    threads = f"{torch.get_num_threads()} thread(s) (OMP_NUM_THREADS to choose)"
    assert said == [
        f"trl-pods train: no GPU: training on the CPU, {threads}, with float32 weights and no mixed precision "
        "(--bf16 false)"
    ]
    args = json.loads((out / "run_args.json").read_text())
    launch = {key: args["launch"][key] for key in ("device", "mixed_precision", "weights_dtype")}
    assert launch == {"device": "cpu", "mixed_precision": "no", "weights_dtype": "float32"}
    assert args["training"]["bf16"] is False


@pytest.mark.parametrize(("accelerator", "expected"), [(True, {}), (False, {"dataloader_pin_memory": False})])
def test_device_defaults(monkeypatch, accelerator, expected):
    """An accelerator keeps TRL's defaults; without one there is no memory to pin. `use_cpu` is never defaulted on (it
    turns DeepSpeed off); bf16 is `PODSConfig`'s choice (tests/test_cpu.py)."""
    monkeypatch.setattr("torch.accelerator.is_available", lambda: accelerator)
    assert device_defaults() == expected


@pytest.mark.parametrize(
    ("task", "flags", "reward_funcs", "length"),
    [
        ("arithmetic", [], ["arithmetic"], 16),
        ("gsm8k", [], ["gsm8k"], 512),
        ("math", [], ["accuracy"], 512),
        ("arithmetic", ["--reward_funcs", "format", "--max_completion_length", "32"], ["format"], 32),
        ("arithmetic", ["--config", "RECIPE"], ["arithmetic"], 64),
    ],
)
def test_the_task_sets_the_reward_and_completion_length_the_user_did_not(
    tmp_path, monkeypatch, task, flags, reward_funcs, length
):
    """`--task arithmetic` trained with the `gsm8k` reward and TRL's 512-token completions (0 of 2 CPU steps done
    after 400 s) unless both were given. The task's reward and completion length are the defaults now; a flag or a
    YAML recipe (here max_completion_length: 64) still sets them."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("max_completion_length: 64\n")
    flags = [str(recipe) if flag == "RECIPE" else flag for flag in flags]
    argv = [
        "--model_name_or_path",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--output_dir",
        str(tmp_path / "run"),
        "--task",
        task,
    ]
    monkeypatch.setattr(train_module, "check_on_hub", lambda *args: None)  # offline here; tested apart below
    script_args, training_args, _ = parse_arguments(parser(), [*argv, *flags])
    assert (script_args.reward_funcs, training_args.max_completion_length) == (reward_funcs, length)


def test_help_opens_with_the_command_the_pods_and_script_flags():
    """`--help` was 1,469 lines, its usage line said `trl-pods` and --pods_n came at line 1,316. Now the usage line
    names the command, a description follows, the PODS and script flags come within the first 60 lines, and TRL's
    and transformers' other flags appear only with --help-all (the brief help is 257 lines with this session's task,
    draw and output-folder flags; under 250 before)."""

    def help_text(flag):
        result = subprocess.run(
            [sys.executable, "-m", "trl_pods.cli", "train", flag], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout.splitlines()

    brief, full = help_text("--help"), help_text("--help-all")
    assert brief[0].startswith("usage: trl-pods train ") and brief[2].startswith("Train a model with PODS")
    first = "\n".join(brief[:60])
    for flag in ("--pods_n", "--pods_m", "--pods_down_sampler", "--pods_generation"):
        assert flag in first, flag
    for flag in ("--task", "--reward_funcs", "--model_name_or_path", "--output_dir", "--help-all"):
        assert any(line.lstrip().startswith(flag) for line in brief), flag
    assert not any("--adam_beta1" in line for line in brief) and any("--adam_beta1" in line for line in full)
    assert len(brief) < 300 < len(full)  # TRL's and transformers' flags alone take over 1,000 lines
    negative = next(i for i, line in enumerate(full) if line.lstrip().startswith("--no_pods_selection_log"))
    assert full[negative + 1].strip() == "Turn --pods_selection_log off (it is on by default)."  # not the positive's


BAD_FLAGS = {
    "reward function": (["--reward_funcs", "gsm8kk"], "Unknown reward function 'gsm8kk'"),
    "down-sampler": (["--pods_down_sampler", "maxvar"], "Unknown down-sampler 'maxvar'"),
    "allocation rule": (
        ["--pods_generation", "budgeted", "--pods_budget", "12", "--pods_allocation", "nope"],
        "'nope'",
    ),
    "task": (
        ["--task", "gsm9k"],
        "Unknown task 'gsm9k' (did you mean 'gsm8k'?); known: gsm8k, math, arithmetic, reasoning_gym:<name>.",
    ),
    "reasoning-gym dataset": (
        ["--task", "reasoning_gym:cont_bits"],
        "Unknown reasoning-gym dataset 'cont_bits' (did you mean 'count_bits'?); ",
    ),
    "generation mode": (["--pods_generation", "refil"], "Unknown generation mode 'refil' (did you mean 'refill'?)"),
    "down-sampler name": (["--pods_down_sampler", "max_varience"], "(did you mean 'max_variance'?)"),
    "difficulty": (["--task", "arithmetic", "--arithmetic_difficulty", "add9"], "--arithmetic_difficulty 'add9'"),
    "reward weights": (["--reward_weights", "1", "2"], "--reward_weights has 2 value(s) for 1 --reward_funcs"),
    "group sizes": (["--pods_n", "3", "--pods_m", "4"], "pods_n (3) is smaller than pods_m (4)"),
    "unknown flag": (
        ["--pods_nn", "8"],
        "unknown flags (--help-all lists all): ['--pods_nn', '8'] (did you mean --pods_n?)",
    ),
    "missing model folder": (
        ["--model_name_or_path", "/tmp/no-such-dir/SmolLM2-135M-Instruc"],
        "--model_name_or_path /tmp/no-such-dir/SmolLM2-135M-Instruc: no such folder",
    ),
    "data file for arithmetic": (
        ["--task", "arithmetic", "--dataset_path", "train.jsonl"],
        "--dataset_path: the arithmetic task is generated",
    ),
    "bf16 without a GPU": (["--bf16", "true"], "--bf16 true needs a GPU with bf16"),
    "data file": (["--dataset_path", "missing.jsonl"], "--dataset_path missing.jsonl: no such file"),
    "config file": (["--config", "missing.yaml"], "--config missing.yaml: no such file."),
    "resume": (["--resume_from_checkpoint", "last"], "--resume_from_checkpoint last: no complete checkpoint in"),
    "max_steps 0": (["--max_steps", "0"], "max_steps=0 would still train one step"),
    "flag typo behind a config error": (
        ["--per_device_train_batch_size", "4", "--pods_mm", "4"],
        "unknown flags (--help-all lists all): ['--pods_mm', '4'] (did you mean --pods_m?)",
    ),
    "LoRA without --use_peft": (
        ["--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", "all-linear"],
        "--lora_r 16, --lora_alpha 32, --lora_target_modules all-linear set up a LoRA adapter, which trains only with "
        "--use_peft true",
    ),
    "logger not installed": (
        ["--report_to", "trackio"],
        "--report_to trackio: the trackio logger needs the package trackio, which is not installed: pip install "
        "trackio",
    ),
    "unknown logger": (["--report_to", "tensorbord"], "Unknown logger 'tensorbord' (did you mean 'tensorboard'?)"),
    "coverage out of range": (
        ["--pods_generation", "refill", "--pods_draw_coverage", "1.5"],
        "pods_draw_coverage is a probability in (0, 1); got 1.5",
    ),
    "coverage its mode does not use": (
        ["--pods_draw_coverage", "0.5"],
        "pods_draw_coverage sizes the draws of pods_generation='refill', 'auto' or 'screened', and "
        "pods_generation='fixed' draws no prompts",
    ),
    "missing checkpoint folder": (
        ["--resume_from_checkpoint", "/tmp/no-such-dir/checkpoint-10"],
        "--resume_from_checkpoint /tmp/no-such-dir/checkpoint-10: no such folder",
    ),
    "output folder of an earlier run": (
        ["--output_dir", "EARLIER"],
        "--output_dir EARLIER already holds files (an earlier run?): give a new folder (EARLIER-2 is free), "
        "--resume_from_checkpoint to continue that run, or --overwrite_output_dir true to empty it first",
    ),
}


HEAVY = {"allocation rule", "reasoning-gym dataset", "reward weights", "group sizes", "bf16 without a GPU",
         "max_steps 0", "coverage out of range", "coverage its mode does not use"}  # fmt: skip
"""The mistakes only the full parser finds (the config's checks, an installed package's names); every other one
`trl_pods.flags.precheck` answers before the heavy imports, in the same line."""


@pytest.mark.parametrize("mistake", BAD_FLAGS)
def test_user_errors_print_one_line_before_any_download_or_model_load(mistake, tmp_path, monkeypatch, capsys):
    """A user mistake printed a 7-18 frame traceback, and with the default GSM8K task a mistyped reward function
    surfaced only after the dataset download (or behind a Hub error offline). Each mistake now ends in one
    `trl-pods train: error:` line on stderr, exit status 2, before any dataset or model is loaded. Each one that needs
    no heavy import is answered the same by the check before them (`trl_pods.flags.precheck`, from the manifest the
    run saved), which passes the others on."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("loaded data before checking the arguments")

    if mistake == "bf16 without a GPU" and is_torch_bf16_gpu_available():
        pytest.skip("this machine has a GPU with bf16")
    if mistake == "logger not installed" and importlib.util.find_spec("trackio") is not None:
        pytest.skip("trackio is installed here")
    monkeypatch.setattr(train_module, "load_datasets", must_not_run)
    monkeypatch.setattr(train_module, "PODSGRPOTrainer", must_not_run)
    monkeypatch.setenv("TRL_PODS_CACHE", str(tmp_path / "cache"))
    flags, message = BAD_FLAGS[mistake]
    earlier = tmp_path / "earlier"
    (earlier / "checkpoint-10").mkdir(parents=True)
    (tmp_path / "run").mkdir()
    flags = [str(earlier) if flag == "EARLIER" else flag for flag in flags]
    message = message.replace("EARLIER", str(earlier))
    argv = ["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--output_dir", str(tmp_path / "run"), *flags]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trl-pods train: error: ") and message in line, line
    if mistake in HEAVY:
        assert precheck("train", argv) == argv
        return
    with pytest.raises(SystemExit) as exit_:
        precheck("train", argv)
    assert exit_.value.code == 2 and capsys.readouterr().err.strip() == line


def test_user_error_through_the_console_script_has_no_traceback(tmp_path):
    """Through the `trl-pods` entry point, as a user runs it: one line, no traceback, status 2."""
    command = [sys.executable, "-m", "trl_pods.cli", "train", "--model_name_or_path", "m", "--reward_funcs", "gsm8kk"]
    result = subprocess.run([*command, "--output_dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("trl-pods train: error: Unknown reward function 'gsm8kk'")


def test_max_steps_0_trains_nothing_it_is_refused(tiny_model_path, tmp_path, capsys):
    """`--max_steps 0` trained one step (transformers checks the count after a step); it is refused with what to
    give instead, and the output folder stays empty."""
    with pytest.raises(SystemExit) as exit_:
        main(_flags(tiny_model_path, tmp_path / "run", "--max_steps", "0"))
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trl-pods train: error: max_steps=0") and "at least 1" in line, line
    assert not (tmp_path / "run").exists()


def test_a_missing_checkpoint_folder_is_one_line_before_the_model_loads(tiny_model_path, tmp_path, capsys):
    """A mistyped `--resume_from_checkpoint` folder was a 19-line traceback after the model had loaded, and left an
    empty output folder behind. It is now one `error:` line naming the folder, before anything loads or is made."""
    with pytest.raises(SystemExit) as exit_:
        main(_flags(tiny_model_path, tmp_path / "run", "--resume_from_checkpoint", str(tmp_path / "checkpoint-9")))
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"trl-pods train: error: --resume_from_checkpoint {tmp_path / 'checkpoint-9'}: no such folder."
    assert not (tmp_path / "run").exists()


def test_overwrite_empties_an_earlier_run_and_the_run_ends_saying_what_it_did(tiny_model_path, tmp_path, capsys):
    """Into a folder that already held a run, `trl-pods train` trained without a word, mixing both runs in
    pods_selections.jsonl beside the old run's files; it now refuses (see `BAD_FLAGS`), and
    ``--overwrite_output_dir true`` empties the folder first. A run ended in a 1,500-character metrics block; it now
    ends with what it trained, where it saved it and the `trl-pods eval` command to run next (the metrics stay in
    train_results.json and trainer_state.json)."""
    out = tmp_path / "run"
    (out / "checkpoint-40").mkdir(parents=True)
    (out / "pods_selections.jsonl").write_text('{"an earlier run": 1}\n')
    contrast = ["--reward_funcs", "helpers.token_sum_reward"]  # a run that learns: no warning that it cannot
    main(_flags(tiny_model_path, out, "--max_steps", "1", "--save_strategy", "no", "--overwrite_output_dir", "true",
                *contrast))  # fmt: skip
    assert not (out / "checkpoint-40").exists() and (out / "model.safetensors").exists()
    assert "an earlier run" not in (out / "pods_selections.jsonl").read_text()
    assert "train_loss" in json.loads((out / "train_results.json").read_text())
    stdout = capsys.readouterr().out
    assert "***** train metrics *****" not in stdout
    tail = stdout.strip().splitlines()[-3:]
    assert tail == [
        f"trl-pods train: trained {tiny_model_path} on the arithmetic task for 1 step (PODS 8 -> 4, max_variance)",
        f"saved in {out}: the model, its card (README.md), run_args.json, and the metrics (train_results.json, "
        "trainer_state.json)",
        f"next, its accuracy: trl-pods eval --run_dir {out} --base_model {tiny_model_path} --task arithmetic",
    ], tail


HUB_MISTAKES = {
    "Hub model": (
        ["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--task", "arithmetic"],
        "--model_name_or_path Qwen/Qwen2.5-0.5B-Instruct needs the Hub model Qwen/Qwen2.5-0.5B-Instruct, which is "
        "not in the local cache, and the Hub is offline here (HF_HUB_OFFLINE=1): give a local model folder",
    ),
    "forgotten --task": (
        ["--model_name_or_path", "TINY"],
        "--task gsm8k needs the Hub dataset openai/gsm8k, which is not in the local cache, and the Hub is offline "
        "here (HF_HUB_OFFLINE=1): give --dataset_path FILE.jsonl",
    ),
    "Hub dataset": (
        ["--model_name_or_path", "TINY", "--dataset_path", "someone/gsm8k-copy"],
        "--dataset_path someone/gsm8k-copy needs the Hub dataset someone/gsm8k-copy",
    ),
    "evaluation split": (
        ["--model_name_or_path", "TINY", "--task", "math", "--dataset_path", "DATA", "--eval_split", "test"],
        "--task math needs the Hub dataset HuggingFaceH4/MATH-500",
    ),
}


@pytest.mark.parametrize("mistake", HUB_MISTAKES)
def test_offline_a_model_or_dataset_that_needs_the_hub_is_one_line(
    mistake, tiny_model_path, tmp_path, monkeypatch, capsys
):
    """Offline, a Hub model name or a forgotten ``--task`` (default gsm8k, a Hub dataset) ended in a 43-81 line
    traceback after 30-56 s of retries. A model or dataset that is neither local nor in the cache, with the Hub
    offline, is now one `error:` line saying what to give instead, before anything loads."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("loaded data before checking the arguments")

    monkeypatch.setattr(train_module, "load_datasets", must_not_run)
    monkeypatch.setattr(train_module, "PODSGRPOTrainer", must_not_run)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    flags, message = HUB_MISTAKES[mistake]
    flags = [{"TINY": str(tiny_model_path), "DATA": str(DATA / "math_sample.jsonl")}.get(f, f) for f in flags]
    with pytest.raises(SystemExit) as exit_:
        main(["--output_dir", str(tmp_path / "run"), *flags])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trl-pods train: error: ") and message in line, line


def test_an_unreachable_hub_is_found_out_at_once(tiny_model_path, tmp_path, monkeypatch, capsys):
    """Online but without a network, the same mistakes took 77 s of retries: the Hub is asked once (a few seconds at
    most; here a port nobody listens on), and a model it would have to download is one `error:` line."""
    monkeypatch.setattr("huggingface_hub.constants.is_offline_mode", lambda: False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert not hub_reachable()
    with pytest.raises(SystemExit):
        main(["--output_dir", str(tmp_path / "run"), "--model_name_or_path", "owner/model", "--task", "arithmetic"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "needs the Hub model owner/model" in line and "cannot be reached" in line, line


def test_a_model_in_the_hub_cache_needs_no_hub(tmp_path, monkeypatch):
    """A Hub name whose snapshot is in the local cache passes the check offline (transformers loads it from there),
    as does a dataset that `datasets` has cached; a Hub that answers, even with an error status, is reachable."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--owner--model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--owner--model" / "refs").mkdir()
    (cache / "models--owner--model" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    (tmp_path / "datasets" / "openai___gsm8k").mkdir(parents=True)
    assert in_cache("owner/model", "model") and not in_cache("owner/other", "model")
    assert in_cache("openai/gsm8k", "dataset") and not in_cache("openai/other", "dataset")
    train_module.check_hub_inputs({"model_name_or_path": "owner/model"}, "gsm8k", [("train", None)], None)

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_error(403)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.handle_request, daemon=True).start()
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setattr(
        "huggingface_hub.constants.is_offline_mode", lambda: False
    )  # huggingface_hub's client obeys it
    try:
        assert hub_reachable()
    finally:
        server.server_close()


def test_offline_mistake_through_the_console_script_is_one_line_at_once(tiny_model_path, tmp_path):
    """Through `trl-pods` as a user runs it offline, a forgotten ``--task`` with a local model: one line, status 2,
    no traceback, and no model or data loaded."""
    command = [sys.executable, "-m", "trl_pods.cli", "train", "--model_name_or_path", str(tiny_model_path)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty-cache"),
           "HF_DATASETS_CACHE": str(tmp_path / "empty-cache")}  # fmt: skip
    result = subprocess.run([*command, "--output_dir", str(tmp_path / "run")], capture_output=True, text=True,
                            timeout=300, env=env)  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("trl-pods train: error: --task gsm8k needs the Hub dataset openai/gsm8k"), line


def test_a_mistyped_command_is_one_line_with_a_suggestion(capsys):
    """`trl-pods trian` printed the usage without saying what was wrong; it is now one `error:` line naming the
    command typed and the closest one, exit status 2."""
    from trl_pods.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_:
        cli_main(["trian", "--max_steps", "2"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "trl-pods: error: unknown command 'trian' (did you mean 'train'?); the commands: train, eval, demo"
    ]


def test_the_hub_check_asks_through_huggingface_hubs_own_client(monkeypatch):
    """The reachability check probed the Hub with urllib: where a user configured huggingface_hub's client (a proxy,
    certificates: `huggingface_hub.set_client_factory`) or only urllib failed TLS, a reachable Hub was refused as
    "cannot be reached". It now asks through huggingface_hub's client (a stand-in here, no network): the Hub
    answers through it although nothing listens at the endpoint, and the client's transport error means
    unreachable."""
    from huggingface_hub import constants, set_client_factory
    from huggingface_hub.errors import HTTPError
    from huggingface_hub.utils import _http

    asked = []

    class StandInClient:
        """huggingface_hub's configured client: answers the Hub, or fails as a broken proxy does."""

        def __init__(self, fails: bool):
            self.fails = fails

        def head(self, url, **kwargs):
            asked.append(url)
            if self.fails:
                raise HTTPError("proxy refused the connection")
            return object()

        def close(self):
            pass

    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{free_port()}")
    factory = _http._GLOBAL_CLIENT_FACTORY
    try:
        set_client_factory(lambda: StandInClient(fails=False))
        assert hub_reachable() and asked == [constants.ENDPOINT]
        set_client_factory(lambda: StandInClient(fails=True))
        assert not hub_reachable() and len(asked) == 2
    finally:
        set_client_factory(factory)


@pytest.mark.parametrize("where", [".", "..", "HOME"])
def test_overwrite_output_dir_refuses_to_empty_the_working_folder_its_parents_or_home(where, tmp_path, monkeypatch):
    """``--overwrite_output_dir true`` empties ``--output_dir``: with ``--output_dir .`` (or a folder above the working
    one, or the home folder) it deleted the user's own files. Such a folder is refused with a ValueError naming it,
    and nothing in it is touched."""
    home, work = tmp_path / "home", tmp_path / "home" / "project"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with pytest.raises(ValueError, match="--overwrite_output_dir would empty"):
        check_output_dir(str(home) if where == "HOME" else where, resuming=False, overwrite=True, inputs={})
    assert (work / "notes.txt").read_text() == "mine"
    check_output_dir(str(work / "runs"), resuming=False, overwrite=True, inputs={})  # a folder below it: allowed


def test_the_default_output_folder_is_checked_too(tmp_path, monkeypatch, capsys):
    """Without ``--output_dir`` a run writes to transformers' default (``trainer_output``): an earlier run there is
    refused as in a folder given, before anything loads."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trainer_output" / "checkpoint-5").mkdir(parents=True)
    with pytest.raises(SystemExit):
        main(["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--task", "arithmetic"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trl-pods train: error: --output_dir trainer_output already holds files"), line


@pytest.mark.parametrize("given", ["model", "data file", "config", "inside the model"])
def test_overwrite_output_dir_never_empties_the_runs_own_inputs(given, tiny_model_path, tmp_path, capsys):
    """``--overwrite_output_dir true`` emptied ``--output_dir`` before anything loaded: given the model's folder as
    the output folder, the weights were deleted and the run failed on a missing tokenizer; a data file or a config
    file inside it went the same way. A folder that is, holds or lies inside an input is refused in one line naming
    the input, and nothing is touched."""
    model, run = tmp_path / "model", tmp_path / "run"
    shutil.copytree(tiny_model_path, model)
    (model / "onnx").mkdir()
    (model / "onnx" / "model.onnx").write_text("part of the model")
    run.mkdir()
    (run / "data.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    (run / "recipe.yaml").write_text("pods_n: 8\n")
    out, flags, message = {  # the output folder, the flags that give the input, how the two overlap
        "model": (model, [], f"which is --model_name_or_path {model}, an input of the run"),
        "data file": (
            run,
            ["--task", "gsm8k", "--dataset_path", str(run / "data.jsonl")],
            "which holds --dataset_path",
        ),
        "config": (run, ["--config", str(run / "recipe.yaml")], f"which holds --config {run / 'recipe.yaml'}"),
        "inside the model": (model / "onnx", [], f"which is inside --model_name_or_path {model}"),
    }[given]
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    with pytest.raises(SystemExit):
        main(_flags(model, out, "--overwrite_output_dir", "true", *flags))
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"trl-pods train: error: --overwrite_output_dir would empty --output_dir {out}, "), line
    assert message in line, line
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


def test_one_pair_of_size_flags_serves_every_generated_task():
    """``--task_train_size``/``--task_test_size`` size the arithmetic task and reasoning-gym's alike (arithmetic had a
    pair of its own); the held-out default is each task's (`trl_pods.tasks.TASK_TEST_SIZES`: 50 and 200) and a Hub
    task has none."""
    from trl_pods.train import ScriptArguments, load_datasets

    assert [ScriptArguments(task=t).task_test_size for t in ("arithmetic", "reasoning_gym:chain_sum", "gsm8k")] == [
        50, 200, None]  # fmt: skip
    train, _ = load_datasets(ScriptArguments(task="arithmetic", task_train_size=30, task_test_size=7), seed=3)
    assert len(train) == 30
