"""Single pass: a row kernel that loops over its row in blocks several times reads the row once.

When every loop of the kernel is ``for v in range(0, N, BLOCK)`` over the same row length ``N``
and block, the launch sets ``BLOCK = triton.next_power_of_2(N)``; each loop then runs exactly once
with ``v = 0``, so its body replaces the loop, and the repeated ``cols = ...`` / ``x = tl.load(...)``
of the later passes are dropped (nothing was stored in between). Multi-pass softmax becomes the
one-read kernel of the Triton tutorial, with the tutorial's warps for a row of that width
(``min(16, max(4, next_power_of_2(N) // 256))``: 8 at 2048, 16 from 4096; a 32k-wide row in one
warp would spill). Offered only when the grid does not depend on the block. ``N`` may be a local
the kernel computes once from its arguments (a group norm's ``(C // G) * HW``): the launch computes
the same from what it passes. An autotuned block goes with its ``@triton.autotune`` decorator when
the configs choose only that block and launch options (one block of the whole row leaves nothing
to tune); a block ``@triton.heuristics`` computes goes with its entry (the decorator too when that
was its only one).

Example: kernel=rowsum_kernel target=h100 params={}

```python before
@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * n_cols
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row + cols, mask=cols < n_cols, other=0.0)
        total += tl.sum(x, axis=0)
    # Second pass: subtract the mean.
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + tl.program_id(0) * n_cols + cols, x - total / n_cols, mask=cols < n_cols)


def center(x):
    out = torch.empty_like(x)
    rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=256)
    return out
```

```python after
@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * n_cols
    total = 0.0
    cols = tl.arange(0, BLOCK)
    x = tl.load(row + cols, mask=cols < n_cols, other=0.0)
    total += tl.sum(x, axis=0)
    # Second pass: subtract the mean.
    tl.store(out_ptr + tl.program_id(0) * n_cols + cols, x - total / n_cols, mask=cols < n_cols)


def center(x):
    out = torch.empty_like(x)
    rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=min(16, max(4, triton.next_power_of_2(x.shape[1]) // 256)))
    return out
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

# Past this many elements a whole row no longer fits the registers of one program (it spills).
MAX_ROW_HINT = 32768
_SIDE_EFFECTS = ("tl.store", "tl.atomic", "tl.debug_barrier")


class _ZeroVar(cst.CSTTransformer):
    """Substitute 0 for the loop variable and drop the resulting ``0 + x``."""

    def __init__(self, var: str):
        self.var = var

    def leave_Name(self, original_node, updated_node):
        return cst.Integer("0") if updated_node.value == self.var else updated_node

    def leave_BinaryOperation(self, original_node, updated_node):
        if isinstance(updated_node.operator, cst.Add):
            if isinstance(updated_node.left, cst.Integer) and updated_node.left.value == "0":
                return updated_node.right.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar) if updated_node.lpar else updated_node.right
            if isinstance(updated_node.right, cst.Integer) and updated_node.right.value == "0":
                return updated_node.left
        return updated_node


def _loop_shape(loop: cst.For) -> tuple[str, str, str] | None:
    """``for v in range(0, N, BLOCK)`` -> (v, N, BLOCK)."""
    it = loop.iter
    if not (isinstance(loop.target, cst.Name) and isinstance(it, cst.Call) and c.code(it.func) in ("range", "tl.range")):
        return None
    args = [a.value for a in it.args if a.keyword is None]
    if len(args) != 3 or len(it.args) != 3 or c.code(args[0]) != "0":
        return None
    if not isinstance(args[1], cst.Name) or not isinstance(args[2], cst.Name) or loop.orelse is not None:
        return None
    return loop.target.value, args[1].value, args[2].value


def _single_assign(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        a = statement.body[0]
        if isinstance(a, cst.Assign) and len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name):
            return a.targets[0].target.value, a.value
    return None


def dedupe(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Drop ``x = e`` when an earlier ``x = e`` still holds (no name of it reassigned, no store since if ``e`` loads)."""
    out: list[cst.BaseStatement] = []
    live: dict[str, tuple[str, set[str], bool]] = {}  # target -> (value code, names read, reads memory)
    carried: list[cst.EmptyLine] = []  # comments of dropped statements move to the next kept one
    for statement in statements:
        single = _single_assign(statement)
        if single is not None:
            target, value = single
            value_code = c.code(value)
            known = live.get(target)
            if known is not None and known[0] == value_code:
                carried.extend(statement.leading_lines)
                continue  # the same value is still in ``target``
        if carried:
            statement = statement.with_changes(leading_lines=[*carried, *statement.leading_lines])
            carried = []
        text = c.code(statement)
        written = c.bound_names(statement)
        side_effect = any(s in text for s in _SIDE_EFFECTS)
        for name in list(live):
            _code, reads, loads = live[name]
            if name in written or reads & written or (loads and side_effect):
                del live[name]
        if single is not None and not isinstance(statement, cst.For):
            target, value = single
            reads = c.names_in(value)
            if target not in reads:
                live[target] = (c.code(value), reads, "load" in c.code(value))
        out.append(statement)
    return out


_LENGTH_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)
# Autotune arguments that only shape the benchmarking of configs: without the decorator nothing is benchmarked.
_BENCH_ONLY_AUTOTUNE_ARGS = {"configs", "key", "warmup", "rep", "prune_configs_by", "reset_to_zero",
                             "restore_value", "cache_results", "use_cuda_graph", "do_bench"}
_CONFIG_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg"}


def _length_expression(kdef: cst.FunctionDef, kernel: Kernel, n_name: str, first_loop: cst.For) -> cst.BaseExpression:
    """What the loops' bound ``N`` is in kernel arguments: ``N`` itself, or the value of a local assigned
    once before the loops from arguments the kernel never reassigns (``group_size = (C // G) * HW``)."""
    if kernel.param(n_name) is not None:
        if n_name in c.bound_names(kdef.body):
            raise ActionError(f"the kernel reassigns {n_name}")
        return cst.Name(n_name)
    body = list(kdef.body.body)
    defining = [s for s in body[:body.index(first_loop)] if (a := _single_assign(s)) is not None and a[0] == n_name]
    assigned_in = [s for s in body if n_name in c.bound_names(s)]
    if len(defining) != 1 or assigned_in != defining:
        raise ActionError(f"{n_name} is neither a kernel argument nor a local assigned once before the loops")
    value = _single_assign(defining[0])[1]
    reassigned = c.bound_names(kdef.body)

    def plain(node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name):
            p = kernel.param(node.value)
            return p is not None and p.kind != "pointer" and node.value not in reassigned
        if isinstance(node, cst.Integer):
            return True
        if isinstance(node, cst.BinaryOperation):
            return isinstance(node.operator, _LENGTH_OPERATORS) and plain(node.left) and plain(node.right)
        return False

    if not plain(value):
        raise ActionError(f"{n_name} is not integer arithmetic (+ - * //) on kernel arguments")
    return value


class _HostNames(cst.CSTTransformer):
    """Replace kernel argument names by what the launch passes for them (parenthesised when compound)."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources

    def leave_Name(self, original_node, updated_node):
        source = self.sources.get(updated_node.value)
        if source is None:
            return updated_node
        value = c.expr(source)
        if isinstance(value, (cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation, cst.IfExp,
                              cst.Comparison, cst.Lambda)) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return value


def _removable_autotune(kdef: cst.FunctionDef, block: str, kernel: Kernel | None = None) -> cst.Decorator:
    """The ``@triton.autotune`` decorator when its configs choose only ``block`` (and launch options)."""
    decorator = next((d for d in kdef.decorators if isinstance(d.decorator, cst.Call)
                      and c.code(d.decorator.func).endswith("autotune")), None)
    found = c.autotune_configs(kdef)
    tune = kernel.autotune if kernel is not None else None
    if decorator is not None and found is None and tune is not None and tune.configs_known and not tune.configs_are_literal:
        # Configs built by code, read from the analysis (it evaluated them; only launch options besides
        # kwargs pass its evaluator): the whole decorator goes, the code that built them stays untouched.
        call = decorator.decorator
        if any(a.keyword is not None and a.keyword.value not in _BENCH_ONLY_AUTOTUNE_ARGS for a in call.args) or \
                sum(a.keyword is None for a in call.args) > 1 or any(cfg.hooks for cfg in tune.configs):
            raise ActionError("the autotune decorator has hooks that also run at launches")
        if any(set(cfg.kwargs) - {block} for cfg in tune.configs):
            raise ActionError(f"the autotune configs choose more than {block}")
        return decorator
    if decorator is None or found is None:
        why = f": {tune.configs_unknown_reason}" if tune is not None and tune.configs_unknown_reason else ""
        raise ActionError(f"the kernel is autotuned through configs this action cannot read{why}")
    call = decorator.decorator
    if any(a.keyword is None and a.value is not found[0] for a in call.args) or \
            any(a.keyword is not None and a.keyword.value not in _BENCH_ONLY_AUTOTUNE_ARGS for a in call.args):
        raise ActionError("the autotune decorator has hooks that also run at launches")
    for config in found[1]:
        meta = config.args[0].value if config.args and config.args[0].keyword is None else None
        if not isinstance(meta, cst.Dict) or any(a.keyword is None for a in config.args[1:]) or \
                any(a.keyword is not None and a.keyword.value not in _CONFIG_LAUNCH_OPTIONS for a in config.args):
            raise ActionError("an autotune config sets more than the block and launch options")
        for element in meta.elements:
            key = element.key if isinstance(element, cst.DictElement) else None
            if not isinstance(key, cst.SimpleString) or key.evaluated_value != block:
                raise ActionError(f"the autotune configs choose more than {block}")
    return decorator


def _heuristic_dropped(kdef: cst.FunctionDef, block: str) -> tuple[cst.Decorator, cst.Decorator | None]:
    """(the ``@triton.heuristics`` decorator, itself without ``block``'s entry, or None when that was its only one)."""
    found = c.heuristics_entry(kdef, block)
    if found is not None:
        decorator, arg, entry = found
        elements = list(arg.value.elements)  # type: ignore[union-attr]
        kept = [e for e in elements if e is not entry]
        if not kept:
            return decorator, None
        if elements[-1] is entry:
            kept[-1] = kept[-1].with_changes(comma=entry.comma)
        new_call = c.replace_all(decorator.decorator, [(arg, arg.with_changes(value=arg.value.with_changes(elements=kept)))])
        return decorator, decorator.with_changes(decorator=new_call)
    raise ActionError(f"@triton.heuristics sets {block} in a form this action cannot read")


def warps_for_row(n_source: str) -> str:
    """Host expression for the warps of a program that holds a whole row of ``n_source`` elements."""
    return f"min(16, max(4, triton.next_power_of_2({n_source}) // 256))"


def block_arg(launch: c.LaunchNode, kernel: Kernel, name: str) -> cst.Arg | None:
    """The argument (keyword or positional) that sets ``name`` at the launch."""
    return next((a for a in launch.call.args if c.arg_param(a, launch.call, kernel) == name), None)


class SinglePass:
    name = "single_pass"
    kind = "Tiling"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel):
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("needs exactly one launch of the kernel in this file")
        if kernel.calls_of("dot"):
            raise ActionError("a tl.dot loop is a reduction over K, not a row held in one block")
        loops = [s for s in kdef.body.body if isinstance(s, cst.For)]
        if not kernel.loops:
            raise ActionError("no loop over a row: each row is already one block")
        if not loops or any(l.depth > 1 for l in kernel.loops) or len(loops) != len(kernel.loops):
            raise ActionError("needs one or more top-level loops: a loop sits inside a branch or another loop")
        shapes = {_loop_shape(l) for l in loops}
        if None in shapes or len({(n, b) for _v, n, b in shapes}) != 1:
            raise ActionError("not every loop is `for v in range(0, N, BLOCK)` over the same N and BLOCK")
        _v, n_name, block = next(iter(shapes))
        if block not in kernel.constexpr_names:
            raise ActionError(f"{block} is not a constexpr")
        # BLOCK_N (columns) is a row's block too when it is the only block; beside a BLOCK_M it is a tile's
        # side, and a lone BLOCK_M or BLOCK_K steps down a column or a K, not along a row.
        role = c.block_role(block)
        if role not in ("1d", "n") or (role == "n" and any(c.is_block_name(n) for n in kernel.constexpr_names if n != block)):
            raise ActionError(f"{block} is not the block of a row")
        # An autotuned block goes with its decorator, a heuristic one with its entry: the launch sets the
        # one block of the whole row, which leaves nothing to tune or to compute.
        if block in kernel.heuristics and kernel.is_autotuned:
            raise ActionError(f"{block} is both autotuned and computed by @triton.heuristics")
        if block in kernel.heuristics:
            decorator, replacement = _heuristic_dropped(kdef, block)
        elif kernel.is_autotuned:
            decorator, replacement = _removable_autotune(kdef, block, kernel), None
        else:
            decorator = replacement = None
        wrapper = (decorator, replacement) if decorator is not None else None
        length = _length_expression(kdef, kernel, n_name, loops[0])
        for loop in loops:
            var = _loop_shape(loop)[0]
            if var in c.bound_names(loop.body):
                raise ActionError(f"the loop assigns its variable {var}")
            after = kdef.body.body[list(kdef.body.body).index(loop) + 1:]
            if any(var in c.names_in(s) and not (isinstance(s, cst.For) and _loop_shape(s)[0] == var) for s in after):
                raise ActionError(f"{var} is read after its loop")
        launch = launches[0]
        if block in c.names_in(c.grid_expression(launch)):
            raise ActionError("the grid depends on the block size")
        how, _node = c.binding_of(launch, kernel, block)
        arg = block_arg(launch, kernel, block)
        if how not in ("literal", "host", "default") or (arg is None and how != "default"):
            raise ActionError(f"the launch computes {block}")
        if arg is not None and isinstance(arg.value, cst.Name) and arg.value.value in c.names_in(c.grid_expression(launch)):
            raise ActionError("the grid depends on the block size")
        if arg is not None and isinstance(arg.value, cst.Name) and launch.host is not None and \
                c.count_name(launch.host, arg.value.value) > 2:
            # Another host line reads the block (rows_per_program's BLOCK_M = ... // BLOCK_SIZE): a new block at the
            # launch would leave that value computed from the old one.
            raise ActionError(f"the host also computes other values from {arg.value.value}; the step would leave them stale")
        site = analysis.launches_of(kernel.name)[0]
        sources = {}
        for name in sorted(c.names_in(length)):
            passed = site.arg(name)
            if passed is None:
                raise ActionError(f"the launch does not pass {name}")
            sources[name] = passed.source
        n_source = c.code(length.visit(_HostNames(sources))) if not isinstance(length, cst.Name) else sources[n_name]
        return kdef, launch, loops, block, n_source, wrapper

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            _kdef, _launch, loops, block, n_source, _wrapper = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        passes = f"{len(loops)} passes" if len(loops) > 1 else "the loop"
        return [Candidate(self.name, self.kind, kernel.name, {},
                          f"Read each row once: {passes} -> one block of {block}=next_power_of_2({n_source})",
                          kernel.loops[0].span.start.line)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something): the first precondition refused."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError as exc:
            return str(exc)
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        if params:
            raise ActionError(f"single_pass takes no parameters, got {sorted(params)}")
        module = c.parse(text)
        kdef, launch, loops, block, n_source, wrapper = self._plan(module, analysis, kernel)
        body: list[cst.BaseStatement] = []
        for statement in kdef.body.body:
            if isinstance(statement, cst.For) and statement in loops:
                inner = [s.visit(_ZeroVar(_loop_shape(statement)[0])) for s in statement.body.body]
                inner[0] = inner[0].with_changes(leading_lines=[*statement.leading_lines, *inner[0].leading_lines])
                body.extend(inner)
            else:
                body.append(statement)
        body = dedupe(body)
        new_kdef = kdef.with_changes(body=kdef.body.with_changes(body=body))
        if wrapper is not None:
            old_decorator, new_decorator = wrapper
            decorators = [new_decorator if d is old_decorator else d for d in kdef.decorators]
            new_kdef = new_kdef.with_changes(decorators=[d for d in decorators if d is not None])
            if new_decorator is None and kdef.decorators[0] is old_decorator:  # what is above the kernel stays
                new_kdef = new_kdef.with_changes(leading_lines=[*kdef.leading_lines, *old_decorator.leading_lines])
        value = c.expr(f"triton.next_power_of_2({n_source})")
        old_arg = block_arg(launch, kernel, block)
        if old_arg is not None and old_arg.keyword is None:  # passed positionally: replace it where it is
            new_call = c.replace_all(launch.call, [(old_arg, old_arg.with_changes(value=value))])
        else:
            new_call = c.set_kwarg(launch.call, block, value)
        # The whole row is one block now: give it the warps of the Triton tutorial's softmax (4 up to
        # 1024 elements, 8 at 2048, 16 from 4096), never the 1 or 2 warps a looping kernel may have used.
        new_call = c.set_kwarg(new_call, "num_warps", c.expr(warps_for_row(n_source)))
        pairs = [(kdef, new_kdef), (launch.call, new_call)]
        notes = [f"rows longer than about {MAX_ROW_HINT} elements spill registers in one block"]
        if old_arg is not None and isinstance(old_arg.value, cst.Name) and launch.host is not None:
            host_var = old_arg.value.value
            assign = c.any_assignment(launch.host, host_var)
            line = c.statement_holding(launch.host, assign) if assign is not None else None
            if line is not None and len(line.body) == 1 and c.count_name(launch.host, host_var) == 2:
                pairs.append((line, cst.RemovalSentinel.REMOVE))  # its assignment and this launch: now dead
        old_warps = c.kwarg(launch.call, "num_warps")
        if old_warps is not None and isinstance(old_warps.value, cst.Name) and launch.host is not None:
            assign = c.any_assignment(launch.host, old_warps.value.value)
            line = c.statement_holding(launch.host, assign) if assign is not None else None
            if line is not None and len(line.body) == 1 and c.count_name(launch.host, old_warps.value.value) == 2:
                pairs.append((line, cst.RemovalSentinel.REMOVE))
        module = c.replace_all(module, pairs)
        return c.finish(text, module, f"single pass over each row in {kernel.name}", notes)


ACTION = SinglePass()
