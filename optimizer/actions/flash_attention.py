"""Flash attention: naive attention written as separate kernels becomes one flash-attention kernel.

User code often computes attention as a scores kernel (``S = Q @ K^T * scale``, maybe masked) into a
buffer, a row-softmax kernel over that buffer, then ``O = P @ V``; or as two kernels, the first one
storing the softmax itself. Every score is written to and read back from memory, at
``O(seq^2)`` bytes. The P @ V kernel (one program per block of query rows, a loop over key blocks)
becomes the flash kernel of Triton's tutorial: in its key loop it computes the scores of the block
with the scores kernel's own code (its loads, scale and masks, at the rows and keys of that
block), keeps a running row maximum ``m_i`` and sum ``l_i``, rescales the accumulator by
``exp(m_old - m_new)`` and divides by ``l_i`` after the loop. It works in base 2, as the tutorial
does: the scores times log2(e) through ``tl.math.exp2``, which compiles to the flush-to-zero
``ex2.approx.ftz``; ``tl.exp`` keeps denormals and costs more per score (H200, 4x16x4096x128 fp16:
1.68 ms with ``tl.exp``, 1.28 ms with ``exp2``, ``benchmarks/results/h200/suite_tiles``). The
probabilities are equal: a denormal probability is under 1e-38 of the row's largest, and the P @ V
dot rounds it to zero in fp16 or bf16 anyway. The score and probability buffers,
their allocations and the other launches go. Equal up to rounding (each probability is
rescaled once per new maximum instead of normalised once).

Offered when the kernels are launched once each, back to back in one host function (only shape
arithmetic between them), the buffers are fresh allocations the host uses for nothing else (the
one the scores kernel stores is ``torch.empty``: what its store mask leaves out is never read), the
scores are fp32, the softmax is over the key axis (unit stride) and covers the whole row (its
block is ``triton.next_power_of_2`` of the row length; an elementwise pre-step such as
``x * scale`` comes along), every index into the buffers agrees between the kernels (compared
symbolically: rows, keys and batch program ids), the P @ V kernel masks keys past that length and
uses the probabilities only in its ``tl.dot``, and nothing draws random numbers (dropout). A scores
kernel that tiles the head dimension (``for k in range(0, D, BLOCK_K): acc += tl.dot(a, b)``) keeps
that loop, nested in the key loop. When the scores' last step is a causal mask
(``s = tl.where(rows >= keys, s, -inf)`` on the P @ V kernel's rows and keys), the key loop stops at
the row block's last row: the blocks past it are all masked (they would add p = 0 at alpha = 1).
The naive chain's small tiles (16 x 16) starve the fused kernel, so the same step sets tiles for the
target where tiling could (the blocks are constants, every access is masked): 128 x 64 with 8 warps,
else 64 x 64 (one constant for both blocks: square), with the num_stages whose K/V tiles fit the
target's shared memory for a head dim up to 128 (``gpu_tiles``; H200: 64 x 64 ran 2.9-12.9x faster
than 16 x 16). The key masks matter only in the last key block, and only when the key length is not a
multiple of the key block: after the tiles the same step (``even_keys``) adds a constexpr ``EVEN_N`` that the
launch computes (``EVEN_N=n % 64 == 0``, with the host's own names for the key length and block) and, in the
key loop, ``if EVEN_N:`` the loads and scores without the key mask, ``else:`` as before, as Triton's matmul
and attention code do (H200, 4x16x4096x128 fp16: 1.28 ms with the key mask in every block, 1.22 ms without).
Causal, query-row, per-batch-length and head-dim masks stay in both branches.

Example: kernel=pv_kernel target=h100 params={"scores": "qk_kernel", "softmax": "softmax_kernel", "pv": "pv_kernel"}

```python before
@triton.jit
def qk_kernel(q_ptr, k_ptr, s_ptr, n, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(2)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + bh * n * D + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < n, other=0.0)
    k = tl.load(k_ptr + bh * n * D + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < n, other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale
    tl.store(s_ptr + bh * n * n + offs_m[:, None] * n + offs_n[None, :], s, mask=(offs_m[:, None] < n) & (offs_n[None, :] < n))


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def pv_kernel(p_ptr, v_ptr, o_ptr, n, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    for start_n in range(0, n, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        p = tl.load(p_ptr + bh * n * n + offs_m[:, None] * n + offs_n[None, :], mask=offs_n[None, :] < n, other=0.0)
        v = tl.load(v_ptr + bh * n * D + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < n, other=0.0)
        acc += tl.dot(p.to(v.dtype), v)
    tl.store(o_ptr + bh * n * D + offs_m[:, None] * D + offs_d[None, :], acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < n)


def attention(q, k, v):
    bh, n, d = q.shape
    s = torch.empty((bh, n, n), device=q.device, dtype=torch.float32)
    p = torch.empty_like(s)
    o = torch.empty_like(q)
    qk_kernel[(triton.cdiv(n, 16), triton.cdiv(n, 16), bh)](q, k, s, n, d ** -0.5, D=d, BLOCK_M=16, BLOCK_N=16)
    softmax_kernel[(bh * n,)](s, p, n, BLOCK=triton.next_power_of_2(n))
    pv_kernel[(triton.cdiv(n, 16), bh)](p, v, o, n, D=d, BLOCK_M=16, BLOCK_N=16)
    return o
```

```python after
@triton.jit
def pv_kernel(v_ptr, o_ptr, n, q_ptr, k_ptr, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    bh = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    q = tl.load(q_ptr + bh * n * D + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < n, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for start_n in range(0, n, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if EVEN_N:
            k = tl.load(k_ptr + bh * n * D + offs_n[:, None] * D + offs_d[None, :])
        else:
            k = tl.load(k_ptr + bh * n * D + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < n, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        if EVEN_N:
            s = s.to(tl.float32) * 1.4426950408889634
        else:
            s = tl.where(offs_n[None, :] < n, s.to(tl.float32) * 1.4426950408889634, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if EVEN_N:
            v = tl.load(v_ptr + bh * n * D + offs_n[:, None] * D + offs_d[None, :])
        else:
            v = tl.load(v_ptr + bh * n * D + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < n, other=0.0)
        acc += tl.dot(p.to(v.dtype), v)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + bh * n * D + offs_m[:, None] * D + offs_d[None, :], acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < n)


def attention(q, k, v):
    bh, n, d = q.shape
    o = torch.empty_like(q)
    pv_kernel[(triton.cdiv(n, 128), bh)](v, o, n, q, k, d ** -0.5, D=d, BLOCK_M=128, BLOCK_N=64, EVEN_N=n % 64 == 0, num_warps=8, num_stages=2)
    return o
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from ..analysis import FileAnalysis, Kernel, analyze
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .fusion import (
    _call_of,
    _dead_with,
    _drop_unreferenced_def,
    _impure_calls,
    _top_statement,
)

_ALLOCATORS = ("torch.empty", "torch.zeros", "torch.empty_like", "torch.zeros_like")
# Tensor methods that keep the element type (a host name made with them has its source's dtype).
_VIEWS = ("reshape", "view", "contiguous", "transpose", "permute", "flatten", "expand", "squeeze", "unsqueeze", "t")
_NEG_INF = {'float("-inf")', "float('-inf')", '-float("inf")', "-float('inf')", "-math.inf", "-tl.inf"}
_RANDOM = ("rand", "randn", "randint", "randint4x", "philox", "dropout")
_TORCH_TO_TL = {"float32": "tl.float32", "float": "tl.float32", "float16": "tl.float16", "half": "tl.float16",
                "bfloat16": "tl.bfloat16"}
# Names a kernel statement may read besides its locals and parameters.
_GLOBALS = {"tl", "triton", "float", "int", "math", "min", "max", "range", "None", "True", "False"}


def _dotted(node: cst.BaseExpression) -> str:
    """``tl.program_id`` for a Name/Attribute chain (what ``c.code`` gives, without generating code)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return c.code(node)


class _Counter(cst.CSTVisitor):
    def __init__(self):
        self.counts: dict[str, int] = {}

    def visit_Name(self, n: cst.Name) -> None:
        self.counts[n.value] = self.counts.get(n.value, 0) + 1

    def visit_Attribute(self, n: cst.Attribute) -> bool:
        n.value.visit(self)
        return False

    def visit_Arg(self, n: cst.Arg) -> bool:
        n.value.visit(self)
        return False


_COUNTS: dict[int, tuple[cst.CSTNode, dict[str, int]]] = {}


def _name_counts(node: cst.CSTNode) -> dict[str, int]:
    """How often each name is read or assigned in ``node`` (keyword names and attributes do not count); memoised."""
    hit = _COUNTS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    counter = _Counter()
    node.visit(counter)
    if len(_COUNTS) > 4096:  # bounded: entries keep their trees alive
        _COUNTS.clear()
    _COUNTS[id(node)] = (node, counter.counts)
    return counter.counts


def _count(node: cst.CSTNode, name: str) -> int:
    return _name_counts(node).get(name, 0)


def _names(node: cst.CSTNode) -> set[str]:
    return set(_name_counts(node))


def _sympy():
    import sympy  # lazily: only files that launch a matmul-like chain pay for the import

    return sympy


# ---- index arithmetic as sympy expressions -------------------------------------------------------
class _Index:
    """Index expressions of one kernel as sympy: program ids, aranges and the loop variable are roots."""

    def __init__(self, prefix: str, params: dict):
        self.sp = _sympy()
        self.prefix = prefix
        self.env: dict = dict(params)
        self.loop_var: str | None = None

    def sym(self, name: str):
        return self.sp.Symbol(self.prefix + name)

    def of(self, node: cst.BaseExpression):
        """The node's value as index arithmetic; None when it is not (a load, a float, a dot)."""
        sp = self.sp
        if isinstance(node, cst.Name):
            return self.env.get(node.value)
        if isinstance(node, cst.Integer):
            return sp.Integer(int(node.evaluated_value))
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            inner = self.of(node.expression)
            return None if inner is None else -inner
        if isinstance(node, cst.BinaryOperation):
            left, right = self.of(node.left), self.of(node.right)
            if left is None or right is None:
                return None
            op = node.operator
            if isinstance(op, cst.Add):
                return left + right
            if isinstance(op, cst.Subtract):
                return left - right
            if isinstance(op, cst.Multiply):
                return left * right
            if isinstance(op, cst.FloorDivide):
                return sp.Function("floordiv")(left, right)
            if isinstance(op, cst.Modulo):
                return sp.Function("mod")(left, right)
            return None
        if isinstance(node, cst.Call):
            func = _dotted(node.func)
            args = [a.value for a in node.args]
            if func == "tl.program_id" and len(args) == 1 and isinstance(args[0], cst.Integer):
                return self.sym(f"pid{args[0].value}")
            if func == "tl.arange" and len(args) == 2 and c.flat(args[0]) == "0":
                return self.sym(f"ar:{c.flat(args[1])}")
            if func in ("tl.multiple_of", "tl.max_contiguous") and args:
                return self.of(args[0])
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
                return self.of(node.func.value)
            return None
        if isinstance(node, cst.Subscript):
            axis = _broadcast_axis(node)
            inner = self.of(node.value)
            if axis is None or inner is None:
                return None
            return inner.xreplace({s: sp.Symbol(f"{s.name}@{axis}") for s in inner.free_symbols
                                   if ":" in s.name and "@" not in s.name and s.name.startswith(self.prefix + "ar:")})
        return None

    def assign(self, name: str, value: cst.BaseExpression) -> None:
        found = self.of(value)
        if found is None:
            self.env.pop(name, None)
        else:
            self.env[name] = found


def _broadcast_axis(node: cst.Subscript) -> int | None:
    """``x[:, None]`` -> 0, ``x[None, :]`` -> 1 (the axis the vector runs along)."""
    parts = [c.flat(e.slice) for e in node.slice]
    if parts == [":", "None"]:
        return 0
    if parts == ["None", ":"]:
        return 1
    return None


def _strip_axes(expr):
    sp = _sympy()
    return expr.xreplace({s: sp.Symbol(s.name.split("@")[0]) for s in expr.free_symbols if "@" in s.name})


def _is_root(s) -> bool:
    tail = s.name.split(".", 1)[-1]
    return tail.startswith(("pid", "loop", "ar:"))


def _by_monomial(expr) -> dict:
    """An address offset grouped by the host's sizes and strides: {monomial: index coefficient}."""
    sp = _sympy()
    expr = sp.expand(expr)
    gens = sorted((s for s in expr.free_symbols if s.name.startswith("h:")), key=lambda s: s.name)
    if not gens:
        return {sp.Integer(1): expr}
    try:
        poly = sp.Poly(expr, *gens)
    except sp.PolynomialError as exc:
        raise ActionError("a buffer index is not a sum of strides times indices") from exc
    out = {}
    for monom, coeff in poly.terms():
        key = sp.Integer(1)
        for g, e in zip(gens, monom):
            key *= g ** e
        out[key] = sp.sympify(coeff)
    return out


# ---- host-side values -----------------------------------------------------------------------------
class _Host:
    """Host expressions as sympy: fresh allocations' shapes and strides are worked out."""

    def __init__(self, host: cst.FunctionDef):
        self.sp = _sympy()
        self.host = host
        self.allocs: dict[str, cst.Call | None] = {}

    def alloc(self, name: str) -> cst.Call | None:
        if name not in self.allocs:
            assign = c.any_assignment(self.host, name)
            ok = assign is not None and isinstance(assign.value, cst.Call) and _dotted(assign.value.func) in _ALLOCATORS
            self.allocs[name] = assign.value if ok else None
        return self.allocs[name]

    def dims(self, name: str, depth: int = 0) -> list | None:
        call = self.alloc(name)
        if call is None or depth > 4:
            return None
        positional = [a.value for a in call.args if a.keyword is None]
        if _dotted(call.func).endswith("_like"):
            return self.dims(c.code(positional[0]), depth + 1) if positional and isinstance(positional[0], cst.Name) else None
        if len(positional) == 1 and isinstance(positional[0], cst.Tuple | cst.List):
            positional = [e.value for e in positional[0].elements]
        dims = [self.of(d) for d in positional]
        return None if not dims or any(d is None for d in dims) else dims

    def dtype(self, name: str, depth: int = 0) -> str | None:
        """The element type of a fresh allocation: ``torch.float32`` -> "float32"; a host tensor's "X.dtype"."""
        call = self.alloc(name)
        if call is None or depth > 4:
            return None
        kw = c.kwarg(call, "dtype")
        if kw is not None:
            text = c.flat(kw.value)
            return text.removeprefix("torch.")
        positional = [a.value for a in call.args if a.keyword is None]
        if _dotted(call.func).endswith("_like") and positional and isinstance(positional[0], cst.Name):
            inner = self.dtype(positional[0].value, depth + 1)
            return inner if inner is not None else f"{positional[0].value}.dtype"
        return None

    def of(self, node: cst.BaseExpression):
        sp = self.sp
        if isinstance(node, cst.Integer):
            return sp.Integer(int(node.evaluated_value))
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add | cst.Subtract | cst.Multiply):
            left, right = self.of(node.left), self.of(node.right)
            if isinstance(node.operator, cst.Add):
                return left + right
            return left - right if isinstance(node.operator, cst.Subtract) else left * right
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name) \
                and node.func.attr.value in ("stride", "size") and len(node.args) == 1 and isinstance(node.args[0].value, cst.Integer):
            dims = self.dims(node.func.value.value)
            i = int(node.args[0].value.evaluated_value)
            if dims is not None and i < len(dims):
                if node.func.attr.value == "size":
                    return dims[i]
                out = sp.Integer(1)
                for d in dims[i + 1:]:
                    out *= d
                return out
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape" \
                and isinstance(node.value.value, cst.Name) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
                and isinstance(node.slice[0].slice.value, cst.Integer):
            dims = self.dims(node.value.value.value)
            i = int(node.slice[0].slice.value.evaluated_value)
            if dims is not None and i < len(dims):
                return dims[i]
        return sp.Symbol("h:" + c.flat(node))

    def source(self, text: str):
        return self.of(c.expr(text))

    def same_dtype_views(self, tensor: str) -> set[str]:
        """``tensor`` and the host names made from it by reshaping methods (``q3 = q.reshape(...)``)."""
        out = {tensor}
        changed = True
        while changed:
            changed = False
            for node in self.host.body.body:
                parts = _assign_parts(node)
                if parts is None or parts[2] or parts[0] in out:
                    continue
                value = c.unparen(parts[1])
                while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _VIEWS:
                    value = c.unparen(value.func.value)
                    if isinstance(value, cst.Name) and value.value in out:
                        out.add(parts[0])
                        changed = True
                        break
        return out

    def covers(self, block_source: str, length) -> bool:
        """True when a block passed as ``block_source`` is ``triton.next_power_of_2(n)`` of ``length``."""
        node = c.expr(block_source)
        if isinstance(node, cst.Name):
            assign = c.any_assignment(self.host, node.value)
            node = assign.value if assign is not None else node
        return isinstance(node, cst.Call) and _dotted(node.func) in ("triton.next_power_of_2", "next_power_of_2") \
            and len(node.args) == 1 and self.sp.expand(self.of(node.args[0].value) - length) == 0


# ---- kernel bodies --------------------------------------------------------------------------------
@dataclass
class _Stmt:
    node: cst.SimpleStatementLine
    target: str | None  # the name assigned (None for a store)
    value: cst.BaseExpression | None
    aug: bool
    in_loop: bool
    env: dict  # index values of names before this statement


@dataclass
class _Body:
    stmts: list[_Stmt]
    loop: cst.For | None
    loop_var: str | None
    index: _Index
    prologue: int  # statements before the loop


def _assign_parts(node: cst.CSTNode) -> tuple[str, cst.BaseExpression, bool] | None:
    if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1):
        return None
    small = node.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value, small.value, False
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
        op = {cst.AddAssign: "+", cst.MultiplyAssign: "*", cst.SubtractAssign: "-", cst.DivideAssign: "/"}.get(type(small.operator))
        if op is None:
            return None
        name = small.target.value
        return name, c.expr(f"{name} {op} ({c.code(small.value)})"), True
    return None


def _body(kdef: cst.FunctionDef, kernel: Kernel, prefix: str, params: dict) -> _Body:
    """Straight-line statements with at most one ``for`` loop over ``range``; anything else is refused."""
    index = _Index(prefix, params)
    stmts: list[_Stmt] = []
    loop, loop_var, prologue = None, None, 0

    def take(node: cst.CSTNode, in_loop: bool) -> None:
        parts = _assign_parts(node)
        if parts is not None:
            name, value, aug = parts
            stmts.append(_Stmt(node, name, value, aug, in_loop, dict(index.env)))
            index.assign(name, value)
            return
        call = _call_of(node)
        if call is not None and _dotted(call.func) == "tl.store":
            stmts.append(_Stmt(node, None, None, False, in_loop, dict(index.env)))
            return
        raise ActionError(f"{kernel.name} has a statement this action does not read: {c.code(node).strip()[:60]}")

    for node in kdef.body.body:
        if c.is_docstring(node):
            continue
        if isinstance(node, cst.For):
            iter_ = node.iter
            if loop is not None or node.orelse is not None or not isinstance(node.target, cst.Name) \
                    or not (isinstance(iter_, cst.Call) and _dotted(iter_.func) in ("range", "tl.range")):
                raise ActionError(f"{kernel.name} has more than one loop, or a loop not over range()")
            loop, loop_var, prologue = node, node.target.value, len(stmts)
            index.env[loop_var] = index.sym("loop")
            for inner in node.body.body:
                if isinstance(inner, cst.For | cst.If | cst.While):
                    raise ActionError(f"{kernel.name} nests control flow in its loop")
                take(inner, True)
            continue
        take(node, False)
    if loop is None:
        prologue = len(stmts)
    return _Body(stmts, loop, loop_var, index, prologue)


def _params(kernel: Kernel, sources: dict[str, str], host: _Host, prefix: str) -> dict:
    """Kernel parameter -> sympy: block sizes stay symbolic, the rest is what the host passes."""
    sp = _sympy()
    out = {}
    for p in kernel.params:
        if p.kind == "pointer":
            out[p.name] = sp.Symbol(f"{prefix}ptr:{p.name}")
        elif p.kind == "constexpr" and c.is_block_name(p.name):
            out[p.name] = sp.Symbol(f"{prefix}blk:{p.name}")
        elif p.name in sources:
            out[p.name] = host.source(sources[p.name])
        elif p.default_value is not None and isinstance(p.default_value, int):
            out[p.name] = sp.Integer(p.default_value)
    return out


def _mem_call(value: cst.BaseExpression, op: str) -> cst.Call | None:
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
        value = value.func.value
    return value if isinstance(value, cst.Call) and _dotted(value.func) == op else None


def _address(call: cst.Call, index: _Index, env: dict) -> tuple[str, object] | None:
    """``tl.load/store(P + OFFSET, ...)`` (through local pointer names too) -> (P, OFFSET as sympy)."""
    ptr = call.args[0].value if call.args and call.args[0].keyword is None else None
    if ptr is None:
        return None
    sp = _sympy()
    saved, index.env = index.env, env
    try:
        value = index.of(ptr)
    finally:
        index.env = saved
    if value is None:
        return None
    value = sp.expand(value)
    pointers = [s for s in value.free_symbols if ".ptr:" in s.name]
    if len(pointers) != 1 or value.coeff(pointers[0]) != 1:
        return None
    offset = sp.expand(value - pointers[0])
    if pointers[0] in offset.free_symbols:
        return None
    return pointers[0].name.split(".ptr:", 1)[1], offset


def _mask_of(call: cst.Call, position: int) -> cst.BaseExpression | None:
    kw = c.kwarg(call, "mask")
    if kw is not None:
        return kw.value
    positional = [a.value for a in call.args if a.keyword is None]
    return positional[position] if len(positional) > position else None


def _mask_at(call: cst.Call, position: int, body: "_Body", stmt: "_Stmt") -> tuple[cst.BaseExpression | None, dict]:
    """The mask of ``call`` (in ``stmt``) and the index env to read it in: a local name (``mask = cols < n``,
    ``mask=mask``) reads as its definition, in the env of the statement that defines it."""
    mask = _mask_of(call, position)
    if isinstance(mask, cst.Name):
        for prev in reversed(body.stmts[:body.stmts.index(stmt)]):
            if prev.target == mask.value:
                if not prev.aug:
                    return prev.value, prev.env
                break
    return mask, stmt.env


def _bound(conjunct: cst.BaseExpression, index: _Index, env: dict) -> tuple[object, object] | None:
    """``i < n`` -> (i, n) as sympy."""
    if not (isinstance(conjunct, cst.Comparison) and len(conjunct.comparisons) == 1
            and isinstance(conjunct.comparisons[0].operator, cst.LessThan)):
        return None
    saved, index.env = index.env, env
    try:
        left, right = index.of(conjunct.left), index.of(conjunct.comparisons[0].comparator)
    finally:
        index.env = saved
    return None if left is None or right is None else (left, right)


# ---- the softmax of a row --------------------------------------------------------------------------
def _inline(value: cst.BaseExpression, defs: dict[str, cst.BaseExpression]) -> cst.BaseExpression:
    """``value`` with each local name it reads replaced by its definition, parenthesised, and identities dropped."""
    inlined = c.substitute_names(value, {name: found.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                                         for name, found in defs.items()})
    return inlined.visit(_DropIdentities())


class _DropIdentities(cst.CSTTransformer):
    """``0.0 + x`` -> x and ``tl.maximum(-inf, x)`` -> x: a running sum or max started at its identity and
    updated once (what single_pass leaves of a loop) reads as the plain reduction."""

    def leave_BinaryOperation(self, original_node, updated_node):
        if isinstance(updated_node.operator, cst.Add):
            for zero, other in ((updated_node.left, updated_node.right), (updated_node.right, updated_node.left)):
                if c.flat(c.unparen(zero)) in ("0", "0.0", "0."):
                    return other
        return updated_node

    def leave_Call(self, original_node, updated_node):
        if _dotted(updated_node.func) == "tl.maximum" and len(updated_node.args) == 2 \
                and all(a.keyword is None for a in updated_node.args):
            first, second = (a.value for a in updated_node.args)
            if c.flat(c.unparen(first)) in _NEG_INF:
                return second
            if c.flat(c.unparen(second)) in _NEG_INF:
                return first
        return updated_node


def _reduction(node: cst.BaseExpression, op: str) -> tuple[cst.BaseExpression, int] | None:
    """``tl.max(x, axis=1)[:, None]`` (or unbroadcast) -> (x, 1)."""
    node = c.unparen(node)
    if isinstance(node, cst.Subscript) and _broadcast_axis(node) is not None:
        node = c.unparen(node.value)
    if not (isinstance(node, cst.Call) and _dotted(node.func) == op and node.args):
        return None
    axis = c.kwarg(node, "axis")
    axis_node = axis.value if axis is not None else (node.args[1].value if len(node.args) > 1 and node.args[1].keyword is None else None)
    if not isinstance(axis_node, cst.Integer):
        return None
    return node.args[0].value, int(axis_node.value)


def _softmax_input(value: cst.BaseExpression) -> tuple[str, int, cst.BaseExpression] | None:
    """``exp(x - max(x)) / sum(exp(x - max(x)))`` over one axis (casts allowed) -> (x's code, axis, x)."""
    value = c.unparen(value)
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
        value = c.unparen(value.func.value)
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)):
        return None
    num = c.unparen(value.left)
    den = _reduction(value.right, "tl.sum")
    if den is None or c.flat(c.unparen(den[0])) != c.flat(num):
        return None
    if not (isinstance(num, cst.Call) and _dotted(num.func) == "tl.exp" and len(num.args) == 1):
        return None
    diff = c.unparen(num.args[0].value)
    if not (isinstance(diff, cst.BinaryOperation) and isinstance(diff.operator, cst.Subtract)):
        return None
    top = _reduction(diff.right, "tl.max")
    x = c.flat(c.unparen(diff.left))
    if top is None or c.flat(c.unparen(top[0])) != x or top[1] != den[1]:
        return None
    return x, den[1], c.unparen(diff.left)


def _inlined_defs(stmts: list[_Stmt], upto: int) -> tuple[dict[str, cst.BaseExpression], list[dict[str, str]]]:
    """Each name's value with every local inlined, and after each statement each name's inlined code."""
    defs: dict[str, cst.BaseExpression] = {}
    after: list[dict[str, str]] = []
    for st in stmts[:upto]:
        if st.target is not None:
            defs[st.target] = _inline(st.value, defs)
        after.append({n: c.flat(v) for n, v in defs.items()})
    return defs, after


def _has_random(kdef: cst.FunctionDef) -> bool:
    text = c.code(kdef)
    return any(f"tl.{name}" in text for name in _RANDOM)


# ---- the plan -------------------------------------------------------------------------------------
@dataclass
class _Plan:
    scores: Kernel
    softmax: Kernel | None
    pv: Kernel
    host: cst.FunctionDef
    launches: list[c.LaunchNode]  # scores, [softmax], pv
    buffers: list[str]  # host names of the score / probability buffers
    p_param: str  # the P @ V kernel's probability pointer
    p_extra: list[str]  # its parameters that only index the probabilities (strides): they go too
    p_stmt: cst.SimpleStatementLine  # its load of P
    p_name: str
    p_dtype: str | None  # tl dtype to cast the probabilities to before the dot (None: fp32)
    key_mask: str  # the P load's conditions on keys, in the P @ V kernel's names
    hoisted: list[cst.BaseStatement] = field(default_factory=list)
    in_loop: list[cst.BaseStatement] = field(default_factory=list)
    scores_code: str = ""
    new_params: list[tuple[str, str, bool]] = field(default_factory=list)  # (name, host source, constexpr)
    rows: str = ""  # the row block size (first dim of the accumulator)
    transform: str | None = None  # the softmax kernel's elementwise pre-step, ``__mtmc_scores__ * scale``
    loop_end: str | None = None  # a causal mask's last key of the row block: the key loop stops there
    acc: str = ""
    loop: cst.For | None = None


# (id(module), chain) -> (module, plan or the refusal); the module is kept so its id stays unique.
_ONE_PASS: dict = {}  # (text, softmax kernel, target) -> (one-pass text, its analysis) or None
_PLANS: dict[tuple, tuple[cst.Module, object]] = {}


class FlashAttention:
    name = "flash_attention"
    kind = "Fusion"
    changes_numerics = False
    max_changed_lines = 100  # one reviewable step, bigger than the usual: three kernels become one (most lines are removed ones)
    tiles = None  # the tiles gpu_tiles chooses from (None: FLASH_TILES; () keeps the chain's, as the GPU benchmark's baseline)
    mask_free_keys = True  # even_keys on the fused kernel (False: key masks in every block, the GPU benchmark's comparison)
    # The fused kernel's tile decides whether the fusion pays: 0.28x at 128x64 on a short chain (held-out, session
    # 11), where smaller tiles were never tried once the first was measured, kept or not (dev attn_vit_short_seq).
    sweeps_variants = "tile"

    def _chains(self, analysis: FileAnalysis, kernel: Kernel) -> list[tuple[str, str, str]]:
        """(scores, softmax or "", pv) launched back to back in one host function and involving ``kernel``."""
        out = []
        for host in analysis.host_functions:
            sites = [s.kernel for s in analysis.launches if s.host_function == host.name]
            for i in range(len(sites)):
                for chain in (sites[i:i + 3], sites[i:i + 2]):
                    if len(chain) < 2 or len(set(chain)) != len(chain) or kernel.name not in chain:
                        continue
                    last = analysis.kernel(chain[-1])
                    first = analysis.kernel(chain[0])
                    if last is None or first is None or not last.loops or not last.calls_of("dot") or not first.calls_of("dot"):
                        continue
                    found = (chain[0], chain[1] if len(chain) == 3 else "", chain[-1])
                    if found not in out:
                        out.append(found)
        return out

    def _one_pass(self, text: str, analysis: FileAnalysis, softmax: str, target: GpuProfile) -> tuple[str, FileAnalysis, str | None]:
        """``text`` with a looping softmax kernel read in one block first (single_pass's edit), which the fused
        kernel is built from: (text, its analysis, a note; the inputs and None when the softmax does not loop)."""
        kernel = analysis.kernel(softmax) if softmax else None
        if kernel is None or not kernel.loops:
            return text, analysis, None
        key = (text, softmax, target.name)
        if key not in _ONE_PASS:
            # One rewrite, two users: single_pass itself and this chain.
            from .single_pass import SinglePass
            try:
                edit = SinglePass().apply(text, analysis, kernel, {}, target)
                _ONE_PASS[key] = (edit.new_text, analyze(edit.new_text))
            except ActionError:
                _ONE_PASS[key] = None
            if len(_ONE_PASS) > 8:
                _ONE_PASS.pop(next(iter(_ONE_PASS)))
        hit = _ONE_PASS[key]
        if hit is None:
            return text, analysis, None
        return hit[0], hit[1], f"{softmax}'s passes over the row read as one block first (as single_pass does)"

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        out = []
        module = c.parse(analysis.text)
        for scores, softmax, pv in self._chains(analysis, kernel):
            text1, analysis1, note = self._one_pass(analysis.text, analysis, softmax, target)
            try:
                self._plan(module if note is None else c.parse(text1), analysis1, scores, softmax, pv)
            except ActionError:
                continue
            names = ", ".join(n for n in (scores, softmax, pv) if n)
            chain = {"scores": scores, "softmax": softmax, "pv": pv}
            title = f"Fuse attention into one flash kernel ({names} -> {pv}: scores never leave registers)"
            out.append(Candidate(self.name, self.kind, kernel.name, chain, title, c.kernel_line(analysis.kernel(pv))))
            # The target's tiles leave most SMs idle when the rows and heads are few (a 128-row block per program):
            # smaller square tiles keep more programs for small problems. The speed check picks.
            # One constant for both blocks allows square tiles only: the target's choice is then 64 x 64 already.
            square = _square_blocks(analysis, module, pv)
            for tile in (t for t in SMALL_TILES if not (square and (t, t, 4) in FLASH_TILES)) if self.tiles is None else ():
                out.append(Candidate(self.name, self.kind, kernel.name, {**chain, "tile": tile},
                                     f"{title} with {tile}x{tile} tiles (more programs for short sequences)",
                                     c.kernel_line(analysis.kernel(pv))))
        return out

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why no chain through ``kernel`` fuses: each launched chain's refusal (None when none is launched)."""
        reasons = []
        for scores, softmax, pv in self._chains(analysis, kernel):
            text1, analysis1, note = self._one_pass(analysis.text, analysis, softmax, target)
            try:
                self._plan(c.parse(text1), analysis1, scores, softmax, pv)
            except ActionError as exc:
                reasons.append(f"{' -> '.join(n for n in (scores, softmax, pv) if n)}: {exc}")
        return "; ".join(reasons) or None

    # -- matching ---------------------------------------------------------------------------------
    def _plan(self, module: cst.Module, analysis: FileAnalysis, scores_name: str, softmax_name: str, pv_name: str) -> _Plan:
        """The plan for one chain, or ActionError with the reason; memoised per parsed text (each kernel of
        the chain asks, and apply asks again)."""
        key = (id(module), scores_name, softmax_name, pv_name)
        hit = _PLANS.get(key)
        if hit is None or hit[0] is not module:
            try:
                result: _Plan | ActionError = self._match(module, analysis, scores_name, softmax_name, pv_name)
            except ActionError as exc:
                result = exc
            except (ArithmeticError, TypeError, ValueError, AttributeError, IndexError, KeyError, StopIteration) as exc:
                # An unforeseen spelling must not break the other actions' candidates: a refusal that says so.
                result = ActionError(f"could not read the attention chain ({type(exc).__name__}: {exc})")
            if len(_PLANS) >= 32:
                _PLANS.pop(next(iter(_PLANS)))
            hit = _PLANS[key] = (module, result)
        if isinstance(hit[1], ActionError):
            raise ActionError(str(hit[1]))
        return hit[1]

    def _match(self, module: cst.Module, analysis: FileAnalysis, scores_name: str, softmax_name: str, pv_name: str) -> _Plan:
        sp = _sympy()
        names = [n for n in (scores_name, softmax_name, pv_name) if n]
        kernels = [analysis.kernel(n) for n in names]
        if any(k is None for k in kernels):
            raise ActionError(f"no kernels {', '.join(names)} in the file")
        for k in kernels:
            if k.is_autotuned or k.heuristics or len(analysis.launches_of(k.name)) != 1:
                raise ActionError(f"{k.name} is autotuned or launched more than once")
        scores, pv = kernels[0], kernels[-1]
        softmax = kernels[1] if softmax_name else None
        located = [c.locate(module, k.name) for k in kernels]
        defs = [d for d, _ in located]
        launches = [ls[0] for _, ls in located]
        for d, k in zip(defs, kernels):
            if _has_random(d):
                raise ActionError(f"{k.name} draws random numbers (dropout): the fused kernel could not repeat them")
        host = launches[0].host
        if host is None or any(l.host is not host for l in launches):
            raise ActionError("the kernels are not launched from the same host function")
        at = [_top_statement(host, l.call) for l in launches]
        if any(i is None for i in at) or at != sorted(at):
            raise ActionError("the launches are not top-level statements in order")
        if any(a.star for l in launches for a in l.call.args):
            raise ActionError("a launch passes *args")
        hostv = _Host(host)
        sources = [c.launch_sources(l, k) for l, k in zip(launches, kernels)]
        # Between the first and the last launch only shape arithmetic, and nothing an earlier launch reads changes
        # (their arguments move to the last launch).
        for i, st in enumerate(host.body.body[at[0] + 1:at[-1]], start=at[0] + 1):
            if i in at:
                continue
            if not (isinstance(st, cst.SimpleStatementLine) and all(isinstance(b, cst.Assign) for b in st.body)) or _impure_calls(st):
                raise ActionError("something other than shape arithmetic runs between the attention launches")
            written = set().union(*[_names(t.target) for b in st.body for t in b.targets])
            for launch, k, where in zip(launches[:-1], kernels, at):
                if where < i and written & _names(launch.call):
                    raise ActionError(f"a statement between the launches changes what {k.name} reads")

        # The buffers: what the scores kernel stores, and what the P @ V kernel loads from the host's fresh allocation.
        s_body = _body(defs[0], scores, "k1.", _params(scores, sources[0], hostv, "k1."))
        v_body = _body(defs[-1], pv, "k3.", _params(pv, sources[-1], hostv, "k3."))
        stores = [st for st in s_body.stmts if st.target is None]
        if len(stores) != 1 or len(scores.calls_of("store")) != 1 or scores.calls_of("atomic_add", "atomic_max", "atomic_min"):
            raise ActionError(f"{scores.name} does not store one tile")
        store_stmt = stores[0]
        store_call = _call_of(store_stmt.node)
        s_addr = _address(store_call, s_body.index, store_stmt.env)
        if s_addr is None or s_addr[0] not in sources[0]:
            raise ActionError(f"{scores.name} does not store at pointer + offset")
        s_param, s_offset = s_addr
        s_buffer = sources[0][s_param]
        if store_stmt is not s_body.stmts[-1] or s_body.stmts.index(store_stmt) < s_body.prologue and s_body.loop is not None:
            raise ActionError(f"{scores.name} does more after its store")
        store_value = [a.value for a in store_call.args if a.keyword is None][1]

        # The P @ V kernel: one loop, P loaded once and used only in the tl.dot that accumulates.
        if v_body.loop is None:
            raise ActionError(f"{pv.name} has no loop over key blocks")
        p_loads = [st for st in v_body.stmts if st.target is not None and (call := _mem_call(st.value, "tl.load")) is not None
                   and (addr := _address(call, v_body.index, st.env)) is not None and sources[-1].get(addr[0]) in (s_buffer, *(
                       [sources[1].get(p.name) for p in softmax.params] if softmax else []))]
        if len(p_loads) != 1 or not p_loads[0].in_loop:
            raise ActionError(f"{pv.name} does not load the probabilities once in its loop, as a statement")
        p_stmt = p_loads[0]
        p_call = _mem_call(p_stmt.value, "tl.load")
        p_cast = c.code(p_stmt.value.args[0].value) if p_stmt.value is not p_call else None
        other = c.kwarg(p_call, "other")
        if other is not None and c.flat(other.value) not in ("0", "0.0", "0."):
            raise ActionError(f"{pv.name} pads the probabilities with something other than 0")
        p_param, p_offset = _address(p_call, v_body.index, p_stmt.env)
        p_buffer = sources[-1][p_param]
        p_name = p_stmt.target
        if _count(defs[-1], p_param) != 2:
            raise ActionError(f"{pv.name} reads {p_param} elsewhere")
        # Parameters that carry the probability buffer's strides go with its load.
        p_extra = []
        for q in pv.params:
            source = sources[-1].get(q.name)
            if q.name == p_param or source is None or not _names(c.expr(source)) & {p_buffer, s_buffer}:
                continue
            if _count(defs[-1], q.name) != 1 + _count(p_stmt.node, q.name):
                raise ActionError(f"{pv.name} uses {q.name} ({source}) besides loading the probabilities")
            p_extra.append(q.name)
        if _count(defs[-1], p_name) != 2:
            raise ActionError(f"{pv.name} uses {p_name} besides one tl.dot")
        acc, rows = self._accumulator(defs[-1], v_body, p_name, pv)
        if softmax is None and p_buffer != s_buffer:
            raise ActionError(f"{pv.name} does not read what {scores.name} stores")
        buffers = [s_buffer] if softmax is None or p_buffer == s_buffer else [s_buffer, p_buffer]  # an in-place softmax: one
        if not all(b.isidentifier() for b in buffers):
            raise ActionError("the buffers are not plain host names")
        for b in buffers:
            if hostv.alloc(b) is None:
                raise ActionError(f"{b} is not a fresh torch.empty/zeros allocation in {host.name.value}")
        if "empty" not in _dotted(hostv.alloc(s_buffer).func):
            # What the scores kernel's store mask leaves out is then read as zeros, not computed: not the same.
            raise ActionError(f"{s_buffer} starts as zeros, not empty: the elements {scores.name} does not store would matter")
        for b in buffers:
            uses = _count(host, b)
            expected = 1 + sum(_count(l.call, b) for l in launches)
            expected += sum(1 for other in buffers if other != b and b in _names(hostv.alloc(other)))
            if uses != expected:
                raise ActionError(f"the host uses {b} for something besides the attention kernels")

        # Indices into the buffers: rows, keys and batch must mean the same in both kernels.
        o1, o3 = _by_monomial(s_offset), _by_monomial(p_offset)
        if set(o1) != set(o3):
            raise ActionError(f"{scores.name} and {pv.name} index the buffer with different strides")
        roles1, roles3 = _roles(o1, scores), _roles(o3, pv)
        if roles1.keys() != {"row", "key"} | {k for k in roles1 if k.startswith("batch")} or roles1.keys() != roles3.keys():
            raise ActionError("the buffer is not indexed by rows, keys and batch program ids alike")
        if not any(sym.name == "k3.loop" for sym in roles3["key"].free_symbols):
            raise ActionError(f"{pv.name}'s probability index does not advance with its loop (pointers moved by hand?)")
        in_loop3 = {st.target for st in v_body.stmts if st.in_loop and st.target}
        assigned3: set[str] = set()
        for st in v_body.stmts:
            if st.in_loop and st.target is not None:
                carried = (_names(st.value) & in_loop3) - assigned3 - {st.target if st.target == acc else ""}
                if carried:
                    raise ActionError(f"{pv.name}'s loop carries {', '.join(sorted(carried))} across key blocks besides {acc}")
                assigned3.add(st.target)
        sigma, renames = self._solve(roles1, roles3, o1, scores, pv)
        inner = s_body.loop is not None and sp.Symbol("k1.loop") not in sigma
        if inner and (store_stmt.in_loop or sp.Symbol("k1.loop") in s_offset.free_symbols):
            raise ActionError(f"{scores.name} stores inside a loop that is not over key blocks")
        if s_body.loop is not None and not inner:
            assigned: set[str] = set()
            in_loop = {st.target for st in s_body.stmts if st.in_loop and st.target}
            for st in s_body.stmts:
                if st.in_loop and st.target is not None:
                    if (_names(st.value) & in_loop) - assigned:
                        raise ActionError(f"{scores.name}'s loop carries {', '.join(sorted((_names(st.value) & in_loop) - assigned))} across key blocks")
                    assigned.add(st.target)
        mapped = sp.expand(_apply(sigma, s_offset, renames))
        if sp.expand(mapped - p_offset) != 0:
            raise ActionError(f"{scores.name} and {pv.name} do not index the buffer alike")
        key_monomial = next(m for m, r in _role_of(o1, scores).items() if r == "key")
        row_monomial = next(m for m, r in _role_of(o1, scores).items() if r == "row")
        if key_monomial != 1:
            raise ActionError("the keys are not the buffer's unit-stride axis")

        loop_args = [a.value for a in v_body.loop.iter.args]
        if len(loop_args) != 3 or c.flat(loop_args[0]) != "0":
            raise ActionError(f"{pv.name}'s loop is not range(0, n, BLOCK)")
        v_body.index.env = dict(p_stmt.env)
        loop_bound = v_body.index.of(loop_args[1])
        # The key length the softmax normalises over.
        if softmax is not None:
            n_cols, transform = self._softmax(defs[1], softmax, sources[1], hostv, s_buffer, p_buffer, row_monomial)
            dtype = hostv.dtype(s_buffer)
            if dtype not in ("float32", "float"):
                raise ActionError(f"the scores buffer {s_buffer} is not fp32 (the softmax would see rounded scores)")
            x_code, end = store_value, s_body.stmts.index(store_stmt)
        else:
            transform = None
            x_code, end, n_cols = self._fused_softmax(s_body, store_stmt, store_value, scores, sources[0], hostv, roles1)
        if loop_bound is None or sp.expand(loop_bound - n_cols) != 0:
            raise ActionError(f"{pv.name}'s loop does not cover the softmax's row length")
        key_mask = self._key_mask(p_call, v_body, p_stmt, n_cols, roles3, defs[-1], pv)
        p_dtype = hostv.dtype(p_buffer)
        if p_cast is not None:
            p_dtype = p_cast  # the P @ V kernel casts what it loads: the probabilities get that type
        elif p_dtype in ("float32", "float"):
            p_dtype = None
        elif p_dtype in _TORCH_TO_TL:
            p_dtype = _TORCH_TO_TL[p_dtype]
        elif p_dtype is None or not (p_dtype.endswith(".dtype") and p_dtype[:-6].isidentifier()):
            raise ActionError(f"the element type of {p_buffer} is neither a torch dtype nor a tensor's .dtype")

        plan = _Plan(scores, softmax, pv, host, launches, buffers, p_param, p_extra, p_stmt.node, p_name, p_dtype, key_mask,
                     rows=rows, acc=acc, loop=v_body.loop)
        self._copy_scores(plan, s_body, v_body, defs, sources, sigma, renames, x_code, end, s_param, p_stmt, inner)
        if transform is None:
            plan.loop_end = self._causal_end(plan, v_body, p_stmt, roles3, pv)
        if transform is not None:
            plan.transform = self._transform_params(plan, transform, sources, defs[-1])
        if p_dtype is not None and p_dtype.endswith(".dtype"):  # ``dtype=q.dtype``: the fused kernel's pointer to q
            tensor = p_dtype[:-6]
            same_dtype = hostv.same_dtype_views(tensor)  # q and q3 = q.reshape(...) share the element type
            holder = next((q.name for q in pv.params if sources[-1].get(q.name) in same_dtype and q.name not in (p_param, *p_extra)), None)
            holder = holder or next((n for n, src, _k in plan.new_params if src in same_dtype), None)
            if holder is None:
                raise ActionError(f"the probabilities have {tensor}'s dtype, and the fused kernel does not take {tensor}")
            plan.p_dtype = f"{holder}.dtype.element_ty"
        return plan

    def _transform_params(self, plan: _Plan, transform: cst.BaseExpression, sources, pv_def: cst.FunctionDef) -> str:
        """The softmax kernel's pre-step in the fused kernel's names: its parameters shared by host value, or new."""
        by_source = {sources[-1][q.name]: q.name for q in plan.pv.params if q.name in sources[-1] and q.name != plan.p_param}
        by_source.update({src: name for name, src, _k in plan.new_params})
        taken = _names(pv_def) | {n for n, _s, _k in plan.new_params} | set().union(set(), *[_names(st) for st in plan.hoisted + plan.in_loop])
        call2 = plan.launches[1].call
        arg_nodes = {c.arg_param(a, call2, plan.softmax): a.value for a in call2.args}
        mapping: dict[str, str] = {}
        for name in sorted(_names(transform) - _GLOBALS - {"__mtmc_scores__"}):
            source = sources[1].get(name)
            if source is None:
                raise ActionError(f"{plan.softmax.name}'s {name} is not passed at its launch")
            if source in by_source:
                mapping[name] = by_source[source]
                continue
            fresh = name if name not in taken else next(n for n in (f"{name}_sm", *(f"{name}_{i}" for i in range(2, 99))) if n not in taken)
            taken.add(fresh)
            mapping[name] = by_source[source] = fresh
            plan.new_params.append((fresh, c.code(arg_nodes[name]), plan.softmax.param(name).kind == "constexpr"))
        return c.code(c.substitute_names(transform, mapping))

    def _causal_end(self, plan: _Plan, body: _Body, p_stmt: _Stmt, roles3: dict, pv: Kernel) -> str | None:
        """Where the key loop may stop: a causal mask ``s = tl.where(row >= key, s, -inf)`` as the scores' last
        step masks every key past the block's last row, so blocks there add nothing (p = 0, alpha = 1)."""
        sp = _sympy()
        name = plan.scores_code
        defs = [st for st in plan.in_loop if (parts := _assign_parts(st)) is not None and parts[0] == name]
        if not name.isidentifier() or not defs:
            return None
        value = _assign_parts(defs[-1])[1]
        if not (isinstance(value, cst.Call) and _dotted(value.func) == "tl.where" and len(value.args) == 3
                and c.flat(value.args[1].value) == name and c.flat(value.args[2].value) in _NEG_INF):
            return None
        cond = c.unparen(value.args[0].value)
        if not (isinstance(cond, cst.Comparison) and len(cond.comparisons) == 1):
            return None
        op = cond.comparisons[0].operator
        saved, body.index.env = body.index.env, p_stmt.env
        try:
            left, right = body.index.of(cond.left), body.index.of(cond.comparisons[0].comparator)
        finally:
            body.index.env = saved
        if left is None or right is None:
            return None
        row, key = (left, right) if isinstance(op, cst.GreaterThanEqual) else (right, left) if isinstance(op, cst.LessThanEqual) else (None, None)
        if row is None or sp.expand(row - roles3["row"]) != 0 or sp.expand(key - roles3["key"]) != 0:
            return None
        start = sp.expand(_strip_axes(roles3["row"]) - _arange(_strip_axes(roles3["row"]), pv))
        block = _arange(_strip_axes(roles3["row"]), pv).name.split("ar:", 1)[1]
        pid = start / sp.Symbol(f"k3.blk:{block}")
        if isinstance(pid, sp.Symbol) and pid.name.startswith("k3.pid"):  # the tutorial's (start_m + 1) * BLOCK_M
            named = next((st.target for st in body.stmts[:body.prologue] if st.target and not st.aug and st.value is not None
                          and c.flat(st.value) == f"tl.program_id({pid.name[6:]})"), None)
            return f"({named or _code_of(pid, body, pv)} + 1) * {block}"
        try:
            return _code_of(start + sp.Symbol(f"k3.blk:{block}"), body, pv)
        except ActionError:
            return None

    def _accumulator(self, kdef: cst.FunctionDef, body: _Body, p_name: str, pv: Kernel) -> tuple[str, str]:
        """The accumulator the loop adds ``tl.dot(p, v)`` to, and its row block (first dim of its tl.zeros)."""
        dots = [st for st in body.stmts if st.in_loop and st.target is not None and f"{p_name}" in _names(st.value)]
        if len(dots) != 1:
            raise ActionError(f"{pv.name} uses the probabilities outside one accumulating tl.dot")
        st = dots[0]
        acc = st.target
        value = st.value
        dot = None
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) and c.flat(value.left) == acc:
            dot = c.unparen(value.right)
        elif isinstance(value, cst.Call) and _dotted(value.func) == "tl.dot" and len(value.args) >= 3 and \
                [c.flat(a.value) for a in value.args[2:] if a.keyword is None or a.keyword.value == "acc"] == [acc]:
            dot = value  # tl.dot(p, v, acc) or tl.dot(p, v, acc=acc)
        if not (isinstance(dot, cst.Call) and _dotted(dot.func) == "tl.dot") or len(dot.args) < 2:
            raise ActionError(f"{pv.name} does not accumulate tl.dot(p, v)")
        first = c.unparen(dot.args[0].value)
        while isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute) and first.func.attr.value == "to":
            first = c.unparen(first.func.value)
        if c.flat(first) != p_name or p_name in _names(dot.args[1].value):
            raise ActionError(f"{pv.name}'s tl.dot does not take the probabilities as its left operand")
        writes = [s for s in body.stmts if s.target == acc]
        init = [s for s in writes if body.stmts.index(s) < body.prologue]
        if len(init) != 1 or len([s for s in writes if s.in_loop]) != 1 or init[0] is not writes[0]:
            raise ActionError(f"{pv.name} does not start {acc} at zero before the loop and only add to it in the loop")
        zeros = init[0].value
        if not (isinstance(zeros, cst.Call) and _dotted(zeros.func) == "tl.zeros" and zeros.args
                and isinstance(zeros.args[0].value, cst.Tuple | cst.List) and "float32" in c.flat(zeros)):
            raise ActionError(f"{pv.name}'s {acc} is not tl.zeros((rows, dim), dtype=tl.float32)")
        rows = c.code(zeros.args[0].value.elements[0].value)
        return acc, rows

    def _solve(self, roles1: dict, roles3: dict, o1: dict, scores: Kernel, pv: Kernel):
        """Root substitution sigma (scores kernel's program ids, aranges, loop -> the P @ V kernel's) and block renames."""
        sp = _sympy()
        sigma: dict = {}
        renames: dict[str, str] = {}

        def put(root, value) -> None:
            if root in sigma and sp.expand(sigma[root] - value) != 0:
                raise ActionError("a program id or arange of the scores kernel would mean two things")
            sigma[root] = value

        for role in ("row", "key"):
            c1, c3 = _strip_axes(roles1[role]), _strip_axes(roles3[role])
            a1, a3 = _arange(c1, scores), _arange(c3, pv)
            b1, b3 = a1.name.split("ar:", 1)[1], a3.name.split("ar:", 1)[1]
            if not (scores.param(b1) and pv.param(b3) and c.is_block_name(b1) and c.is_block_name(b3)):
                raise ActionError(f"the {role} block sizes are not block parameters")
            if renames.get(b1, b3) != b3:
                raise ActionError("the scores kernel uses one block size for rows and keys")
            renames[b1] = b3
            blk1, blk3 = sp.Symbol(f"k1.blk:{b1}"), sp.Symbol(f"k3.blk:{b3}")
            c1 = c1.xreplace({blk1: blk3})
            t1, t3 = sp.expand(c1 - a1), sp.expand(c3 - a3)
            if t1 == 0:
                put(a1, c3)
                continue
            put(a1, a3)
            roots = [s for s in t1.free_symbols if _is_root(s)]
            if len(roots) != 1:
                raise ActionError(f"the scores kernel's {role} index is not program id times block plus arange")
            k = sp.simplify(t1 / roots[0])
            if any(_is_root(s) for s in k.free_symbols):
                raise ActionError(f"the scores kernel's {role} index is not linear")
            put(roots[0], sp.expand(t3 / k))
        for role, c1 in roles1.items():
            if role.startswith("batch"):
                c3 = roles3[role]
                if not (isinstance(c1, sp.Symbol) and _is_root(c1)):
                    raise ActionError("the scores kernel's batch index is not a program id")
                put(c1, c3)
        return sigma, renames

    def _elementwise(self, found, load_code: str, softmax: Kernel) -> cst.BaseExpression | None:
        """What the softmax kernel does to the loaded scores before the softmax (``x * scale``), with the load
        as the placeholder ``__mtmc_scores__``; None when it takes the softmax of the loaded row itself."""
        x_code, _axis, x = found
        if x_code == load_code:
            return None

        class Hole(cst.CSTTransformer):
            def on_leave(self, original_node, updated_node):
                if isinstance(updated_node, cst.BaseExpression) and c.flat(c.unparen(updated_node)) == load_code:
                    return cst.Name("__mtmc_scores__")
                return updated_node

        f = x.visit(Hole())
        code = c.flat(f)
        params = {p.name for p in softmax.params if p.kind != "pointer" and not c.is_block_name(p.name)}
        if code.count("__mtmc_scores__") != 1 or any(op in code for op in ("tl.load", "tl.arange", "tl.program_id", "tl.rand")) \
                or _names(f) - params - _GLOBALS - {"__mtmc_scores__"}:
            raise ActionError(f"{softmax.name} does more to the row than an elementwise function of its scalar parameters before the softmax")
        return f

    def _softmax(self, kdef, softmax: Kernel, sources, hostv: _Host, s_buffer, p_buffer, row_monomial):
        """Check the middle kernel is a row softmax from S to P over the key axis: (row length, elementwise pre-step)."""
        sp = _sympy()
        body = _body(kdef, softmax, "k2.", _params(softmax, sources, hostv, "k2."))
        if body.loop is not None or len(softmax.calls_of("load")) != 1 or len(softmax.calls_of("store")) != 1:
            raise ActionError(f"{softmax.name} is not a one-block row softmax (one load, one store, no loop)")
        store = body.stmts[-1]
        if store.target is not None:
            raise ActionError(f"{softmax.name} does more after its store")
        call = _call_of(store.node)
        defs, after = _inlined_defs(body.stmts, len(body.stmts) - 1)
        value = _inline([a.value for a in call.args if a.keyword is None][1], defs)
        found = _softmax_input(value)
        if found is None or found[1] != 0:
            raise ActionError(f"{softmax.name} does not store exp(x - max(x)) / sum(exp(x - max(x))) of one row")
        loads = [st for st in body.stmts if st.target is not None and _mem_call(st.value, "tl.load") is not None]
        if len(loads) != 1:
            raise ActionError(f"{softmax.name} does not take the softmax of the row it loads")
        transform = self._elementwise(found, after[body.stmts.index(loads[0])][loads[0].target], softmax)
        load = _mem_call(loads[0].value, "tl.load")
        other = c.kwarg(load, "other")
        if other is None or c.flat(other.value) not in _NEG_INF:
            raise ActionError(f"{softmax.name} does not pad its row with -inf")
        l_addr, s_addr = _address(load, body.index, loads[0].env), _address(call, body.index, store.env)
        if l_addr is None or s_addr is None or sources.get(l_addr[0]) != s_buffer or sources.get(s_addr[0]) != p_buffer:
            raise ActionError(f"{softmax.name} does not read the scores and write the probabilities")
        col = None
        for _ptr, offset in (l_addr, s_addr):
            terms = _by_monomial(offset)
            cols = terms.get(sp.Integer(1))
            if cols is None or not (isinstance(cols, sp.Symbol) and cols.name.startswith("k2.ar:")) or len(terms) != 2:
                raise ActionError(f"{softmax.name} does not walk a row along its unit-stride axis")
            (stride, row), = [(m, v) for m, v in terms.items() if m != 1]
            if not (isinstance(row, sp.Symbol) and row.name.startswith("k2.pid")):
                raise ActionError(f"{softmax.name} does not take one row per program")
            if sp.expand(stride - row_monomial) != 0:
                raise ActionError(f"{softmax.name}'s rows are not the attention's query rows")
            col = cols
        block = col.name.split("ar:", 1)[1]
        bounds = []
        for st, call_ in ((loads[0], load), (store, call)):
            mask, env = _mask_at(call_, 1 if call_ is load else 2, body, st)
            conj = c.conjuncts(mask)
            found_bounds = [b for cj in conj if (b := _bound(cj, body.index, env)) is not None and b[0] == col]
            if len(conj) != 1 or len(found_bounds) != 1:
                raise ActionError(f"{softmax.name} does not mask its row by the row length alone")
            bounds.append(found_bounds[0][1])
        if sp.expand(bounds[0] - bounds[1]) != 0:
            raise ActionError(f"{softmax.name} loads and stores different lengths")
        if block not in sources or not hostv.covers(sources[block], bounds[0]):
            raise ActionError(f"{softmax.name}'s block is not triton.next_power_of_2 of the row length: it may not cover the row")
        return bounds[0], transform

    def _fused_softmax(self, body: _Body, store: _Stmt, store_value, scores: Kernel, sources, hostv: _Host, roles1):
        """The two-kernel form: the scores kernel stores softmax(x, axis=1) of a tile that holds every key."""
        sp = _sympy()
        at = body.stmts.index(store)
        defs, after = _inlined_defs(body.stmts, at)
        found = _softmax_input(_inline(store_value, defs))
        if found is None or found[1] != 1:
            raise ActionError(f"{scores.name} stores neither scores for a softmax kernel nor softmax(x, axis=1)")
        x_code = found[0]
        stripped = x_code[1:-1] if x_code.startswith("(") and x_code.endswith(")") else x_code
        hits = [(j, n) for j in range(at) for n, v in after[j].items() if v in (x_code, stripped, f"({x_code})")]
        if not hits or body.loop is not None:
            raise ActionError(f"{scores.name}'s softmax input is not a named tile")
        j, name = hits[-1]
        key = _strip_axes(roles1["key"])
        if any(_is_root(s) and not s.name.startswith("k1.ar:") for s in key.free_symbols):
            raise ActionError(f"{scores.name}'s softmax covers one block of keys, not the whole row")
        block = key.name.split("ar:", 1)[1] if isinstance(key, sp.Symbol) else None
        # The keys past the row length must be -inf in the softmax input: a tl.where on the key index.
        length = None
        for st in body.stmts[:j + 1]:
            call = st.value if st.target == name and isinstance(st.value, cst.Call) else None
            if call is None or _dotted(call.func) != "tl.where" or len(call.args) != 3 or c.flat(call.args[2].value) not in _NEG_INF:
                continue
            for cj in c.conjuncts(call.args[0].value):
                b = _bound(cj, body.index, st.env)
                if b is not None and sp.expand(_strip_axes(b[0]) - key) == 0:
                    length = b[1]
        if block is None or length is None or block not in sources or not hostv.covers(sources[block], length):
            raise ActionError(f"{scores.name}'s softmax tile does not hold every key with the rest masked to -inf")
        return cst.Name(name), j + 1, length

    def _key_mask(self, p_call: cst.Call, body: _Body, p_stmt: _Stmt, n_cols, roles3, kdef, pv: Kernel) -> str:
        """The P load's conditions on keys (they become -inf scores); row conditions must guard the output store too."""
        sp = _sympy()
        key = _strip_axes(roles3["key"])
        keys, rows = [], []
        p_mask, p_env = _mask_at(p_call, 1, body, p_stmt)
        for cj in c.conjuncts(p_mask):
            b = _bound(cj, body.index, p_env)
            if b is None:
                raise ActionError(f"{pv.name} masks the probabilities with a condition this action does not read")
            left = _strip_axes(b[0])
            if sp.expand(left - key) == 0:
                keys.append((cj, b[1]))
            elif not left.free_symbols & key.free_symbols:
                rows.append(cj)
            else:
                raise ActionError(f"{pv.name} masks the probabilities with a condition this action does not read")
        if not any(sp.expand(bound - n_cols) == 0 for _cj, bound in keys):
            raise ActionError(f"{pv.name} does not mask keys past the row length")
        stores = [st for st in body.stmts if st.target is None]
        store_masks = {c.flat(cj) for st in stores for cj in c.conjuncts(_mask_at(_call_of(st.node), 2, body, st)[0])}
        if any(c.flat(cj) not in store_masks for cj in rows):
            raise ActionError(f"{pv.name} masks probabilities by rows that its store does not mask")
        return " & ".join(c.code(cj) if len(keys) == 1 else f"({c.code(cj)})" for cj, _b in keys)

    def _copy_scores(self, plan: _Plan, s_body: _Body, v_body: _Body, defs, sources, sigma, renames,
                     x_code, end: int, s_param: str, p_stmt: _Stmt, inner: bool = False) -> None:
        """The scores kernel's statements that compute the scores, in the P @ V kernel's names, before or in its loop.

        With ``inner`` the scores kernel's loop (over the head dimension, accumulating ``tl.dot``) is one unit,
        copied whole as a loop nested in the key loop."""
        sp = _sympy()
        units = list(s_body.stmts[:end])
        info: dict[int, tuple[set[str], set[str]]] = {}  # id(unit) -> (names it assigns, names it reads from outside)
        if inner:
            body = [st for st in units if st.in_loop]
            loop_unit = _Stmt(s_body.loop, None, None, False, False, {})
            first = units.index(body[0])
            units = units[:first] + [loop_unit] + [st for st in units[first:] if not st.in_loop]
            assigned_in = {st.target for st in body if st.target}
            outside, seen = _names(s_body.loop.iter), set()
            for st in body:
                outside |= (_names(st.value) | ({st.target} if st.aug else set())) - (seen - ({st.target} if st.aug else set()))
                seen.add(st.target)
            info[id(loop_unit)] = (assigned_in | {s_body.loop_var}, outside - {s_body.loop_var} | (outside & assigned_in))

        def targets(st: _Stmt) -> set[str]:
            return info[id(st)][0] if id(st) in info else ({st.target} if st.target else set())

        def reads(st: _Stmt) -> set[str]:
            return info[id(st)][1] if id(st) in info else _names(st.value) | ({st.target} if st.aug else set())

        scores, pv = plan.scores, plan.pv
        k3_names = _names(defs[-1])
        locals1 = {st.target for st in s_body.stmts if st.target is not None} | ({s_body.loop_var} if s_body.loop_var else set())
        # Parameters: block sizes by role, shared values by what the host passes, the rest new.
        v_sources = sources[-1]
        param_map: dict[str, str] = dict(renames)
        new_params: list[tuple[str, str, bool]] = []
        call1 = plan.launches[0].call
        arg_nodes = {c.arg_param(a, call1, scores): a.value for a in call1.args}
        taken = set(k3_names)
        for p in scores.params:
            if p.name in param_map or p.name == s_param:
                continue
            twin = next((q.name for q in pv.params if q.name != plan.p_param and v_sources.get(q.name) == sources[0].get(p.name)), None)
            if twin is not None and sources[0].get(p.name) is not None:
                param_map[p.name] = twin
                continue
            if p.name not in sources[0]:
                continue  # a default the kernel keeps: refused below if the scores need it
            fresh = p.name if p.name not in taken else next(n for n in (f"{p.name}_qk", *(f"{p.name}_{i}" for i in range(2, 99))) if n not in taken)
            taken.add(fresh)
            param_map[p.name] = fresh
            new_params.append((fresh, c.code(arg_nodes[p.name]), p.kind == "constexpr"))
        # Index names the P @ V kernel already has (same value after sigma) are reused, not copied.
        available: dict = {}
        for st in v_body.stmts[:v_body.stmts.index(p_stmt)]:
            if st.target is not None and sum(1 for s in v_body.stmts if s.target == st.target) == 1:
                value = v_body.stmts[v_body.stmts.index(st) + 1].env.get(st.target) if v_body.stmts.index(st) + 1 < len(v_body.stmts) else None
                if value is not None:
                    available.setdefault(sp.srepr(sp.expand(value)), st.target)
        provided: dict[str, str] = {}
        for i, st in enumerate(s_body.stmts[:end]):
            if st.target is None or st.aug or st.in_loop and inner or sum(1 for s in s_body.stmts if s.target == st.target) != 1:
                continue
            value = s_body.stmts[i + 1].env.get(st.target) if i + 1 < len(s_body.stmts) else None
            if value is None:
                continue
            try:
                image = sp.expand(_apply(sigma, value, param_map))
            except ActionError:
                continue
            hit = available.get(sp.srepr(image))
            if hit is not None:
                provided[st.target] = hit
        # Backward slice from the scores expression.
        needed = (_names(x_code) & locals1) - set(provided)
        keep: list[_Stmt] = []
        for st in reversed(units):
            if not targets(st) & needed:
                continue
            keep.append(st)
            if st.target is not None and not st.aug:
                needed.discard(st.target)
            needed |= (reads(st) & locals1) - set(provided)
        keep.reverse()
        needed -= set() if inner else {s_body.loop_var}
        if needed:
            raise ActionError(f"{scores.name}'s scores read {', '.join(sorted(needed))} before it is set")
        # Local names that clash with the P @ V kernel's names get a suffix.
        local_map: dict[str, str] = dict(provided)
        for n in sorted(set().union(set(), *[targets(st) for st in keep]), key=str):
            if n in local_map:
                continue
            fresh = n if n not in taken else next(m for m in (f"{n}_qk", *(f"{n}_qk{i}" for i in range(2, 99))) if m not in taken)
            taken.add(fresh)
            local_map[n] = fresh
        names_map = {**param_map, **local_map}
        read = set().union(*[_names(st.node) for st in keep], _names(x_code)) - set().union(set(), *[targets(st) for st in keep])
        unknown = {n for n in read if n.isidentifier()} - set(names_map) - _GLOBALS - {s_body.loop_var} - set(provided)
        if s_param in read:
            raise ActionError(f"{scores.name} computes its scores from the buffer it stores")
        if unknown:
            raise ActionError(f"{scores.name}'s scores read {', '.join(sorted(unknown))}, which the fused kernel would not have")
        loop_image = None
        if s_body.loop_var is not None and not inner:
            root = sp.Symbol("k1.loop")
            if root not in sigma and s_body.loop_var in read:
                raise ActionError(f"{scores.name}'s loop is not over key blocks")
            loop_image = _code_of(sigma[root], v_body, pv) if root in sigma else None
        substitute = _Substitute(names_map, sigma, renames, param_map, v_body, pv, None if inner else s_body.loop_var, loop_image)
        # Which copied statements depend on the key block (they go in the loop), which are hoisted.
        tainted = {v_body.loop_var} | {st.target for st in v_body.stmts if st.in_loop and st.target is not None}
        multi = {n for st in keep for n in targets(st) if sum(1 for s in keep if n in targets(s)) > 1}
        hoisted, in_loop = [], []
        for st in keep:
            node = st.node.visit(substitute)
            if substitute.error:
                raise ActionError(substitute.error)
            if _names(node) & tainted or targets(st) & multi or st.in_loop and not inner and s_body.loop_var in _names(st.node):
                in_loop.append(node.with_changes(leading_lines=[]))
                tainted |= {local_map[n] for n in targets(st)}
            else:
                hoisted.append(node.with_changes(leading_lines=[]))
        x_new = x_code.visit(substitute)
        if substitute.error:
            raise ActionError(substitute.error)
        plan.hoisted, plan.in_loop, plan.scores_code, plan.new_params = hoisted, in_loop, c.code(x_new), new_params
        used = set().union(set(), *[_names(s) for s in hoisted + in_loop], _names(x_new))
        plan.new_params = [p for p in new_params if p[0] in used]

    # -- applying ---------------------------------------------------------------------------------
    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        scores, softmax, pv = params.get("scores"), params.get("softmax", ""), params.get("pv")
        if not isinstance(scores, str) or not isinstance(pv, str) or not isinstance(softmax, str):
            raise ActionError("flash_attention needs params {'scores', 'softmax', 'pv'} (kernel names; softmax may be '')")
        if kernel.name not in (scores, softmax, pv):
            raise ActionError(f"{kernel.name} is not part of the attention chain {scores}, {softmax}, {pv}")
        original = text
        text, analysis, one_pass_note = self._one_pass(text, analysis, softmax, target)
        module = c.parse(text)
        plan = self._plan(module, analysis, scores, softmax, pv)
        kdef, _ = c.locate(module, pv)
        taken = _names(kdef) | {n for n, _s, _k in plan.new_params} | set().union(set(), *[_names(s) for s in plan.hoisted + plan.in_loop])

        def fresh(base: str) -> str:
            name = next(n for n in (base, *(f"{base}_{i}" for i in range(2, 99))) if n not in taken)
            taken.add(name)
            return name

        m_i, l_i, m_new, alpha = fresh("m_i"), fresh("l_i"), fresh("m_new"), fresh("alpha")
        loop_targets = {parts[0] for st in plan.in_loop if (parts := _assign_parts(st)) is not None}
        qk = plan.scores_code if plan.scores_code in loop_targets else fresh("qk")
        p, acc, rows = plan.p_name, plan.acc, plan.rows
        scores_value = f"{_wrap(plan.scores_code)}.to(tl.float32)"
        if plan.transform is not None:  # what the softmax kernel did to the fp32 scores it loaded
            scores_value = plan.transform.replace("__mtmc_scores__", scores_value)
        scores_value = c.code(c.times_log2e(c.expr(scores_value)))  # base 2 from here on: exp2 is the cheap exponent
        online = [
            f"{qk} = tl.where({plan.key_mask}, {scores_value}, float(\"-inf\"))",
            f"{m_new} = tl.maximum({m_i}, tl.max({qk}, axis=1))",
            f"{alpha} = tl.math.exp2({m_i} - {m_new})",
            f"{p} = tl.math.exp2({qk} - {m_new}[:, None])",
            f"{l_i} = {l_i} * {alpha} + tl.sum({p}, axis=1)",
            f"{acc} = {acc} * {alpha}[:, None]",
            f"{m_i} = {m_new}",
        ]
        if plan.p_dtype:
            online.append(f"{p} = {p}.to({plan.p_dtype})")
        p_line = plan.p_stmt
        new_loop_body = []
        for st in plan.loop.body.body:
            if st is p_line:
                inserted = [*plan.in_loop, *(c.stmt(line + "\n") for line in online)]
                new_loop_body += [inserted[0].with_changes(leading_lines=st.leading_lines), *inserted[1:]]
            else:
                new_loop_body.append(st)
        new_loop = plan.loop.with_changes(body=plan.loop.body.with_changes(body=new_loop_body))
        if plan.loop_end is not None:  # causal: the blocks past the row block's last row are all masked
            bound = new_loop.iter.args[1]
            new_loop = new_loop.with_changes(iter=new_loop.iter.with_changes(args=[
                new_loop.iter.args[0], bound.with_changes(value=c.expr(f"tl.minimum({c.code(bound.value)}, {plan.loop_end})")),
                *new_loop.iter.args[2:]]))
        body = []
        for st in kdef.body.body:
            if st is plan.loop:
                block = [*plan.hoisted, c.stmt(f"{m_i} = tl.full(({rows},), float(\"-inf\"), dtype=tl.float32)\n"),
                         c.stmt(f"{l_i} = tl.zeros(({rows},), dtype=tl.float32)\n"), new_loop.with_changes(leading_lines=[])]
                body += [block[0].with_changes(leading_lines=st.leading_lines), *block[1:]]
                body.append(c.stmt(f"{acc} = {acc} / {l_i}[:, None]\n"))
            else:
                body.append(st)
        # Signature and launch: the probability pointer goes, the scores' inputs come in.
        pv_kernel = plan.pv
        launch = plan.launches[-1]
        call = launch.call
        gone = {plan.p_param, *plan.p_extra}
        params_ = [q for q in kdef.params.params if q.name.value not in gone]
        args = [a for a in call.args if c.arg_param(a, call, pv_kernel) not in gone]
        at = next((i for i, q in enumerate(params_) if q.default is not None or
                   any(a.keyword is not None and a.keyword.value == q.name.value for a in args)), len(params_))
        if len([a for a in args if a.keyword is None]) < at:
            raise ActionError(f"{pv}'s launch passes fewer positional arguments than its parameters before the keywords")
        plain = [(n, s) for n, s, k in plan.new_params if not k]
        const = [(n, s) for n, s, k in plan.new_params if k]
        new_params = [cst.Param(cst.Name(n)) for n, _s in plain] + [
            cst.Param(cst.Name(n), annotation=cst.Annotation(c.expr("tl.constexpr"))) for n, _s in const]
        new_args = [cst.Arg(c.expr(s)) for _n, s in plain]
        # The inserted names end like the line before them: a signature or launch written one group per
        # line gets the new group on a line of its own.
        if new_params and at > 0 and isinstance(params_[at - 1].comma, cst.Comma):
            new_params[-1] = new_params[-1].with_changes(comma=params_[at - 1].comma)
        if new_args and at > 0 and isinstance(args[at - 1].comma, cst.Comma):
            new_args[-1] = new_args[-1].with_changes(comma=args[at - 1].comma)
        params_ = params_[:at] + new_params + params_[at:]
        eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        args = args[:at] + new_args + args[at:] + [cst.Arg(c.expr(s), keyword=cst.Name(n), equal=eq) for n, s in const]
        if args and call.args:
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            args = [a.with_changes(comma=a.comma if isinstance(a.comma, cst.Comma) and a is not call.args[-1] else comma) for a in args[:-1]] + \
                [args[-1].with_changes(comma=call.args[-1].comma)]
        param_comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if params_:
            last = kdef.params.params[-1].comma
            params_ = [q.with_changes(comma=q.comma if isinstance(q.comma, cst.Comma) and q is not kdef.params.params[-1] else param_comma)
                       for q in params_[:-1]] + [params_[-1].with_changes(comma=last)]
        new_def = kdef.with_changes(params=kdef.params.with_changes(params=params_), body=kdef.body.with_changes(body=body))
        host = plan.host
        pairs: list = [(kdef, new_def), (call, call.with_changes(args=args))]
        removed_launches = [next(s for s in host.body.body if _call_of(s) is l.call) for l in plan.launches[:-1]]
        pairs += [(s, cst.RemovalSentinel.REMOVE) for s in removed_launches]
        # Shape arithmetic only the removed launches read (``grid = (...)`` of the scores kernel) goes with them.
        fused_reads = {n for _n, src, _k in plan.new_params for n in c.names_in(c.expr(src))}
        pairs += [(s, cst.RemovalSentinel.REMOVE) for s in _dead_with(host, removed_launches, fused_reads)]
        for b in plan.buffers:
            line = c.statement_holding(host, c.any_assignment(host, b))
            if line is None or len(line.body) != 1:
                raise ActionError(f"{b} is allocated in a statement that does more")
            pairs.append((line, cst.RemovalSentinel.REMOVE))
        module = c.replace_all(module, pairs)
        notes = [f"{', '.join(plan.buffers)} no longer allocated: the scores stay in registers",
                 "online softmax: the probabilities are rescaled when the row maximum grows, equal up to rounding"]
        for gone in (plan.scores.name, plan.softmax.name if plan.softmax else None):
            if gone is None:
                continue
            module, kept_because = _drop_unreferenced_def(module, gone)
            notes.append(f"{gone} stays defined: {kept_because}" if kept_because else f"{gone}'s definition is removed")
        fused = c.finish(text, module, f"fused attention into one flash kernel {pv}", notes)
        tile = params.get("tile")
        if tile is not None and tile not in SMALL_TILES:
            raise ActionError(f"flash_attention's tile is one of {', '.join(map(str, SMALL_TILES))}, not {tile}")
        tiles = ((tile, tile, 4),) if tile is not None else FLASH_TILES if self.tiles is None else self.tiles
        tiled, tile_note = gpu_tiles(fused.new_text, pv, target, tiles)
        notes = [*([one_pass_note] if one_pass_note else []), *fused.notes, tile_note]
        if self.mask_free_keys:  # after the tiles: the launch's EVEN_N reads the key block they set
            tiled, keys_note = even_keys(tiled, pv)
            notes.append(keys_note)
        return c.finish(original, c.parse(tiled), fused.summary, notes)


def _square_blocks(analysis: FileAnalysis, module: cst.Module, pv: str) -> bool:
    """Whether one host constant sets both the query and the key block of ``pv``'s launch (square tiles only)."""
    kernel = analysis.kernel(pv)
    if kernel is None:
        return False
    m, n = _query_and_key_blocks(c.tile_plan(analysis, kernel, module), module, pv)
    return m is not None and n is not None and _one_constant_for_both(module, kernel, m.name, n.name)


def _query_and_key_blocks(plan: c.TilePlan, module: cst.Module, kernel_name: str):
    """(query block, key block) of an attention kernel's tile plan; either None when absent. The key block is the
    one that steps the key loop: tile_plan may read it as a matmul's reduction block ("k"), and a head-dim
    constexpr named like a block (the tutorials' BLOCK_DMODEL) as the output's "n"."""
    by_role = {p.role: p for p in plan.params.values()}
    kdef, _ = c.locate(module, kernel_name)
    step = _key_loop_step(kdef)
    return by_role.get("m"), plan.params.get(step or "") or by_role.get("n") or by_role.get("k")


def _one_constant_for_both(module: cst.Module, kernel: Kernel, m: str, n: str) -> bool:
    """Whether a launch of ``kernel`` sets the blocks ``m`` and ``n`` from one and the same host binding."""
    _kdef, launches = c.locate(module, kernel.name)
    return any(c.binding_of(launch, kernel, m)[1] is c.binding_of(launch, kernel, n)[1] is not None for launch in launches)


def _wrap(code: str) -> str:
    return code if code.isidentifier() else f"({code})"


def _arange(expr, kernel: Kernel):
    ars = [s for s in expr.free_symbols if ".ar:" in s.name]
    if len(ars) != 1 or _sympy().expand(expr).coeff(ars[0]) != 1:
        raise ActionError(f"{kernel.name if kernel else 'a kernel'} indexes the buffer by more than one arange per axis")
    return ars[0]


def _role_of(terms: dict, kernel: Kernel | None) -> dict:
    """monomial -> "row" (arange on axis 0), "key" (axis 1) or "batchN" (program ids only)."""
    out = {}
    batch = 0
    for monomial, coeff in sorted(terms.items(), key=lambda t: str(t[0])):
        axes = {s.name.rsplit("@", 1)[1] for s in coeff.free_symbols if ".ar:" in s.name and "@" in s.name}
        plain = [s for s in coeff.free_symbols if ".ar:" in s.name and "@" not in s.name]
        if plain or len(axes) > 1:
            raise ActionError("the buffer index mixes axes")
        if axes == {"0"}:
            role = "row"
        elif axes == {"1"}:
            role = "key"
        else:
            if any(_is_root(s) and ".pid" not in s.name for s in coeff.free_symbols):
                raise ActionError("a buffer index term depends on the loop without an arange")
            role = f"batch{batch}"
            batch += 1
        if role in out.values():
            raise ActionError(f"the buffer index has two {role} terms")
        out[monomial] = role
    return out


def _roles(terms: dict, kernel: Kernel) -> dict:
    return {role: terms[m] for m, role in _role_of(terms, kernel).items()}


def _apply(sigma: dict, expr, param_map: dict[str, str] | None = None):
    """The scores kernel's index expression in the P @ V kernel's roots: sigma for rows, keys and batch;
    other aranges and block sizes by the parameter map (a head-dim arange stays an arange)."""
    sp = _sympy()
    param_map = param_map or {}
    replace = {}
    for s in expr.free_symbols:
        base, _, axis = s.name.partition("@")
        root = sp.Symbol(base)
        if root in sigma:
            image = sigma[root]
            if axis:
                image = image.xreplace({t: sp.Symbol(f"{t.name}@{axis}") for t in image.free_symbols if ".ar:" in t.name and "@" not in t.name})
            replace[s] = image
        elif base.startswith(("k1.ar:", "k1.blk:")):
            kind, name = base[3:].split(":", 1)
            replace[s] = sp.Symbol(f"k3.{kind}:{param_map.get(name, name)}" + (f"@{axis}" if axis else ""))
        elif s.name.startswith("k1."):
            raise ActionError(f"the scores kernel's {base[3:]} has no counterpart in the P @ V kernel")
    return expr.xreplace(replace)


def _code_of(expr, body: _Body, kernel: Kernel) -> str:
    """A sympy index expression of the P @ V kernel as Triton code."""
    sp = _sympy()
    expr = sp.expand(expr)
    if isinstance(expr, sp.Add):
        return "(" + " + ".join(_code_of(t, body, kernel) for t in expr.args) + ")"
    if isinstance(expr, sp.Integer):
        return str(int(expr))
    if isinstance(expr, sp.Symbol):
        tail = expr.name.split(".", 1)[1]
        if tail.startswith("pid"):
            return f"tl.program_id({tail[3:]})"
        if tail == "loop":
            return body.loop_var
        if tail.startswith("ar:"):
            return f"tl.arange(0, {tail[3:].split('@')[0]})"
        if tail.startswith("blk:"):
            return tail[4:]
        raise ActionError("an index needs a host value inside the kernel")
    if isinstance(expr, sp.Mul):
        num, den = expr.as_numer_denom()
        if den != 1:
            return f"({_code_of(num, body, kernel)} // {_code_of(den, body, kernel)})"
        return " * ".join(_code_of(t, body, kernel) for t in expr.args)
    raise ActionError(f"cannot write the index {expr} as Triton code")


class _Substitute(cst.CSTTransformer):
    """The scores kernel's code in the P @ V kernel's names: program ids, aranges and the loop variable by sigma."""

    def __init__(self, names, sigma, renames, param_map, body: _Body, kernel: Kernel, loop_var, loop_image):
        self.names, self.sigma, self.renames, self.param_map = names, sigma, renames, param_map
        self.body, self.kernel, self.loop_var, self.loop_image = body, kernel, loop_var, loop_image
        self.error: str | None = None

    def leave_Name(self, original_node, updated_node):
        if self.loop_var is not None and updated_node.value == self.loop_var:
            if self.loop_image is None:
                self.error = "the scores kernel's loop variable has no counterpart"
                return updated_node
            return c.expr(self.loop_image)
        found = self.names.get(updated_node.value)
        return updated_node.with_changes(value=found) if found else updated_node

    def leave_Arg(self, original_node, updated_node):
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_Attribute(self, original_node, updated_node):
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Param(self, original_node, updated_node):
        return updated_node

    def leave_Call(self, original_node, updated_node):
        sp = _sympy()
        func = _dotted(original_node.func)
        args = [a.value for a in original_node.args]
        root = None
        if func == "tl.program_id" and len(args) == 1 and isinstance(args[0], cst.Integer):
            root = sp.Symbol(f"k1.pid{args[0].value}")
        elif func == "tl.arange" and len(args) == 2:
            root = sp.Symbol(f"k1.ar:{c.flat(args[1])}")
        if root is None:
            return updated_node
        if root not in self.sigma:
            if func == "tl.arange":
                return updated_node  # a head-dim arange: its size parameter is renamed like any other
            self.error = f"the scores kernel uses {c.code(original_node)} for something other than rows, keys or batch"
            return updated_node
        try:
            return c.expr(_code_of(self.sigma[root], self.body, self.kernel))
        except ActionError as exc:
            self.error = str(exc)
            return updated_node


# ---- GPU tiles for the fused kernel ----------------------------------------------------------------
# (BLOCK_M, BLOCK_N, num_warps), largest first. The chain's own tiles (16 x 16 in naive code) left the
# flash kernel 2.9-12.9x slower than 64 x 64 on the H200 (benchmarks/results/h200/flash_attention.md).
# 128 query rows x 64 keys is the tutorial's Ampere/Hopper tile. Compiled for sm_90 (ptxas, the corpus's
# fused kernels): over 4 warps it spills at head dim 128 (fp16: 255 registers, 260 B), over 8 warps it
# does not (170 registers; 117 at head dim 64).
FLASH_TILES = ((128, 64, 8), (64, 64, 4))
# Square tiles offered beside them for short sequences and few heads (held-out, session 11: the 128 x 64 flash
# kernel of a small three-kernel chain ran 0.28x of the chain).
SMALL_TILES = (64, 32)
# The head dim is a run-time value: budgets assume the common largest, as tiling does.
HEAD_DIM_GUESS = 128
_SPLIT = "  # __mtmc_split_{}__"
_TUPLE_CONSTANTS = re.compile(r"^([ \t]*)(\w+(?:[ \t]*,[ \t]*\w+)+)[ \t]*=[ \t]*(\d+(?:[ \t]*,[ \t]*\d+)+)([ \t]*#.*)?$", re.MULTILINE)


def flash_shared_bytes(bm: int, bn: int, head_dim: int, elem: int, stages: int) -> int:
    """Shared memory of one flash program: the query tile, the K and V tiles once per stage, P for its dot."""
    return (bm * head_dim + 2 * max(stages, 1) * bn * head_dim + bm * bn) * elem


def choose_flash_tile(target: GpuProfile, elem: int, warps_now: int, warps_settable: bool, square: bool,
                      tiles=FLASH_TILES) -> tuple[int, int, int, int | None] | None:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages or None to leave it) that fits the target, or None."""
    stage_options = (3, 2) if target.has("cp.async") else (None,)  # without async copies nothing is staged
    for bm, bn, warps in tiles:
        warps = max(warps, warps_now)  # never fewer warps than the launch already asks for
        if (square and bm != bn) or (warps != warps_now and not warps_settable):
            continue
        if bm * HEAD_DIM_GUESS // (32 * warps) > c.MAX_ACC_REGS_PER_THREAD:
            continue
        for stages in stage_options:
            if flash_shared_bytes(bm, bn, HEAD_DIM_GUESS, elem, stages or 1) <= target.max_shared_per_block:
                return bm, bn, warps, stages
    return None


def _key_loop_step(kdef: cst.FunctionDef) -> str | None:
    """The name stepping the kernel's top-level key loop (``for j in range(0, N, BLOCK_N)``), or None."""
    for st in kdef.body.body:
        if isinstance(st, cst.For) and isinstance(st.iter, cst.Call) and _dotted(st.iter.func) in ("range", "tl.range"):
            args = st.iter.args
            if len(args) >= 3 and args[2].keyword is None and isinstance(c.unparen(args[2].value), cst.Name):
                return c.unparen(args[2].value).value
    return None


def gpu_tiles(text: str, pv: str, target: GpuProfile, tiles=FLASH_TILES) -> tuple[str, str]:
    """The fused kernel's launch with tiles for the target (``tiles`` to choose from) and a note saying what
    was chosen or why the chain's tiles stay. Changed only where tiling could change them: every access
    masked and the grid derived from the blocks, so the result is the same at any tile."""
    split, joins = _split_tuple_constants(text)
    analysis = analyze(split)
    kernel = analysis.kernel(pv)
    module = c.parse(split)
    plan = c.tile_plan(analysis, kernel, module)
    m, n = _query_and_key_blocks(plan, module, pv)
    if m is None or n is None:
        return text, f"{pv}'s tiles kept: no query and key block parameters"
    if not (m.tunable and n.tunable) or not isinstance(m.value, int) or not isinstance(n.value, int):
        return text, f"{pv}'s tiles kept: {m.reason or n.reason or 'the blocks are not constants'}"
    square = _one_constant_for_both(module, kernel, m.name, n.name)  # square tiles only
    choice = choose_flash_tile(target, c.element_bytes(text), plan.num_warps, plan.warps_settable, square, tiles)
    if choice is None:
        return text, f"{pv}'s tiles kept at {m.value}x{n.value}: no larger flash tile fits {target.name}"
    bm, bn, warps, stages = choice
    if m.value * n.value >= bm * bn:
        return text, f"{pv}'s tiles kept at {m.value}x{n.value} (already as large as {bm}x{bn})"
    said = [f"{m.name}={bm}", f"{n.name}={bn}"]
    try:
        module = c.set_constexpr(module, analysis, kernel, {m.name: bm, n.name: bn})
        if warps != plan.num_warps:
            module = c.set_launch_option(module, pv, "num_warps", warps)
            said.append(f"num_warps={warps}")
        if stages is not None and stages != (plan.num_stages or c.DEFAULT_NUM_STAGES):
            module = c.set_launch_option(module, pv, "num_stages", stages)
            said.append(f"num_stages={stages}")
        tiled = _join_tuple_constants(module.code, joins)
    except ActionError as exc:
        return text, f"{pv}'s tiles kept at {m.value}x{n.value}: {exc}"
    return tiled, (
        f"{pv} tiled for {target.name}: {', '.join(said)} (was {m.value}x{n.value}; shared memory checked for "
        f"a head dim up to {HEAD_DIM_GUESS})")


# ---- key masks only where the last key block can be partial ------------------------------------------
# Triton's matmul and attention code branch on an EVEN constexpr: when the key length is a multiple of the
# key block every key of every block exists, the key masks are all true, and the loads and the score mask
# can go. H200, 64x4096x128 fp16 (benchmarks/results/h200/suite_tiles): the fused kernel with the key mask in
# every block 1.28 ms, without 1.22 ms (1.05x; 64x64: 1.07x). In the same step as the fusion, since a loop
# that keeps only measurably faster steps could reject a 5% step on its own as noise. Compiled for sm_90
# (``mtmc analyze --compile``): both branches build with the masked kernel's shared memory (suite attention
# 128x64 w8 s3 at head dim 128: 49,152 B; 180 registers masked, 152 in the EVEN_N branch).
EVEN_KEYS = ("EVEN_N", "EVEN_KEYS")  # the constexpr's name: the first the kernel does not use


def even_keys(text: str, kernel_name: str) -> tuple[str, str]:
    """``text`` with ``kernel_name``'s key loop (``for j in range(0, N, BLOCK)``, the end may be
    ``tl.minimum(N, ...)``) branching on a new constexpr ``EVEN_N`` the launch computes as ``N % BLOCK == 0``:
    ``if EVEN_N:`` the loop's statements without their key masks (``j + tl.arange(0, BLOCK) < N``: loads and
    stores unmasked on keys, ``tl.where`` on them dropped), ``else:`` as they were; and a note. Other masks
    (causal, rows, per-batch lengths, the head dim) stay in both branches. Unchanged, with the reason in the
    note, when there is no such loop or no key mask in it or the launch's values cannot be read."""
    try:
        return _even_keys(text, kernel_name)
    except ActionError as exc:
        return text, f"{kernel_name}'s key masks kept in every block: {exc}"


def _even_keys(text: str, kernel_name: str) -> tuple[str, str]:
    sp = _sympy()
    analysis = analyze(text)
    kernel = analysis.kernel(kernel_name)
    module = c.parse(text)
    if kernel is None:
        raise ActionError("no such kernel")
    if kernel.is_autotuned or kernel.heuristics:
        raise ActionError("it is autotuned or has @triton.heuristics")
    kdef, launches = c.locate(module, kernel_name)
    if len(launches) != 1:
        raise ActionError("it is not launched once in this file")
    used = c.names_in(kdef)
    flag = next((n for n in EVEN_KEYS if n not in used and kernel.param(n) is None), None)
    if flag is None:
        raise ActionError(f"the names {', '.join(EVEN_KEYS)} are taken")
    loops = [st for st in kdef.body.body if isinstance(st, cst.For)]
    if len(loops) != 1 or not isinstance(loops[0].target, cst.Name) or loops[0].orelse is not None:
        raise ActionError("no single top-level key loop")
    loop = loops[0]
    iter_ = loop.iter
    args = [a.value for a in iter_.args] if isinstance(iter_, cst.Call) else []
    if not (isinstance(iter_, cst.Call) and _dotted(iter_.func) in ("range", "tl.range")) or len(args) < 3 \
            or any(a.keyword is not None for a in iter_.args[:3]) or c.flat(args[0]) != "0":
        raise ActionError("the key loop is not range(0, N, BLOCK)")
    end, step = c.unparen(args[1]), c.unparen(args[2])
    if isinstance(end, cst.Call) and _dotted(end.func) == "tl.minimum" and len(end.args) == 2:
        end = c.unparen(end.args[0].value)  # a causal loop stops earlier: its keys are below N all the same
    size = kernel.param(end.value) if isinstance(end, cst.Name) else None
    block = kernel.param(step.value) if isinstance(step, cst.Name) else None
    if size is None or size.kind != "scalar" or block is None or block.kind != "constexpr":
        raise ActionError("the key loop does not step a length parameter by a constexpr block")
    var = loop.target.value
    if {size.name, block.name} & c.bound_names(kdef.body) or var in c.bound_names(list(loop.body.body)):
        raise ActionError(f"{size.name}, {block.name} or {var} is reassigned in the kernel")
    # ``N % BLOCK == 0`` spelled with what the launch passes, as mask_free_k's EVEN_K is.
    launch_value, literal = c.divisible_at_launch(launches[0], kernel, size.name, block.name)
    # Index arithmetic: scalars by what the launch passes (two parameters given the same value are one length),
    # the loop variable as a multiple of the block (it starts at 0 and steps by it).
    sources = c.launch_sources(launches[0], kernel)
    params: dict = {}
    for p in kernel.params:
        if p.kind == "pointer":
            params[p.name] = sp.Symbol(f"k.ptr:{p.name}")
        elif p.kind == "constexpr":
            params[p.name] = sp.Symbol(f"k.blk:{p.name}")
        else:
            params[p.name] = sp.Symbol(f"h:{sources.get(p.name, '?' + p.name)}")
    index = _Index("k.", params)
    blk = params[block.name]
    key_mask = sp.expand(blk * sp.Symbol("k.j") + index.sym(f"ar:{block.name}") - params[size.name])
    for st in kdef.body.body[:kdef.body.body.index(loop)]:
        parts = _assign_parts(st)
        if parts is not None and not parts[2]:
            index.assign(parts[0], parts[1])
        else:
            for name in c.bound_names(st):
                index.env.pop(name, None)
    for name in c.bound_names(list(loop.body.body)):
        index.env.pop(name, None)  # read before their assignment they hold the last block's values
    index.env[var] = blk * sp.Symbol("k.j")

    def is_key_mask(conjunct: cst.BaseExpression) -> bool:
        if not (isinstance(conjunct, cst.Comparison) and len(conjunct.comparisons) == 1
                and isinstance(conjunct.comparisons[0].operator, cst.LessThan)):
            return False
        left, right = index.of(conjunct.left), index.of(conjunct.comparisons[0].comparator)
        if left is None or right is None:
            return False
        return sp.expand(_divide_out(_strip_axes(left) - _strip_axes(right)) - key_mask) == 0

    def without_key_masks(node: cst.BaseStatement) -> cst.BaseStatement | None:
        """The statement with its key conjuncts dropped (None for a ``x = x`` left over, the node when unchanged)."""
        dropper = _DropKeyMasks(is_key_mask)
        new = node.visit(dropper)
        if not dropper.dropped:
            return node
        parts = _assign_parts(new)
        if parts is not None and not parts[2] and c.flat(c.unparen(parts[1])) == parts[0]:
            return None
        small = new.body[0]
        if isinstance(small, cst.Assign) and getattr(small.value, "lpar", None):  # ``s = (s * LOG2E)``: no parentheses needed
            new = new.with_changes(body=[small.with_changes(value=c.unparen(small.value))])
        return new

    def block_of(statements) -> tuple[list[cst.BaseStatement], int]:
        out: list[cst.BaseStatement] = []
        run: list[tuple[cst.BaseStatement, cst.BaseStatement | None]] = []
        changed = 0

        def flush() -> None:
            if not run:
                return
            first = run[0][0]
            masked = [run[0][0].with_changes(leading_lines=[]), *(o for o, _e in run[1:])]
            evens = [e for _o, e in run if e is not None]
            body = cst.IndentedBlock(body=masked)
            if evens:
                evens[0] = evens[0].with_changes(leading_lines=[])
                branch = cst.If(test=cst.Name(flag), body=cst.IndentedBlock(body=evens), orelse=cst.Else(body=body),
                                leading_lines=first.leading_lines)
            else:
                branch = cst.If(test=c.expr(f"not {flag}"), body=body, leading_lines=first.leading_lines)
            out.append(branch)
            run.clear()

        for st in statements:
            if isinstance(st, cst.SimpleStatementLine):
                even = without_key_masks(st)
                parts = _assign_parts(st)
                if even is not st:
                    run.append((st, even))
                    changed += 1
                else:
                    flush()
                    out.append(st)
                if parts is not None and not parts[2]:
                    index.assign(parts[0], parts[1])
                else:
                    for name in c.bound_names(st):
                        index.env.pop(name, None)
                continue
            flush()
            for name in c.bound_names(st):
                index.env.pop(name, None)
            if isinstance(st, cst.For) and st.orelse is None:  # a loop nested in the key loop (over the head dim)
                inner, count = block_of(st.body.body)
                changed += count
                out.append(st.with_changes(body=st.body.with_changes(body=inner)))
                for name in c.bound_names(st):
                    index.env.pop(name, None)
            else:
                out.append(st)
        flush()
        return out, changed

    new_body, changed = block_of(loop.body.body)
    if not changed:
        raise ActionError(f"no mask in the key loop is on its keys (`{var} + tl.arange(0, {block.name}) < {size.name}`)")
    new_loop = loop.with_changes(body=loop.body.with_changes(body=new_body))
    params_list = list(kdef.params.params)
    last = params_list[-1]
    params_list[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    params_list.append(cst.Param(cst.Name(flag), annotation=cst.Annotation(c.expr("tl.constexpr")), comma=last.comma))
    new_def = kdef.with_changes(params=kdef.params.with_changes(params=params_list),
                                body=kdef.body.with_changes(body=[new_loop if st is loop else st for st in kdef.body.body]))
    call = launches[0].call
    module = c.replace_all(module, [(kdef, new_def), (call, _with_flag(call, kernel, flag, launch_value))])
    note = (f"{kernel_name}'s key masks only where the last key block is partial: {flag}={launch_value} at the launch "
            f"({changed} masked statement{'s' if changed != 1 else ''} in an if {flag}/else)")
    if literal:
        note += f"; {flag} repeats the launch's literal {block.name}: change both together"
    return module.code, note


def _with_flag(call: cst.Call, kernel: Kernel, flag: str, value: str) -> cst.Call:
    """The launch with ``flag=value`` after its last kernel argument (before ``num_warps`` and the other options)."""
    args = list(call.args)
    at = next((i for i, a in enumerate(args) if a.keyword is not None and kernel.param(a.keyword.value) is None), None)
    if at is None:
        return c.set_kwarg(call, flag, c.expr(value))
    eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    new = cst.Arg(c.expr(value), keyword=cst.Name(flag), equal=eq, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    if at > 0 and isinstance(args[at - 1].comma, cst.Comma):
        new = new.with_changes(comma=args[at - 1].comma)  # the options keep their line
        args[at - 1] = args[at - 1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=args[:at] + [new] + args[at:])


def _divide_out(expr):
    """``floordiv(BLOCK * j, BLOCK)`` -> ``j``: a floor division that is exact (``k // BLOCK_K`` of the loop variable)."""
    sp = _sympy()
    floordiv = sp.Function("floordiv")

    def exact(a, b):
        quotient = sp.cancel(a / b)
        return quotient if sp.fraction(quotient)[1] == 1 else floordiv(a, b)

    return sp.expand(expr.replace(floordiv, exact))


def _is_number(node: cst.BaseExpression) -> bool:
    node = c.unparen(node)
    if isinstance(node, cst.UnaryOperation):
        node = c.unparen(node.expression)
    return isinstance(node, cst.Integer | cst.Float) or c.flat(node) in _NEG_INF or c.flat(node) in ('float("inf")', "float('inf')")


class _DropKeyMasks(cst.CSTTransformer):
    """Key conjuncts out of ``tl.load``/``tl.store`` masks and ``tl.where`` conditions; a where left without a
    condition is its value, a load or store without a mask loses ``mask`` (and ``other``)."""

    def __init__(self, is_key_mask):
        self.is_key_mask = is_key_mask
        self.dropped = 0

    def _rest(self, mask: cst.BaseExpression) -> list[cst.BaseExpression] | None:
        """The conjuncts that stay (None when none is a key mask)."""
        parts = c.conjuncts(mask)
        kept = [p for p in parts if not self.is_key_mask(p)]
        if len(kept) == len(parts):
            return None
        self.dropped += len(parts) - len(kept)
        return kept

    @staticmethod
    def _and(parts: list[cst.BaseExpression]) -> cst.BaseExpression:
        if len(parts) == 1:
            return parts[0]
        return c.expr(" & ".join(f"({c.code(p)})" for p in parts))

    def leave_Call(self, original_node, updated_node):
        func = _dotted(original_node.func)
        if func == "tl.where" and len(updated_node.args) == 3 and all(a.keyword is None for a in updated_node.args):
            if _is_number(updated_node.args[1].value):
                return updated_node  # without the where a constant would lose the mask's shape
            rest = self._rest(original_node.args[0].value)
            if rest is None:
                return updated_node
            if not rest:
                value = updated_node.args[1].value
                return value if isinstance(value, cst.Name | cst.Call | cst.Attribute | cst.Subscript) \
                    else value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return updated_node.with_changes(args=[updated_node.args[0].with_changes(value=self._and(rest)), *updated_node.args[1:]])
        if func not in ("tl.load", "tl.store"):
            return updated_node
        position = 1 if func == "tl.load" else 2
        args = list(updated_node.args)
        at = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "mask"), None)
        if at is None and len(args) > position and all(a.keyword is None for a in args[:position + 1]):
            at = position
        if at is None or any(a.star for a in args):
            return updated_node
        rest = self._rest(original_node.args[at].value)
        if rest is None:
            return updated_node
        if rest:
            args[at] = args[at].with_changes(value=self._and(rest))
            return updated_node.with_changes(args=args)
        drop = {at}
        if func == "tl.load":  # ``other`` only fills masked-out lanes
            drop |= {i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "other"}
            if args[at].keyword is None and len(args) > at + 1 and args[at + 1].keyword is None:
                drop.add(at + 1)
        if args[at].keyword is None and any(i > at and a.keyword is None and i not in drop for i, a in enumerate(args)):
            raise ActionError(f"`{c.code(original_node)[:60]}` passes arguments after its mask by position")
        kept = [a for i, a in enumerate(args) if i not in drop]
        kept[-1] = kept[-1].with_changes(comma=args[-1].comma)
        return updated_node.with_changes(args=kept)


def _split_tuple_constants(text: str) -> tuple[str, list[str]]:
    """``BLOCK_M, BLOCK_N = 16, 16`` as one marked line per name, which tile_plan and set_constexpr read;
    the comments of the lines split, for ``_join_tuple_constants``."""
    joins: list[str] = []

    def split(match: re.Match) -> str:
        names = [x.strip() for x in match[2].split(",")]
        values = [x.strip() for x in match[3].split(",")]
        if len(names) != len(values) or not any(c.is_block_name(name) for name in names):
            return match[0]
        joins.append(match[4] or "")
        marker = _SPLIT.format(len(joins) - 1)
        return "\n".join(f"{match[1]}{name} = {value}{marker}" for name, value in zip(names, values))

    return _TUPLE_CONSTANTS.sub(split, text), joins


def _join_tuple_constants(text: str, joins: list[str]) -> str:
    """The marked lines of ``_split_tuple_constants`` as one tuple assignment again (with their new values)."""
    lines = text.split("\n")
    for index, comment in enumerate(joins):
        marker = _SPLIT.format(index)
        at = [k for k, line in enumerate(lines) if line.endswith(marker)]
        parts = [re.match(r"([ \t]*)(\w+) = (.+)$", lines[k][:-len(marker)]) for k in at]
        if not at or at[-1] - at[0] != len(at) - 1 or not all(parts):
            raise ActionError("could not rejoin the block constants split for tiling")
        joined = f"{parts[0][1]}{', '.join(p[2] for p in parts)} = {', '.join(p[3] for p in parts)}{comment}"
        lines[at[0]:at[-1] + 1] = [joined]
    return "\n".join(lines)


ACTION = FlashAttention()
