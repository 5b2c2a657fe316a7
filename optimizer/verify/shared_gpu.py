"""Several verifying processes on one GPU: a map over child processes that share it through ``runtime/gpu_lock``.

One verifier pool measures one candidate at a time, and most of a verification is CPU work (the
candidate's import, Triton's compile, correctness trials), so a 16-core GPU machine measures many
more candidates per minute with several pools side by side. Each child process has its own pools
(``api.pool_for``); their jobs hold the GPU shared and their timing rounds hold it alone. Used by
``mtmc train collect --backend process`` and the KernelBench loop.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import tempfile
from typing import Any, Callable, Iterable, Iterator

from .runtime import gpu_lock


def map_on_one_gpu(fn: Callable[[Any], Any], items: Iterable[Any], processes: int,
                   may_start: Callable[[], bool] = lambda: True) -> Iterator[tuple[Any, Any]]:
    """``(item, fn(item))`` as they finish, ``processes`` at a time; an exception becomes the result.

    ``items`` is read as items are handed out, and ``may_start`` is asked before each (a budget): once
    False, nothing new starts and the items in flight finish. One process runs in this one. More are
    forked, so they have the package however this process imported it (an uninstalled checkout on a GPU
    machine too); this process must not have touched CUDA (its verifier pools' workers are separate
    processes, and a fork forgets the pools).
    """
    pending = iter(items)
    if processes <= 1:
        for item in pending:
            if not may_start():
                return
            yield item, _call(fn, item)
        return
    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    lock_dir = tempfile.mkdtemp(prefix="mtmc-gpu-lock-")
    os.chmod(lock_dir, 0o755)
    previous = os.environ.get(gpu_lock.ENV)
    os.environ[gpu_lock.ENV] = os.path.join(lock_dir, "gpu.lock")
    tasks, results = context.Queue(), context.Queue()
    children = [context.Process(target=_serve, args=(fn, tasks, results), name=f"mtmc-gpu-share-{i}")
                for i in range(processes)]
    try:
        for child in children:
            child.start()
        running, exhausted = 0, False
        while True:
            while not exhausted and running < processes and may_start():
                item = next(pending, _DONE)
                if item is _DONE:
                    exhausted = True
                    break
                tasks.put(item)
                running += 1
            if not running:
                break
            try:
                item, result = results.get(timeout=5.0)
            except queue.Empty:
                if not any(child.is_alive() for child in children):
                    break  # every child died: nothing more will come
                continue
            running -= 1
            yield item, result
    finally:
        for _ in children:
            tasks.put(None)
        for child in children:
            child.join(timeout=60)
            if child.is_alive():
                child.kill()
        if previous is None:
            os.environ.pop(gpu_lock.ENV, None)
        else:
            os.environ[gpu_lock.ENV] = previous


_DONE = object()


def _serve(fn: Callable[[Any], Any], tasks, results) -> None:
    """A child: call ``fn`` on items until the sentinel, then close this process's verifier pools."""
    from .api import close_pools

    try:
        while True:
            item = tasks.get()
            if item is None:
                return
            results.put((item, _call(fn, item)))
    finally:
        close_pools()  # a child ends without atexit: its pools' workers would outlive it


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    """``fn(item)``, or the exception it raised (one that cannot cross a pipe as a plain RuntimeError)."""
    try:
        return fn(item)
    except BaseException as exc:  # noqa: BLE001 - the caller counts on one answer per item
        return exc if _picklable(exc) else RuntimeError(f"{type(exc).__name__}: {exc}")


def _picklable(value: Any) -> bool:
    import pickle

    try:
        pickle.dumps(value)
        return True
    except Exception:  # noqa: BLE001 - any failure to pickle means: send a plain error instead
        return False
