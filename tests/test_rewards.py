"""The math reward functions: scoring tables, hang-proofing, the worker process and the registry."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from trl_pods import rewards
from trl_pods.rewards import (
    REWARD_FUNCS,
    accuracy_reward,
    format_reward,
    gsm8k_reward,
    reward_timeout,
    reward_workers,
)
from trl_pods.tasks import get_reward_func

GSM8K_GOLD = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
TOWER = "\\boxed{10^{10^{10}}}"  # sympy would compute a 10-billion-digit integer inside one C call


def _chat(content):
    return [{"role": "assistant", "content": content}]


@pytest.fixture
def short_timeout(monkeypatch):
    """A 1.5 s per-item deadline, so that tests of hanging items stay fast."""
    monkeypatch.setenv("TRL_PODS_REWARD_TIMEOUT", "1.5")


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        # correct
        ("The answer is \\boxed{72}.", {"answer": GSM8K_GOLD}, 1.0),
        ("<think>48 + 24</think><answer>72</answer>", {"answer": GSM8K_GOLD}, 1.0),
        ("<answer>72.0</answer>", {"answer": "#### 72"}, 1.0),
        ("<answer>72 clips</answer>", {"answer": "#### 72"}, 1.0),
        ("<answer>\\$18</answer>", {"answer": "#### 18"}, 1.0),
        ("So she needs 1000 dollars.", {"answer": "#### 1,000"}, 1.0),
        ("<answer>1,000</answer>", {"answer": "#### 1000"}, 1.0),
        ("<answer>0.5</answer>", {"answer": "\\frac{1}{2}"}, 1.0),
        ("\\boxed{\\frac{1}{2}}", {"answer": "0.5"}, 1.0),
        ("<answer>72</answer>", {"answer": 72}, 1.0),
        ("<answer>(3, \\frac{\\pi}{2})</answer>", {"answer": "\\left( 3, \\frac{\\pi}{2} \\right)"}, 1.0),
        ("<answer>6-5i</answer>", {"answer": "6 - 5i"}, 1.0),
        ("Thus $\\boxed{\\dfrac{14}{3}}$.", {"solution": "$2+\\frac{5}{3}+1=\\boxed{\\frac{14}{3}}$"}, 1.0),
        ("<answer>9</answer>", {"answer": "9", "solution": "wrong gold \\boxed{8}"}, 1.0),
        (_chat("<think>x</think><answer>72</answer>"), {"answer": GSM8K_GOLD}, 1.0),
        ([{"role": "assistant", "content": [{"type": "text", "text": "\\boxed{72}"}]}], {"answer": "72"}, 1.0),
        # incorrect
        ("The answer is \\boxed{73}.", {"answer": GSM8K_GOLD}, 0.0),
        ("<answer>6+5i</answer>", {"answer": "6 - 5i"}, 0.0),
        ("<answer>71</answer> but really \\boxed{72}", {"answer": "#### 72"}, 0.0),
        (_chat("<answer>27</answer>"), {"answer": GSM8K_GOLD}, 0.0),
        # completion without a parsable answer
        ("I do not know.", {"answer": "#### 72"}, 0.0),
        ("", {"answer": "#### 72"}, 0.0),
        ("<answer></answer>", {"answer": "#### 72"}, 0.0),
        (_chat(None), {"answer": "#### 72"}, 0.0),
        # unscorable gold
        ("\\boxed{72}", {"answer": "#### N/A"}, None),
        ("\\boxed{72}", {"answer": "#### "}, None),
        ("\\boxed{72}", {"answer": ""}, None),
        ("\\boxed{72}", {"answer": None}, None),
        ("\\boxed{72}", {"solution": float("nan")}, None),
    ],
)
def test_accuracy_table(completion, gold, expected):
    """Correct, incorrect and unparsable completions and unparsable golds, as strings and as conversations."""
    assert accuracy_reward([completion], **{column: [value] for column, value in gold.items()}) == [expected]


def test_accuracy_batch_and_trl_extras():
    """A batch keeps its order, mixes None (unscorable gold) with scores, and accepts TRL's extra kwargs."""
    result = accuracy_reward(
        ["\\boxed{72}", "\\boxed{5}", "<answer>10</answer>", "\\boxed{1}"],
        answer=["#### 72", "#### N/A", "#### 10", "#### 2"],
        prompts=[[{"role": "user", "content": "q"}]] * 4,
        completion_ids=[[1, 2]] * 4,
        trainer_state=None,
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: None,
        question=["q"] * 4,
    )
    assert result == [1.0, None, 1.0, 0.0]


def test_accuracy_requires_a_gold_column():
    """Without an `answer` or `solution` column the misconfiguration is reported, not scored as all-None."""
    with pytest.raises(ValueError, match="answer"):
        accuracy_reward(["\\boxed{1}"], question=["q"])


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>48 + 24 = 72</think><answer>72</answer>", 1.0),
        ("  \n<think>\nreasoning\n</think>\n\n<answer> 72 </answer>\n", 1.0),
        (_chat("<think>a</think> <answer>b</answer>"), 1.0),
        ("<think>a</think>", 0.0),
        ("<answer>72</answer>", 0.0),
        ("<answer>72</answer><think>a</think>", 0.0),
        ("<think>a</think><think>b</think><answer>72</answer>", 0.0),
        ("<think>a</think><answer>7</answer><answer>2</answer>", 0.0),
        ("Sure! <think>a</think><answer>72</answer>", 0.0),
        ("<think>a</think> so <answer>72</answer>", 0.0),
        ("<think>a</think><answer>72</answer> Done.", 0.0),
        ("<think>a<answer>72</answer></think>", 0.0),
        (_chat(None), 0.0),
        (None, 0.0),
    ],
)
def test_format_table(completion, expected):
    """The <think>…</think><answer>…</answer> structure: each tag once, in order, only whitespace outside."""
    assert format_reward([completion]) == [expected]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>a</think><answer>72</answer>", 1.0),
        ("The answer is 72.", 1.0),
        ("<think>a</think><answer>71</answer>", 0.2),
        ("<answer>71</answer><think>a</think>", 0.2),
        ("<think>a</think> 71", 0.1),
        ("<think>a</think><answer>7</answer><answer>1</answer>", 0.1),
        ("71", 0.0),
    ],
)
def test_gsm8k_reward_table(completion, expected):
    """PODS's GSM8K composite: 1.0 if correct, else 0.05 per tag occurring exactly once (at most 0.2)."""
    assert gsm8k_reward([completion], answer=[GSM8K_GOLD]) == [pytest.approx(expected)]


def test_gsm8k_reward_unscorable_gold_is_none():
    """No format credit is handed out for a row whose gold cannot be parsed: the whole reward is None."""
    assert gsm8k_reward(["<think>a</think><answer>1</answer>"], answer=["#### N/A"]) == [None]


def test_hostile_batch_is_bounded_and_maps_back(short_timeout):
    """Exponent towers, megabyte strings, broken LaTeX, unicode junk and None content each get a float quickly,
    and the correct items around the timed-out ones keep their own scores."""
    batch = [
        ("9^9^9^9^9", 0.0),
        ("\\boxed{72}", 1.0),
        ("\\boxed{9^{9^{9^{9^9}}}}", 0.0),
        (f"<think>big</think><answer>{TOWER}</answer>", 0.0),
        (_chat("<answer>72</answer>"), 1.0),
        ("7" * 1_000_000, 0.0),
        ("\\boxed{" * 200_000, 0.0),
        ("<answer>" * 100_000 + "</answer>" * 100_000, 0.0),
        ("\\boxed{\\frac{1}{", 0.0),
        ("\\left( \\right. \\begin{pmatrix} 1 & \\\\ \\end{", 0.0),
        ("\\frac{" * 300, 0.0),
        ("\ud800\x00\u202e\U0001f4a5 \\boxed{\ufffd}", 0.0),
        (None, 0.0),
        (_chat(None), 0.0),
        ([], 0.0),
        (42, 0.0),
        ("The answer is 72", 1.0),
    ]
    completions = [completion for completion, _ in batch]
    start = time.perf_counter()
    results = accuracy_reward(completions, answer=["#### 72"] * len(batch))
    elapsed = time.perf_counter() - start
    assert all(isinstance(r, float) for r in results)
    assert results == [expected for _, expected in batch]
    assert elapsed < 30, f"hostile batch took {elapsed:.1f} s"
    start = time.perf_counter()
    assert all(isinstance(r, float) for r in format_reward(completions))
    assert all(isinstance(r, float) for r in gsm8k_reward(completions[4:], answer=["#### 72"] * (len(batch) - 4)))
    assert time.perf_counter() - start < 10


def test_call_from_a_thread(short_timeout):
    """Off the main thread (where math-verify's signal.alarm timeouts fail) a hanging item still times out."""
    results = {}

    def score():
        results["thread"] = threading.current_thread() is not threading.main_thread()
        results["rewards"] = accuracy_reward(["\\boxed{72}", TOWER, "<answer>72</answer>"], answer=["#### 72"] * 3)

    thread = threading.Thread(target=score)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert results == {"thread": True, "rewards": [1.0, 0.0, 1.0]}


def test_killed_worker_is_replaced():
    """A worker that died between calls (OOM killer, kill -9) is restarted and nothing is mis-scored."""
    assert accuracy_reward(["\\boxed{1}"], answer=["1"]) == [1.0]
    proc = rewards._WORKER._proc
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert accuracy_reward(["\\boxed{1}", "\\boxed{3}"], answer=["1", "2"]) == [1.0, 0.0]
    assert rewards._WORKER._proc.pid != proc.pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA and /proc are Linux's")
def test_a_worker_cannot_allocate_past_its_headroom():
    """A scorer's worker holds its imports plus `sandbox.MEMORY_HEADROOM` of data at most: an answer built to exhaust
    memory fails there with MemoryError (its item scores None -> 0) instead of growing until the OOM killer picks
    the trainer. The cap is what a process under `_limit_memory` gets: an allocation past it raises."""
    from trl_pods import sandbox

    assert accuracy_reward(["\\boxed{1}"], answer=["1"]) == [1.0]
    limits = Path(f"/proc/{rewards._WORKER._proc.pid}/limits").read_text().splitlines()
    soft = next(line for line in limits if line.startswith("Max data size")).split()[3]
    assert soft.isdigit() and sandbox.MEMORY_HEADROOM < int(soft) < sandbox.MEMORY_HEADROOM + (8 << 30)
    probe = textwrap.dedent(
        f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("sandbox", {str(Path(sandbox.__file__))!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        bytearray(64 << 20)  # within any headroom
        module._limit_memory(256 << 20)
        bytearray(64 << 20)
        try:
            bytearray(1 << 30)
        except MemoryError:
            print("refused")
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "refused", result.stderr


def test_a_worker_that_dies_before_an_item_reaches_it_costs_nothing(monkeypatch):
    """A worker that is alive when a call checks it and dead before it answers (killed in between: the OOM killer,
    kill -9) is restarted and the item sent once more; it used to score that item 0 without trying it."""
    assert accuracy_reward(["\\boxed{1}"], answer=["1"]) == [1.0]
    ensure = rewards._WORKER._ensure_running
    killed = []

    def ensure_then_die():
        ensure()
        if not killed:
            killed.append(rewards._WORKER._proc.pid)
            os.kill(killed[0], signal.SIGKILL)
            rewards._WORKER._proc.wait(timeout=10)

    monkeypatch.setattr(rewards._WORKER, "_ensure_running", ensure_then_die)
    assert accuracy_reward(["\\boxed{2}", "\\boxed{3}"], answer=["2", "4"]) == [1.0, 0.0]
    assert killed and rewards._WORKER._proc.pid != killed[0]


def test_forked_child_gets_its_own_worker():
    """After os.fork the child starts its own worker instead of reading answers meant for its parent."""
    assert accuracy_reward(["\\boxed{1}"], answer=["1"]) == [1.0]
    parent_worker = rewards._WORKER._proc.pid
    pid = os.fork()
    if pid == 0:  # child: exit status 0 only if it scored correctly on a worker of its own
        ok = accuracy_reward(["\\boxed{2}"], answer=["2"]) == [1.0] and rewards._WORKER._proc.pid != parent_worker
        rewards._WORKER.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert accuracy_reward(["\\boxed{3}"], answer=["3"]) == [1.0]
    assert rewards._WORKER._proc.pid == parent_worker


def test_no_worker_outlives_the_interpreter():
    """At interpreter exit the worker is killed, even while a daemon thread waits on a hanging item."""
    script = textwrap.dedent(
        f"""
        import threading, time
        from trl_pods import rewards
        assert rewards.accuracy_reward(["1"], answer=["1"]) == [1.0]
        print(rewards._WORKER._proc.pid, flush=True)
        threading.Thread(target=rewards.accuracy_reward, args=([{TOWER!r}],), kwargs={{"answer": ["1"]}},
                         daemon=True).start()
        time.sleep(0.5)
        """
    )
    repo_root = str(Path(rewards.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo_root, *sys.path])}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _numbered(n):
    """n completions answering i for gold i, every third one wrong (gold i + 1), and the rewards they should get."""
    completions = [f"<think>i</think><answer>{i}</answer>" for i in range(n)]
    answers = [str(i + 1 if i % 3 == 0 else i) for i in range(n)]
    return completions, answers, [0.0 if i % 3 == 0 else 1.0 for i in range(n)]


def _worker_pids():
    return [w._proc.pid for w in (rewards._WORKER, *rewards._EXTRA_WORKERS) if w._proc is not None]


@pytest.fixture
def three_workers(monkeypatch):
    """Parallel scoring on up to 3 worker processes."""
    monkeypatch.setenv("TRL_PODS_REWARD_WORKERS", "3")


def test_parallel_batch_matches_serial_in_order(monkeypatch, three_workers):
    """A batch split over 3 workers comes back in the caller's order with the same rewards as one worker gives,
    and 3 worker processes really took part."""
    completions, answers, expected = _numbered(96)
    parallel = accuracy_reward(completions, answer=answers)
    assert len(set(_worker_pids()[:3])) == 3
    monkeypatch.setenv("TRL_PODS_REWARD_WORKERS", "1")
    assert parallel == accuracy_reward(completions, answer=answers) == expected


def test_hostile_item_in_parallel_batch_costs_only_its_own_item(short_timeout, monkeypatch):
    """A hanging item in a parallel batch scores 0.0 and restarts only its own worker; every other item, also those
    after it in the same shard, keeps its own score."""
    monkeypatch.setenv("TRL_PODS_REWARD_WORKERS", "2")
    completions, answers, expected = _numbered(48)
    assert accuracy_reward(completions, answer=answers) == expected  # both workers up
    before = set(_worker_pids()[:2])
    completions[5], expected[5] = TOWER, 0.0
    assert accuracy_reward(completions, answer=answers) == expected
    assert len(before & set(_worker_pids()[:2])) == 1


def test_shard_count():
    """Small batches stay on one worker; larger ones get one shard per MIN_ITEMS_PER_WORKER items, up to the limit."""
    per = rewards.MIN_ITEMS_PER_WORKER
    assert rewards._shard_count(0, 8) == rewards._shard_count(2 * per - 1, 8) == 1
    assert rewards._shard_count(2 * per, 8) == 2
    assert rewards._shard_count(256 * per, 8) == 8
    assert rewards._shard_count(256 * per, 1) == 1


def test_forked_child_gets_its_own_parallel_workers(three_workers):
    """After os.fork a child scoring a parallel batch starts workers of its own; the parent keeps its workers."""
    completions, answers, expected = _numbered(64)
    assert accuracy_reward(completions, answer=answers) == expected
    parent_workers = _worker_pids()
    pid = os.fork()
    if pid == 0:  # child: exit status 0 only if it scored correctly on workers of its own
        ok = accuracy_reward(completions, answer=answers) == expected
        ok = ok and len(_worker_pids()) >= 3 and not set(_worker_pids()) & set(parent_workers)
        for worker in (rewards._WORKER, *rewards._EXTRA_WORKERS):
            worker.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert accuracy_reward(completions, answer=answers) == expected
    assert _worker_pids() == parent_workers


def test_no_parallel_worker_outlives_the_interpreter():
    """At interpreter exit every worker is killed, even while a daemon thread waits on a parallel batch of hanging
    items; the interpreter does not wait for that batch."""
    script = textwrap.dedent(
        f"""
        import threading, time
        from trl_pods import rewards
        assert rewards.accuracy_reward(["1"] * 64, answer=["1"] * 64) == [1.0] * 64
        print(*(w._proc.pid for w in (rewards._WORKER, *rewards._EXTRA_WORKERS)), flush=True)
        threading.Thread(target=rewards.accuracy_reward, args=([{TOWER!r}] * 64,), kwargs={{"answer": ["1"] * 64}},
                         daemon=True).start()
        time.sleep(0.5)
        """
    )
    repo_root = str(Path(rewards.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo_root, *sys.path]), "TRL_PODS_REWARD_WORKERS": "2",
           "TRL_PODS_REWARD_TIMEOUT": "60"}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    pids = [int(pid) for pid in out.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_workers_env_var_is_validated(monkeypatch, value):
    """A bad TRL_PODS_REWARD_WORKERS fails loudly instead of silently scoring on some other number of processes."""
    monkeypatch.setenv("TRL_PODS_REWARD_WORKERS", value)
    with pytest.raises(ValueError, match="TRL_PODS_REWARD_WORKERS"):
        reward_workers()


@pytest.mark.parametrize(
    ("cores", "local_world_size", "expected"),
    [(2, None, 2), (112, "8", 8), (16, "8", 2), (4, "8", 1), (64, None, rewards.MAX_DEFAULT_REWARD_WORKERS)],
)
def test_workers_default_shares_the_cores_among_local_processes(monkeypatch, cores, local_world_size, expected):
    """By default each training process on a host takes an equal share of the usable cores, at least 1 and at most
    MAX_DEFAULT_REWARD_WORKERS; the environment variable overrides it."""
    monkeypatch.delenv("TRL_PODS_REWARD_WORKERS", raising=False)
    monkeypatch.setattr(rewards, "_usable_cores", lambda: cores)
    if local_world_size is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world_size)
    assert reward_workers() == expected
    monkeypatch.setenv("TRL_PODS_REWARD_WORKERS", "5")
    assert reward_workers() == 5


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_timeout_env_var_is_validated(monkeypatch, value):
    """A bad TRL_PODS_REWARD_TIMEOUT fails loudly instead of disabling or breaking the deadline."""
    monkeypatch.setenv("TRL_PODS_REWARD_TIMEOUT", value)
    with pytest.raises(ValueError, match="TRL_PODS_REWARD_TIMEOUT"):
        reward_timeout()


def test_timeout_defaults_and_env_override(monkeypatch):
    """The deadline is the module constant unless the environment variable sets it."""
    monkeypatch.delenv("TRL_PODS_REWARD_TIMEOUT", raising=False)
    assert reward_timeout() == rewards.REWARD_TIMEOUT_S
    monkeypatch.setenv("TRL_PODS_REWARD_TIMEOUT", "2.5")
    assert reward_timeout() == 2.5


def test_registry():
    """Names resolve to the reward functions, dotted paths are imported, unknown names list the known ones."""
    assert REWARD_FUNCS == {"accuracy": accuracy_reward, "format": format_reward, "gsm8k": gsm8k_reward}
    assert get_reward_func("gsm8k") is gsm8k_reward
    assert get_reward_func("trl_pods.rewards.format_reward") is format_reward
    with pytest.raises(ValueError, match="'accuracy', 'arithmetic', 'format', 'gsm8k'"):
        get_reward_func("nope")
    with pytest.raises(ValueError, match="Could not import"):
        get_reward_func("trl_pods.rewards.nope")
    with pytest.raises(ValueError, match="not callable"):
        get_reward_func("trl_pods.rewards.MAX_ANSWER_CHARS")
