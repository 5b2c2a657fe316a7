"""Poisoned allocation: while a version runs, uninitialised buffers come back NaN-filled.

A kernel that writes only part of its output, or that relies on finding the reference's result in
freed memory (the caching allocator hands the same block back), then returns NaN or garbage where
it skipped work, and the NaN check or the comparison catches it. Only the ``empty`` family is
patched: ``zeros``/``full`` promise their contents, ``empty`` does not.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

_PATCHED_FUNCTIONS = ("empty", "empty_like", "empty_strided")


def _poison(t: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(t.dtype).max)  # int: a value no sane kernel leaves by accident
    return t


@contextlib.contextmanager
def poisoned_allocations() -> Iterator[dict]:
    """Patch ``torch.empty*`` and ``Tensor.new_empty`` to NaN-fill; yields a counter of poisoned buffers."""
    counter = {"buffers": 0}
    originals = {name: getattr(torch, name) for name in _PATCHED_FUNCTIONS}
    original_new_empty = torch.Tensor.new_empty
    own_new_empty = "new_empty" in vars(torch.Tensor)  # else inherited from the C base: delete, not set, after

    def wrap(fn):
        def poisoned(*args, **kwargs):
            out = fn(*args, **kwargs)
            if isinstance(out, torch.Tensor) and not out.is_meta:
                counter["buffers"] += 1
                _poison(out)
            return out

        poisoned.__wrapped__ = fn
        poisoned.__name__ = getattr(fn, "__name__", "empty")
        return poisoned

    for name, fn in originals.items():
        setattr(torch, name, wrap(fn))
    torch.Tensor.new_empty = wrap(original_new_empty)
    try:
        yield counter
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)
        if own_new_empty:
            torch.Tensor.new_empty = original_new_empty
        else:
            del torch.Tensor.new_empty
