'''Tensor descriptors: the K loop's 2-D tile loads of a ``tl.dot`` become TMA loads (``tl.make_tensor_descriptor``) on sm_90+.

Hopper's Tensor Memory Accelerator copies a whole tile from global to shared memory in one instruction,
with no per-element address or mask arithmetic in the registers of the program; tiles that reach past
the tensor's edge are filled with zeros, which is what a load masked on the tensor's bounds with
``other=0`` gives. On an H200 an fp16 8192x8192x8192 matmul written with descriptors ran 1.12x faster
than the same kernel with pointer loads (``benchmarks/suite_tiles_gpu.py``, ``TMA descriptors``).
Each rewritten operand gets one descriptor before the loop::

    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    ...
        a = a_desc.load([pid_m * BLOCK_M, k])

and an operand whose unit-stride dimension is the tile's first (B stored (N, K)) is loaded
``[BLOCK_N, BLOCK_K]`` and transposed (``.T``). When the kernel's one ``tl.store`` is a plain tile store
after the loop (inline pointer, tile-aligned offsets, unit column stride, masked on both bounds, no
hints) it becomes ``c_desc.store([...], value)`` too (TMA writes nothing past the edges; the store
casts to the output's type as ``tl.store`` does).
Device-side descriptors need memory for the descriptor: the edit adds a module-level allocator and
``triton.set_allocator`` once (the spelling of the GPU run).

Semantics are kept for every input: the descriptors are taken under a new constexpr ``USE_TMA`` that
each launch computes with ``_tma_ready`` (added once per file) from what it passes: the unit-stride
argument is 1, and the base pointer and every other stride (the row stride; a batch offset's factors)
are 16-byte aligned, which TMA needs; otherwise the original pointer accesses run (an ``else``
branch). Compile diagnostics compile ``USE_TMA`` as False (compile/plan.py); the tests compile both.

Offered on targets with ``sm_90`` or newer, for a top-level ``range(0, K, BLOCK_K)`` (or
``range(0, tl.cdiv(K, BLOCK_K))``) loop whose ``tl.dot`` operands are each loaded in the loop from a
pointer ``base + rows[:, None] * stride_0 + cols[None, :] * stride_1`` (inline, or a name assigned once
and not stepped with ``+=``), where each offset vector is ``start + tl.arange(0, BLOCK)``: the K one
starts at the loop's ``k`` (``k * BLOCK_K``), the other at ``pid * BLOCK`` (tile aligned). The mask
may only bound those offsets (``rows[:, None] < M``), ``other`` must be zero, and one dimension must
have unit stride: written without a stride, or a stride argument every launch passes as
``t.stride(-1)`` or as the last ``t.stride(i)`` it passes for ``t`` (descriptors need a compile-time
unit innermost stride: they spell it ``1``, and ``_tma_ready`` checks the argument). The unit-stride block must be at least 16 bytes wide
(smallest torch dtype the file names) at every launch and autotune config.

Example: kernel=mm_kernel target=h100 params={}

```python before
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b, c, M, N, K):
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
```

```python after
def _tma_ready(tensor, unit_stride, *strides):
    """Whether TMA reads ``tensor`` as the kernel does: unit innermost stride, 16-byte-aligned base and strides."""
    return unit_stride == 1 and tensor.data_ptr() % 16 == 0 and all(
        stride * tensor.element_size() % 16 == 0 for stride in strides)


def _tma_allocator(size: int, alignment: int, stream):
    """Global memory for the device-side TMA descriptors."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


triton.set_allocator(_tma_allocator)


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    for k in range(0, K, BLOCK_K):
        if USE_TMA:
            a = a_desc.load([tl.program_id(0) * BLOCK_M, k])
            b = b_desc.load([k, tl.program_id(1) * BLOCK_N])
        else:
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    if USE_TMA:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
        c_desc.store([tl.program_id(0) * BLOCK_M, tl.program_id(1) * BLOCK_N], acc)
    else:
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b, c, M, N, K):
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, USE_TMA=_tma_ready(a, 1, K) and _tma_ready(b, 1, N) and _tma_ready(c, 1, N))
```
'''

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .mask_free_k import MaskFreeK

ALLOCATOR = "_tma_allocator"
READY = "_tma_ready"  # the host check of what TMA needs
FLAG = "USE_TMA"  # the constexpr that picks descriptors (True) or the original pointer accesses
MIN_ARCH = 90  # TMA: Hopper and newer
MIN_INNER_BYTES = 16  # a descriptor's block is at least 16 bytes wide in its unit-stride dimension
_ZEROS = frozenset({"0", "0.0", "0.", "False"})
_UNIT_STRIDE = re.compile(r"^(\w+)\.stride\(([1-9]|-1)\)$")


@dataclass
class _Axis:
    """One dimension of a loaded tile: ``start + tl.arange(0, block)`` times ``stride``."""

    start: str  # source of the scalar start (``pid_m * BLOCK_M``, ``k``)
    block: str
    stride: str | None  # None: unit stride written as no stride at all
    size: str | None = None  # the tensor's extent in this dimension (the mask's bound)


@dataclass
class _Operand:
    """One ``tl.dot`` operand loaded in the K loop (or the output tile stored after it), and what its descriptor reads."""

    name: str
    statement: cst.SimpleStatementLine
    load: cst.Call
    base: str
    axes: list[_Axis]  # the tile's dimensions: [rows ([:, None]), cols ([None, :])]
    unit: int  # the dimension with unit stride (1: row-major tile, 0: transposed)
    pointer_statement: cst.SimpleStatementLine | None  # a pointer name's own line, dead after the rewrite
    desc: str = ""
    value: cst.BaseExpression | None = None  # what the output tile's store writes


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    loop: cst.For
    operands: list[_Operand]
    language: str
    allocator: bool  # the file needs the allocator and set_allocator
    store: _Operand | None = None  # the output tile's store, when it is a plain masked tile store too
    launch_flags: list[str] = field(default_factory=list)  # per launch: the USE_TMA expression
    helper: bool = True  # the file needs the _tma_ready function
    tiles: cst.For | None = None  # a persistent kernel's tile loop around the K loop
    hoisted: bool = False  # the descriptors are made once, before the tile loop (they read nothing of the tile)


def _terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The summands of ``a + b + c`` (through parentheses)."""
    node = c.unparen(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _terms(node.left) + _terms(node.right)
    return [node]


class TensorDescriptor:
    name = "tensor_descriptor"
    # TensorCore: it changes how the tensor cores' operands reach shared memory (the TMA unit instead of
    # per-thread loads); it adds no stages (Pipelining), tiles (Tiling) or order (Reordering).
    kind = "TensorCore"
    changes_numerics = False  # the same tiles, zeros past the edges as the masks' other=0
    # A new constexpr every launch computes: a kernel another module launches is not edited.
    keeps_interface = False
    pays_with = frozenset({"persistent"})  # see Persistent.pays_with
    max_changed_lines = 50  # host check and allocator (10), flag, descriptors, the loads' and store's if/else (multi-line loads re-indented)

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> _Plan:
        if target.arch < MIN_ARCH:
            raise ActionError(f"TMA tensor descriptors need sm_{MIN_ARCH} or newer; {target.name} is {target.sm_name}")
        roots = c.language_roots(analysis)
        if not roots:
            raise ActionError("the file does not import triton.language")
        if not kernel.calls_of("dot"):
            raise ActionError("no tl.dot in the kernel")
        if kernel.calls_of("make_tensor_descriptor"):
            raise ActionError(f"{kernel.name} already makes tensor descriptors")
        kdef, launches = c.locate(module, kernel.name)
        if any(c.is_call(call, "dot", roots) and c.exact_dot(call) for call in c.calls_in(kdef)):
            # An IEEE fp32 product runs on FMA units, not on wgmma, which TMA's shared tiles feed; on the H200 the
            # engine's edit of such a kernel (wild dev mm_fp32_ieee_test) was also rejected for wrong results.
            raise ActionError("a tl.dot pinned to input_precision=\"ieee\" runs on FMA units: TMA tiles feed nothing faster")
        body = list(kdef.body.body)
        loops = [s for s in body if isinstance(s, cst.For) and c.contains(s, cst.Call, lambda n: c.is_call(n, "dot", roots))]
        tiles = loops[0] if len(loops) == 1 and _is_tile_loop(loops[0], roots) else None
        if tiles is not None:
            # A persistent kernel: the K loop is in the tile loop, whose statements run before it, after the kernel's
            # own. ``body`` is that flat order; the tile loop's counter is no name the descriptors may read.
            inner = list(tiles.body.body)
            body = body[:body.index(tiles)] + inner
            loops = [s for s in inner if isinstance(s, cst.For) and c.contains(s, cst.Call, lambda n: c.is_call(n, "dot", roots))]
        if len(loops) != 1:
            raise ActionError("the kernel has no single top-level loop that feeds tl.dot" if not loops
                              else "more than one top-level loop feeds tl.dot")
        loop = loops[0]
        size_k, block_k, kterm, var = MaskFreeK._loop_shape(loop, kernel, roots)
        if var in c.bound_names(list(loop.body.body)) or {size_k, block_k} & c.bound_names(body):
            raise ActionError(f"the loop variable {var}, {size_k} or {block_k} is reassigned in the kernel")
        names = self._dot_operands(loop, roots)
        operands = [self._operand(name, loop, kdef, body, kernel, roots, (size_k, block_k, kterm, var), launches, analysis)
                    for name in names]
        taken = c.names_in(kdef) | {p.name for p in kernel.params}
        for op in operands:
            op.desc = next((n for n in (f"{op.name}_desc", f"{op.name}_tma_desc") if n not in taken), "")
            if not op.desc:
                raise ActionError(f"the kernel already uses {op.name}_desc and {op.name}_tma_desc")
            taken.add(op.desc)
        self._check_inner_blocks(operands, kernel, launches, analysis)
        try:
            store = self._store(kdef, body, loop, kernel, roots, launches, analysis, var)
        except ActionError:
            store = None  # the loads alone: the store stays a pointer store
        if store is not None:
            store.desc = next((n for n in (f"{store.name}_desc", f"{store.name}_tma_desc") if n not in taken), "")
            store = store if store.desc else None
        if kernel.param(FLAG) is not None or FLAG in c.names_in(kdef) or FLAG in kernel.heuristics:
            raise ActionError(f"{kernel.name} already uses the name {FLAG}")
        if not launches:
            raise ActionError(f"no launch of {kernel.name} in this file to compute {FLAG} at")
        if any(c.kwarg(launch.call, FLAG) is not None for launch in launches):
            raise ActionError(f"a launch already passes {FLAG}")
        descriptors = operands + ([store] if store is not None else [])
        try:
            flags = [" and ".join(self._ready(op, kernel, kdef, launch) for op in descriptors) for launch in launches]
        except ActionError:
            if store is None:
                raise
            store, descriptors = None, operands  # the loads alone, when only the output's check cannot be spelled
            flags = [" and ".join(self._ready(op, kernel, kdef, launch) for op in descriptors) for launch in launches]
        language = c.kernel_language(analysis, kernel) or min(roots)
        allocator = "set_allocator(" not in analysis.text
        if allocator:
            if ALLOCATOR in c.names_in(module):
                raise ActionError(f"the file already uses the name {ALLOCATOR}")
            if c.module_import_name(module, "torch") is None or c.module_import_name(module, "triton") is None:
                raise ActionError("the file does not import torch and triton by name: nowhere to spell triton.set_allocator")
        helper = not re.search(rf"^def {READY}\(", analysis.text, re.MULTILINE)
        if helper and READY in c.names_in(module):
            raise ActionError(f"the file already uses the name {READY}")
        hoisted = False
        if tiles is not None:
            per_tile = c.bound_names(list(tiles.body.body)) | c.names_in(tiles.target)
            hoisted = not any(c.names_in(c.expr(source)) & per_tile for op in descriptors
                              for source in [op.base] + [a.size for a in op.axes] + [a.stride for a in op.axes if a.stride])
        return _Plan(kdef, loop, operands, language, allocator, store, flags, helper, tiles, hoisted)

    @staticmethod
    def _ready(op: _Operand, kernel: Kernel, kdef: cst.FunctionDef, launch: c.LaunchNode) -> str:
        """``_tma_ready(tensor, unit stride, *strides)`` for ``op``'s descriptor, in the names of ``launch``'s caller:
        the unit stride is 1 and the base and every other stride (the row stride, a batch offset's) 16-byte aligned."""
        sources = c.launch_sources(launch, kernel)

        def host(source: str) -> str:
            """A kernel expression of parameters and literals, in the caller's names."""
            node = c.expr(source)
            names = c.names_in(node)
            missing = [n for n in names if kernel.param(n) is None or n not in sources]
            if missing:
                raise ActionError(f"`{source}` reads {', '.join(sorted(missing))}, not an argument every launch passes")
            if isinstance(node, cst.Name):
                return sources[node.value]
            return " ".join(c.code(c.substitute_names(node, {n: c.expr(f"({sources[n]})") if not sources[n].isidentifier()
                                                             else sources[n] for n in names})).split())

        pointers: list[str] = []
        strides = [host(op.axes[1 - op.unit].stride)]

        def walk(node: cst.BaseExpression, depth: int = 0) -> None:
            for term in _terms(node):
                if isinstance(term, cst.Name) and kernel.param(term.value) is not None:
                    if kernel.param(term.value).kind != "pointer":
                        raise ActionError(f"the base of {op.name}'s tile adds the argument {term.value}: its alignment "
                                          "is not known")
                    pointers.append(term.value)
                    continue
                if isinstance(term, cst.Name) and depth < 4 and (assign := c.any_assignment(kdef, term.value)) is not None:
                    walk(assign.value, depth + 1)
                    continue
                # A program's offset: local scalars (program ids, loop-free arithmetic) are whole numbers, so only the
                # arguments and literals they multiply decide the alignment.
                factors = _factors(term) or []
                kept = [f for f in factors if isinstance(f, cst.Integer) or kernel.param(c.code(f)) is not None]
                if not kept:
                    raise ActionError(f"the base of {op.name}'s tile adds `{c.code(term)}`: its alignment is not known")
                strides.append(host(" * ".join(c.code(f) for f in kept)))

        walk(c.expr(op.base))
        if len(pointers) != 1:
            raise ActionError(f"the base of {op.name}'s tile is not one pointer argument plus offsets")
        tensor = sources.get(pointers[0])
        if tensor is None:
            raise ActionError(f"a launch does not pass {pointers[0]}")
        unit = op.axes[op.unit].stride
        return f"{READY}({tensor}, {host(unit) if unit is not None else 1}, {', '.join(strides)})"

    def _store(self, kdef, body, loop, kernel, roots, launches, analysis, var) -> _Operand | None:
        """The kernel's one ``tl.store`` when it writes a whole output tile: a statement after the loop, an inline
        pointer to a 2-D tile at tile-aligned offsets with unit column stride, masked on both dimensions' bounds."""
        stores = [call for call in c.calls_in(kdef.body) if c.is_call(call, "store", roots)]
        if len(stores) != 1:
            return None
        call = stores[0]
        statement = next((s for s in body[body.index(loop) + 1:] if isinstance(s, cst.SimpleStatementLine)
                          and len(s.body) == 1 and isinstance(s.body[0], cst.Expr) and c.unparen(s.body[0].value) is call), None)
        positional = [a.value for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        named = dict(zip(("pointer", "value", "mask"), positional)) | keywords
        if statement is None or any(a.star for a in call.args) or set(named) != {"pointer", "value", "mask"} \
                or len(named) != len(call.args):
            return None  # cache or eviction hints, a missing mask, a store inside a branch
        pointer = c.unparen(named["pointer"])
        if isinstance(pointer, cst.Name):
            return None  # a named output pointer: left as it is
        resolve = self._resolver(kdef, roots)
        base, axes = self._decompose(pointer, resolve, roots, "the output")
        self._masks(named["mask"], axes, resolve, roots, "the output")
        if any(axis.size is None for axis in axes):
            return None  # only a store masked on both dimensions is a plain tile store
        for axis in axes:
            flat = c.flat(axis.start)
            if var in re.findall(r"\w+", axis.start) or not (flat == "0" or flat.endswith(f"*{axis.block}")
                                                              or flat.startswith(f"{axis.block}*")):
                return None
        if self._unit_dimension(axes, kernel, launches, "the output") != 1:
            return None
        stem = base[:-len("_ptr")] if base.endswith("_ptr") and base[:-len("_ptr")].isidentifier() else "out"
        store = _Operand(stem, statement, call, base, axes, 1, None, value=named["value"])
        self._check_inner_blocks([store], kernel, launches, analysis)
        # Everything the descriptor reads is set once before the store, outside the loop.
        ready = c.bound_names(body[:body.index(statement)]) - c.bound_names(list(loop.body.body))
        params = {p.name for p in kernel.params}
        local = c.bound_names(body) | params
        sources = [base] + [a.size for a in axes] + [a.start for a in axes] + [a.stride for a in axes if a.stride is not None]
        for source in sources:
            for n in c.names_in(c.expr(source)) & local:
                if n not in params and (n not in ready or c.any_assignment(kdef, n) is None):
                    return None
        return store

    @staticmethod
    def _dot_operands(loop: cst.For, roots: frozenset[str]) -> list[str]:
        """The names every ``tl.dot`` of the loop multiplies (``a``, ``b``; through ``tl.trans(b)`` / ``b.T``)."""
        found: list[str] = []
        for call in c.calls_in(loop.body):
            if not c.is_call(call, "dot", roots):
                continue
            args = [a.value for a in call.args if a.keyword is None][:2]
            keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            args += [keywords[k] for k in ("input", "other") if k in keywords]
            if len(args) != 2:
                raise ActionError("a tl.dot does not name both operands")
            for arg in args:
                arg = c.unparen(arg)
                if c.is_call(arg, "trans", roots) and len(arg.args) == 1:
                    arg = c.unparen(arg.args[0].value)
                elif isinstance(arg, cst.Attribute) and arg.attr.value == "T":
                    arg = c.unparen(arg.value)
                if not isinstance(arg, cst.Name):
                    raise ActionError(f"the tl.dot operand `{c.code(arg)}` is not a loaded name")
                if arg.value not in found:
                    found.append(arg.value)
        return found

    def _operand(self, name, loop, kdef, body, kernel, roots, shape, launches, analysis) -> _Operand:
        size_k, block_k, kterm, var = shape
        statements = [s for s in loop.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                      and isinstance(s.body[0], cst.Assign) and len(s.body[0].targets) == 1
                      and isinstance(s.body[0].targets[0].target, cst.Name) and s.body[0].targets[0].target.value == name]
        if len(statements) != 1 or c.any_assignment(kdef, name) is None:
            raise ActionError(f"the tl.dot operand {name} is not assigned once, on its own line, in the K loop")
        statement = statements[0]
        loads = [n for n in c.calls_in(statement) if c.is_call(n, "load", roots)]
        if len(loads) != 1:
            raise ActionError(f"{name} is not one tl.load")
        load = loads[0]
        value = c.unparen(statement.body[0].value)
        while value is not load:  # only ``tl.load(...)`` or ``tl.load(...).to(...)``
            if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("to", "cast")):
                raise ActionError(f"{name} = `{c.code(value)}` does more than load a tile")
            value = c.unparen(value.func.value)
        positional = [a for a in load.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in load.args if a.keyword is not None}
        if any(a.star for a in load.args) or len(positional) > 1 or set(keywords) - {"pointer", "mask", "other"}:
            raise ActionError(f"the load of {name} passes more than a pointer, a mask and other= "
                              f"({', '.join(sorted(set(keywords) - {'pointer', 'mask', 'other'})) or 'positional mask'})")
        pointer = positional[0].value if positional else keywords.get("pointer")
        other = keywords.get("other")
        if other is not None and c.flat(other) not in _ZEROS:
            raise ActionError(f"the load of {name} fills masked elements with {c.code(other)}, not zero as TMA does")
        index = list(loop.body.body).index(statement)
        pointer_statement = None
        if isinstance(c.unparen(pointer), cst.Name):
            pointer, pointer_statement = self._pointer_definition(c.unparen(pointer).value, kdef, loop, body, index, name)
        vectors = self._resolver(kdef, roots)
        base, axes = self._decompose(pointer, vectors, roots, name)
        self._masks(keywords.get("mask"), axes, vectors, roots, name)
        self._tile_aligned(axes, (size_k, block_k, kterm, var), name)
        self._sizes(kdef, axes, vectors, roots, size_k, var, name)
        unit = self._unit_dimension(axes, kernel, launches, name)
        self._in_scope(kdef, loop, body, index, var, name, base, axes)
        return _Operand(name, statement, load, base, axes, unit, pointer_statement)

    @staticmethod
    def _pointer_definition(pointer: str, kdef, loop, body, index, name) -> tuple[cst.BaseExpression, cst.SimpleStatementLine | None]:
        """A pointer name's single assignment (before the loop, or in it before the load) and its line."""
        assign = c.any_assignment(kdef, pointer)
        if assign is None:
            raise ActionError(f"the pointer {pointer} of {name} is not assigned once (a pointer stepped with += "
                              "is not understood: the descriptor loads at the loop's k)")
        if c.count_name(kdef, pointer) != 2:
            raise ActionError(f"the pointer {pointer} of {name} is used besides this load")
        for statements in (list(loop.body.body)[:index], body[:body.index(loop)]):
            for s in statements:
                if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and s.body[0] is assign:
                    return assign.value, s
        raise ActionError(f"the pointer {pointer} of {name} is not assigned on its own line before the load")

    @staticmethod
    def _resolver(kdef: cst.FunctionDef, roots: frozenset[str]):
        """``resolve(node) -> (start source, block) | None`` for ``start + tl.arange(0, BLOCK)`` offset vectors."""

        def resolve(node: cst.BaseExpression, depth: int = 0) -> tuple[str, str] | None:
            node = c.unparen(node)
            if depth > 4:
                return None
            if isinstance(node, cst.Name):
                assign = c.any_assignment(kdef, node.value)
                return resolve(assign.value, depth + 1) if assign is not None else None
            if c.is_call(node, "arange", roots):
                args = [a.value for a in node.args]
                if len(args) == 2 and c.flat(args[0]) == "0" and isinstance(args[1], cst.Name | cst.Integer) \
                        and all(a.keyword is None for a in node.args):
                    return "0", c.code(args[1])
                return None
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
                left, right = resolve(node.left, depth), resolve(node.right, depth)
                if (left is None) == (right is None):
                    return None
                vector, scalar = (left, node.right) if left is not None else (right, node.left)
                if vector_like(scalar, depth):
                    return None
                start = " ".join(c.code(c.unparen(scalar)).split())
                return (start if vector[0] == "0" else f"{start} + {vector[0]}"), vector[1]
            return None

        # Names bound otherwise than by one assignment may hold tensors, except the counters of range loops.
        bound = c.bound_names(kdef.body)
        counters = {n for loop in _range_loops(kdef, roots) for n in c.names_in(loop.target)}
        vectors: dict[str, bool] = {n: False for n in counters if c.any_assignment(kdef, n) is None}

        def vector_like(node: cst.BaseExpression, depth: int = 0) -> bool:
            """Whether ``node`` may be a tensor (an arange, a load, or a name bound to one): not a scalar start."""
            if c.contains(node, cst.Call, lambda n: c.is_call(n, "arange", roots) or c.is_call(n, "load", roots)):
                return True
            for name in c.names_in(node):
                if name not in vectors:
                    vectors[name] = True  # while it is being decided (a cycle), and when it is too deep to tell
                    assign = c.any_assignment(kdef, name)
                    vectors[name] = name in bound if assign is None else depth > 16 or vector_like(assign.value, depth + 1)
                if vectors[name]:
                    return True
            return False

        resolve.vector_like = vector_like
        return resolve

    @staticmethod
    def _decompose(pointer: cst.BaseExpression, resolve, roots, name) -> tuple[str, list[_Axis]]:
        """(base pointer source, [row axis, column axis]) of ``base + rows[:, None] * s0 + cols[None, :] * s1``."""
        bases: list[cst.BaseExpression] = []
        axes: dict[int, _Axis] = {}
        for term in _terms(pointer):
            factors = [term]
            if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
                factors = [c.unparen(term.left), c.unparen(term.right)]
            broadcasts = [(f, *c.broadcast_axis(f)) for f in factors]
            found = [(f, inner, dim) for f, inner, dim in broadcasts if dim is not None]
            if not found:
                if resolve.vector_like(term, 0):
                    raise ActionError(f"the pointer of {name} adds `{c.code(term)}`, not a [:, None] or [None, :] offset")
                bases.append(term)
                continue
            if len(found) != 1 or len(factors) > 2:
                raise ActionError(f"the pointer of {name} has the term `{c.code(term)}`: not `offsets[:, None] * stride`")
            factor, inner, dim = found[0]
            stride = next((f for f in factors if f is not factor), None)
            if stride is not None and resolve.vector_like(stride, 0):
                raise ActionError(f"the stride `{c.code(stride)}` of {name}'s pointer is not a scalar")
            vector = resolve(inner)
            if vector is None:
                raise ActionError(f"the offsets `{c.code(inner)}` of {name} are not `start + tl.arange(0, BLOCK)`")
            if dim in axes:
                raise ActionError(f"the pointer of {name} offsets one dimension twice")
            axes[dim] = _Axis(vector[0], vector[1], None if stride is None else " ".join(c.code(stride).split()))
        if set(axes) != {0, 1}:
            raise ActionError(f"the pointer of {name} is not a 2-D tile (rows[:, None] and cols[None, :])")
        if len(bases) != 1:
            raise ActionError(f"the pointer of {name} has {len(bases)} scalar parts, not one base pointer")
        return " ".join(c.code(bases[0]).split()), [axes[0], axes[1]]

    @staticmethod
    def _masks(mask, axes: list[_Axis], resolve, roots, name) -> None:
        """Each part of the mask bounds one dimension's offsets: ``rows[:, None] < M``; records the bound."""
        if mask is None or c.flat(mask) == "None":
            return
        for part in c.conjuncts(mask):
            ok = isinstance(part, cst.Comparison) and len(part.comparisons) == 1 \
                and isinstance(part.comparisons[0].operator, cst.LessThan)
            if ok:
                inner, dim = c.broadcast_axis(part.left)
                bound = part.comparisons[0].comparator
                vector = resolve(inner) if dim is not None else None
                ok = vector is not None and (c.flat(vector[0]), vector[1]) == (c.flat(axes[dim].start), axes[dim].block) \
                    and not resolve.vector_like(bound, 0) and axes[dim].size is None
                if ok:
                    axes[dim].size = " ".join(c.code(bound).split())
                    continue
            raise ActionError(f"the mask part `{c.code(part)}` of {name} does not bound its tile's offsets "
                              "(`rows[:, None] < M`); TMA can only zero what lies past the tensor's edges")

    @staticmethod
    def _tile_aligned(axes: list[_Axis], shape, name) -> None:
        """One dimension starts at the loop's ``k`` with BLOCK_K, the other at a multiple of its block."""
        _size_k, block_k, kterm, var = shape
        k_dims = [d for d, axis in enumerate(axes) if var in re.findall(r"\w+", axis.start)]
        if len(k_dims) != 1:
            raise ActionError(f"not exactly one dimension of {name}'s tile moves with the loop's {var}")
        k_axis, other = axes[k_dims[0]], axes[1 - k_dims[0]]
        starts = {var} if kterm == var else {f"{var}*{block_k}", f"{block_k}*{var}"}
        if c.flat(k_axis.start) not in starts or k_axis.block != block_k:
            raise ActionError(f"the K offsets of {name} start at `{k_axis.start}` with {k_axis.block}, not at the loop's "
                              f"{' or '.join(sorted(starts))} with {block_k}")
        flat = c.flat(other.start)
        if flat != "0" and not (flat.endswith(f"*{other.block}") or flat.startswith(f"{other.block}*")):
            raise ActionError(f"the {name} tile's other offsets start at `{other.start}`, not a multiple of {other.block}")

    @staticmethod
    def _sizes(kdef, axes: list[_Axis], resolve, roots, size_k: str, var: str, name: str) -> None:
        """An unmasked dimension's extent: K for the loop's dimension, else the bound its offsets have elsewhere."""
        for axis in axes:
            if axis.size is not None:
                continue
            if var in re.findall(r"\w+", axis.start):
                axis.size = size_k
                continue
            bounds = set()
            for comparison in _comparisons(kdef):
                inner, _dim = c.broadcast_axis(comparison.left)
                vector = resolve(inner)
                if vector is not None and (c.flat(vector[0]), vector[1]) == (c.flat(axis.start), axis.block):
                    bounds.add(" ".join(c.code(comparison.comparisons[0].comparator).split()))
            if len(bounds) != 1:
                raise ActionError(f"the {name} tile's offsets starting at `{axis.start}` are never bounded "
                                  "(`offs[:, None] < M`): no extent for the descriptor")
            axis.size = bounds.pop()

    @staticmethod
    def _unit_dimension(axes: list[_Axis], kernel: Kernel, launches: list, name: str) -> int:
        """The dimension with unit stride: written without a stride, or a stride argument every launch passes as
        ``t.stride(1)`` / ``t.stride(-1)`` (the guard checks at run time that it is 1; the descriptor spells ``1``)."""
        written = [d for d, axis in enumerate(axes) if axis.stride is None]
        if len(written) == 2:
            raise ActionError(f"both dimensions of {name}'s tile have unit stride")
        if len(written) == 1:
            return written[0]
        for d, axis in enumerate(axes):
            param = kernel.param(axis.stride)
            if param is not None and param.kind == "scalar" and launches and all(
                    _innermost_at_launch(launch, kernel, axis.stride) for launch in launches):
                return d
        raise ActionError(f"no dimension of {name}'s tile has unit stride: neither is written without a stride nor "
                          f"passed as t.stride(1) / t.stride(-1) at every launch ({' and '.join(a.stride for a in axes)})")

    @staticmethod
    def _in_scope(kdef, loop, body, index, var, name, base, axes) -> None:
        """The descriptor's names exist before the loop; the load offsets' names hold the same value at the load."""
        before = c.bound_names(body[:body.index(loop)])
        in_loop = c.bound_names(list(loop.body.body))
        params = {p.name.value for p in kdef.params.params}
        local = c.bound_names(body) | params | {var}  # other names are globals (tl, module constants)
        outside = [base] + [a.size for a in axes] + [a.stride for a in axes if a.stride is not None]
        for source in outside:
            for n in c.names_in(c.expr(source)) & local:
                if n == var or n in in_loop or (n not in params and n not in before) or \
                        (n in before and c.any_assignment(kdef, n) is None):
                    raise ActionError(f"`{source}` ({name}'s base, extent or stride) reads {n}, which is not set once "
                                      "before the K loop")
        for axis in axes:
            for n in (c.names_in(c.expr(axis.start)) & local) - {var}:
                if n in params and n not in c.bound_names(body):
                    continue
                if c.any_assignment(kdef, n) is None:
                    raise ActionError(f"the offsets of {name} start at `{axis.start}`, which reads {n}, set more than once")
                if n in in_loop and not any(n in c.bound_names([s]) for s in list(loop.body.body)[:index]):
                    raise ActionError(f"the offsets of {name} read {n}, set in the loop after the load")

    @staticmethod
    def _check_inner_blocks(operands: list[_Operand], kernel: Kernel, launches: list, analysis: FileAnalysis) -> None:
        """Each descriptor's unit-stride block is at least 16 bytes wide at every launch and config."""
        elem = min(c.torch_dtype_sizes(analysis.text), default=2)  # the narrowest floating type (fp16 when none)
        configs = kernel.autotune.configs if kernel.autotune is not None else []
        for op in operands:
            block = op.axes[op.unit].block
            if block.isdigit():
                values = [int(block)]
            else:
                values = [cfg.kwargs.get(block) for cfg in configs if block in cfg.kwargs]
                if not values:
                    values = [c.launch_values(launch, kernel).get(block) for launch in launches]
            if not values or any(not isinstance(v, int) for v in values):
                raise ActionError(f"{block}'s value is not known at every launch: a descriptor's block needs "
                                  f"{MIN_INNER_BYTES} bytes in its unit-stride dimension")
            if min(values) * elem < MIN_INNER_BYTES:
                raise ActionError(f"{op.name}'s {block}={min(values)} of {elem}-byte elements is under the "
                                  f"{MIN_INNER_BYTES} bytes a descriptor's block needs in its unit-stride dimension")

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel, target)
        except ActionError:
            return []
        line = next((loop.span.start.line for loop in kernel.loops if any(
            loop.span.start_offset <= d.span.start_offset < loop.span.end_offset for d in kernel.calls_of("dot"))),
            c.kernel_line(kernel))
        names = ", ".join(op.name for op in plan.operands)
        return [Candidate(self.name, self.kind, kernel.name, {},
                          f"Load the tl.dot tiles ({names}) through TMA tensor descriptors ({target.sm_name})", line)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel, target)
        except ActionError as exc:
            return str(exc) or "not a tl.dot loop of 2-D tile loads"
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        if params:
            raise ActionError(f"{self.name} takes no parameters (got {c.fmt_params(params)})")
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel, target)
        tl = plan.language
        loads = {id(op.statement): op for op in plan.operands}
        loop_body: list[cst.BaseStatement] = []
        group: list[cst.BaseStatement] = []  # consecutive operand loads: one if/else for them
        for statement in [*plan.loop.body.body, None]:
            op = loads.get(id(statement))
            if op is not None:
                group.append(statement)
                continue
            if group:
                tma = [c.replace_all(g, [(loads[id(g)].load, c.expr(self._load(loads[id(g)])))]) for g in group]
                loop_body.append(_branches(tma, group))
                group = []
            if statement is not None:
                loop_body.append(statement)
        new_loop = plan.loop.with_changes(body=plan.loop.body.with_changes(body=loop_body))
        made = [c.stmt(self._descriptor(op, tl)) for op in plan.operands]
        store_made = [c.stmt(self._descriptor(plan.store, tl))] if plan.store is not None else []
        if plan.hoisted:  # once per program, before its tile loop
            made, store_made, before_tiles = [], [], _branches(made + store_made, [])
        body: list[cst.BaseStatement] = []
        for statement in (plan.tiles.body.body if plan.tiles is not None else plan.kdef.body.body):
            if statement is plan.loop:
                if made:
                    body.append(_branches(made, []).with_changes(leading_lines=statement.leading_lines))
                    statement = new_loop.with_changes(leading_lines=[])
                else:
                    statement = new_loop
            elif plan.store is not None and statement is plan.store.statement:
                store = plan.store
                written = c.stmt(f"{store.desc}.store([{', '.join(a.start for a in store.axes)}], "
                                 f"{' '.join(c.code(c.unparen(store.value)).split())})")
                statement = _branches([*store_made, written], [statement])
            body.append(statement)
        if plan.tiles is not None:
            new_tiles = plan.tiles.with_changes(body=plan.tiles.body.with_changes(body=body))
            body = []
            for statement in plan.kdef.body.body:
                if statement is plan.tiles:
                    if plan.hoisted:
                        body.append(before_tiles.with_changes(leading_lines=statement.leading_lines))
                        new_tiles = new_tiles.with_changes(leading_lines=[])
                    statement = new_tiles
                body.append(statement)
        params_list = list(plan.kdef.params.params)
        last = params_list[-1]
        params_list[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        params_list.append(cst.Param(cst.Name(FLAG), annotation=cst.Annotation(c.expr(f"{tl}.constexpr")), comma=last.comma))
        new_kdef = plan.kdef.with_changes(body=plan.kdef.body.with_changes(body=body),
                                          params=plan.kdef.params.with_changes(params=params_list))
        pairs: list[tuple[cst.CSTNode, object]] = [(plan.kdef, new_kdef)]
        _kdef, launches = c.locate(module, kernel.name)
        for launch, flag in zip(launches, plan.launch_flags):
            pairs.append((launch.call, c.set_kwarg(launch.call, FLAG, c.expr(flag))))
        module = self._with_host_code(c.replace_all(module, pairs), analysis, plan)
        shapes = "; ".join(f"{op.desc} [{', '.join(a.size for a in op.axes)}]" for op in plan.operands
                           + ([plan.store] if plan.store is not None else []))
        notes = [(f"{FLAG} ({READY} at the launch) takes the descriptors only where TMA can read the tensors as the "
                  "kernel does (unit innermost stride, 16-byte-aligned base and strides); elsewhere the pointer accesses stay")]
        if plan.allocator:
            notes.append(f"adds {ALLOCATOR} and triton.set_allocator: device-side descriptors live in global memory")
        what = "tl.dot tiles and output tile" if plan.store is not None else "tl.dot tiles"
        return c.finish(text, module, f"TMA tensor descriptors for {kernel.name}'s {what} ({shapes}; {FLAG})", notes)

    @staticmethod
    def _descriptor(op: _Operand, tl: str) -> str:
        order = [1 - op.unit, op.unit]  # the unit-stride dimension last
        shape = ", ".join(op.axes[d].size for d in order)
        strides = f"{op.axes[order[0]].stride or 1}, 1"
        blocks = ", ".join(op.axes[d].block for d in order)
        return (f"{op.desc} = {tl}.make_tensor_descriptor({op.base}, shape=[{shape}], strides=[{strides}], "
                f"block_shape=[{blocks}])")

    @staticmethod
    def _load(op: _Operand) -> str:
        order = [1 - op.unit, op.unit]
        load = f"{op.desc}.load([{', '.join(op.axes[d].start for d in order)}])"
        return load if op.unit == 1 else f"{load}.T"

    def _with_host_code(self, module: cst.Module, analysis: FileAnalysis, plan: _Plan) -> cst.Module:
        """The readiness check and (once per file) the allocator, after the file's imports."""
        torch, triton = c.module_import_name(module, "torch"), c.module_import_name(module, "triton")
        source = ""
        if plan.helper:
            source += (f"def {READY}(tensor, unit_stride, *strides):\n"
                       f'    """Whether TMA reads ``tensor`` as the kernel does: unit innermost stride, 16-byte-aligned base '
                       f'and strides."""\n'
                       f"    return unit_stride == 1 and tensor.data_ptr() % 16 == 0 and all(\n"
                       f"        stride * tensor.element_size() % 16 == 0 for stride in strides)\n\n\n")
        if plan.allocator:
            source += (f"def {ALLOCATOR}(size: int, alignment: int, stream):\n"
                       f'    """Global memory for the device-side TMA descriptors."""\n'
                       f'    return {torch}.empty(size, dtype={torch}.int8, device="cuda")\n\n\n'
                       f"{triton}.set_allocator({ALLOCATOR})\n")
        if not source:
            return module
        inserted = c.insert_after_imports(module, source)
        if inserted is None:
            raise ActionError("the file has no top-level imports to put the TMA host code after")
        return inserted

def _branches(tma: list[cst.BaseStatement], pointer: list[cst.BaseStatement]) -> cst.If:
    """``if USE_TMA: <tma> else: <pointer>`` (no else when ``pointer`` is empty); comments above stay above."""
    first = (pointer or tma)[0]
    leading = first.leading_lines if hasattr(first, "leading_lines") else []
    strip = [s.with_changes(leading_lines=[]) if hasattr(s, "leading_lines") else s for s in tma]
    kept = [s.with_changes(leading_lines=[]) if hasattr(s, "leading_lines") and i == 0 else s for i, s in enumerate(pointer)]
    orelse = cst.Else(body=cst.IndentedBlock(body=kept)) if pointer else None
    return cst.If(test=cst.Name(FLAG), body=cst.IndentedBlock(body=strip), orelse=orelse, leading_lines=leading)


def _is_tile_loop(loop: cst.For, roots: frozenset[str]) -> bool:
    """``for tile in tl.range(tl.program_id(0), <tiles>, tl.num_programs(0))``: a persistent kernel's tile loop."""
    it = loop.iter
    if not (isinstance(it, cst.Call) and c.is_call(it, "range", roots) and len(it.args) >= 3
            and all(a.keyword is None for a in it.args[:3])):
        return False
    start, _count, step = (a.value for a in it.args[:3])
    return (c.is_call(start, "program_id", roots) and c.flat(c.code(start)).endswith("(0)")
            and c.is_call(step, "num_programs", roots) and c.flat(c.code(step)).endswith("(0)"))


def _factors(node: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The factors of ``a * b * c`` (through parentheses); None for anything but a product or a single name."""
    node = c.unparen(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        left, right = _factors(node.left), _factors(node.right)
        return None if left is None or right is None else left + right
    return [node] if isinstance(node, cst.Name | cst.Integer) else None


def _range_loops(kdef: cst.FunctionDef, roots: frozenset[str]) -> list[cst.For]:
    """The kernel's ``for x in range(...)`` / ``tl.range`` / ``tl.static_range`` loops (their counters are scalars)."""
    found: list[cst.For] = []

    class V(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> None:
            func = c.code(node.iter.func) if isinstance(node.iter, cst.Call) else ""
            if func == "range" or (func.rsplit(".", 1)[-1] in ("range", "static_range") and func.rsplit(".", 1)[0] in roots):
                found.append(node)

    kdef.body.visit(V())
    return found


def _comparisons(kdef: cst.FunctionDef) -> list[cst.Comparison]:
    """Every ``x < y`` of the kernel."""
    found: list[cst.Comparison] = []

    class V(cst.CSTVisitor):
        def visit_Comparison(self, node: cst.Comparison) -> None:
            if len(node.comparisons) == 1 and isinstance(node.comparisons[0].operator, cst.LessThan):
                found.append(node)

    kdef.body.visit(V())
    return found


def _innermost_at_launch(launch: c.LaunchNode, kernel: Kernel, param: str) -> bool:
    """Whether ``launch`` passes ``param`` as ``t.stride(-1)``, or as the last ``t.stride(i)`` (i >= 1) it passes for ``t``."""
    match = _UNIT_STRIDE.match(c.launch_sources(launch, kernel).get(param, ""))
    if match is None:
        return False
    passed = [int(i) for i in re.findall(rf"\b{match.group(1)}\.stride\(\s*(-?\d+)\s*\)", c.code(launch.call))]
    return match.group(2) == "-1" or int(match.group(2)) == max(passed)


ACTION = TensorDescriptor()
