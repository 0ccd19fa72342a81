"""`trl_pods.evaluate`: the pass@k estimator, single-model and run-directory evaluation, outputs and input checks."""

import json
import shutil
from math import comb
from pathlib import Path

import pytest

from trl_pods.evaluate import EvalArguments, accuracy, evaluate, main, pass_at_k
from trl_pods.flags import precheck

DATA = Path(__file__).parent / "data"
SEEN: list[list[str]] = []  # completions scored by `length_parity_reward`, one list per call


def length_parity_reward(completions, **kwargs) -> list[float]:
    """Deterministic in the completion text, about half correct: 1.0 for an even number of characters."""
    texts = [completion[0]["content"] for completion in completions]
    SEEN.append(texts)
    return [float(len(text) % 2 == 0) for text in texts]


def tiny_args(model, tmp_path, **kwargs) -> EvalArguments:
    defaults = dict(
        task="arithmetic",
        max_problems=4,
        num_samples=2,
        temperature=1.0,
        max_new_tokens=6,
        batch_size=4,
        seed=0,
        device="cpu",
        output=str(tmp_path / "eval.json"),
    )
    return EvalArguments(model_name_or_path=str(model), **{**defaults, **kwargs})


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - comb(3, 2) / comb(5, 2)),  # 0.7
        (4, 0, 2, 0.0),
        (4, 4, 1, 1.0),
        (4, 4, 4, 1.0),
        (5, 3, 3, 1.0),  # n - c < k: every 3 of the 5 samples include a correct one
        (10, 3, 4, 1 - comb(7, 4) / comb(10, 4)),
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    """The unbiased estimator 1 - C(n-c, k) / C(n, k) matches hand-computed values, including the edge cases."""
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_exact_for_k1_and_large_n():
    """pass@1 is exactly c/n (so it equals the mean accuracy), and large n neither overflows nor loses precision."""
    assert all(pass_at_k(n, c, 1) == c / n for n in range(1, 30) for c in range(n + 1))
    assert pass_at_k(2048, 1, 1024) == pytest.approx(0.5)
    assert 0.0 < pass_at_k(2048, 1, 1) < 1e-3


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 5), (4, 1, 0), (4, 5, 1), (4, -1, 1)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    """k outside 1..n or c outside 0..n is an error, not a silently wrong number."""
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_single_model_writes_json_and_is_reproducible(tiny_model_path, tmp_path):
    """A single-model run writes the JSON with every field; accuracy is the mean of correct/k and equals pass@1;
    the same seed gives the same completions and numbers."""
    reward = f"{__name__}.length_parity_reward"
    SEEN.clear()
    report = evaluate(tiny_args(tiny_model_path, tmp_path, reward=reward))
    assert json.loads((tmp_path / "eval.json").read_text()) == report
    assert not (tmp_path / "eval.png").exists(), "one model and no --plot: no plot"
    assert {k: report[k] for k in ("task", "split", "num_samples", "temperature")} == {
        "task": "arithmetic",
        "split": "test",
        "num_samples": 2,
        "temperature": 1.0,
    }
    (result,) = report["results"]
    assert result["model"] == str(tiny_model_path) and result["step"] is None and result["train_time_s"] is None
    assert result["num_problems"] == 4 and result["unscorable"] == 0
    assert 0 < result["tokens_generated"] <= 4 * 2 * 6
    assert result["eval_seconds"] > 0

    (texts,) = SEEN
    assert len(texts) == 4 * 2
    correct = [sum(len(t) % 2 == 0 for t in texts[i : i + 2]) for i in range(0, 8, 2)]
    assert result["accuracy"] == sum(c / 2 for c in correct) / 4
    assert 0.0 <= result["accuracy"] <= 1.0
    assert result["pass@1"] == result["accuracy"]
    assert result["pass@2"] == sum(c > 0 for c in correct) / 4

    again = evaluate(tiny_args(tiny_model_path, tmp_path, reward=reward))
    assert SEEN[1] == SEEN[0], "same seed, same completions"
    drop = ("eval_seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in again["results"]] == [
        {k: v for k, v in result.items() if k not in drop}
    ]


def test_arithmetic_reward_and_greedy_decoding(tiny_model_path, tmp_path):
    """The default correctness reward of the arithmetic task runs; greedy decoding (temperature 0) ignores the seed."""
    reports = [
        evaluate(tiny_args(tiny_model_path, tmp_path, temperature=0.0, num_samples=1, seed=seed)) for seed in (0, 1)
    ]
    results = [{k: v for k, v in r["results"][0].items() if k != "eval_seconds"} for r in reports]
    assert results[0] == results[1]
    assert set(results[0]) >= {"accuracy", "pass@1"} and "pass@2" not in results[0]


def _fake_checkpoint(model: Path, folder: Path, step: int, log_history: list[dict]) -> None:
    shutil.copytree(model, folder, dirs_exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": log_history}))


def test_run_dir_evaluates_checkpoints_by_step(tiny_model_path, tmp_path):
    """Every checkpoint-<step> is evaluated in step order with its cumulative training time (step_time entries
    weighted by the steps they average over, other log entries ignored); the final model that equals the last
    checkpoint is not evaluated twice; the default JSON and PNG land in the run directory."""
    run = tmp_path / "run"
    log = [
        {"step": 1, "step_time": 2.0, "loss": 0.1},
        {"step": 1, "eval_loss": 0.5},
        {"step": 3, "step_time": 4.0, "loss": 0.2},  # logging_steps=2: the mean of steps 2 and 3
    ]
    _fake_checkpoint(tiny_model_path, run / "checkpoint-3", 3, log)
    _fake_checkpoint(tiny_model_path, run / "checkpoint-1", 1, log[:2])
    _fake_checkpoint(tiny_model_path, run, 3, log)  # the final model, saved at the end of training
    (run / "checkpoint-2-tmp").mkdir()  # not a checkpoint folder

    args = EvalArguments(
        run_dir=str(run), task="arithmetic", max_problems=2, num_samples=2, max_new_tokens=4, device="cpu"
    )
    report = evaluate(args)
    assert [r["step"] for r in report["results"]] == [1, 3]
    assert [r["train_time_s"] for r in report["results"]] == [2.0, 2.0 + 2 * 4.0]
    assert [r["model"] for r in report["results"]] == [str(run / "checkpoint-1"), str(run / "checkpoint-3")]
    assert json.loads((run / "eval_arithmetic.json").read_text()) == report
    assert (run / "eval_arithmetic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gsm8k_local_file_through_the_cli(tiny_model_path, tmp_path, capsys):
    """`main` parses the flags, loads a local GSM8K file, scores with math-verify's accuracy reward, writes the
    requested JSON and plot, and prints the table."""
    output, plot = tmp_path / "gsm8k.json", tmp_path / "gsm8k.png"
    main(
        [
            "--model_name_or_path",
            str(tiny_model_path),
            "--task",
            "gsm8k",
            "--dataset_path",
            str(DATA / "gsm8k_sample.jsonl"),
            "--max_problems",
            "2",
            "--max_new_tokens",
            "4",
            "--device",
            "cpu",
            "--output",
            str(output),
            "--plot",
            str(plot),
        ]
    )
    (result,) = json.loads(output.read_text())["results"]
    assert result["num_problems"] == 2 and result["num_samples"] == 1 and result["unscorable"] == 0
    assert 0.0 <= result["accuracy"] <= 1.0
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert "accuracy" in capsys.readouterr().out


@pytest.mark.parametrize(("task", "reward", "tokens"), [("arithmetic", "arithmetic", 16), ("gsm8k", "gsm8k", 512)])
def test_reward_and_completion_length_follow_the_task_unless_given(task, reward, tokens):
    """Evaluation, like training, uses the task's own reward and completion length (`trl_pods.tasks`); arithmetic
    generated 512 tokens per answer of a few. Values the user gives are kept."""
    args = EvalArguments(model_name_or_path="m", task=task)
    assert (args.reward, args.max_new_tokens) == (reward, tokens)
    args = EvalArguments(model_name_or_path="m", task=task, reward="accuracy", max_new_tokens=8)
    assert (args.reward, args.max_new_tokens) == ("accuracy", 8)


def test_bad_arguments_fail_early():
    """Greedy decoding with several samples, and a missing or doubled model source, are clear errors."""
    with pytest.raises(ValueError, match="greedy"):
        EvalArguments(model_name_or_path="m", temperature=0.0, num_samples=4)
    with pytest.raises(ValueError, match="exactly one"):
        EvalArguments()
    with pytest.raises(ValueError, match="exactly one"):
        EvalArguments(model_name_or_path="m", run_dir="r")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model_name_or_path", "m", "--reward", "nope"], "Unknown reward function 'nope'"),
        (["--run_dir", "missing-run"], "--run_dir missing-run: no such folder"),
        (["--model_name_or_path", "m", "--task", "arithmetic", "--arithmetic_difficulty", "x"], "difficulty 'x'"),
        (["--model_name_or_path", "m", "--temperature", "0", "--num_samples", "2"], "greedy"),
        (["--model_name_or_path", "m", "--task", "gsm9k"], "Unknown task 'gsm9k'"),
        (["--model_name_or_path", "/no/such/dir/model"], "--model_name_or_path /no/such/dir/model: no such folder"),
        (["--model_name_or_path", "m", "--base_model", "./no/such/base"], "--base_model ./no/such/base: no such"),
        (["--model_name_or_path", "m", "--task", "arithmetic", "--dataset_path", "x.jsonl"], "task is generated"),
    ],
)
def test_cli_user_errors_are_one_line_before_any_model_load(flags, message, tmp_path, monkeypatch, capsys):
    """A mistyped reward surfaced only after every model had generated; user mistakes printed tracebacks. Each now
    ends in one `trl-pods eval: error:` line, exit status 2, before any data or model is loaded; all but the one the
    arguments' dataclass refuses in the same line before the heavy imports (`trl_pods.flags.precheck`)."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("evaluated before checking the arguments")

    monkeypatch.setattr("trl_pods.evaluate.evaluate", must_not_run)
    monkeypatch.setenv("TRL_PODS_CACHE", str(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        main(flags)
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trl-pods eval: error: ") and message in line, line
    if message == "greedy":  # EvalArguments' own check, after the imports
        assert precheck("eval", flags) == flags
        return
    with pytest.raises(SystemExit):
        precheck("eval", flags)
    assert capsys.readouterr().err.strip() == line


def test_cli_help_names_the_command_and_says_what_it_does(capsys):
    """The usage line said `trl-pods` for every command and there was no description."""
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("usage: trl-pods eval ") and lines[2].startswith("Accuracy and pass@k of a model")
    assert any(line.lstrip().startswith("--num_samples") for line in lines)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--task", "arithmetic"], "needs the Hub model"),
        (["--run_dir", "RUN", "--base_model", "Qwen/Qwen2.5-0.5B-Instruct", "--task", "arithmetic"], "--base_model"),
        (["--model_name_or_path", "RUN"], "--task gsm8k needs the Hub dataset openai/gsm8k"),
    ],
)
def test_offline_a_hub_model_or_dataset_is_one_line(flags, message, tmp_path, monkeypatch, capsys):
    """Offline, a Hub model name or the default task's Hub dataset ended in a long traceback after the retries; now
    one `trl-pods eval: error:` line saying what to give instead, before any model loads."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("evaluated before checking the arguments")

    monkeypatch.setattr("trl_pods.evaluate.evaluate", must_not_run)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path) if flag == "RUN" else flag for flag in flags])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trl-pods eval: error: ") and message in line and "HF_HUB_OFFLINE=1" in line, line


def test_default_sampling_is_greedy_for_one_sample_and_the_papers_for_several():
    """`trl-pods eval` sampled at temperature 0.9 unless told, so a single sample's "accuracy" was a draw. Without
    `--temperature`, one sample per problem is greedy; several (pass@k) are drawn at the paper's 0.9; a temperature
    given is kept."""
    assert EvalArguments(model_name_or_path="m").temperature == 0.0
    assert EvalArguments(model_name_or_path="m", num_samples=4).temperature == 0.9
    assert EvalArguments(model_name_or_path="m", temperature=0.7).temperature == 0.7


def test_the_command_says_how_it_sampled_and_where_it_wrote_and_drops_a_stale_plot(tiny_model_path, tmp_path, capsys):
    """The command printed no temperature and not where it wrote, and a rerun on one model rewrote the JSON but kept
    the earlier run's plot, so the folder contradicted itself. It now prints the task, samples and temperature first
    and the files last, and a rerun that draws no plot removes the stale one."""
    run = tmp_path / "run"
    for step in (1, 2):
        _fake_checkpoint(tiny_model_path, run / f"checkpoint-{step}", step, [])
    flags = ["--task", "arithmetic", "--max_problems", "2", "--max_new_tokens", "4", "--device", "cpu"]
    main(["--run_dir", str(run), *flags])
    out = capsys.readouterr().out.splitlines()
    json_path, png = run / "eval_arithmetic.json", run / "eval_arithmetic.png"
    assert (
        out[0] == "trl-pods eval: task arithmetic (generated offline), 1 sample(s) per problem, greedy (temperature 0)"
    )
    assert out[-1] == f"trl-pods eval: wrote {json_path} and {png}" and png.is_file()
    main(["--model_name_or_path", str(run / "checkpoint-2"), "--output", str(json_path), *flags, "--num_samples", "2"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("2 sample(s) per problem, sampled at temperature 0.9, top_p 1, seed 42")
    assert out[-1] == f"trl-pods eval: wrote {json_path}"
    assert not png.exists(), "the plot of the earlier evaluation, which the new JSON contradicts"
    assert [r["step"] for r in json.loads(json_path.read_text())["results"]] == [None]


def test_each_model_gets_a_progress_bar_and_an_incomplete_checkpoint_is_left_out(tiny_model_path, tmp_path, capsys):
    """An evaluation showed only the weight-loading bars for minutes (9 of them on a CPU for a reasoning-gym task) and
    looked hung: each model now has a bar of the problems done, named by its place in the list and its folder. A
    checkpoint folder without its ``trainer_state.json`` (a run stopped while saving it) is not evaluated."""
    run = tmp_path / "run"
    _fake_checkpoint(tiny_model_path, run / "checkpoint-1", 1, [])
    shutil.copytree(tiny_model_path, run / "checkpoint-2")  # stopped before Trainer wrote its trainer_state.json
    flags = ["--task", "arithmetic", "--max_problems", "3", "--max_new_tokens", "4", "--device", "cpu"]
    main(["--run_dir", str(run), "--base_model", str(tiny_model_path), *flags, "--batch_size", "1"])
    err = capsys.readouterr().err
    assert [r["step"] for r in json.loads((run / "eval_arithmetic.json").read_text())["results"]] == [0, 1]
    assert f"model 1 of 2: {tiny_model_path}: 100%" in err and f"model 2 of 2: {run / 'checkpoint-1'}: 100%" in err
    assert "3/3" in err


def test_accuracy_from_python_writes_nothing(tiny_model_path, tmp_path, monkeypatch):
    """The Python quick start had no way to evaluate: `accuracy` gives what `trl-pods eval` measures for one model,
    with the same arguments, and writes no file."""
    monkeypatch.chdir(tmp_path)
    options = dict(task="arithmetic", max_problems=4, max_new_tokens=4, device="cpu")
    written = tmp_path / "e.json"
    expected = evaluate(EvalArguments(model_name_or_path=str(tiny_model_path), output=str(written), **options))
    written.unlink()
    assert accuracy(tiny_model_path, **options) == expected["results"][0]["accuracy"]
    assert list(tmp_path.iterdir()) == []
