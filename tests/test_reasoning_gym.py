"""reasoning-gym tasks (`trl_pods.reasoning_gym_tasks`): the split, the extraction rule, the dataset's scorer as the
reward, the scorers that evaluate text kept from running it, one-line errors, and a tiny-model train and eval."""

import json
import sys
from pathlib import Path

import pytest
import reasoning_gym

from trl_pods import reasoning_gym_tasks as rg
from trl_pods.evaluate import EvalArguments, _load_problems, evaluate
from trl_pods.evaluate import main as eval_main
from trl_pods.tasks import get_reward_func, load_task
from trl_pods.train import main as train_main

CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # 200 distinct questions
COMPOSITE_PART = {"name": "chain_sum", "weight": 1, "config": {"seed": 3}}  # a part may not set its seed
LEGS = {"min_animals": 1, "max_animals": 1, "max_instances": 2}  # 74 distinct questions


def _columns(rows) -> dict:
    return {name: list(rows[name]) for name in rows.column_names if name != "prompt"}


def _questions(rows) -> list[str]:
    return [prompt[-1]["content"] for prompt in rows["prompt"]]


def test_held_out_problems_are_distinct_fixed_by_the_seed_and_never_trained_on():
    """On a setting with few distinct questions (74), the held-out problems are distinct, the training problems
    (repeats allowed) share none of them, and the held-out set depends on the seed and its size alone, not on the
    training size."""
    train = load_task("reasoning_gym:leg_counting", "train", config=LEGS, seed=3, n_train=300, n_test=30)
    test = load_task("reasoning_gym:leg_counting", "test", config=json.dumps(LEGS), seed=3, n_test=30)
    held_out = _questions(test)
    assert len(set(held_out)) == 30 and len(train) == 300
    assert not set(_questions(train)) & set(held_out)
    assert len(set(_questions(train))) < 300  # repeats: the setting has 74 questions
    smaller = rg.split_items("leg_counting", LEGS, 3, 5, 30)[1]
    assert [item["question"] for item in smaller] == held_out
    assert [item["question"] for item in rg.split_items("leg_counting", LEGS, 4, 0, 30)[1]] != held_out


def test_too_few_distinct_questions_for_the_held_out_set_is_a_clear_error():
    """Asking for more held-out problems than the setting has distinct questions says how many there are and the size
    to use, in one line, instead of holding out repeats or training on held-out questions."""
    with pytest.raises(ValueError, match=r"only 74 distinct questions .*: use --task_test_size 37 or less"):
        rg.split_items("leg_counting", LEGS, 0, 10, 100)
    with pytest.raises(ValueError, match=r"left only 0 training problems .*: use --task_test_size 37 or less"):
        rg.split_items("leg_counting", LEGS, 0, 10, 74)
    assert len(rg.split_items("leg_counting", LEGS, 0, 300, 37)[0]) == 300


@pytest.mark.parametrize(
    ("text", "numeric", "answer"),
    [
        ("<answer> 12 </answer>", True, "12"),
        ("<answer>1</answer> then <answer>ynam</answer>\nmore", False, "ynam"),
        ("3 + 4 is 7, so 1,007.", True, "1007"),
        ("The result is -4", True, "-4"),
        ("no number here", True, ""),
        ("Reversed:\nnus\n\n", False, "nus"),
        ("<answer>unclosed 5", True, "5"),
        ("", False, ""),
    ],
)
def test_extract_answer_reads_the_answer_tag_else_the_last_number_or_line(text, numeric, answer):
    """The documented rule: the last ``<answer>`` content, else the last number (numeric tasks, commas dropped),
    else the last non-empty line."""
    assert rg.extract_answer(text, numeric) == answer


def test_the_datasets_scorer_is_the_reward_right_wrong_and_hostile():
    """The `reasoning_gym` reward is the dataset's `score_answer` of the extracted answer: 1.0 for the gold in tags
    or as the last number, the scorer's own value for a wrong answer, 0.0 for a hostile one; on a text task it equals
    `score_answer` itself."""
    rows = load_task("reasoning_gym:chain_sum", "test", config=CHAIN_SUM, seed=0, n_test=3)
    gold = rows["answer"]
    assert rows["reasoning_gym_numeric"] == [True] * 3
    completions = [
        [{"role": "assistant", "content": f"<answer>{gold[0]}</answer>"}],
        [{"role": "assistant", "content": f"It is {int(gold[1]) + 1}."}],
        [{"role": "assistant", "content": "<answer>__import__('os').getpid()</answer>"}],
    ]
    assert get_reward_func("reasoning_gym")(completions, **_columns(rows)) == [1.0, 0.0, 0.0]
    assert get_reward_func("reasoning_gym")([f"so {gold[2]}"], **_columns(rows.select([2]))) == [1.0]

    words = load_task("reasoning_gym:spell_backward", "test", seed=0, n_test=2)
    assert words["reasoning_gym_numeric"] == [False, False]
    entries = [rg.decode_entry(e) for e in words["reasoning_gym_entry"]]
    answers = [entries[0]["answer"], f"the word is {entries[1]['answer']}"]
    scorer = reasoning_gym.create_dataset("spell_backward", seed=0, size=1)
    expected = [scorer.score_answer(a, e) for a, e in zip(answers, entries, strict=True)]
    assert expected == [1.0, 0.0]
    assert get_reward_func("reasoning_gym")(answers, **_columns(words)) == expected


def test_a_conversation_is_scored_on_its_last_assistant_message_as_the_other_rewards_do():
    """Both reasoning-gym rewards read a conversation as math-verify's reward does (`rewards.completion_text`): its
    last assistant message, content parts joined; a tool message after it is not the answer. They read the last
    message of any role, and no content parts."""
    rows = load_task("reasoning_gym:chain_sum", "test", config=CHAIN_SUM, seed=0, n_test=1)
    answer = f"<answer>{rows['answer'][0]}</answer>"
    completions = [
        [{"role": "assistant", "content": answer}, {"role": "tool", "content": "42"}],
        [{"role": "assistant", "content": [{"type": "text", "text": answer}]}],
    ]
    columns = {name: values * 2 for name, values in _columns(rows).items()}
    assert get_reward_func("reasoning_gym")(completions, **columns) == [1.0, 1.0]
    assert get_reward_func("reasoning_gym_format")(completions) == [1.0, 1.0]


def test_format_reward_wants_one_non_empty_answer_tag():
    """`reasoning_gym_format`: 1.0 for one ``<answer>…</answer>`` with content, else 0.0."""
    completions = ["<answer>7</answer>", "x <answer> 7 </answer> y", "<answer></answer>", "7", "<answer>7"]
    assert get_reward_func("reasoning_gym_format")(completions) == [1.0, 1.0, 0.0, 0.0, 0.0]


def _hostile(marker) -> list[str]:
    """Completions that run ``touch marker`` wherever a scorer evaluates them as code."""
    code = f"__import__('os').system('touch {marker}')"
    return [code, f"<answer>{code}</answer>", f"The answer:\n{code}", f"[{code}]", f"<answer>[{code}, 1]</answer>"]


def test_the_hazard_is_real_an_unguarded_scorer_runs_the_completion(tmp_path):
    """What the guard prevents: reasoning-gym's own scorers (an ``eval`` one and a sympy one) called on a hostile
    answer in this process write the marker file (so the tests below can fail)."""
    for task in ("string_insertion", "countdown"):
        marker = tmp_path / task
        dataset = reasoning_gym.create_dataset(task, seed=0, size=1)
        dataset.score_answer(_hostile(marker)[0], dataset[0])
        assert marker.exists(), task


@pytest.mark.parametrize("task", sorted(rg.EVALUATING_SCORERS))
def test_a_completion_that_would_run_code_runs_nothing_in_the_reward_or_eval(
    task, tiny_model_path, tmp_path, monkeypatch
):
    """Each scorer that evaluates text (`EVALUATING_SCORERS`) gets hostile completions (bare, in tags, on the last
    line, inside a list) through the reward and through `trl-pods eval`'s scoring: no marker file is written, and
    each scores what the scorer gives an unparsable answer (countdown and puzzle24: 0.01; the others 0)."""
    marker = tmp_path / "MARKER"
    rows = load_task(f"reasoning_gym:{task}", "test", seed=0, n_test=1)
    hostile = _hostile(marker)
    scores = get_reward_func("reasoning_gym")(hostile, **{k: v * len(hostile) for k, v in _columns(rows).items()})
    floor = 0.01 if task in ("countdown", "puzzle24") else 0.0
    assert scores == [floor] * len(hostile) and not marker.exists()

    def generate(model, tokenizer, prompts, args, device, label=None):
        return [hostile for _ in prompts], 0

    monkeypatch.setattr("trl_pods.evaluate._generate_hf", generate)
    args = EvalArguments(
        model_name_or_path=str(tiny_model_path), task=f"reasoning_gym:{task}", max_problems=1,
        num_samples=len(hostile), temperature=1.0, device="cpu", output=str(tmp_path / "eval.json"),
    )  # fmt: skip
    assert evaluate(args)["results"][0]["accuracy"] == 0.0 and not marker.exists()


@pytest.mark.parametrize(
    ("task", "answer", "expected"),
    [
        ("string_insertion", "ABCAD", True),
        ("string_insertion", "['A', 'B']", True),
        ("string_insertion", "''.join(['A'])", False),
        ("spiral_matrix", "1 2 3\n4", True),
        ("n_queens", "_ Q\nQ _", True),
        ("binary_matrix", "[[0, 1], [1, 2]]", True),
        ("binary_matrix", "[[0, 1], [1, x]]", False),
        ("countdown", "94*4 - 61 - 6", True),
        ("countdown", "x*4", False),
        ("countdown", "9**9**9**9", False),  # no gold uses a power
        ("puzzle24", "(2**3)*3", False),
        ("puzzle24", "open(chr(120)+chr(120), chr(119))", False),
        ("simple_integration", "-34*x**8/15 - 5*x/4 + C", True),
        ("intermediate_integration", "-4*(-2*x - 8)**(3/2)/3 + sin(x) + C", True),
        ("intermediate_integration", "exec(chr(49))", False),
        ("intermediate_integration", "-Integral(x**3*sin(3*x), x) + C", False),  # a gold that restates the question
        ("polynomial_multiplication", "S(x).func", False),
        ("polynomial_multiplication", "exec(x)", False),
        ("chain_sum", "__import__('os')", True),  # its scorer does not evaluate text
    ],
)
def test_admissible_lets_through_only_literals_or_the_golds_alphabet(task, answer, expected):
    """`admissible`: an ``eval`` scorer gets a Python literal or text of its gold's alphabet; a sympy scorer gets
    its gold's alphabet with one-letter names and maths functions only; other scorers get anything."""
    assert rg.admissible(task, answer) is expected


def test_a_scorer_that_hangs_or_raises_scores_its_floor_and_the_next_answer_is_scored(monkeypatch, caplog):
    """simple_integration's scorer (sympy's simplify) on a product of four 100th powers computes for longer than the
    timeout (1 s here; bounded powers keep the cheap-to-write hangs out, not every slow answer): it scores what the
    scorer gives an unparsable answer, the worker is restarted and the next answer is scored; a scorer that raises
    (an entry without its metadata) scores 0.0."""
    monkeypatch.setattr(rg, "SCORE_TIMEOUT_S", 1.0)
    rows = load_task("reasoning_gym:simple_integration", "test", seed=0, n_test=1)
    columns = {k: v * 2 for k, v in _columns(rows).items()}
    x = rg.decode_entry(rows["reasoning_gym_entry"][0])["metadata"]["variable"]
    slow = "*".join(f"({x} + {k})**100" for k in range(1, 5))
    assert rg.admissible("simple_integration", slow)
    scores = get_reward_func("reasoning_gym")([f"<answer>{slow}</answer>", f"<answer>{rows['answer'][0]}</answer>"],
                                              **columns)  # fmt: skip
    assert scores == [0.0, 1.0]
    assert "took over 1 s on an item" in caplog.text  # not minutes: the timeout ended it
    queens = load_task("reasoning_gym:n_queens", "test", seed=0, n_test=1)
    item = rg.decode_entry(queens["reasoning_gym_entry"][0])
    entry = rg.encode_entry({**item, "metadata": {"source_dataset": "n_queens"}})
    answer = ["<answer>_ Q</answer>"]
    assert get_reward_func("reasoning_gym")(answer, **{**_columns(queens), "reasoning_gym_entry": [entry]}) == [0.0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--task", "reasoning_gym:chain_summ"],
            "Unknown reasoning-gym dataset 'chain_summ' (did you mean 'chain_sum'?)",
        ),
        (
            ["--task", "reasoning_gym:chain_sum", "--task_config", '{"min_term": 2}'],
            "is not a setting of chain_sum (ChainSumConfig.__init__() got an unexpected keyword argument 'min_term'); "
            "its settings (defaults): min_terms=2, max_terms=6,",
        ),
        (
            ["--task", "reasoning_gym:chain_sum", "--task_config", '{"min_terms": 5, "max_terms": 2}'],
            "(max_terms must be >= min_terms); its settings (defaults): min_terms=2",
        ),
        (["--task", "reasoning_gym:chain_sum", "--task_config", "{min_terms: 2}"], "--task_config is not JSON"),
        (["--task", "reasoning_gym:chain_sum", "--task_config", '{"seed": 2}'], "trl_pods sets itself: use --seed"),
        (["--task", "arithmetic", "--task_config", "{}"], "--task_config sets a reasoning_gym:<name> task's dataset"),
        (["--task", "gsm9k"], "Unknown task 'gsm9k' (did you mean 'gsm8k'?); known: gsm8k, math, arithmetic,"),
        (["--task", "reasoning_gym:composite"], 'composite needs its parts: --task_config \'{"datasets": [{"name": "'),
        (
            ["--task", "reasoning_gym:composite", "--task_config", json.dumps({"datasets": [COMPOSITE_PART]})],
            "composite's part chain_sum sets seed, which trl_pods sets itself",
        ),
        (
            ["--task", "reasoning_gym:composite", "--task_config", '{"datasets": [{"name": "chain_sum"}]}'],
            "is not a setting of composite (",
        ),
    ],
)
@pytest.mark.parametrize("command", ["train", "eval"])
def test_unknown_names_and_bad_settings_are_one_line_listing_what_is_known(command, flags, message, tmp_path, capsys):
    """An unknown dataset names the closest one (not the 106 reasoning-gym has), a bad setting the dataset's settings
    with their defaults; both in one `error:` line, exit status 2, before any model load."""
    with pytest.raises(SystemExit) as exit_:
        if command == "train":
            train_main(["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--output_dir", str(tmp_path), *flags])
        else:
            eval_main(["--model_name_or_path", "m", *flags])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"trl-pods {command}: error: ") and message in line, line


@pytest.mark.parametrize("command", ["train", "eval"])
def test_without_the_extra_one_line_says_how_to_install_it(command, tmp_path, monkeypatch, capsys):
    """With reasoning-gym not installed (its import fails), `--task reasoning_gym:<name>` is one `error:` line with
    the install command."""
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    flags = ["--task", "reasoning_gym:chain_sum"]
    with pytest.raises(SystemExit) as exit_:
        if command == "train":
            train_main(["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--output_dir", str(tmp_path), *flags])
        else:
            eval_main(["--model_name_or_path", "m", *flags])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"trl-pods {command}: error: ") and "pip install 'trl-pods[tasks]'" in line, line


@pytest.mark.parametrize(
    ("task", "config"), [("chain_sum", CHAIN_SUM), ("spell_backward", {"min_word_len": 3, "max_word_len": 4})]
)
def test_tiny_model_trains_and_evaluates_on_the_runs_held_out_problems(task, config, tiny_model_path, tmp_path):
    """`trl-pods train --task reasoning_gym:<name> --task_config ...` trains 2 PODS steps with the dataset's scorer
    (a numeric and a text task), saves the task and its config in run_args.json, and `trl-pods eval --run_dir`
    scores the run's own held-out problems (its seed, config and held-out size) with the same scorer."""
    out = tmp_path / "run"
    train_main([
        "--model_name_or_path", str(tiny_model_path), "--output_dir", str(out), "--task", f"reasoning_gym:{task}",
        "--task_config", json.dumps(config), "--task_train_size", "16", "--task_test_size", "3", "--seed", "5",
        "--pods_n", "4", "--pods_m", "2", "--per_device_train_batch_size", "2", "--max_steps", "2",
        "--max_completion_length", "6", "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
        "--use_cpu", "true", "--bf16", "false", "--disable_tqdm", "true",
    ])  # fmt: skip
    script = json.loads((out / "run_args.json").read_text())["script"]
    assert script["task"] == f"reasoning_gym:{task}" and json.loads(script["task_config"]) == config
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "rewards/reasoning_gym_reward/mean" in e] == [1, 2]
    eval_main(["--run_dir", str(out), "--task", f"reasoning_gym:{task}", "--max_new_tokens", "6", "--device", "cpu"])
    report = json.loads((out / f"eval_reasoning_gym_{task}.json").read_text())
    assert report["results"][0]["num_problems"] == 3
    held_out = load_task(f"reasoning_gym:{task}", "test", config=config, seed=5, n_test=3)
    args = EvalArguments(run_dir=str(out), task=f"reasoning_gym:{task}")
    assert _questions(_load_problems(args)) == _questions(held_out)


EVALUATES_ONLY_ITS_OWN_DATA = {  # reviewed in reasoning_gym 0.1.25: these modules evaluate, but never the answer
    "number_sorting": "score_answer evals the gold answer (entry['answer']) when it is not JSON",
    "basic_arithmetic": "eval of the generated expression, while generating",
    "bitwise_arithmetic": "eval of the generated problem, while generating",
    "codeio": "exec of the dataset's own code, while generating",
    "gsm_symbolic": "eval in its templates' generators, while generating",
    "propositional_logic": "its own parse_expr: a recursive parser of its logic syntax that evaluates nothing",
    "advanced_geometry": "sympy while generating; score_answer reads the answer with float() and ==",
    "polynomial_equations": "sympy while generating; score_answer reads the answer's comma-separated parts with float",
    "simple_equations": "sympy while generating; the base class's score_answer compares strings",
}


def test_every_installed_scorer_that_evaluates_text_is_guarded_or_reviewed():
    """A reasoning-gym release that adds a scorer calling eval/exec/sympy parsing on text must not slip through: every
    dataset whose module (or the shared utils its scorers call) holds such a call, or imports sympy (whose functions
    sympify a string argument), is either in `EVALUATING_SCORERS` (guarded by `admissible`) or was reviewed as
    evaluating only its own data."""
    import inspect
    import re
    from pathlib import Path

    from reasoning_gym.factory import DATASETS

    # sympy's functions (expand, solve, simplify, Eq, ...) sympify a string argument, which evaluates it: a module
    # that imports sympy at all is reviewed.
    evaluating = re.compile(r"\b(eval|exec|sympify|parse_expr|parse_latex|S)\(|^\s*(import|from) sympy\b", re.M)
    found = set()
    for name, (dataset_class, _) in DATASETS.items():
        module_file = inspect.getsourcefile(dataset_class)
        source = Path(module_file).read_text()
        if name == "gsm_symbolic":  # its generators live in sibling files
            source += "".join(p.read_text() for p in Path(module_file).parent.glob("generators_*.py"))
        if evaluating.search(source):
            found.add(name)
    assert found == set(rg.EVALUATING_SCORERS) | set(EVALUATES_ONLY_ITS_OWN_DATA)
    shared = Path(inspect.getsourcefile(reasoning_gym.utils)).read_text()
    assert not evaluating.search(shared)


# ----------------------------------------------------------------------------------------------------------------
# Streams: independent per seed, the held-out set apart from the training size, one fixed set by choice
# ----------------------------------------------------------------------------------------------------------------


WIDE_SUMS = {"min_terms": 4, "max_terms": 6, "min_digits": 2, "max_digits": 4}  # over 10^20 questions


def test_seeds_draw_independent_problem_streams():
    """Two data seeds share no more problems than chance allows (none: chain_sum with `WIDE_SUMS` has over 10^20
    questions). reasoning-gym's item i of seed s is item i + 1 of seed s - 1, so seeds 0 and 1 shared 1,999 of 2,000
    training problems when the seed went to reasoning-gym as it was; a seed's training and held-out streams are
    apart too."""
    config = json.dumps(WIDE_SUMS)
    train = {seed: set(_questions(load_task("reasoning_gym:chain_sum", "train", config=config, seed=seed,
                                            n_train=2000, n_test=200))) for seed in (0, 1)}  # fmt: skip
    held_out = {seed: set(_questions(load_task("reasoning_gym:chain_sum", "test", config=config, seed=seed,
                                               n_test=200))) for seed in (0, 1)}  # fmt: skip
    assert len(held_out[0]) == len(held_out[1]) == 200 and min(map(len, train.values())) == 2000
    assert not train[0] & train[1] and not held_out[0] & held_out[1]
    assert not train[0] & held_out[1] and not train[1] & held_out[0]


def test_task_seed_fixes_the_problems_across_training_seeds():
    """``--task_seed`` draws a generated task's problems, and ``--seed`` the training: two runs with one task seed and
    two training seeds train and hold out the same problems; unset, the task seed is ``--seed``."""
    from trl_pods.train import ScriptArguments, load_datasets

    def problems(seed, **fields):
        script = ScriptArguments(task="reasoning_gym:chain_sum", task_config=json.dumps(CHAIN_SUM),
                                 task_train_size=40, task_test_size=10, eval_split="test", **fields)  # fmt: skip
        return [_questions(rows) for rows in load_datasets(script, seed)]

    assert problems(1, task_seed=7) == problems(2, task_seed=7)
    assert problems(1) != problems(2) and problems(7) == problems(1, task_seed=7)


@pytest.mark.parametrize("task", ["acre", "list_functions"])
def test_the_runs_held_out_set_is_what_eval_loads_whatever_the_training_size(task, tmp_path):
    """acre's and list_functions' items depend on how many the dataset object holds: the held-out set a run excluded
    from training (its training size 300) and the one `trl-pods eval --run_dir` loaded (none) had 0 and 47 of 50 in
    common. Now the held-out stream does not depend on the training size: eval loads exactly what the run held out
    (its task seed), and the run trained on none of it."""
    from trl_pods.train import ScriptArguments, load_datasets

    script = ScriptArguments(task=f"reasoning_gym:{task}", task_train_size=300, task_test_size=20, task_seed=4)
    train, _ = load_datasets(script, seed=9)
    held_out = [question for question, _, _ in rg.split_rows(task, {}, 4, 300, 20)[1]]
    run = {"script": {**vars(script)}, "training": {"seed": 9}}
    (tmp_path / "run_args.json").write_text(json.dumps(run))
    evaluated = _questions(_load_problems(EvalArguments(run_dir=str(tmp_path), task=f"reasoning_gym:{task}")))
    assert evaluated == held_out and len(set(held_out)) == 20
    assert not set(_questions(train)) & set(held_out)


# ----------------------------------------------------------------------------------------------------------------
# Scores: refused answers at the scorer's floor, bounded powers, lossless entries
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "floor"), [("countdown", 0.01), ("puzzle24", 0.01), ("string_insertion", 0.0)])
def test_a_refused_answer_scores_what_the_scorer_gives_an_unparsable_one(task, floor):
    """countdown's and puzzle24's scorers give 0.01 to an answer they cannot parse; a refused (inadmissible) answer
    got 0.0, so an all-wrong group showed contrast only because some answers were refused. Now it gets the scorer's
    own value for an unparsable answer, and never reaches the scorer."""
    rows = load_task(f"reasoning_gym:{task}", "test", seed=0, n_test=1)
    entry = rg.decode_entry(rows["reasoning_gym_entry"][0])
    assert rg.make_dataset(task, {}).score_answer(rg.UNPARSABLE_ANSWER, entry) == floor
    hostile = ["<answer>__import__('os').getpid()</answer>", "<answer>9**9**9**9</answer>"]
    columns = {k: v * len(hostile) for k, v in _columns(rows).items()}
    assert get_reward_func("reasoning_gym")(hostile, **columns) == [floor] * len(hostile)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("-12*x**5 + 3*x**2 - 7", True),
        ("2*(4*x + 2)**(3/2)/3 + C", True),
        ("x**-2 + (x**2 + 1)**(1/2)", True),
        ("x**100", True),
        ("9**9**9**9", False),
        ("x**101", False),
        ("(x**20)**20", False),  # nested powers multiply: x**400
        ("2**x", False),  # an exponent is a number: x - x + 10**10 would be one
        ("x**(1/0)", False),
        ("(x + 1", False),  # not an expression: the scorer could not read it either
    ],
)
def test_powers_are_bounded_where_the_scorer_computes_them(answer, expected):
    """polynomial_multiplication and the integration tasks admit ``**`` (their golds use it), and sympy computes a
    numeric power in full: ``9**9**9**9`` held the scorer until its 5 s timeout and a worker restart. An exponent must
    be a number, and nested exponents multiply to at most `MAX_EXPONENT` (the golds' largest at the default settings
    is 10)."""
    for task in ("polynomial_multiplication", "simple_integration", "intermediate_integration"):
        assert rg.admissible(task, answer) is expected, task


def test_a_power_beyond_the_bound_never_reaches_the_scorer(monkeypatch):
    """``9**9**9**9`` on polynomial_multiplication is refused before the scoring worker: it is never sent (the worker
    is not held until its timeout and restarted), and it scores what the scorer gives an unparsable answer."""
    from trl_pods import sandbox

    rows = load_task("reasoning_gym:polynomial_multiplication", "test", seed=0, n_test=1)
    sent, run = [], sandbox.Sandbox.run

    def recording(self, items, timeout):
        sent.extend(items)
        return run(self, items, timeout)

    monkeypatch.setattr(sandbox.Sandbox, "run", recording)
    assert get_reward_func("reasoning_gym")(["<answer>9**9**9**9</answer>"], **_columns(rows)) == [0.0]
    assert [answer for *_, answer in sent] == [rg.UNPARSABLE_ANSWER]


def test_entries_are_stored_losslessly():
    """The stored entry decodes to the item reasoning-gym made, types and all: tuples (arc_agi's boards, every
    ``difficulty``), sets, dicts with other keys than strings (graph_color), fractions (gsm_symbolic), numpy values
    (knights_knaves), and a dict whose key looks like the encoding's own tags."""
    import fractions

    import numpy as np

    item = {
        "question": "q",
        "answer": None,
        "metadata": {
            "board": ((1, 2), (3, 4)),
            "lists": [[1, (2,)], []],
            "set": {3, 1, 2},
            "frozen": frozenset({"a"}),
            "colors": {1: "red", (0, 1): [2]},
            "fraction": fractions.Fraction(3, 4),
            "name": np.str_("Alice"),
            "count": np.int64(7),
            "grid": np.arange(6).reshape(2, 3),
            "tagged": {"__tuple__": [1]},
            "nan": float("inf"),
        },
    }
    decoded = rg.decode_entry(rg.encode_entry(item))
    grid = decoded["metadata"].pop("grid")
    assert decoded == {**item, "metadata": {k: v for k, v in item["metadata"].items() if k != "grid"}}
    assert type(decoded["metadata"]["board"][0]) is tuple and type(decoded["metadata"]["lists"][0][1]) is tuple
    assert type(decoded["metadata"]["name"]) is np.str_ and type(decoded["metadata"]["count"]) is np.int64
    assert grid.dtype == item["metadata"]["grid"].dtype and (grid == item["metadata"]["grid"]).all()
    with pytest.raises(ValueError, match="cannot be stored"):
        rg.encode_entry({"question": "q", "metadata": {"thing": object()}})


@pytest.mark.parametrize("task", ["arc_agi", "rearc"])
def test_arc_tasks_score_the_right_board_1(task):
    """arc_agi and rearc compare the answer's board with the entry's tuples: stored as plain JSON they came back as
    lists, and the right board scored 0.05 like any wrong one. The right board now scores 1.0."""
    rows = load_task(f"reasoning_gym:{task}", "test", seed=0, n_test=3)
    gold = [f"<answer>{answer}</answer>" for answer in rows["answer"]]
    assert get_reward_func("reasoning_gym")(gold, **_columns(rows)) == [1.0, 1.0, 1.0]


# ----------------------------------------------------------------------------------------------------------------
# Every dataset loads: composite from JSON, word_ladder at the default sizes
# ----------------------------------------------------------------------------------------------------------------

COMPOSITE = {"datasets": [{"name": "chain_sum", "weight": 1, "config": CHAIN_SUM}, {"name": "countdown", "weight": 2,
                                                                                     "config": {}}]}  # fmt: skip


def test_composite_is_configured_from_json():
    """``--task reasoning_gym:composite --task_config '{"datasets": [{"name", "weight", "config"}, ...]}'`` mixes the
    parts (reasoning-gym's `DatasetSpec`s, made from JSON), each item scored by its part's scorer, the countdown
    items behind countdown's guard."""
    rows = load_task("reasoning_gym:composite", "test", config=json.dumps(COMPOSITE), seed=0, n_test=12)
    sources = [rg.decode_entry(entry)["metadata"]["source_dataset"] for entry in rows["reasoning_gym_entry"]]
    assert set(sources) == {"chain_sum", "countdown"}
    gold = [f"<answer>{answer}</answer>" for answer in rows["answer"]]
    assert get_reward_func("reasoning_gym")(gold, **_columns(rows)) == [1.0] * 12
    hostile = ["<answer>__import__('os').getpid()</answer>"] * 12
    floors = [0.01 if source == "countdown" else 0.0 for source in sources]
    assert get_reward_func("reasoning_gym")(hostile, **_columns(rows)) == floors


def test_word_ladder_loads_at_the_default_sizes():
    """word_ladder refuses a dataset object of over 20,000 items, and the loader asked for 45,000 at the default
    sizes (2,000 training problems, 200 held out); the streams are now read from objects of `STREAM_CHUNK` items."""
    train, held_out = rg.split_items("word_ladder", {}, 0, 2000, 200)
    assert len(train) == 2000 and len({item["question"] for item in held_out}) == 200


def test_items_reasoning_gym_fails_to_make_are_left_out(tmp_path, monkeypatch):
    """codeio fails to make about one item in 4,500 (its program's output holds a numpy integer that it cannot write
    as JSON: TypeError), and that failure ended the whole load; such an item is now left out of the stream (the same
    one on every process), here item 175 of seed 2's held-out stream."""
    monkeypatch.chdir(tmp_path)  # codeio's programs write files (test_dir/) where they run
    failures = []
    assert len(list(rg._stream("codeio", {}, 2, "test", 200, str(tmp_path), failures))) == 199
    assert failures and failures[0].startswith("TypeError: Object of type int64 is not JSON serializable")
    assert len({question for question, _, _ in rg.split_rows("codeio", {}, 2, 0, 200)[1]}) == 200


def test_a_build_writes_in_a_folder_of_its_own_and_leaves_out_items_that_hold_it(tmp_path, monkeypatch):
    """codeio's third held-out item of seed 0 runs a program that writes ``test_dir/`` where it runs, and its question
    holds that folder's path: it wrote into the user's folder, and its problem differed with the folder the trainer
    ran in. A build now runs in an empty temporary folder, removed after, and leaves such items out."""
    monkeypatch.chdir(tmp_path)
    held_out = rg.split_items("codeio", {}, 0, 0, 3)[1]
    assert not list(tmp_path.iterdir()) and Path.cwd() == tmp_path
    assert not any("test_dir" in repr(item) for item in held_out)
    failures = []
    assert len(list(rg._stream("codeio", {}, 0, "test", 3, str(tmp_path), failures))) == 2
    assert failures == ["an item that holds the folder it was made in"]
    assert (tmp_path / "test_dir").is_dir()  # _stream alone runs where it is


def test_eval_refuses_a_run_whose_held_out_problems_it_cannot_make(tmp_path, capsys):
    """A reasoning-gym run saved before each seed and split had a stream of its own (no ``task_seed`` in its
    run_args.json) held out problems this trl_pods no longer makes: `trl-pods eval --run_dir` would score other ones,
    some of which the run trained on. It is one `error:` line, before any model load, saying what to do instead."""
    run = {"script": {"task": "reasoning_gym:chain_sum", "task_config": None, "task_test_size": 200},
           "training": {"seed": 42}}  # fmt: skip
    (tmp_path / "run_args.json").write_text(json.dumps(run))
    with pytest.raises(SystemExit) as exit_:
        eval_main(["--run_dir", str(tmp_path), "--task", "reasoning_gym:chain_sum"])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "has no task_seed" in line and "--model_name_or_path" in line, line
