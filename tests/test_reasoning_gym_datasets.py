"""Every installed reasoning-gym dataset (reasoning_gym's registry) through trl_pods's loader, in two processes with
different hash seeds (tests/reasoning_gym_datasets.py, one process per hash seed building every dataset): both load
the same problems, every dataset loads, and each gold answer scores through the `reasoning_gym` reward what the
dataset's own scorer gives it on the item as reasoning-gym made it (not the stored one), unless its refusal is written
down here with its reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_pods.sandbox import HASH_SEED

HELPER = Path(__file__).with_name("reasoning_gym_datasets.py")
OTHER_HASH_SEED = "12345"

REFUSED_GOLDS = {  # dataset: (what the refused golds hold, why the reward refuses them)
    "intermediate_integration": (
        "Integral(",
        "where sympy could not integrate, the gold is the unevaluated Integral(...) of the question, whose derivative "
        "is the integrand: copying the question would score 1.0. `admissible` refuses the name (not a maths function)",
    ),
}


@pytest.fixture(scope="module")
def every_dataset(tmp_path_factory) -> dict[str, dict]:
    """What the loader gave in a process with the scoring worker's hash seed (with the originals and gold scores) and
    in one with another hash seed, both run at once."""
    folder = tmp_path_factory.mktemp("every-dataset")
    runs = {}
    for hash_seed in (HASH_SEED, OTHER_HASH_SEED):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = folder / f"hash-{hash_seed}.json"
        runs[hash_seed] = (out, subprocess.Popen([sys.executable, str(HELPER), str(out)], env=env,
                                                 stderr=subprocess.PIPE, text=True))  # fmt: skip
    found = {}
    for hash_seed, (out, process) in runs.items():
        _, err = process.communicate(timeout=900)
        assert process.returncode == 0, err[-3000:]
        found[hash_seed] = json.loads(out.read_text())
    return found


def test_two_processes_with_different_hash_seeds_load_the_same_problems(every_dataset):
    """Datasets whose items depend on Python's string hashing (isomorphic_strings, polynomial_multiplication,
    ransom_note, word_ladder, ...) give every process, and every resume, the same problems: both splits, the same
    rows (question, gold, stored entry) on two processes whose hash seeds differ."""
    first, second = every_dataset[HASH_SEED], every_dataset[OTHER_HASH_SEED]
    assert first.keys() == second.keys()
    differ = [name for name in first if first[name].get("rows") != second[name].get("rows")]
    assert not differ, f"{len(differ)} datasets load other problems on another process: {differ}"


def test_every_dataset_loads_and_gives_the_items_reasoning_gym_made(every_dataset):
    """Every registered dataset loads (composite from a JSON config), and the loader's rows are the items
    reasoning-gym made for the split: the same question and gold answer."""
    found = every_dataset[HASH_SEED]
    assert not {name: run["error"] for name, run in found.items() if "error" in run}
    for name, run in found.items():
        for split in ("train", "test"):
            rows = [[question, answer] for question, answer, _ in run["rows"][split]]
            made = [[q, None if a is None else str(a)] for q, a in run["original"][split]]
            assert rows == made, (name, split)


def test_every_gold_answer_scores_what_its_scorer_gives_on_the_original_item(every_dataset):
    """The gold answer in ``<answer>`` tags scores through the reward (stored entry, scoring worker) exactly what the
    dataset's scorer gives it on the item reasoning-gym made: arc_agi and rearc scored the right board 0.05 when the
    stored entry had lost its tuples. A gold is refused (scoring what the scorer gives an unparsable answer) only
    where `REFUSED_GOLDS` says why."""
    wrong = {}
    for name, run in every_dataset[HASH_SEED].items():
        for answer, reward, expected, unparsable in run.get("gold", []):
            refused = name in REFUSED_GOLDS and REFUSED_GOLDS[name][0] in answer
            if reward != (unparsable if refused else expected):
                wrong.setdefault(name, []).append((answer[:60], reward, expected))
    assert not wrong
    assert sum(len(run.get("gold", [])) for run in every_dataset[HASH_SEED].values()) > 500
