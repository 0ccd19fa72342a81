"""Builds every installed reasoning-gym dataset through trl_pods's loader and writes what it got, for
tests/test_reasoning_gym_datasets.py (one process per hash seed) and for the check at the default sizes:

    PYTHONHASHSEED=0 python tests/reasoning_gym_datasets.py OUT.json [--train 2000 --test 200] [--seed S]

Per dataset (`CONFIGS` for those without usable defaults): the rows of both splits (question, gold answer, entry),
or the one-line error the loader raised, and the seconds it took. Run where PYTHONHASHSEED is the scoring worker's
(`trl_pods.sandbox.HASH_SEED`), it also makes the split in this process (`split_items`: the items as reasoning-gym
made them, never stored or encoded) and scores each gold answer twice: through the project's `reasoning_gym` reward
(the gold in ``<answer>`` tags, scored on the stored entry in the worker) and by the dataset's own scorer on the
original item, beside what that scorer gives an unparsable answer (`UNPARSABLE_ANSWER`).
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reasoning_gym.factory import DATASETS  # noqa: E402

from trl_pods import reasoning_gym_tasks as rg  # noqa: E402
from trl_pods.sandbox import HASH_SEED  # noqa: E402

CONFIGS = {  # composite has no default parts: two, one of them a scorer that evaluates text
    "composite": {
        "datasets": [
            {"name": "countdown", "weight": 1.0, "config": {}},
            {"name": "spell_backward", "weight": 1.0, "config": {}},
        ]
    }
}


def _rows(dataset) -> list[list]:
    columns = (dataset[c] for c in ("prompt", "answer", "reasoning_gym_entry"))
    return [[prompt[-1]["content"], answer, entry] for prompt, answer, entry in zip(*columns, strict=True)]


def _score_or_0(scorer, answer: str, item: dict) -> float:
    """The scorer's score, 0.0 where it raises (prime_factorization's does on an answer that is not a number)."""
    try:
        return scorer.score_answer(answer, item)
    except Exception:
        return 0.0


def build(name: str, seed: int, n_train: int, n_test: int, originals: bool) -> dict:
    """What the loader gives for dataset ``name`` (and, with ``originals``, the gold scores both ways)."""
    config, start = CONFIGS.get(name, {}), time.perf_counter()
    task = rg.PREFIX + name
    try:
        splits = {
            "train": rg.load_reasoning_gym(task, "train", config, seed=seed, n_train=n_train, n_test=n_test),
            "test": rg.load_reasoning_gym(task, "test", config, seed=seed, n_test=n_test),
        }
    except ValueError as err:
        return {"error": str(err), "seconds": time.perf_counter() - start}
    found = {"rows": {split: _rows(rows) for split, rows in splits.items()}}
    if originals:
        made = dict(zip(("train", "test"), rg.split_items(name, config, seed, n_train, n_test), strict=True))
        scorer = rg.make_dataset(name, config)
        found["original"], found["gold"] = {}, []
        for split, rows in splits.items():
            found["original"][split] = [[item["question"], item["answer"]] for item in made[split]]
            gold = [(item["answer"], row) for item, row in zip(made[split], rows, strict=True)]
            gold = [(answer, row) for answer, row in gold if answer is not None]
            if not gold:
                continue
            completions = [f"<answer>{answer}</answer>" for answer, _ in gold]
            columns = {c: [row[c] for _, row in gold] for c in rows.column_names if c.startswith("reasoning_gym_")}
            rewards = rg.reasoning_gym_reward(completions, **columns)
            items = [item for item in made[split] if item["answer"] is not None]
            expected = [scorer.score_answer(str(item["answer"]), item) for item in items]
            floor = [_score_or_0(scorer, rg.UNPARSABLE_ANSWER, item) for item in items]
            scores = zip(gold, rewards, expected, floor, strict=True)
            found["gold"] += [[str(answer), *values] for (answer, _), *values in scores]
    found["seconds"] = time.perf_counter() - start
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="JSON file: {dataset: what the loader gave}")
    parser.add_argument("--train", type=int, default=3, help="training problems per dataset")
    parser.add_argument("--test", type=int, default=3, help="held-out problems per dataset")
    parser.add_argument("--seed", type=int, default=0, help="the data seed")
    parser.add_argument("--only", nargs="*", help="these datasets only")
    args = parser.parse_args()
    originals = os.environ.get("PYTHONHASHSEED") == HASH_SEED
    found = {}
    for name in args.only or sorted(DATASETS):
        found[name] = build(name, args.seed, args.train, args.test, originals)
        result = found[name].get("error", "ok")
        print(f"{name}: {result} ({found[name]['seconds']:.1f} s)", file=sys.stderr, flush=True)
    with open(args.out, "w") as file:
        json.dump(found, file)


if __name__ == "__main__":
    main()
