"""Comparing outputs: flattening results, tolerances by dtype, first mismatch and error figures."""

from __future__ import annotations

import math
from typing import Any

import torch

# KernelBench's tolerances (atol = rtol); integer and bool outputs must match exactly.
TOLERANCES = {
    torch.float64: 1e-7,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 1e-2,
}
FP8_TOLERANCE = 1e-1
# Integer outputs of floating math may differ by one rounding step on at most 1/this of their elements.
ROUNDING_STEP_SHARE = 100


def tolerance_for(dtype: torch.dtype, floor: torch.dtype | None = None) -> float:
    """The atol/rtol for outputs of ``dtype`` (0 for exact types), never tighter than ``floor`` allows.

    ``floor`` is the lowest precision the job computes in (inputs, reference): an fp32 output of
    a computation on bf16 inputs carries bf16 rounding, so it is judged at bf16's tolerance.
    """
    if dtype in TOLERANCES:
        own = TOLERANCES[dtype]
    elif dtype.is_floating_point:  # fp8 variants
        own = FP8_TOLERANCE
    else:
        return 0.0  # integers and bools match exactly, whatever the inputs were
    return max(own, tolerance_for(floor)) if floor is not None and floor.is_floating_point else own


def dots_in_tf32(expected: dict[str, Any], floor: torch.dtype | None, atol: float | None = None,
                 rtol: float | None = None) -> bool:
    """Whether the accepted version computes an fp32 job in TF32: its result misses the reference at fp32's
    tolerance but meets it at fp16's (both keep 10 mantissa bits), as an fp32 ``tl.dot`` does on the GPU by
    default. Then candidates are judged at fp16's tolerance too. Both results come from the accepted side
    (its own file or the problem's), never from the candidate; explicit tolerances are kept."""
    old, reference = expected.get("old"), expected.get("reference")
    if floor != torch.float32 or old is None or reference is None or atol is not None or rtol is not None:
        return False
    try:
        return not compare(old, reference, floor=floor)["ok"] and compare(old, reference, floor=torch.float16)["ok"]
    except TypeError:  # results that cannot be compared judge nothing here
        return False


# TF32 keeps fp16's 10 mantissa bits, but over a long sum its error grows with the terms, not with the output:
# outputs near zero miss every relative tolerance while the norm-relative error stays near 3e-4 (fp32 lands far
# under 1e-3, bf16 operands between 1e-3 and 1e-2). An accepted version within this of its reference in norm
# computes in TF32; one further off is wrong, not rounded.
TF32_NORM_REL = 2e-3
# How far past the accepted version's own worst error a step may land: the worst of a million rounded values
# moves little between seeds, and a real mistake (an index, a skipped block) is the size of the values.
TF32_ERROR_MARGIN = 3.0


def tf32_long_sum_atol(expected: dict[str, Any], floor: torch.dtype | None, atol: float | None = None,
                       rtol: float | None = None) -> float | None:
    """The absolute tolerance for an fp32 job whose accepted version sums long TF32 products (an fp32 ``tl.dot``
    over a long K, or a broadcast product that Triton turns into one): its own worst error vs the reference, times
    ``TF32_ERROR_MARGIN``; None when it meets fp32's tolerance, is further than ``TF32_NORM_REL`` in norm from the
    reference, is not finite, or the job sets its own tolerances. Both results come from the accepted side."""
    old, reference = expected.get("old"), expected.get("reference")
    if floor != torch.float32 or old is None or reference is None or atol is not None or rtol is not None:
        return None
    try:
        if compare(old, reference, floor=floor)["ok"]:
            return None
    except TypeError:
        return None
    pairs = list(zip(flatten(old), flatten(reference)))
    worst = 0.0
    for (_, a), (_, b) in pairs:
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape \
                or not a.is_floating_point() or not b.is_floating_point() or a.numel() == 0:
            return None
        a64, b64 = a.detach().to(torch.float64), b.detach().to(a.device, torch.float64)
        if not bool(torch.isfinite(a64).all()) or not bool(torch.isfinite(b64).all()):
            return None
        norm = float(b64.norm())
        error = a64 - b64
        if norm == 0.0 or float(error.norm()) / norm > TF32_NORM_REL:
            return None
        worst = max(worst, float(error.abs().max()))
    return TF32_ERROR_MARGIN * worst if worst > 0.0 else None


def lowest_precision(dtypes) -> torch.dtype | None:
    """The floating dtype with the loosest tolerance among ``dtypes`` (None without floating ones)."""
    floats = [d for d in dtypes if isinstance(d, torch.dtype) and d.is_floating_point]
    return max(floats, key=tolerance_for, default=None)


def upcast(casts_to: str | None, inputs: Any) -> str | None:
    """"float16 -> float32" when a function converting to ``casts_to`` (harness.widest_cast) computes wider than
    its inputs' precision, the dtype of the largest float input (as the compute roofline takes it): then it is
    no baseline a user would call. None without float inputs."""
    floats = [t for _, t in flatten(inputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    own = max(floats, key=lambda t: t.numel()).dtype if floats else None
    wide = getattr(torch, casts_to) if casts_to else None
    if own is None or wide is None or torch.finfo(wide).bits <= torch.finfo(own).bits:
        return None
    return f"{str(own).replace('torch.', '')} -> {casts_to}"


def effective_precision(value: Any) -> torch.dtype | None:
    """The precision a result was really computed in: an fp32 reference whose every value is exactly
    a bf16 (or fp16) value was computed in bf16 and converted with ``.float()``.

    Needs 64+ finite values that are not all integers (small integers are exact in every format),
    so a coincidence cannot loosen a check.
    """
    lowest = None
    for _, item in flatten(value):
        if not isinstance(item, torch.Tensor) or item.dtype not in (torch.float32, torch.float64):
            continue
        finite = item.detach()[torch.isfinite(item.detach())]
        if finite.numel() < 64 or bool((finite == finite.round()).all()):
            continue
        lower = (torch.bfloat16, torch.float16) + ((torch.float32,) if item.dtype == torch.float64 else ())
        for low in lower:
            if bool((finite.to(low).to(finite.dtype) == finite).all()):
                lowest = lowest_precision([lowest, low] if lowest is not None else [low])
                break
    return lowest


def flatten(value: Any, prefix: str = "output") -> list[tuple[str, Any]]:
    """Tensors and scalars in a result, with a readable path: ``output[1]``, ``output['y']``."""
    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, dict):
        out = []
        for key in sorted(value, key=str):
            out.extend(flatten(value[key], f"{prefix}[{key!r}]"))
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for i, item in enumerate(value):
            out.extend(flatten(item, f"{prefix}[{i}]"))
        return out
    if isinstance(value, (int, float, bool)) or value is None:
        return [(prefix, value)]
    raise TypeError(f"{prefix}: cannot compare a result of type {type(value).__name__}")


def nonfinite(value: Any) -> dict | None:
    """The first NaN/Inf in a result as ``{"output", "index", "value", "count"}``, or None."""
    for name, item in flatten(value):
        if not isinstance(item, torch.Tensor) or not item.dtype.is_floating_point or item.numel() == 0:
            continue
        bad = ~torch.isfinite(item)
        count = int(bad.sum().item())
        if count:
            flat = int(bad.reshape(-1).nonzero()[0].item())
            index = _unravel(flat, tuple(item.shape))
            return {"output": name, "index": index, "value": _scalar(item.reshape(-1)[flat]), "count": count}
    return None


def compare(actual: Any, expected: Any, atol: float | None = None, rtol: float | None = None,
            scale: float = 1.0, floor: torch.dtype | None = None) -> dict:
    """Compare two results element-wise; returns ``{"ok", "max_abs", "max_rel", "mismatch", ...}``.

    ``mismatch`` (when not ok) names the output, the first bad index, both values, the count of
    bad elements and the tolerance used. A NaN where the expected value is finite counts as bad.
    ``scale`` multiplies the tolerances (2 when both sides carry their own rounding error);
    ``floor`` is the job's lowest precision (see ``tolerance_for``).
    """
    got, want = flatten(actual), flatten(expected)
    summary = {"ok": True, "max_abs": 0.0, "max_rel": 0.0, "mismatch": None, "elements": 0}
    if len(got) != len(want):
        summary.update(ok=False, mismatch={"reason": f"{len(got)} outputs, expected {len(want)}"})
        return summary
    for (name, a), (_, b) in zip(got, want):
        result = _compare_one(name, a, b, atol, rtol, scale, floor)
        summary["elements"] += result.get("elements", 0)
        summary["max_abs"] = max(summary["max_abs"], result.get("max_abs", 0.0))
        summary["max_rel"] = max(summary["max_rel"], result.get("max_rel", 0.0))
        if not result["ok"] and summary["ok"]:
            summary["ok"] = False
            summary["mismatch"] = result["mismatch"]
    return summary


def _compare_one(name: str, a: Any, b: Any, atol: float | None, rtol: float | None, scale: float = 1.0,
                 floor: torch.dtype | None = None) -> dict:
    if not isinstance(b, torch.Tensor):
        if isinstance(a, torch.Tensor):
            return _bad(name, f"a tensor where {type(b).__name__} {b!r} was expected")
        if isinstance(a, float) and isinstance(b, float):
            tol = (tolerance_for(torch.float32, floor) if atol is None else atol) * scale
            ok = math.isclose(a, b, rel_tol=tol, abs_tol=tol) or (math.isnan(a) and math.isnan(b))
        else:
            ok = a == b
        return {"ok": ok, "elements": 1, "mismatch": None if ok else {"output": name, "actual": a, "expected": b}}
    if not isinstance(a, torch.Tensor):
        return _bad(name, f"{type(a).__name__} where a tensor was expected")
    if tuple(a.shape) != tuple(b.shape):
        return _bad(name, f"shape {tuple(a.shape)}, expected {tuple(b.shape)}")
    if a.dtype != b.dtype:
        return _bad(name, f"dtype {a.dtype}, expected {b.dtype}".replace("torch.", ""))
    tol = tolerance_for(b.dtype, floor)
    a_tol = (tol if atol is None else atol) * scale
    r_tol = (tol if rtol is None else rtol) * scale
    if a.numel() == 0:
        return {"ok": True, "elements": 0, "max_abs": 0.0, "max_rel": 0.0, "mismatch": None}
    a64 = a.detach().to(torch.float64) if a.dtype != torch.bool else a.detach().to(torch.int64).to(torch.float64)
    b64 = b.detach().to(a64.device, torch.float64) if b.dtype != torch.bool else b.detach().to(a64.device, torch.int64).to(torch.float64)
    diff = (a64 - b64).abs()
    both_nan = torch.isnan(a64) & torch.isnan(b64)
    same_inf = torch.isinf(a64) & torch.isinf(b64) & (a64 == b64)
    close = (diff <= a_tol + r_tol * b64.abs()) | both_nan | same_inf
    if (atol is None and not b.dtype.is_floating_point and b.dtype != torch.bool and floor is not None
            and floor.is_floating_point):
        # Integers rounded from floating math (quantization): two correct roundings of values that land
        # on a tie differ by one step. Allowed on at most 1% of the elements; more is a wrong kernel.
        steps = diff == 1
        if int(steps.sum().item()) <= max(1, a.numel() // ROUNDING_STEP_SHARE):
            close = close | steps
    # The largest errors where the difference is finite; torch.where, not a boolean index: indexing by a mask
    # costs a nonzero() (a device sync on a GPU, ~20 ms for 6k elements on a busy 2-core CPU).
    finite = torch.isfinite(diff)
    max_abs = float(torch.where(finite, diff, 0.0).max().item())
    rel = diff / b64.abs().clamp_min(1e-12)
    max_rel = float(torch.where(finite, rel, 0.0).max().item())
    bad = ~close
    count = int(bad.sum().item())
    out = {"ok": count == 0, "elements": a.numel(), "max_abs": max_abs, "max_rel": max_rel, "mismatch": None}
    if count:
        flat = int(bad.reshape(-1).nonzero()[0].item())
        out["mismatch"] = {
            "output": name,
            "index": _unravel(flat, tuple(a.shape)),
            "actual": _scalar(a.reshape(-1)[flat]),
            "expected": _scalar(b.reshape(-1)[flat]),
            "count": count,
            "elements": a.numel(),
            "atol": a_tol,
            "rtol": r_tol,
            "dtype": str(b.dtype).replace("torch.", ""),
        }
    return out


def _bad(name: str, reason: str) -> dict:
    return {"ok": False, "elements": 0, "mismatch": {"output": name, "reason": reason}}


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for dim in reversed(shape):
        index.append(flat % dim)
        flat //= dim
    return list(reversed(index))


def _scalar(t: torch.Tensor) -> float | int | bool | str:
    value = t.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Inf
    return value


def tensors_equal(a: Any, b: Any) -> dict | None:
    """Bit-exact equality of two results (used for the input-mutation check); the first difference or None."""
    for (name, x), (_, y) in zip(flatten(a, "input"), flatten(b, "input")):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return {"output": name, "reason": "shape or dtype changed"}
            same = (x == y) | (torch.isnan(x) & torch.isnan(y)) if x.dtype.is_floating_point else (x == y)
            if not bool(same.all()):
                flat = int((~same).reshape(-1).nonzero()[0].item())
                return {
                    "output": name,
                    "index": _unravel(flat, tuple(x.shape)),
                    "actual": _scalar(x.reshape(-1)[flat]),
                    "expected": _scalar(y.reshape(-1)[flat]),
                    "count": int((~same).sum().item()),
                }
        elif x != y:
            return {"output": name, "reason": f"{x!r} became {y!r}"}
    return None


def nbytes(value: Any) -> int:
    """Total bytes of the tensors in a value (inputs or outputs), for the memory roofline."""
    try:
        return sum(t.numel() * t.element_size() for _, t in flatten(value) if isinstance(t, torch.Tensor))
    except TypeError:
        return 0
