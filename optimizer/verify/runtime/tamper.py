"""Code under test must not replace the tools the checker compares with (torch's functions, Tensor methods).

The worker takes a snapshot right after importing torch, before any user code; after user code has
run, anything in ``torch``, ``torch.Tensor``, ``torch.testing`` or ``torch.nn.functional`` that now
points at a function defined outside torch (``torch.Tensor.__sub__ = lambda ...``) is tampering: the
trial fails and the worker is replaced, so the patch dies with it.
"""

from __future__ import annotations

from typing import Any

_BASELINE: dict[str, int] | None = None


def _owners() -> dict[str, Any]:
    import torch
    import torch.nn.functional
    import torch.testing

    return {"torch": torch, "torch.Tensor": torch.Tensor, "torch.testing": torch.testing,
            "torch.nn.functional": torch.nn.functional}


def take_snapshot() -> None:
    """Remember what every watched name points at (call before any user code is loaded)."""
    global _BASELINE
    _BASELINE = {f"{owner}.{name}": id(value) for owner, obj in _owners().items() for name, value in vars(obj).items()}


def replaced() -> list[str]:
    """Watched names that user code re-pointed at its own functions since the snapshot."""
    if _BASELINE is None:
        return []
    found = []
    for owner, obj in _owners().items():
        bases = [b for b in getattr(obj, "__mro__", ())[1:] if b is not object]
        for name, value in list(vars(obj).items()):
            key = f"{owner}.{name}"
            changed = _BASELINE[key] != id(value) if key in _BASELINE else any(name in vars(b) for b in bases)
            if changed and not (getattr(value, "__module__", None) or "").startswith("torch"):
                found.append(key)  # re-pointed, or shadowing what the class inherits (Tensor.__sub__)
    return found
