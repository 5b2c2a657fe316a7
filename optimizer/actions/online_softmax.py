"""Online softmax: a row-max loop and a sum-of-exponentials loop over the same row become one loop.

``for ...: m = tl.maximum(m, tl.max(x, axis=0))`` followed by ``for ...: d += tl.sum(tl.exp(x - m),
axis=0)`` reads the row twice. One loop keeps a running maximum and rescales the running sum each
time the maximum grows (``d * exp(m - m_new)``), the online softmax of Milakov and Gimelshein that
flash attention uses: one read fewer for rows too long to hold in one block (where ``single_pass``
does not apply). The sum is the same up to rounding (each term is rescaled once per new maximum).
Offered when both loops have the same header, the second repeats the first's statements up to its
update, neither stores, and what lies between them is the sum's initialisation.

Example: kernel=lse_kernel target=h100 params={"max": "m", "sum": "d"}

```python before
@triton.jit
def lse_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    d = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        d += tl.sum(tl.exp(x - m), axis=0)
    tl.store(out_ptr + row, m + tl.log(d))
```

```python after
@triton.jit
def lse_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(d))
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .fusion import _assign_of


def _max_update(statement: cst.CSTNode) -> tuple[str, str] | None:
    """``m = tl.maximum(m, tl.max(x, axis=0))`` (either order) -> (m, x)."""
    single = _assign_of(statement)
    if single is None or not isinstance(single[1], cst.Call) or c.code(single[1].func) != "tl.maximum":
        return None
    m, call = single
    args = [a.value for a in call.args]
    if len(args) != 2 or any(a.keyword for a in call.args):
        return None
    for mine, other in ((args[0], args[1]), (args[1], args[0])):
        if isinstance(mine, cst.Name) and mine.value == m:
            x = _reduced(other, "tl.max")
            if x is not None:
                return m, x
    return None


def _reduced(node: cst.BaseExpression, op: str) -> str | None:
    """``tl.max(x, axis=0)`` -> "x" (a name reduced over the block's only axis)."""
    if not (isinstance(node, cst.Call) and c.code(node.func) == op and node.args and isinstance(node.args[0].value, cst.Name)):
        return None
    rest = node.args[1:]
    if len(rest) > 1 or (rest and c.code(rest[0].value) != "0") or (rest and rest[0].keyword not in (None,) and rest[0].keyword.value != "axis"):
        return None
    return node.args[0].value.value


def _sum_update(statement: cst.CSTNode, m: str, x: str) -> str | None:
    """``d += tl.sum(tl.exp(x - m), axis=0)`` or ``d = d + ...`` -> d."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    small = statement.body[0]
    expected = f"tl.sum(tl.exp({x}-{m}),axis=0)"
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and isinstance(small.target, cst.Name):
        return small.target.value if "".join(c.code(small.value).split()) == expected else None
    single = _assign_of(statement)
    if single is not None and "".join(c.code(single[1]).split()) in (f"{single[0]}+{expected}", f"{expected}+{single[0]}"):
        return single[0]
    return None


class OnlineSoftmax:
    name = "online_softmax"
    kind = "Reordering"
    changes_numerics = False

    def _plan(self, module: cst.Module, kernel: Kernel):
        kdef, _ = c.locate(module, kernel.name)
        body = list(kdef.body.body)
        found = []
        for i, first in enumerate(body):
            if not isinstance(first, cst.For) or first.orelse is not None:
                continue
            inner = list(first.body.body)
            update = _max_update(inner[-1]) if inner else None
            if update is None:
                continue
            m, x = update
            j = next((j for j in range(i + 1, len(body)) if isinstance(body[j], cst.For)), None)
            if j is None:
                continue
            second = body[j]
            inner2 = list(second.body.body)
            if c.code(second.with_changes(body=second.body.with_changes(body=[]), leading_lines=[])).split(":")[0] != \
                    c.code(first.with_changes(body=first.body.with_changes(body=[]), leading_lines=[])).split(":")[0]:
                continue
            if len(inner2) != len(inner) or [c.code(s).strip() for s in inner2[:-1]] != [c.code(s).strip() for s in inner[:-1]]:
                continue
            d = _sum_update(inner2[-1], m, x)
            if d is None or d in (m, x):
                continue
            between = body[i + 1:j]
            init = [s for s in between if (a := _assign_of(s)) is not None and a[0] == d]
            others = [s for s in between if s not in init]
            if len(init) != 1 or c.names_in(_assign_of(init[0])[1]) & {m, x, d}:
                continue
            if any(c.names_in(s) & {m, d, x} for s in others):
                continue
            text = c.code(first) + c.code(second)
            if "tl.store" in text or "tl.atomic" in text:
                continue
            written = set()
            for s in inner[:-1]:
                single = _assign_of(s)
                if single is None:
                    break
                written.add(single[0])
            else:
                if {m, d} & written or x not in written:
                    continue
                found.append((first, second, init[0], m, x, d))
        return kdef, found

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        if kernel.calls_of("dot"):
            return []
        _kdef, found = self._plan(c.parse(analysis.text), kernel)
        return [Candidate(self.name, self.kind, kernel.name, {"max": m, "sum": d},
                          f"Online softmax: one loop for the running max {m} and the sum {d} (one read of the row fewer)",
                          c.kernel_line(kernel)) for _f, _s, _i, m, _x, d in found]

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        kdef, found = self._plan(module, kernel)
        match = next((f for f in found if f[3] == params.get("max") and f[5] == params.get("sum")), None)
        if match is None:
            raise ActionError(f"no max loop of {params.get('max')!r} followed by a sum loop of {params.get('sum')!r} in {kernel.name}")
        first, second, init, m, x, d = match
        taken = c.names_in(kdef)
        m_new = next(n for n in (f"{m}_new", *(f"{m}_new{i}" for i in range(2, 99))) if n not in taken)
        inner = list(first.body.body)
        update = [c.stmt(f"{m_new} = tl.maximum({m}, tl.max({x}, axis=0))\n").with_changes(leading_lines=inner[-1].leading_lines),
                  c.stmt(f"{d} = {d} * tl.exp({m} - {m_new}) + tl.sum(tl.exp({x} - {m_new}), axis=0)\n"),
                  c.stmt(f"{m} = {m_new}\n")]
        merged = first.with_changes(body=first.body.with_changes(body=[*inner[:-1], *update]))
        init_line = init.with_changes(leading_lines=[])
        body = []
        for s in kdef.body.body:
            if s is first:  # the sum starts next to the max; every comment of the two passes stays, above the loop
                kept = [line for line in [*init.leading_lines, *second.leading_lines,
                                          *(l for st in second.body.body for l in st.leading_lines)] if line.comment is not None]
                body += [init_line.with_changes(leading_lines=first.leading_lines), merged.with_changes(leading_lines=kept)]
            elif s is second or s is init:
                continue
            else:
                body.append(s)
        module = c.replace_all(module, [(kdef, kdef.with_changes(body=kdef.body.with_changes(body=body)))])
        return c.finish(text, module, f"online softmax in {kernel.name}: one loop for {m} and {d}",
                        ["the sum is rescaled when the maximum grows: equal up to rounding"])


ACTION = OnlineSoftmax()
