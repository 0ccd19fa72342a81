"""The offline demo's report, output folder, console, plots and model card (the demo itself runs end to end in CI;
its thread choice is tested in tests/test_cpu.py)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import load, pods_config, prompts_dataset, token_sum_reward
from matplotlib.figure import Figure

from trl_pods import PODSGRPOTrainer, demo, smollm2
from trl_pods.demo import verdict
from trl_pods.inputs import fresh_folder
from trl_pods.smollm2 import HUB_NAME


def test_verdict_says_plainly_when_training_ended_worse_and_names_the_best_checkpoint():
    """A run cut short by the time guard that ends below the base model must say so, and point to the best
    checkpoint (or to the base model when no checkpoint beats it) instead of presenting the last one."""
    lines = verdict([(0, 0.46), (10, 0.52), (20, 0.42)], steps_planned=40)
    assert lines[0] == "held-out accuracy: 0.46 before -> 0.42 after 20 PODS steps"
    assert any("stopped training at step 20 of 40" in line for line in lines)
    assert any(line.startswith("WARNING") and "worse than the base model" in line for line in lines)
    assert any("checkpoint-10 (0.52)" in line for line in lines)

    lines = verdict([(0, 0.46), (4, 0.40)], steps_planned=4)
    assert any("keep the base model" in line for line in lines)
    assert not any("stopped" in line for line in lines)


def test_verdict_is_quiet_when_the_last_checkpoint_is_the_best():
    """A normal run (the last checkpoint best, all steps done) reports before and after, nothing else."""
    assert verdict([(0, 0.46), (20, 0.78), (40, 0.88)], steps_planned=40) == [
        "held-out accuracy: 0.46 before -> 0.88 after 40 PODS steps"
    ]


def test_a_rerun_gets_a_folder_of_its_own(tmp_path):
    """A second `trl-pods demo` wrote into the first run's ./pods-demo: it evaluated the old checkpoint-10..40 as its
    own, mixed both runs in demo_summary.json, the card and the plots, and appended to pods_selections.jsonl. A run
    now goes to the wanted folder only while it is missing or empty, else to the first free NAME-2, NAME-3, ..."""
    wanted = tmp_path / "pods-demo"
    assert fresh_folder(wanted) == wanted
    wanted.mkdir()
    assert fresh_folder(wanted) == wanted  # empty: nothing to mix with
    (wanted / "checkpoint-40").mkdir()
    assert fresh_folder(wanted) == tmp_path / "pods-demo-2"
    (tmp_path / "pods-demo-2").mkdir()
    (tmp_path / "pods-demo-2" / "demo_log.txt").write_text("an interrupted run\n")
    assert fresh_folder(wanted) == tmp_path / "pods-demo-3"


def test_console_sends_everything_but_the_demos_lines_to_the_log(tmp_path, capfd):
    """The demo printed ~320 lines: warnings, a metrics dict per step, loading bars. Python's and C's writes to
    stdout/stderr and a child process's output now go to the log; only the lines written to the yielded stream reach
    the console, and the console is back to normal afterwards."""
    log = tmp_path / "demo_log.txt"
    with demo.console(log) as say:
        print("[demo] mine", file=say)
        print("a metrics dict")
        print("a warning", file=sys.stderr)
        os.write(2, b"a C library\n")
        subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
    print("after")
    out, err = capfd.readouterr()
    assert (out, err) == ("[demo] mine\nafter\n", "")
    assert log.read_text().splitlines() == ["a metrics dict", "a warning", "a C library", "a child process"]


def test_a_crash_keeps_its_traceback_and_names_the_log(tmp_path, capfd):
    """A real failure inside the quiet console still reaches the user: it propagates, and the console says where the
    full log is."""
    with pytest.raises(RuntimeError, match="boom"), demo.console(tmp_path / "log.txt"):
        raise RuntimeError("boom")
    assert f"[demo] failed; the full log is in {tmp_path / 'log.txt'}" in capfd.readouterr().out


def test_held_out_plot_starts_at_step_0_on_a_0_to_1_axis(tmp_path, monkeypatch):
    """eval_arithmetic.png dropped the base model (step 0) and cut its y-axis to 0.72-0.88, steepening the gain. The
    demo's held-out report and plot now start at step 0, on a 0-1 axis, titled with the setup."""
    results = [{"model": f"checkpoint-{s}", "step": s, "train_time_s": 6.0 * s, "accuracy": a, "pass@1": a}
               for s, a in ((10, 0.72), (20, 0.88))]  # fmt: skip
    report = {"task": "arithmetic", "num_samples": 1, "temperature": 0.0, "results": results}
    monkeypatch.setattr(demo, "held_out", lambda **kwargs: report)
    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *args, **kwargs: figures.append(self))
    before = {"model": "base", "step": None, "train_time_s": None, "accuracy": 0.46, "pass@1": 0.46}
    accuracy, _ = demo._held_out_report(tmp_path, tmp_path / "base", before)
    assert accuracy == [(0, 0.46), (10, 0.72), (20, 0.88)]
    saved = json.loads((tmp_path / "eval_arithmetic.json").read_text())["results"]
    assert [(r["step"], r["train_time_s"]) for r in saved] == [(0, 0.0), (10, 60.0), (20, 120.0)]
    (figure,) = figures
    assert all(axis.get_ylim() == (0, 1) for axis in figure.axes)
    assert figure.axes[0].lines[0].get_xdata()[0] == 0
    assert figure.get_suptitle().startswith(demo.SETUP)


def test_held_out_evaluates_the_test_problems_of_the_runs_seed(monkeypatch):
    """A run trained with seed s never sees the test problems of seed s, but may see those of the demo's seed 42 (on
    add2x1, 31 of those 50 are in seed 0's training set): ``held_out(seed=s)`` draws seed s's problems, and the
    demo's own by default. Before, a ``seed`` went to the sampling seed and the problems stayed the demo's."""
    drawn = []
    monkeypatch.setattr(demo, "evaluate", lambda args: drawn.append((args.arithmetic_seed, args.max_problems)))
    demo.held_out("add2x1", seed=3, model_name_or_path="model")
    demo.held_out("add2x1", model_name_or_path="model")
    assert drawn == [(3, demo.HELD_OUT), (demo.SEED, demo.HELD_OUT)]


def test_model_card_names_pods_its_paper_and_the_base_model(tiny_model_path, tmp_path):
    """TRL's card said "a fine-tuned version of [None]", `pipeline(..., model="None")` and "trained with GRPO". The
    demo's card is the PODS card: PODS and its paper, the base model by its folder's name and by the Hub model that the
    folder's card names (as `trl_pods.smollm2` writes it), a usage example loading this run, and the demo's section
    (how the weights were made, accuracy by step); the model's config is left as it was."""
    base = tmp_path / "SmolLM2-135M-Instruct"
    shutil.copytree(tiny_model_path, base)
    smollm2._write_card(base)
    model, tokenizer = load(base)
    trainer = PODSGRPOTrainer(
        model=model,
        reward_funcs=token_sum_reward,
        args=pods_config(tmp_path / "pods-demo", pods_n=4, pods_m=2, per_device_train_batch_size=2),
        train_dataset=prompts_dataset(),
        processing_class=tokenizer,
    )
    trainer.save_model()  # as the demo's training does before the card: a card goes only where the model is
    card = demo.model_card(trainer, [(0, 0.46), (40, 0.88)]).read_text()
    assert "trained with PODS (Policy Optimization with Down-Sampling, [Not All Rollouts are Useful" in card
    assert "https://huggingface.co/papers/2504.13818" in card and "Xu, Yixuan Even" in card
    assert f"the local folder `{base.name}`; its card names [{HUB_NAME}](https://huggingface.co/{HUB_NAME})" in card
    assert str(base) not in card.split("## Usage")[0]  # named by a name that holds once the run is shared
    assert f"base_model: {HUB_NAME}" in card and "None" not in card
    assert f"PeftModel.from_pretrained(base, '{tmp_path / 'pods-demo'}')" not in card  # a full model here
    assert f"AutoModelForCausalLM.from_pretrained('{tmp_path / 'pods-demo'}')" in card
    assert "4-bit (Q4_1) GGUF" in card and "0: 0.46, 40: 0.88" in card
    assert trainer.model.config._name_or_path == str(base)


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_max_steps_below_1_is_refused_before_anything_runs(steps, tmp_path, monkeypatch, capsys):
    """`trl-pods demo --max_steps 0` built the model, measured it and trained one step. It is now one `error:` line
    (exit status 2) before any folder is made or anything is built."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("the demo ran")

    monkeypatch.setattr(demo, "run", must_not_run)
    with pytest.raises(SystemExit) as exit_:
        demo.main(["--max_steps", steps, "--output_dir", str(tmp_path / "demo")])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"trl-pods demo: error: --max_steps {steps}: give the steps to train (at least 1)."
    assert not (tmp_path / "demo").exists()


def test_a_mistyped_demo_flag_is_one_line_with_a_suggestion(capsys):
    """`trl-pods demo --max_stepz 3` printed argparse's usage block before its error; like the other commands, it is
    one `error:` line naming the flag typed and the closest one, exit status 2."""
    with pytest.raises(SystemExit) as exit_:
        demo.main(["--max_stepz", "3"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "trl-pods demo: error: unrecognized arguments: --max_stepz 3 (did you mean --max_steps?)"
    ]


def test_the_demo_ends_saying_what_to_try_next(smollm2_cache, tmp_path, monkeypatch, capfd):
    """The demo's last line said where the run was saved, and nothing of what to do next; it now points to the same
    run from the command line and from Python, and to the PODS flags. The whole demo, on the tiny stand-in model."""
    monkeypatch.setenv("TRL_PODS_CACHE", str(smollm2_cache))
    demo.main(["--max_steps", "2", "--output_dir", str(tmp_path / "demo")])
    lines = capfd.readouterr().out.strip().splitlines()
    assert lines[-1] == f"[demo] {demo.NEXT}" and lines[-2].startswith(f"[demo] saved in {tmp_path / 'demo'}/")
    assert "trl-pods train --help" in demo.NEXT and "Quick start" in demo.NEXT
