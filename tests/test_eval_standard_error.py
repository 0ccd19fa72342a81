"""The evaluation's standard error (`trl_pods.evaluate.standard_error`) beside each accuracy, in `trl-pods eval`'s JSON
and table, and held-out sets of 1,000 problems where a task has them: one evaluation of 200 problems has a standard
error of about 0.035, more than the change between two evaluations near a race's target."""

import math

import pytest

from trl_pods.evaluate import EvalArguments, _load_problems, evaluate, format_table, standard_error


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([1, 0, 1, 1], math.sqrt(0.75 * 0.25 / 4)),  # 0/1 scores: the binomial sqrt(p (1 - p) / n)
        ([0.5, 0.5, 0.5], 0.0),
        ([1.0, 0.0], 0.5 / math.sqrt(2)),
        ([0.25, 0.75, 1.0, 0.0], math.sqrt(sum((x - 0.5) ** 2 for x in (0.25, 0.75, 1.0, 0.0)) / 4 / 4)),
    ],
)
def test_standard_error_of_a_mean_of_scores(scores, expected):
    """The standard error of the mean of per-problem scores in [0, 1]: sqrt(mean squared deviation / n), which for
    0/1 scores is the binomial sqrt(p (1 - p) / n); 200 problems at p = 0.5 give 0.035."""
    assert standard_error(scores) == pytest.approx(expected)
    assert standard_error([1] * 100 + [0] * 100) == pytest.approx(0.0354, abs=1e-4)


def test_standard_error_needs_scores():
    """No scores, no estimate: a clear error instead of a division by zero."""
    with pytest.raises(ValueError, match="at least one score"):
        standard_error([])


def test_eval_reports_the_standard_error_beside_the_accuracy_on_1000_held_out_problems(
    tiny_model_path, tmp_path, monkeypatch
):
    """`trl-pods eval --max_problems 1000` on a reasoning-gym task holds out 1,000 distinct problems, and the JSON
    gives each model's ``accuracy_stderr`` (the standard error of its per-problem accuracies), which the table prints
    beside the accuracy."""
    args = EvalArguments(model_name_or_path=str(tiny_model_path), task="reasoning_gym:chain_sum", max_problems=1000,
                         device="cpu", output=str(tmp_path / "eval.json"))  # fmt: skip
    problems = _load_problems(args)
    questions = [prompt[-1]["content"] for prompt in problems["prompt"]]
    assert len(set(questions)) == 1000
    golds = dict(zip(questions, problems["answer"], strict=True))

    def generate(model, tokenizer, prompts, args, device, label=None):  # right on every third problem
        texts = [[f"<answer>{golds[q] if i % 3 == 0 else 'no'}</answer>"] for i, q in enumerate(questions)]
        return texts, 0

    monkeypatch.setattr("trl_pods.evaluate._generate_hf", generate)
    report = evaluate(args)
    (result,) = report["results"]
    scores = [1.0 if i % 3 == 0 else 0.0 for i in range(1000)]
    assert result["accuracy"] == pytest.approx(334 / 1000)
    assert result["accuracy_stderr"] == pytest.approx(standard_error(scores))
    header, line = format_table(report).splitlines()
    assert "s.e." in header and f"{result['accuracy_stderr']:.4f}" in line
