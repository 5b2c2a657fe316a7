"""Epilogue fusion: an elementwise PyTorch op applied to a kernel's output moves into the kernel's store.

``y = ...kernel writes y...; return torch.relu(y)`` becomes a kernel that stores
``tl.maximum(v, 0.0)`` and a host that returns ``y``: one pass over memory and one launch fewer.
Offered when the op is one of a small table (relu, sigmoid, exp, abs, sqrt, gelu, silu, leaky_relu
and clamp with literal bounds, as functions or tensor methods; +, -, * or / with a number), its
input is a fresh buffer that this kernel fills with its only store and that nothing else reads,
and the kernel is launched once. The value is cast to the buffer's element type before the op
(what storing it did), so only the op's own rounding can differ (ulps).

Example: kernel=scale_kernel target=h100 params={"op": "relu"}

```python before
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 3.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scaled_relu(x):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return torch.relu(y)
```

```python after
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.maximum((3.0 * tl.load(x_ptr + offs, mask=offs < n)).to(y_ptr.dtype.element_ty), 0.0), mask=offs < n)


def scaled_relu(x):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .fusion import _ALLOCATORS, _store_parts

# torch function (or tensor method) -> Triton expression over ``{v}``.
TORCH_OPS = {
    "relu": "tl.maximum({v}, 0.0)",
    "sigmoid": "tl.sigmoid({v})",
    "exp": "tl.exp({v})",
    "abs": "tl.abs({v})",
    "sqrt": "tl.sqrt({v})",
    "gelu": "0.5 * {v} * (1.0 + tl.erf({v} * 0.7071067811865476))",
    "silu": "{v} * tl.sigmoid({v}.to(tl.float32))",
}
_PREFIXES = ("torch.", "torch.nn.functional.", "F.", "torch.special.")
# A literal on either side of the buffer: the op's name and its template for each side.
_BINARY = {cst.Multiply: "*", cst.Add: "+", cst.Subtract: "-", cst.Divide: "/"}
_BINARY_NAMES = {"*": "mul", "+": "add", "-": "sub", "/": "div"}


def _number(node: cst.BaseExpression | None) -> str | None:
    """``2.0``, ``3``, ``-0.5`` -> their code; anything else None."""
    if isinstance(node, cst.Float | cst.Integer):
        return node.value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(
            node.expression, cst.Float | cst.Integer):
        return "-" + node.expression.value
    return None


def _call_op(expr: cst.Call, buffer: str) -> tuple[str, str] | None:
    """``torch.relu(y)``, ``F.leaky_relu(y, 0.2)``, ``y.clamp(min=0.0)``... -> (name, template)."""
    positional = [a.value for a in expr.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in expr.args if a.keyword is not None}
    keywords.pop("inplace", None)  # F.relu(y, inplace=True) returns y with the same values
    func = expr.func
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == buffer:
        op, rest = func.attr.value, positional  # a method of the buffer: y.relu()
    else:
        name = c.code(func)
        op = next((name[len(p):] for p in sorted(_PREFIXES, key=len, reverse=True) if name.startswith(p)), None)
        if op is None or not positional or not (isinstance(positional[0], cst.Name) and positional[0].value == buffer):
            return None
        rest = positional[1:]
    if op in TORCH_OPS and not rest and not keywords:
        return op, TORCH_OPS[op]
    if op == "leaky_relu" and len(rest) + len(keywords) <= 1 and set(keywords) <= {"negative_slope"}:
        slope = _number(rest[0]) if rest else (_number(keywords["negative_slope"]) if keywords else "0.01")
        if slope is not None:
            return f"leaky_relu {slope}", f"tl.where({{v}} >= 0, {{v}}, {{v}} * {slope})"
    if op in ("clamp", "clip") and len(rest) <= 2 and set(keywords) <= {"min", "max"}:
        bounds = dict(zip(("min", "max"), rest)) | keywords
        low, high = (_number(bounds.get(k)) for k in ("min", "max"))
        if any(k in bounds and v is None for k, v in (("min", low), ("max", high))) or (low is None and high is None):
            return None
        template = "{v}" if low is None else f"tl.maximum({{v}}, {low})"
        template = template if high is None else f"tl.minimum({template}, {high})"
        return f"clamp {low} {high}", template
    return None


def _op_of(expr: cst.BaseExpression, buffer: str) -> tuple[str, str] | None:
    """``torch.relu(y)`` -> ("relu", template); ``y * 2.0`` -> ("mul 2.0", ...); None otherwise."""
    if isinstance(expr, cst.Call):
        return _call_op(expr, buffer)
    if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _BINARY:
        sym = _BINARY[type(expr.operator)]
        for mine, other, template in ((expr.left, expr.right, "{{v}} {sym} {n}"), (expr.right, expr.left, "{n} {sym} {{v}}")):
            number = _number(other)
            if isinstance(mine, cst.Name) and mine.value == buffer and number is not None:
                side = "" if template.startswith("{{v}}") else " (left)"
                return f"{_BINARY_NAMES[sym]} {number}{side}", template.format(sym=sym, n=number)
    return None


_METADATA = {"numel", "shape", "stride", "dtype", "device", "size", "dim", "ndim", "element_size"}


def _metadata_reads(node: cst.CSTNode, name: str) -> int:
    """``buffer.numel()``, ``buffer.shape``...: reads that do not look at the buffer's values."""
    count = 0

    class V(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> None:
            nonlocal count
            if isinstance(n.value, cst.Name) and n.value.value == name and n.attr.value in _METADATA:
                count += 1

    node.visit(V())
    return count


class Epilogue:
    name = "epilogue"
    kind = "Fusion"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel):
        if len(analysis.launches_of(kernel.name)) != 1 or len(kernel.calls_of("store")) != 1:
            raise ActionError("needs one launch and one store")
        kdef, (launch,) = c.locate(module, kernel.name)
        host = launch.host
        if host is None:
            raise ActionError("the launch is not in a host function")
        body = list(host.body.body)
        launch_index = next((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                             and isinstance(s.body[0], cst.Expr) and s.body[0].value is launch.call), None)
        if launch_index is None or launch_index + 1 >= len(body):
            raise ActionError("nothing follows the launch")
        store_statement = next(s for s in kdef.body.body if _store_parts(s))
        dest, _offs, value, _mask = _store_parts(store_statement)
        site = analysis.launches_of(kernel.name)[0]
        dest_arg = site.arg(dest)
        if dest_arg is None or dest_arg.keyword:
            raise ActionError("the stored-to buffer is not passed positionally")
        buffer = dest_arg.source.strip()
        alloc = c.host_assignment(host, buffer)
        if alloc is None or not (isinstance(alloc.value, cst.Call) and c.code(alloc.value.func) in _ALLOCATORS):
            raise ActionError(f"{buffer} is not a fresh torch.empty/zeros allocation")
        after = body[launch_index + 1]
        if not isinstance(after, cst.SimpleStatementLine) or len(after.body) != 1:
            raise ActionError("the statement after the launch is not a simple one")
        small = after.body[0]
        target_expr = small.value if isinstance(small, cst.Return | cst.Assign) else None
        if target_expr is None:
            raise ActionError("the launch is not followed by `z = op(buffer)` or `return op(buffer)`")
        op = _op_of(target_expr, buffer)
        if op is None:
            raise ActionError("the next statement is not a supported elementwise op on the buffer")
        if c.count_name(host, buffer) - _metadata_reads(host, buffer) != 3:  # allocation, launch, the op
            raise ActionError(f"{buffer} is used elsewhere too")
        return kdef, store_statement, value, dest, small, target_expr, buffer, op

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            *_rest, buffer, (op, _template) = self._plan(c.parse(analysis.text), analysis, kernel)
        except (ActionError, StopIteration):
            return []
        return [Candidate(self.name, self.kind, kernel.name, {"op": op},
                          f"Fuse the PyTorch {op} on {buffer} into {kernel.name}'s store (one pass fewer)",
                          kernel.calls_of("store")[0].span.start.line)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except (ActionError, StopIteration) as exc:
            return str(exc) or "no PyTorch elementwise operation follows the launch on its output"
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        try:
            kdef, store_statement, value, dest, small, target_expr, buffer, (op, template) = self._plan(module, analysis, kernel)
        except StopIteration as exc:
            raise ActionError("no store in the kernel") from exc
        if params.get("op") != op:
            raise ActionError(f"the op after the launch is {op!r}, not {params.get('op')!r}")
        cast = f"({c.code(value)}).to({dest}.dtype.element_ty)"
        call = store_statement.body[0].value
        pairs = [(target_expr, cst.Name(buffer))]
        if template.count("{v}") == 1:
            new_value = c.expr(template.format(v=cast))
            pairs.append((call, call.with_changes(args=[call.args[0], call.args[1].with_changes(value=new_value), call.args[2]])))
        else:  # the op reads its input more than once: name the stored value first
            local = f"{dest.removesuffix('_ptr')}_value"
            if local in c.names_in(kdef):
                raise ActionError(f"the kernel already uses the name {local}")
            new_value = c.expr(template.format(v=local))
            new_store = store_statement.with_changes(leading_lines=[], body=[store_statement.body[0].with_changes(
                value=call.with_changes(args=[call.args[0], call.args[1].with_changes(value=new_value), call.args[2]]))])
            named = c.stmt(f"{local} = {cast}\n").with_changes(leading_lines=store_statement.leading_lines)
            pairs.append((store_statement, cst.FlattenSentinel([named, new_store])))
        module = c.replace_all(module, pairs)
        return c.finish(text, module, f"fused {op} into {kernel.name}'s store")


ACTION = Epilogue()
