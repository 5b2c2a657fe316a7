"""Hoist: a loop-invariant load or transcendental computation moves out of the loop, computed once.

A statement ``name = expr`` directly in a loop body moves to just before the loop when ``expr``
loads memory or calls a transcendental function (``exp``, ``sqrt``, ``log``, ...), reads nothing the
loop assigns (nor the loop variable), ``name`` is assigned nowhere else in the kernel and read
nowhere in the loop before it, and, for loads, the loop stores nothing (the store could alias).

Example: kernel=scale_kernel target=h100 params={"name": "inv"}

```python before
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, norm, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inv = 1.0 / tl.sqrt(norm)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * inv, mask=offs < n)


def scale(x, norm):
    out = torch.empty_like(x)
    scale_kernel[(1,)](x, out, x.numel(), norm, BLOCK=128)
    return out
```

```python after
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, norm, BLOCK: tl.constexpr):
    inv = 1.0 / tl.sqrt(norm)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * inv, mask=offs < n)


def scale(x, norm):
    out = torch.empty_like(x)
    scale_kernel[(1,)](x, out, x.numel(), norm, BLOCK=128)
    return out
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import TRANSCENDENTAL_OPS, Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .single_pass import _single_assign

_SIDE_EFFECTS = ("tl.store", "tl.atomic_", "tl.debug_barrier", "tl.device_print")


def _calls(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.add(c.code(n.func))

    node.visit(V())
    return found


def _worth_hoisting(value: cst.BaseExpression) -> str | None:
    calls = _calls(value)
    if "tl.load" in calls:
        return "load"
    if any(name.rsplit(".", 1)[-1] in TRANSCENDENTAL_OPS for name in calls if name.startswith(("tl.", "triton.language."))):
        return "math"
    return None


def hoistable(kdef: cst.FunctionDef) -> list[tuple[str, cst.For, cst.BaseStatement, str]]:
    """(name, loop, statement, "load" | "math") for every statement that can move out of its loop."""
    counts: dict[str, int] = {}

    class Count(cst.CSTVisitor):
        def visit_AssignTarget(self, n):
            for name in c.names_in(n.target):
                counts[name] = counts.get(name, 0) + 1

        def visit_AugAssign(self, n):
            for name in c.names_in(n.target):
                counts[name] = counts.get(name, 0) + 2

    kdef.visit(Count())
    found = []

    class Loops(cst.CSTVisitor):
        def visit_For(self, loop: cst.For) -> None:
            written = c.bound_names(loop)
            text = c.code(loop.body)
            stores = any(s in text for s in _SIDE_EFFECTS)
            statements = list(loop.body.body)
            for i, statement in enumerate(statements):
                single = _single_assign(statement)
                kind = _worth_hoisting(single[1]) if single is not None else None
                if not kind or counts.get(single[0]) != 1 or (kind == "load" and stores):
                    continue  # names are read only for a statement worth moving (walks are the cost)
                name, value = single
                reads = c.names_in(value) - {"tl", "triton"}
                read_before = set().union(*(c.names_in(s) for s in statements[:i]))
                if name not in read_before and not reads & written:
                    found.append((name, loop, statement, kind))

    kdef.visit(Loops())
    return found


class Hoist:
    name = "hoist"
    kind = "Hoist"
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        kdef, _ = c.locate(c.parse(analysis.text), kernel.name)
        out = []
        for name, _loop, _statement, kind in hoistable(kdef):
            what = "load" if kind == "load" else "math"
            line = next((call.span.start.line for call in kernel.calls if call.target == name), c.kernel_line(kernel))
            out.append(Candidate(self.name, self.kind, kernel.name, {"name": name},
                                 f"Hoist the loop-invariant {what} `{name}` out of its loop", line))
        return out

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        kdef, _ = c.locate(c.parse(analysis.text), kernel.name)
        return None if hoistable(kdef) else "no loop-invariant load or computation inside a loop"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        kdef, _ = c.locate(module, kernel.name)
        hits = [h for h in hoistable(kdef) if h[0] == params.get("name")]
        if len(hits) != 1:
            raise ActionError(f"`{params.get('name')}` is not a loop-invariant load or math statement in {kernel.name}")
        name, loop, statement, _kind = hits[0]
        body = [s for s in loop.body.body if s is not statement]
        if not body:
            raise ActionError("the loop would be empty")
        # The loop's comments stay above the loop's new first line; the statement's own travel with it.
        moved = statement.with_changes(leading_lines=[*loop.leading_lines, *statement.leading_lines])
        new_loop = loop.with_changes(leading_lines=[], body=loop.body.with_changes(body=body))
        module = c.replace_all(module, [(loop, cst.FlattenSentinel([moved, new_loop]))])
        return c.finish(text, module, f"hoisted {name} out of the loop in {kernel.name}")


ACTION = Hoist()
