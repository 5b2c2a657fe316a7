"""Name the block size: a literal block size repeated in the grid becomes one host constant both read.

``kernel[(triton.cdiv(n, 64),)](..., BLOCK=64)`` says the same number twice; the step puts
``BLOCK = 64`` before the launch (before ``grid = ...`` when the grid is a name) and lets the grid
and the launch read it, positional or keyword, so later steps (tiling, autotune) and readers change
it in one place. Every number it replaces must stand for that block: the divisor of a ``cdiv`` or
of ``(n + 63) // 64`` (the 63 becomes ``BLOCK - 1``), told apart from other blocks of the same value
by the size the kernel masks against them or by the grid axis. Nothing else changes.

Example: kernel=scale_kernel target=h100 params={"param": "BLOCK"}

```python before
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x):
    out = torch.empty_like(x)
    # one program per 64 elements
    scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out
```

```python after
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x):
    out = torch.empty_like(x)
    # one program per 64 elements
    BLOCK = 64
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
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


class _Rewrite(cst.CSTTransformer):
    """Replace nodes by identity and put ``before`` in front of the anchor statement (keeping its comments first)."""

    def __init__(self, replace: dict[int, cst.CSTNode], anchor: cst.CSTNode, before: cst.SimpleStatementLine):
        self.replace = replace
        self.anchor = anchor
        self.before = before

    def on_leave(self, original_node, updated_node):
        if id(original_node) in self.replace:
            return self.replace[id(original_node)]
        if original_node is self.anchor:
            first = self.before.with_changes(leading_lines=updated_node.leading_lines)
            return cst.FlattenSentinel([first, updated_node.with_changes(leading_lines=[])])
        return updated_node


class NameBlock:
    name = "name_block"
    kind = "Prepare"  # a readability step that changes no behaviour: ranked after the steps that do
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def _plan(self, module: cst.Module, kernel: Kernel, param: str):
        """(launch, literal arg, grid sites, anchor statement, constant name, value) or ActionError."""
        if kernel.is_autotuned:
            raise ActionError("the kernel is autotuned: its configs set the block sizes")
        _kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("needs exactly one launch of the kernel")
        launch = launches[0]
        if launch.host is None:
            raise ActionError("the launch is at module level")
        how, arg = c.binding_of(launch, kernel, param)
        if how != "literal":
            raise ActionError(f"the launch does not pass {param} as a literal")
        value = int(arg.value.evaluated_value)
        sites, why = c.grid_literal_sites(launch, kernel, c.launch_values(launch, kernel))
        mine = [s for s in sites if s.block == param]
        if why or not mine:
            raise ActionError(why or f"the grid does not repeat {param}'s {value}")
        grid = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
        anchor = _compound_holding(launch.host, launch.call)
        if isinstance(grid, cst.Name):
            assign = c.any_assignment(launch.host, grid.value)
            if assign is None:
                raise ActionError(f"the grid {grid.value} is not assigned in {launch.host.name.value}")
            anchor = c.statement_holding(launch.host, assign)
        if anchor is None:
            raise ActionError("cannot find the statement that holds the launch")
        name = next((n for n in (param, param.upper(), f"{kernel.name.upper()}_{param.upper()}")
                     if count_free(launch, n)), None)
        if name is None:
            raise ActionError(f"no free host name for {param}")
        return launch, arg, mine, anchor, name, value

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        module = c.parse(analysis.text)
        out = []
        for p in kernel.params:
            if p.kind != "constexpr" or not c.is_block_name(p.name):
                continue
            try:
                _launch, _arg, _sites, _anchor, name, value = self._plan(module, kernel, p.name)
            except ActionError:
                continue
            site = analysis.launches_of(kernel.name)[0]
            out.append(Candidate(self.name, self.kind, kernel.name, {"param": p.name},
                                 f"Name the block size: {name} = {value} for the grid and the launch of {kernel.name}",
                                 site.span.start.line))
        return out

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        module = c.parse(analysis.text)
        reasons: dict[str, list[str]] = {}  # reason -> the blocks it refuses
        for p in kernel.params:
            if p.kind == "constexpr" and c.is_block_name(p.name):
                try:
                    self._plan(module, kernel, p.name)
                except ActionError as exc:
                    reasons.setdefault(str(exc), []).append(p.name)
                else:
                    return None
        return "; ".join(f"{', '.join(names)}: {why}" for why, names in reasons.items()) or \
            "the kernel has no block-size parameter"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        param = params.get("param")
        if not isinstance(param, str) or kernel.param(param) is None:
            raise ActionError(f"name_block needs params {{'param': a block-size parameter of {kernel.name}}}")
        module = c.parse(text)
        launch, arg, sites, anchor, name, value = self._plan(module, kernel, param)
        replace: dict[int, cst.CSTNode] = {id(arg): arg.with_changes(value=cst.Name(name))}
        for site in sites:
            replace[id(site.node)] = c.expr(f"({name} - {-site.offset})") if site.offset else cst.Name(name)
        constant = c.stmt(f"{name} = {value}\n")
        module = module.visit(_Rewrite(replace, anchor, constant))
        return c.finish(text, module, f"named {kernel.name}'s {param}: {name} = {value} in the grid and the launch")


def count_free(launch: c.LaunchNode, name: str) -> bool:
    """True when neither the host function nor the module uses ``name`` yet."""
    host_free = launch.host is None or c.count_name(launch.host, name) == 0
    module_free = launch.module is None or not any(
        name in c.names_in(s) for s in launch.module.body if not isinstance(s, cst.FunctionDef | cst.ClassDef))
    return host_free and module_free and name not in ("triton", "tl", "torch")


def _compound_holding(root: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """The innermost statement (of any kind) that holds ``node``, for a launch inside e.g. a ``return``."""
    found: list[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def __init__(self):
            self.stack: list[cst.CSTNode] = []

        def on_visit(self, n: cst.CSTNode) -> bool:
            if n is node and self.stack:
                found.append(self.stack[-1])
                return False
            if isinstance(n, cst.BaseStatement):
                self.stack.append(n)
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            if self.stack and self.stack[-1] is original_node:
                self.stack.pop()

    root.visit(V())
    return found[0] if found else None


ACTION = NameBlock()
