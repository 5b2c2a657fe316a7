"""Code under test must not replace the tools the checker compares with (torch's functions, Tensor methods).

The worker takes a snapshot right after importing torch, before any user code; after user code has
run, anything in ``torch``, ``torch.Tensor``, ``torch.testing`` or ``torch.nn.functional`` that now
points at a function defined outside torch (``torch.Tensor.__sub__ = lambda ...``) is tampering: the
trial fails and the worker is replaced, so the patch dies with it.
"""

from __future__ import annotations

import sys
from typing import Any

_BASELINE: dict[str, int] | None = None
_RUNTIME_BASELINE: dict[str, tuple[int, int]] = {}


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


def _runtime_callables() -> dict[str, Any]:
    """The verifier's own functions and classes in this process (the runtime package and its classes' methods)."""
    found: dict[str, Any] = {}
    package = __name__.rsplit(".", 1)[0]
    for name, module in list(sys.modules.items()):
        if name != package and not name.startswith(package + "."):
            continue
        for attr, value in list(vars(module).items()):
            if callable(value):
                found[f"{name}.{attr}"] = value
            if isinstance(value, type) and value.__module__ == name:
                for method, member in list(vars(value).items()):
                    found[f"{name}.{attr}.{method}"] = member
    return found


def _fingerprint(value: Any) -> tuple[int, int]:
    return id(value), id(getattr(value, "__code__", None))


def snapshot_runtime() -> None:
    """Remember the verifier's own code as loaded (call once every runtime module is imported)."""
    _RUNTIME_BASELINE.clear()
    _RUNTIME_BASELINE.update({key: _fingerprint(value) for key, value in _runtime_callables().items()})


def runtime_intact() -> bool:
    """Whether the verifier's own functions and methods are still the ones loaded (user code may rebind
    them, or their ``__code__``); a worker whose code changed is not used for another job."""
    now = _runtime_callables()
    return all(key in now and _fingerprint(now[key]) == mark for key, mark in _RUNTIME_BASELINE.items())
