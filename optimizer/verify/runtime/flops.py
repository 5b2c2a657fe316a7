"""The reference's floating-point work, for the compute roofline: aten FLOPs and the operand dtype.

``torch.utils.flop_counter.FlopCounterMode`` counts matmul/bmm/addmm/conv/attention FLOPs and
nothing for elementwise ops, which is what the roofline needs: a kernel made only of elementwise
work is memory-bound whatever its arithmetic. Counting is best effort: any failure (an op the mode
cannot trace, a reference that refuses to run under a dispatch mode) just means no count.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def count_flops(fn: Callable[[Any], Any], args: Any) -> dict:
    """Run ``fn(args)`` once under FlopCounterMode: ``{"flops": n, "flop_dtype": "float16"}`` or ``{"flops_error": ...}``."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            fn(args)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        flops = int(counter.get_total_flops())
    except BaseException as exc:  # noqa: BLE001 - user code: a failure here must never fail verification
        return {"flops": None, "flops_error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"flops": flops, "flop_dtype": dominant_float_dtype(args)}


def dominant_float_dtype(args: Any) -> str | None:
    """The dtype of the largest floating-point input tensor ("float16"), which sets the peak to compare with."""
    tensors = [t for t in _tensors(args) if t.dtype.is_floating_point]
    if not tensors:
        return None
    largest = max(tensors, key=lambda t: t.numel() * t.element_size())
    return str(largest.dtype).removeprefix("torch.")


def _tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in nested lists, tuples and dicts; anything else is skipped."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []
