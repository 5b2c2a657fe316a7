"""Split-KV (flash decoding): an online-softmax loop over keys shared by NUM_SPLITS programs, then merged.

Decode attention gives each (sequence, head) one program that walks every key: a batch of 8
sequences with 8 heads is 64 programs on a GPU of 132 SMs, each streaming its whole KV cache alone.
Flash decoding splits the key loop: program ``split`` of ``NUM_SPLITS`` runs the same loop over its
contiguous share of the keys and writes its running state (the maximum ``m``, the sum ``l`` and the
accumulator ``acc``) to a float32 scratch buffer; a second kernel, the original with its loop replaced
by the merge, rescales each split's state to the largest maximum (``exp(m_split - m)``), adds them,
and runs the original epilogue (``acc / l``, the store) unchanged. Every key is still visited once,
in blocks of the same size; only the order of the sum changes (results match within the dtype's
tolerance).

Offered when the kernel has one top-level ``for`` loop over ``range(lo, hi[, step])`` whose only
loop-carried state is a scalar maximum that starts at ``-inf``, a scalar sum that starts at 0, and a
1-D accumulator that starts as ``tl.zeros([D])``, rescaled with one of ``tl.exp``/``tl.exp2``; nothing
before or in the loop stores; the launch is a statement of its own with a grid tuple of one or two
axes; no kernel parameter has a default. The scratch is allocated beside the launch, on the device
of the launch's first argument.

Example: kernel=decode_kernel target=h100 params={"NUM_SPLITS": 8}

```python before
@triton.jit
def decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, n_keys, scale, D: tl.constexpr, BLOCK: tl.constexpr):
    head = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + head * D + offs_d)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(0, n_keys, BLOCK):
        offs_t = start + tl.arange(0, BLOCK)
        kv = (head * n_keys + offs_t[:, None]) * D + offs_d[None, :]
        k = tl.load(k_ptr + kv, mask=offs_t[:, None] < n_keys, other=0.0)
        s = tl.where(offs_t < n_keys, tl.sum(k * q[None, :], axis=1) * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + kv, mask=offs_t[:, None] < n_keys, other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(out_ptr + head * D + offs_d, acc / l_i)


def decode(q, k, v):
    heads, d = q.shape
    out = torch.empty_like(q)
    decode_kernel[(heads,)](q, k, v, out, k.shape[1], d ** -0.5, D=d, BLOCK=64)
    return out
```

```python after
@triton.jit
def decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, n_keys, scale, D: tl.constexpr, BLOCK: tl.constexpr, partial_acc_ptr, partial_ml_ptr, NUM_SPLITS: tl.constexpr):
    head = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + head * D + offs_d)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    split = tl.program_id(1)
    split_len = tl.cdiv(tl.cdiv(n_keys, BLOCK), NUM_SPLITS) * BLOCK
    split_start = split * split_len
    split_end = tl.minimum(split_start + split_len, n_keys)
    for start in range(split_start, split_end, BLOCK):
        offs_t = start + tl.arange(0, BLOCK)
        kv = (head * n_keys + offs_t[:, None]) * D + offs_d[None, :]
        k = tl.load(k_ptr + kv, mask=offs_t[:, None] < n_keys, other=0.0)
        s = tl.where(offs_t < n_keys, tl.sum(k * q[None, :], axis=1) * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + kv, mask=offs_t[:, None] < n_keys, other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    part = tl.program_id(0) * NUM_SPLITS + split
    tl.store(partial_acc_ptr + part * D + tl.arange(0, D), acc)
    tl.store(partial_ml_ptr + part * 2, m_i)
    tl.store(partial_ml_ptr + part * 2 + 1, l_i)


@triton.jit
def decode_kernel_merge(q_ptr, k_ptr, v_ptr, out_ptr, n_keys, scale, D: tl.constexpr, BLOCK: tl.constexpr, partial_acc_ptr, partial_ml_ptr, NUM_SPLITS: tl.constexpr):
    head = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + head * D + offs_d)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    first = tl.program_id(0) * NUM_SPLITS
    for split in range(0, NUM_SPLITS):
        m_i = tl.maximum(m_i, tl.load(partial_ml_ptr + (first + split) * 2))
    for split in range(0, NUM_SPLITS):
        weight = tl.exp(tl.load(partial_ml_ptr + (first + split) * 2) - m_i)
        l_i += weight * tl.load(partial_ml_ptr + (first + split) * 2 + 1)
        acc += weight * tl.load(partial_acc_ptr + (first + split) * D + tl.arange(0, D))
    tl.store(out_ptr + head * D + offs_d, acc / l_i)


def decode(q, k, v):
    heads, d = q.shape
    out = torch.empty_like(q)
    partial_acc = torch.empty((heads * 8, d), device=q.device, dtype=torch.float32)
    partial_ml = torch.empty((heads * 8, 2), device=q.device, dtype=torch.float32)
    decode_kernel[(heads, 8)](q, k, v, out, k.shape[1], d ** -0.5, D=d, BLOCK=64, partial_acc_ptr=partial_acc, partial_ml_ptr=partial_ml, NUM_SPLITS=8)
    decode_kernel_merge[(heads,)](q, k, v, out, k.shape[1], d ** -0.5, D=d, BLOCK=64, partial_acc_ptr=partial_acc, partial_ml_ptr=partial_ml, NUM_SPLITS=8)
    return out
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

SPLITS = (8, 4, 16)  # best first: 8 splits turn 64 (sequence, head) programs into 512, about 4 per SM
SPLIT_PARAM = "NUM_SPLITS"
SCRATCH = ("partial_acc_ptr", "partial_ml_ptr")  # kernel parameters; the host buffers drop the ``_ptr``
# Names the rewrite introduces in the kernels; a kernel that already uses one is refused.
KERNEL_NAMES = ("split", "split_len", "split_start", "split_end", "part", "first", "weight")
_NEG_INF = re.compile(r"^-\s*float\(\s*['\"]inf['\"]\s*\)$|^float\(\s*['\"]-inf['\"]\s*\)$|^-\s*math\.inf$")


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    launch: c.LaunchNode
    statement: cst.SimpleStatementLine  # the launch's own statement in the host function
    loop: cst.For
    lo: str
    hi: str
    step: str
    m: str
    l: str
    acc: str
    width: str  # the accumulator's length, as the kernel writes it (a constexpr or a literal)
    width_host: str  # ... and as the launch passes it
    exp: str  # "exp" or "exp2": the rescaling the loop uses, and the merge must use
    grid: list[str]  # the grid tuple's entries as written
    device_arg: str
    tl: str


def _single_assignments(statements: list[cst.BaseStatement]) -> dict[str, cst.BaseExpression]:
    """``name = value`` lines among ``statements`` (the last one wins)."""
    out: dict[str, cst.BaseExpression] = {}
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    out[small.targets[0].target.value] = small.value
    return out


class SplitKV(c.ExplainsByPlan):
    name = "split_kv"
    kind = "Tiling"
    changes_numerics = False  # the order of the sum changes, within the dtype's tolerance
    max_changed_lines = 40  # the merge kernel is new code: its epilogue and prologue are the original's

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        if kernel.is_autotuned or kernel.param(SPLIT_PARAM) is not None:
            raise ActionError("the kernel is autotuned or already split")
        source = kernel.def_span.text(analysis.text)
        if not ("inf" in source and "maximum(" in source and "zeros(" in source and "exp" in source):
            # The cheap test first: most kernels are not an online softmax (the code-action latency counts).
            raise ActionError("no online-softmax loop (a -inf maximum, tl.maximum, a tl.zeros accumulator, tl.exp)")
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1 or launches[0].host is None:
            raise ActionError("split-KV needs exactly one launch of the kernel, inside a function")
        launch = launches[0]
        if any(p.default is not None for p in kdef.params.params) or kdef.params.star_arg is not cst.MaybeSentinel.DEFAULT \
                or kdef.params.kwonly_params:
            raise ActionError("a kernel parameter has a default or is keyword-only")
        body = list(kdef.body.body)
        loops = [i for i, s in enumerate(body) if isinstance(s, cst.For | cst.While)]
        if len(loops) != 1 or not isinstance(body[loops[0]], cst.For):
            raise ActionError("split-KV needs exactly one top-level for loop")
        at = loops[0]
        loop: cst.For = body[at]  # type: ignore[assignment]
        before, after = body[:at], body[at + 1:]
        found = _kinds_in(kdef.body)
        if found[cst.For] + found[cst.While] != 1 or loop.orelse is not None:
            raise ActionError("another loop (inside the key loop or beside it), or a loop with an else branch")
        if found[cst.Break] or found[cst.Continue] or found[cst.Return]:
            raise ActionError("break, continue or return")
        ahead = c.code(cst.Module(body=before)) + c.code(loop)
        if re.search(r"\.store\(|atomic_", ahead):
            raise ActionError("something is stored before or inside the loop")
        if not re.search(r"\.store\(", c.code(cst.Module(body=after))):
            raise ActionError("nothing is stored after the loop")
        used = c.names_in(kdef)
        if used & set(KERNEL_NAMES + SCRATCH):
            raise ActionError(f"the kernel already uses a name the rewrite needs ({sorted(used & set(KERNEL_NAMES + SCRATCH))[0]})")
        # The loop: range(lo, hi[, step]) over a plain name.
        it = loop.iter
        if not (isinstance(it, cst.Call) and c.code(it.func) in ("range", "tl.range") and 1 <= len(it.args) <= 3
                and all(a.keyword is None and not a.star for a in it.args) and isinstance(loop.target, cst.Name)):
            raise ActionError("the loop is not `for name in range(lo, hi, step)`")
        args = [c.code(a.value) for a in it.args]
        lo, hi, step = ("0", args[0], "1") if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else "1")
        # The state: a maximum from -inf, a sum from 0 and an accumulator from tl.zeros([D]), nothing else.
        inits = _single_assignments(before)
        carried = (c.bound_names(loop.body) & set(inits)) - {loop.target.value}
        if len(carried) != 3:
            raise ActionError(f"the loop carries {len(carried)} values; online softmax carries a maximum, a sum and an accumulator")
        m = [n for n in carried if _NEG_INF.match(c.code(inits[n]).strip())]
        zeros = [n for n in carried if _vector_zeros(inits[n]) is not None]
        sums = [n for n in carried if c.code(inits[n]).strip() in ("0", "0.0", "0.")]
        if len(m) != 1 or len(zeros) != 1 or len(sums) != 1:
            raise ActionError("the loop state is not a -inf maximum, a 0 sum and a tl.zeros([D]) accumulator")
        leaked = (c.bound_names(loop.body) | {loop.target.value}) - set(inits)
        if c.names_in(cst.Module(body=after)) & leaked:
            raise ActionError("the code after the loop reads a value of the last iteration")
        width = _vector_zeros(inits[zeros[0]])
        loop_code = c.code(loop.body)
        uses_exp2, uses_exp = "exp2(" in loop_code, re.search(r"\bexp\(", loop_code) is not None
        if uses_exp2 == uses_exp:
            raise ActionError("the loop rescales with neither or both of tl.exp and tl.exp2")
        if not re.search(rf"\b{re.escape(m[0])}\b", loop_code.split("\n", 1)[-1]) or "maximum(" not in loop_code:
            raise ActionError("the maximum is not updated with tl.maximum")
        # The launch: a statement of its own, a grid tuple of one or two axes.
        statement = _statement_of(launch.host, launch.call)
        if statement is None or len(statement.body) != 1:
            raise ActionError("the launch is not a statement of its own")
        grid = c.grid_expression(launch)
        if not isinstance(grid, cst.Tuple) or not 1 <= len(grid.elements) <= 2:
            raise ActionError("the grid is not a tuple of one or two axes")
        if re.search(r"program_id\(\s*(axis\s*=\s*)?2\s*\)", c.code(kdef)):
            raise ActionError("the kernel already reads a third grid axis")
        if width.isdigit():
            width_host = width
        else:
            param = kernel.param(width)
            sources = c.launch_sources(launch, kernel)
            if param is None or param.kind != "constexpr" or width not in sources:
                raise ActionError(f"the accumulator's length {width} is not a constexpr the launch passes")
            width_host = sources[width]
        positional = [a for a in launch.call.args if a.keyword is None and not a.star]
        if not positional or not isinstance(positional[0].value, cst.Name):
            raise ActionError("the launch's first argument is not a tensor name (the scratch goes on its device)")
        if not re.search(r"^\s*(import torch\b|from torch\b)", analysis.text, re.M):
            raise ActionError("the module does not import torch (the scratch is a torch tensor)")
        host_names = c.names_in(launch.host)
        if host_names & {s.removesuffix("_ptr") for s in SCRATCH}:
            raise ActionError("the launching function already uses a scratch name")
        return _Plan(kdef, launch, statement, loop, lo, hi, step, m[0], sums[0], zeros[0], width, width_host,
                     "exp2" if uses_exp2 else "exp", [c.code(e.value) for e in grid.elements],
                     positional[0].value.value, _tl_name(kdef))

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        return [Candidate(self.name, self.kind, kernel.name, {SPLIT_PARAM: s},
                          f"Split the key loop over {SPLIT_PARAM}={s} programs, then merge (flash decoding) on "
                          f"{target.key.upper()}", c.kernel_line(kernel))
                for s in SPLITS]

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        splits = params.get(SPLIT_PARAM)
        if not c.is_pow2(splits) or not 2 <= int(splits) <= 64:  # type: ignore[arg-type]
            raise ActionError(f"{SPLIT_PARAM} must be a power of two from 2 to 64, not {splits!r}")
        splits = int(splits)  # type: ignore[arg-type]
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        tl, axes = plan.tl, len(plan.grid)
        program = f"{tl}.program_id(0)" if axes == 1 else f"({tl}.program_id(0) * {tl}.num_programs(1) + {tl}.program_id(1))"
        body = list(plan.kdef.body.body)
        at = body.index(plan.loop)
        before, after = body[:at], body[at + 1:]
        # The split kernel: the loop over this split's share of the blocks, then its state to the scratch.
        span = plan.hi if plan.lo == "0" else f"{plan.hi} - {_factor(plan.lo)}"
        blocks = span if plan.step == "1" else f"{tl}.cdiv({span}, {plan.step})"
        split_head = [
            c.stmt(f"split = {tl}.program_id({axes})"),
            c.stmt(f"split_len = {tl}.cdiv({blocks}, {SPLIT_PARAM})" + ("" if plan.step == "1" else f" * {_factor(plan.step)}")),
            c.stmt("split_start = split * split_len" if plan.lo == "0" else f"split_start = {_factor(plan.lo)} + split * split_len"),
            c.stmt(f"split_end = {tl}.minimum(split_start + split_len, {plan.hi})"),
        ]
        loop_range = plan.loop.iter.with_changes(args=[  # type: ignore[union-attr]
            cst.Arg(c.expr("split_start"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(c.expr("split_end"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(c.expr(plan.step))])
        split_tail = [
            c.stmt(f"part = {program} * {SPLIT_PARAM} + split"),
            c.stmt(f"{tl}.store(partial_acc_ptr + part * {plan.width} + {tl}.arange(0, {plan.width}), {plan.acc})"),
            c.stmt(f"{tl}.store(partial_ml_ptr + part * 2, {plan.m})"),
            c.stmt(f"{tl}.store(partial_ml_ptr + part * 2 + 1, {plan.l})"),
        ]
        params_ = _with_params(list(plan.kdef.params.params), tl)
        split_kdef = plan.kdef.with_changes(
            params=plan.kdef.params.with_changes(params=params_),
            body=plan.kdef.body.with_changes(body=before + split_head + [plan.loop.with_changes(iter=loop_range)] + split_tail))
        # The merge kernel: the original with its loop replaced by the merge of the splits' states.
        exp = f"{tl}.{plan.exp}"
        merge = [
            c.stmt(f"first = {program} * {SPLIT_PARAM}"),
            _for(f"for split in range(0, {SPLIT_PARAM}):\n"
                 f"    {plan.m} = {tl}.maximum({plan.m}, {tl}.load(partial_ml_ptr + (first + split) * 2))\n"),
            _for(f"for split in range(0, {SPLIT_PARAM}):\n"
                 f"    weight = {exp}({tl}.load(partial_ml_ptr + (first + split) * 2) - {plan.m})\n"
                 f"    {plan.l} += weight * {tl}.load(partial_ml_ptr + (first + split) * 2 + 1)\n"
                 f"    {plan.acc} += weight * {tl}.load(partial_acc_ptr + (first + split) * {plan.width} + "
                 f"{tl}.arange(0, {plan.width}))\n"),
        ]
        merge_name = _free_name(module, f"{kernel.name}_merge")
        merge_kdef = plan.kdef.with_changes(
            name=cst.Name(merge_name), params=plan.kdef.params.with_changes(params=params_),
            body=plan.kdef.body.with_changes(body=before + merge + after),
            leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        # The host: the scratch beside the launch, the split launch with one more grid axis, then the merge.
        programs = " * ".join(_factor(g) for g in plan.grid)
        acc_buf, ml_buf = (s.removesuffix("_ptr") for s in SCRATCH)
        device = f"{plan.device_arg}.device"
        call = plan.launch.call
        for scratch, buf in zip(SCRATCH, (acc_buf, ml_buf)):
            call = c.set_kwarg(call, scratch, cst.Name(buf))
        call = c.set_kwarg(call, SPLIT_PARAM, cst.Integer(str(splits)))
        grid_src = ", ".join(plan.grid) + ("," if axes == 1 else "")
        split_call = call.with_changes(func=call.func.with_changes(  # type: ignore[union-attr]
            slice=[cst.SubscriptElement(cst.Index(c.expr(f"({', '.join(plan.grid)}, {splits})")))]))
        merge_call = call.with_changes(func=call.func.with_changes(  # type: ignore[union-attr]
            value=cst.Name(merge_name), slice=[cst.SubscriptElement(cst.Index(c.expr(f"({grid_src})")))]))
        host_lines = [
            c.stmt(f"{acc_buf} = torch.empty(({programs} * {splits}, {plan.width_host}), device={device}, dtype=torch.float32)"),
            c.stmt(f"{ml_buf} = torch.empty(({programs} * {splits}, 2), device={device}, dtype=torch.float32)"),
            plan.statement.with_changes(body=[cst.Expr(split_call)]),
            plan.statement.with_changes(body=[cst.Expr(merge_call)], leading_lines=[]),
        ]
        module = c.replace_all(module, [(plan.kdef, cst.FlattenSentinel([split_kdef, merge_kdef])),
                                        (plan.statement, cst.FlattenSentinel(host_lines))])
        return c.finish(text, module, f"split-KV for {kernel.name} ({SPLIT_PARAM}={splits}, merged by {merge_name})",
                        ["the splits' sums are merged in another order: results match within the dtype's tolerance"])


def _kinds_in(node: cst.CSTNode) -> dict[type, int]:
    """How many loops, breaks, continues and returns ``node`` holds, in one walk."""
    counts = {cst.For: 0, cst.While: 0, cst.Break: 0, cst.Continue: 0, cst.Return: 0}

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if type(n) in counts:
                counts[type(n)] += 1
            return True

    node.visit(V())
    return counts


def _vector_zeros(init: cst.BaseExpression) -> str | None:
    """``D`` when ``init`` is exactly ``tl.zeros([D], ...)`` (a 1-D accumulator starting at zero), else None."""
    if not (isinstance(init, cst.Call) and c.code(init.func).endswith(".zeros") and init.args
            and init.args[0].keyword is None and isinstance(init.args[0].value, cst.List | cst.Tuple)):
        return None
    elements = init.args[0].value.elements
    return c.code(elements[0].value).strip() if len(elements) == 1 else None


def _statement_of(root: cst.CSTNode, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The statement line whose expression statement is ``call`` (a launch written as a statement)."""
    found: list[cst.SimpleStatementLine] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            if any(isinstance(b, cst.Expr) and b.value is call for b in node.body):
                found.append(node)
            return False

    root.visit(V())
    return found[0] if found else None


def _tl_name(kdef: cst.FunctionDef) -> str:
    """How the kernel names triton.language (``tl`` almost always)."""
    found = re.search(r"\b(\w+)\.program_id\(", c.code(kdef))
    return found.group(1) if found else "tl"


def _with_params(params: list[cst.Param], tl: str) -> list[cst.Param]:
    """``params`` with the scratch pointers and the split count appended, separated like the last two."""
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    last = params[-1]
    between = params[-2].comma if len(params) > 1 and isinstance(params[-2].comma, cst.Comma) else space
    new = [cst.Param(cst.Name(n), comma=between) for n in SCRATCH]
    new.append(cst.Param(cst.Name(SPLIT_PARAM), annotation=cst.Annotation(c.expr(f"{tl}.constexpr")), comma=last.comma))
    return params[:-1] + [last.with_changes(comma=between)] + new


def _factor(source: str) -> str:
    """``source`` ready to multiply: a name, call, attribute or subscript as is, anything else in parentheses."""
    return source if re.fullmatch(r"[\w.]+(\([^()]*\)|\[[^\[\]]*\])*", source) else f"({source})"


def _for(source: str) -> cst.BaseStatement:
    return cst.parse_statement(source)


def _free_name(module: cst.Module, name: str) -> str:
    taken = c.names_in(module)
    while name in taken:
        name += "_"
    return name


ACTION = SplitKV()
