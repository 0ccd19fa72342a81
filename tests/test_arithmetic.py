"""The built-in offline task: seeded problems, a disjoint held-out split, and an exact reward."""

import pytest

from trl_pods.arithmetic import arithmetic_reward, extract_answer, make_arithmetic_dataset, train_test_arithmetic


def test_problems_are_seeded_and_correct():
    """The same seed gives the same problems; every gold answer is the right sum."""
    a, b = make_arithmetic_dataset(20, seed=3), make_arithmetic_dataset(20, seed=3)
    assert a["prompt"] == b["prompt"] and a["answer"] == b["answer"]
    assert make_arithmetic_dataset(20, seed=4)["prompt"] != a["prompt"]
    for row in a:
        x, _, y = row["prompt"][0]["content"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["answer"]) == int(x) + int(y)


def test_held_out_split_is_disjoint_from_training():
    """add1 has 100 distinct questions: 50 held out, never seen in training; the split is reproducible."""
    train, test = train_test_arithmetic(n_train=500, n_test=50, seed=42)
    test_questions = {row["prompt"][0]["content"] for row in test}
    assert len(test_questions) == 50
    assert not test_questions & {row["prompt"][0]["content"] for row in train}
    assert train_test_arithmetic(n_train=10, n_test=50, seed=42)[1]["prompt"] == test["prompt"]
    with pytest.raises(ValueError, match="only 100 distinct"):
        train_test_arithmetic(n_test=101)


@pytest.mark.parametrize(
    "completion,gold,reward",
    [
        ("7 + 4 = 11.", "11", 1.0),
        ([{"role": "assistant", "content": "The answer is 11"}], "11", 1.0),
        ("To add 7 and 4 we", "11", 0.0),  # cut off: ends with an operand
        ("11 is wrong, it is 12", "11", 0.0),  # the last integer counts
        ("", "11", 0.0),
        ("1,000", "1000", 1.0),
        ("-3", "-3", 1.0),
    ],
)
def test_reward_reads_the_last_integer(completion, gold, reward):
    """1.0 exactly when the completion's last integer is the gold answer."""
    assert arithmetic_reward([completion], answer=[gold]) == [reward]


def test_extract_answer_handles_no_number():
    """No integer at all gives None (reward 0)."""
    assert extract_answer("no digits here") is None
