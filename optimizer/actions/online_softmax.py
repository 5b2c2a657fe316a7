"""Online softmax: a row-max loop and a sum-of-exponentials loop over the same row become one loop.

``for ...: m = tl.maximum(m, tl.max(x, axis=0))`` followed by ``for ...: d += tl.sum(tl.exp(x - m),
axis=0)`` reads the row twice. One loop keeps a running maximum and rescales the running sum each
time the maximum grows (``d * exp(m - m_new)``), the online softmax of Milakov and Gimelshein that
flash attention uses: one read fewer for rows too long to hold in one block (where ``single_pass``
does not apply). The sum is the same up to rounding (each term is rescaled once per new maximum).
Offered when both loops have the same header, the second repeats the first's statements up to its
update, neither stores, and what lies between them is the sum's initialisation or can follow the merged
loop (a kernel fused by row_fusion stores its maximum there).

The same step for mean and variance (params ``{"mean": s, "sq": q}``): a loop summing masked loads
``s += tl.load(..., mask=M, other=0.0)``, ``mean = ... tl.sum(s, axis=0) ...``, then a loop summing
``d * d`` with ``d = tl.where(M, x - mean, 0.0)`` over the same loads become one loop of Welford
updates per lane (``s`` holds each lane's mean, ``q`` its squares about it, a lane count masks the
tail), after which ``mean`` reads ``tl.sum(s * count, axis=0)`` and Chan's term ``count * (s -
mean)**2`` makes ``q`` the squares about ``mean``: the same sums up to rounding, one read fewer.

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

from dataclasses import dataclass

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


def _aug_add(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """``s += e`` -> (s, e)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and isinstance(small.target, cst.Name):
            return small.target.value, small.value
    return None


def _masked_zero_load(node: cst.BaseExpression) -> str | None:
    """``tl.load(p, mask=M, other=0.0)`` (optionally ``.to(...)``) -> the code of M: masked lanes read 0."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
        node = node.func.value
    if not (isinstance(node, cst.Call) and c.code(node.func) == "tl.load"):
        return None
    mask, other = c.kwarg(node, "mask"), c.kwarg(node, "other")
    if mask is None or other is None or c.code(other.value).strip() not in ("0", "0.0", "0.", "0.0e0"):
        return None
    return c.code(mask.value).strip()


def _fp32_zeros(statement: cst.CSTNode, name: str) -> bool:
    """``name = tl.zeros([...], dtype=tl.float32)``."""
    single = _assign_of(statement)
    if single is None or single[0] != name or not isinstance(single[1], cst.Call) or c.code(single[1].func) != "tl.zeros":
        return False
    dtype = c.kwarg(single[1], "dtype")
    return dtype is not None and c.code(dtype.value).strip() == "tl.float32"


def _defined_before_read(statements: list[cst.BaseStatement], name: str) -> bool:
    """``name`` is assigned before it is read in ``statements`` (or never read); a loop body counts as its own sequence."""
    for statement in statements:
        if isinstance(statement, cst.For):
            if name in c.names_in(statement.iter) or not _defined_before_read(list(statement.body.body), name):
                return False
            continue
        single = _assign_of(statement)
        if single is not None and single[0] == name and name not in c.names_in(single[1]):
            return True
        if name in c.names_in(statement):
            return False
    return True


def _centred_square(rest: list[cst.BaseStatement], value: cst.BaseExpression) -> tuple[str, str, str, str, str] | None:
    """``[x = VALUE,] d = tl.where(M, x - mean, 0.0); q += d * d`` -> (x, d, M, mean, q)."""
    if len(rest) == 3:
        loaded = _assign_of(rest[0])
        if loaded is None or c.code(loaded[1]).strip() != c.code(value).strip():
            return None
        x = loaded[0]
    elif len(rest) == 2 and isinstance(value, cst.Name):
        x = value.value
    else:
        return None
    centred, update = _assign_of(rest[-2]), _aug_add(rest[-1])
    if centred is None or update is None:
        return None
    d, where = centred
    if not (isinstance(where, cst.Call) and c.code(where.func) == "tl.where" and len(where.args) == 3
            and all(a.keyword is None for a in where.args)):
        return None
    cond, diff, zero = (a.value for a in where.args)
    if c.code(zero).strip() not in ("0", "0.0", "0.") or not (
            isinstance(diff, cst.BinaryOperation) and isinstance(diff.operator, cst.Subtract)
            and isinstance(diff.left, cst.Name) and diff.left.value == x and isinstance(diff.right, cst.Name)):
        return None
    if "".join(c.code(update[1]).split()) != f"{d}*{d}":
        return None
    return x, d, c.code(cond).strip(), diff.right.value, update[0]


def _movable_past_loop(between: list[cst.BaseStatement], before: list[cst.BaseStatement], m: str, d: str, x: str,
                       loop_names: set[str]) -> bool:
    """The statements between the two loops can follow the merged loop (where ``apply`` leaves them).

    They may read the final maximum (a kernel fused by row_fusion stores it there) and cast it to fp32
    in place (a no-op on a running maximum, which is fp32); they may not touch the sum or the loaded
    block, nor rebind a name the loops read, unless to the value it already has (row_fusion repeats
    ``row = tl.program_id(0)``)."""
    earlier = {a[0]: c.code(a[1]).strip() for s in before if (a := _assign_of(s)) is not None}
    for statement in between:
        if c.names_in(statement) & {d, x} or isinstance(statement, (cst.For, cst.While, cst.If)):
            return False
        single = _assign_of(statement)
        if single is None:
            if not isinstance(statement, cst.SimpleStatementLine) or not all(
                    isinstance(small, cst.Expr) for small in statement.body):
                return False  # an augmented or tuple assignment, a return...: not worth the proof
            continue
        name, value = single
        if name == m:
            if "".join(c.code(value).split()) not in (f"{m}.to(tl.float32)", f"({m}).to(tl.float32)"):
                return False
        elif name in loop_names and earlier.get(name) != c.code(value).strip():
            return False
    return True


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
            if not _movable_past_loop(others, body[:i], m, d, x, c.names_in(first) | c.names_in(second)):
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
        module = c.parse(analysis.text)
        _kdef, found = self._plan(module, kernel)
        softmax = [Candidate(self.name, self.kind, kernel.name, {"max": m, "sum": d},
                             f"Online softmax: one loop for the running max {m} and the sum {d} (one read of the row fewer)",
                             c.kernel_line(kernel)) for _f, _s, _i, m, _x, d in found]
        welford = [Candidate(self.name, self.kind, kernel.name, {"mean": w.total, "sq": w.squares},
                             f"Online mean and variance (Welford): one loop for the sum {w.total} and the squares "
                             f"{w.squares} (one read of the row fewer)", c.kernel_line(kernel))
                   for w in self._welford_plan(module, kernel)]
        return softmax + welford

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        if self.candidates(analysis, kernel, target):
            return None
        if kernel.calls_of("dot"):
            return "a tl.dot kernel: its loop is a reduction over K (flash_attention fuses attention's softmax)"
        if not any(l.depth == 1 for l in kernel.loops):
            return "no top-level loop over a row"
        return ("no top-level max loop followed by a sum-of-exponentials loop, nor a masked-sum loop followed by a "
                "centred-squares loop (tl.where(mask, x - mean, 0.0)) over the same loads, with nothing stored between")

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        if "mean" in params or "sq" in params:
            return self._apply_welford(text, module, kernel, params)
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

    def _welford_plan(self, module: cst.Module, kernel: Kernel) -> list["_Welford"]:
        """A loop summing masked loads into ``s``, ``mean = ... tl.sum(s, axis=0) ...``, and a loop summing
        the squares of ``tl.where(M, x - mean, 0.0)`` into ``q`` over the same loads: one Welford loop."""
        kdef, _ = c.locate(module, kernel.name)
        body = list(kdef.body.body)
        taken = c.names_in(kdef)
        found = []
        for i, first in enumerate(body):
            if not isinstance(first, cst.For) or first.orelse is not None or not first.body.body:
                continue
            inner = list(first.body.body)
            total = _aug_add(inner[-1])
            if total is None or _masked_zero_load(total[1]) is None and not isinstance(total[1], cst.Name):
                continue
            s_name, value = total
            prefix = inner[:-1]
            if isinstance(value, cst.Name):  # ``x = tl.load(...); s += x``: the load is the prefix's x
                load = next((a[1] for st in reversed(prefix) if (a := _assign_of(st)) is not None and a[0] == value.value), None)
                if load is None or _masked_zero_load(load) is None:
                    continue
                mask = _masked_zero_load(load)
            else:
                mask = _masked_zero_load(value)
            j = next((j for j in range(i + 1, len(body)) if isinstance(body[j], cst.For)), None)
            if j is None or c.code(body[j].target) != c.code(first.target) or c.code(body[j].iter) != c.code(first.iter) \
                    or body[j].orelse is not None:
                continue
            second = body[j]
            inner2 = list(second.body.body)
            if [c.code(st).strip() for st in inner2[:len(prefix)]] != [c.code(st).strip() for st in prefix]:
                continue
            shape = _centred_square(inner2[len(prefix):], value)
            if shape is None:
                continue
            x, d, cond, mean, q_name = shape
            if cond != mask or len({s_name, q_name, x, mean}) != 4 or d in (s_name, q_name, mean):
                continue
            between = body[i + 1:j]
            mean_line = [st for st in between if (a := _assign_of(st)) is not None and a[0] == mean]
            q_init = [st for st in between if _fp32_zeros(st, q_name)]
            s_init = [st for st in body[:i] if _fp32_zeros(st, s_name)]
            if len(mean_line) != 1 or len(q_init) != 1 or len(s_init) != 1 or \
                    c.code(_assign_of(q_init[0])[1]).strip() != c.code(_assign_of(s_init[0])[1]).strip():
                continue  # the lane counts and the correction term take the accumulators' one shape
            # The mean reads s only through ``tl.sum(s, axis=0)``: that sum becomes tl.sum(s * count, axis=0).
            mean_code = c.code(_assign_of(mean_line[0])[1])
            summed = f"tl.sum({s_name}, axis=0)"
            if summed not in mean_code or s_name in c.names_in(c.expr(mean_code.replace(summed, "0"))):
                continue
            # s and q are written only by their initialisation and these loops; the loops store nothing.
            others = [st for st in body if st not in (first, second, mean_line[0], q_init[0], s_init[0])]
            if any({s_name, q_name} & c.bound_names(st) for st in others):
                continue
            if any(s_name in c.names_in(st) for st in body[j + 1:]):
                continue
            loop_text = c.code(first) + c.code(second)
            if "tl.store" in loop_text or "tl.atomic" in loop_text:
                continue
            # What lies between the loops must not feed the merged loop, nor read q or s.
            loop_reads = c.names_in(first)  # the merged loop reads what the first did (its mask is the where's)
            if any(c.bound_names(st) & loop_reads or c.names_in(st) & {q_name} for st in between if st is not q_init[0]):
                continue
            if any(st is not mean_line[0] and s_name in c.names_in(st) for st in between):
                continue
            # The second loop leaves x and d (and its prefix's names) bound; later code must not read them.
            leftover = {x, d} | {n for st in prefix for n in c.bound_names(st)}
            if not all(_defined_before_read(body[j + 1:], n) for n in leftover):
                continue
            fresh = [n for n in ("count", "delta", *(f"count{k}" for k in range(2, 9)), *(f"delta{k}" for k in range(2, 9)))
                     if n not in taken]
            count = next(n for n in fresh if n.startswith("count"))
            delta = next(n for n in fresh if n.startswith("delta"))
            found.append(_Welford(first, second, s_init[0], q_init[0], mean_line[0], s_name, q_name, x, d, mean, cond,
                                  value, count, delta))
        return found

    def _apply_welford(self, text: str, module: cst.Module, kernel: Kernel, params: dict[str, Value]) -> Edit:
        match = next((w for w in self._welford_plan(module, kernel)
                      if w.total == params.get("mean") and w.squares == params.get("sq")), None)
        if match is None:
            raise ActionError(f"no sum loop of {params.get('mean')!r} followed by a centred-squares loop of "
                              f"{params.get('sq')!r} in {kernel.name}")
        w = match
        kdef, _ = c.locate(module, kernel.name)
        s, q = w.total, w.squares
        inner = list(w.first.body.body)
        loaded = [] if isinstance(w.value, cst.Name) else [c.stmt(f"{w.x} = {c.code(w.value).strip()}\n")]
        x = w.value.value if isinstance(w.value, cst.Name) else w.x
        update = [*loaded,
                  c.stmt(f"{w.count} += tl.where({w.cond}, 1.0, 0.0)\n"),
                  c.stmt(f"{w.delta} = tl.where({w.cond}, {x} - {s}, 0.0)\n"),
                  c.stmt(f"{s} += {w.delta} / tl.maximum({w.count}, 1.0)\n"),
                  c.stmt(f"{q} += {w.delta} * tl.where({w.cond}, {x} - {s}, 0.0)\n")]
        update[0] = update[0].with_changes(leading_lines=inner[-1].leading_lines)
        merged = w.first.with_changes(body=w.first.body.with_changes(body=[*inner[:-1], *update]))
        s_zeros = c.code(_assign_of(w.s_init)[1]).strip()
        mean_value = _assign_of(w.mean_line)[1]
        new_mean = w.mean_line.deep_replace(mean_value, c.expr(
            c.code(mean_value).replace(f"tl.sum({s}, axis=0)", f"tl.sum({s} * {w.count}, axis=0)")))
        if new_mean.deep_equals(w.mean_line):
            raise ActionError(f"cannot rewrite the mean of {s}")
        kept = [line for line in [*w.second.leading_lines, *(l for st in w.second.body.body for l in st.leading_lines)]
                if line.comment is not None]
        # Chan et al.: the squares about the mean are each lane's squares about its own mean plus
        # count * (lane mean - mean)^2, whatever value ``mean`` holds.
        chan = c.stmt(f"{q} += {w.count} * ({s} - {w.mean}) * ({s} - {w.mean})\n").with_changes(leading_lines=kept)
        body = []
        for st in kdef.body.body:
            if st is w.s_init:
                body += [st, w.q_init.with_changes(leading_lines=[]), c.stmt(f"{w.count} = {s_zeros}\n")]
            elif st is w.first:
                body.append(merged)
            elif st is w.mean_line:
                body.append(new_mean)
            elif st is w.q_init:
                if st.leading_lines and any(l.comment is not None for l in st.leading_lines):
                    chan = chan.with_changes(leading_lines=[*st.leading_lines, *chan.leading_lines])
                continue
            elif st is w.second:
                body.append(chan)
            else:
                body.append(st)
        module = c.replace_all(module, [(kdef, kdef.with_changes(body=kdef.body.with_changes(body=body)))])
        return c.finish(text, module, f"online mean and variance in {kernel.name}: one loop for {s} and {q}",
                        ["Welford's update with Chan's combination of the lanes: equal up to rounding"])


@dataclass
class _Welford:
    first: cst.For
    second: cst.For
    s_init: cst.BaseStatement
    q_init: cst.BaseStatement
    mean_line: cst.BaseStatement
    total: str
    squares: str
    x: str
    d: str
    mean: str
    cond: str
    value: cst.BaseExpression
    count: str
    delta: str


ACTION = OnlineSoftmax()
