"""Run untrusted work (a scorer fed model text) in a persistent worker process, each item under a wall-clock limit.

`Sandbox(module, function)` calls ``trl_pods.<module>.<function>(item)`` for every item in a worker process of its
own and returns the answers in order; an item that raises gives None, and so does one that runs past its timeout:
the worker is then killed, a fresh one started, and the remaining items sent to it. The worker is a fresh
interpreter (``python -c``, the equivalent of a 'spawn' start: nothing of the trainer's threads, CUDA state or open
files is inherited) that registers ``trl_pods`` as a bare package, so only the named module and what it imports are
loaded, never ``trl_pods/__init__.py`` (torch, TRL). It lives as long as its `Sandbox`: starting one costs the
module's imports once (about a second for reasoning-gym), an item then costs one pipe round trip. Its string hashing
is fixed (``PYTHONHASHSEED`` `HASH_SEED`), so what it computes from sets of strings (reasoning-gym's generators) is the
same whichever process asks, on every machine and every resume.

Safety nets: each item also caps the worker's own CPU time (``RLIMIT_CPU``, timeout + 2 s) so that the kernel ends a
runaway worker even when its parent is gone; the worker's memory is capped at what its imports took plus
`MEMORY_HEADROOM` (``RLIMIT_DATA``, on Linux); an idle worker exits when its pipe closes; ``atexit`` kills every
worker; a forked child (a DataLoader worker) drops its copies of the parent's workers. What a sandbox does not do:
restrict what the code may do. Code that must never run (``eval`` of model text) has to be refused before it is
sent (see `trl_pods.reasoning_gym_tasks.admissible`).
"""

from __future__ import annotations

import atexit
import logging
import math
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["HASH_SEED", "Sandbox"]

STARTUP_TIMEOUT_S = 120.0
"""Longest wait for a worker to import its module and say it is ready."""

_READY = "ready"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Runs in the worker: `trl_pods` becomes a bare package (its __init__, which imports torch, never runs), then the
# module is imported and serves.
_BOOT = (
    "import importlib, sys, types\n"
    "package = types.ModuleType('trl_pods')\n"
    "package.__path__ = [sys.argv[1]]\n"
    "sys.modules['trl_pods'] = package\n"
    "importlib.import_module('trl_pods.sandbox')._serve(*sys.argv[2:5], int(sys.argv[5]))\n"
)

HASH_SEED = "0"
"""``PYTHONHASHSEED`` of every worker: the order of a set of strings, and so what a worker computes from one, is the
same in every worker."""

MEMORY_HEADROOM = 2 << 30
"""Bytes of data an item may allocate in a worker beyond what the worker held once it had imported its module: an
answer built to exhaust memory raises MemoryError there (its item gives None) instead of starving the trainer."""

logger = logging.getLogger(__name__)


def _set_soft_limit(kind: int, soft: int) -> None:
    """Set this process's soft ``resource`` limit ``kind`` to ``soft``, never above its hard limit."""
    import resource

    _, hard = resource.getrlimit(kind)
    resource.setrlimit(kind, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _limit_cpu(seconds: float) -> None:
    """Have the kernel end this process (SIGXCPU) once it uses ``seconds`` more CPU time."""
    import resource

    _set_soft_limit(resource.RLIMIT_CPU, math.ceil(time.process_time() + seconds))


def _limit_memory(headroom: int) -> None:
    """Cap this process's data (heap and anonymous mappings, ``RLIMIT_DATA``) at what it holds now plus
    ``headroom`` bytes, so that an allocation past it raises MemoryError; no cap where the kernel does not say what
    the process holds (not Linux)."""
    import resource

    try:
        with open("/proc/self/status") as status:
            held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return
    _set_soft_limit(resource.RLIMIT_DATA, held + headroom)


def _serve(module: str, function: str, prepare: str, fd: int) -> None:
    """Worker main loop: run ``prepare`` (if named), then answer each ``(items, timeout)`` request with one message
    per item, in order."""
    import importlib
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # being killed by RLIMIT_CPU must not dump core
    code = importlib.import_module(f"trl_pods.{module}")
    if prepare:
        getattr(code, prepare)()
    work = getattr(code, function)
    _limit_memory(MEMORY_HEADROOM)  # after the imports: what an item allocates, past them
    conn = Connection(fd)
    conn.send(_READY)
    while True:
        try:
            items, timeout = conn.recv()
        except EOFError:  # the parent closed the pipe or died
            return
        for item in items:
            _limit_cpu(timeout + 2)
            try:
                result = work(item)
            except Exception:  # the work's own failure is the caller's None, not the worker's end
                result = None
            conn.send(result)


class Sandbox:
    """A persistent worker process that runs ``trl_pods.<module>.<function>`` on items, each under a timeout.

    Args:
        module: Module of the `trl_pods` package, e.g. ``"reasoning_gym_tasks"``; it must not import torch or the
            package's ``__init__`` names at import time.
        function: Function of that module called with one item (picklable) and returning a picklable result.
        prepare: Function of that module called once in each new worker before it takes items (e.g. heavy imports,
            so that they do not count against the first item's timeout); "" for none.
    """

    def __init__(self, module: str, function: str, prepare: str = "") -> None:
        self.module, self.function, self.prepare = module, function, prepare
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        _SANDBOXES.add(self)

    def run(self, items: Sequence[Any], timeout: float) -> list[Any]:
        """The function's result for every item, in order; None for an item that raised or ran past ``timeout``
        seconds (the worker is then restarted for the items after it). A worker that dies without answering (killed
        from outside, or crashing on the item) is restarted and the item sent once more; None if it dies again.

        Raises:
            RuntimeError: the worker could not be started.
        """
        results: list[Any] = []
        retried = -1  # the item sent again after its worker died without an answer
        with self._lock:
            while len(results) < len(items):
                self._ensure_running()
                todo = list(items[len(results) :])
                try:
                    self._conn.send((todo, timeout))
                    for _ in todo:
                        if not self._conn.poll(timeout):
                            raise TimeoutError
                        results.append(self._conn.recv())
                except (OSError, EOFError) as err:  # TimeoutError is an OSError
                    self.close()
                    if not isinstance(err, TimeoutError) and retried != len(results):
                        retried = len(results)  # the worker may have died before the item reached it: once more
                        continue
                    logger.warning(
                        "%s.%s %s on an item; it counts as None and the worker was restarted.",
                        self.module,
                        self.function,
                        f"took over {timeout:g} s" if isinstance(err, TimeoutError) else f"failed ({err!r})",
                    )
                    results.append(None)
                except BaseException:
                    self.close()  # e.g. KeyboardInterrupt: answers left in the pipe must never reach a later call
                    raise
        return results

    def _ensure_running(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.close()
        parent_conn, child_conn = multiprocessing.Pipe()
        fd = child_conn.fileno()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, _PACKAGE_DIR, self.module, self.function, self.prepare, str(fd)],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "PYTHONHASHSEED": HASH_SEED},
            )
        finally:
            child_conn.close()
        self._conn = parent_conn
        try:
            ready = parent_conn.poll(STARTUP_TIMEOUT_S) and parent_conn.recv() == _READY
        except (OSError, EOFError):
            ready = False
        except BaseException:
            self.close()
            raise
        if not ready:
            self.close()
            raise RuntimeError(
                f"The worker for trl_pods.{self.module}.{self.function} ({sys.executable}) did not start within "
                f"{STARTUP_TIMEOUT_S:g} s."
            )

    def close(self) -> None:
        """Kill the worker process, if any (lock-free, so that it can run at interpreter exit)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def _forget_after_fork(self) -> None:
        # A forked child must not talk to its parent's worker; closing its copy of the pipe keeps "parent gone =>
        # pipe closed => idle worker exits" true. The child starts its own worker when it needs one.
        if self._conn is not None:
            self._conn.close()
        self._conn, self._proc, self._lock = None, None, threading.Lock()


_SANDBOXES: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def _close_all() -> None:
    for sandbox in list(_SANDBOXES):
        sandbox.close()


def _forget_all_after_fork() -> None:
    for sandbox in list(_SANDBOXES):
        sandbox._forget_after_fork()


os.register_at_fork(after_in_child=_forget_all_after_fork)
atexit.register(_close_all)
