"""Autotune: wrap a kernel in ``@triton.autotune`` with a compact config set for the target.

The configs cover the block sizes (plus ``num_warps``/``num_stages``), pruned by the target's
shared memory and registers, and the launch's own tile last (no size the file ran at gets slower); ``key`` names the size arguments the kernel masks or loops against.
The autotuned arguments leave the launch sites, and a grid that read the block sizes becomes a
``lambda META:`` over them. Offered when every block size is tunable (see tiling) and set at the
launches by keyword, a host constant or the default; where every launch computes its blocks from the row
(``calculate_settings(n)``, ``triton.next_power_of_2(n)``), the configs set only ``num_warps`` (2-32) and the
launch keeps its blocks. A kernel jitted by a call (``f = triton.jit(f)``)
gets the autotuner around that call: ``f = triton.autotune(configs=[...], key=[...])(triton.jit(f))``.

Example: kernel=scale_kernel target=h100 params={"configs": 5}

```python before
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x):
    out = torch.empty_like(x)
    BLOCK = 128
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK, num_warps=4)
    return out
```

```python after
@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 1024}, num_warps=4),
        triton.Config({"BLOCK": 2048}, num_warps=4),
        triton.Config({"BLOCK": 2048}, num_warps=8),
        triton.Config({"BLOCK": 4096}, num_warps=8),
        triton.Config({"BLOCK": 128}, num_warps=4),
    ],
    key=["n"],
)
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[lambda META: (triton.cdiv(x.numel(), META["BLOCK"]),)](x, out, x.numel())
    return out
```
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..checks.bindings import CheckContext
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .tiling import TILES_2D

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) by architecture; pruned per target below.
DOT_CONFIGS: dict[int, list[tuple[int, int, int, int, int]]] = {
    90: [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 64, 4, 3)],
    80: [(128, 256, 32, 8, 3), (128, 128, 32, 4, 4), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4), (64, 64, 32, 4, 4)],
    70: [(128, 128, 32, 8, 2), (64, 128, 32, 4, 2), (64, 64, 32, 4, 2), (32, 64, 32, 4, 2)],
}
# An fp32 tl.dot pinned to IEEE precision runs on FMA units: smaller tiles than the tensor cores' (tiling.FMA_TILES);
# the five best of the H200 sweep (results/h200/fma_tiles/).
FMA_DOT_CONFIGS: list[tuple[int, int, int, int, int]] = [
    (64, 64, 32, 4, 3), (64, 64, 32, 4, 2), (128, 64, 32, 4, 3), (128, 128, 16, 4, 2), (64, 64, 16, 2, 2)]
ROW_CONFIGS = [(1024, 4), (2048, 4), (2048, 8), (4096, 8)]
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # a Config sets these; the launch may not too


def _size_keys(kernel: Kernel, text: str) -> list[str]:
    """Scalar arguments the kernel compares indices with or loops up to (what the best config depends on)."""
    body = kernel.body_span.text(text)
    loops = " ".join(" ".join(l.iter_args) for l in kernel.loops)
    keys = []
    for p in kernel.params:
        if p.kind != "scalar" or p.name.startswith("stride"):
            continue
        compared = re.search(rf"[<>]=?\s*{p.name}\b|\b{p.name}\s*[<>]", body)
        if compared or re.search(rf"\b{p.name}\b", loops):
            keys.append(p.name)
    return keys


class _MetaNames(cst.CSTTransformer):
    """Host names and repeated literals of a grid -> ``META["BLOCK"]``."""

    def __init__(self, mapping: dict[str, str], literal: dict | None = None, meta: str = "META"):
        self.mapping = mapping
        self.literal = literal or {}
        self.meta = meta  # the grid lambda's own name for its argument (``lambda meta: ...``)

    def leave_Name(self, original_node, updated_node):
        if updated_node.value in self.mapping:
            return c.expr(f'{self.meta}["{self.mapping[updated_node.value]}"]')
        return updated_node

    def leave_Integer(self, original_node, updated_node):
        site = self.literal.get(id(original_node))
        if site is None:
            return updated_node
        return c.expr(f'{self.meta}["{site.block}"]' + (f" - {-site.offset}" if site.offset else ""))


def _without_tuned(call: cst.Call, kernel: Kernel, names: set[str]) -> cst.Call:
    """``call`` without the autotuned arguments; positional ones after a removed one become keywords."""
    args = []
    removed_positional = False
    for arg in call.args:
        param = c.arg_param(arg, call, kernel)
        if param in names:
            removed_positional = removed_positional or arg.keyword is None
            continue
        if removed_positional and arg.keyword is None:
            if arg.star or param is None:
                raise ActionError("an autotuned argument is passed positionally before *args")
            arg = arg.with_changes(keyword=cst.Name(param), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        args.append(arg)
    if args and call.args and args[-1] is not call.args[-1]:
        args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
    return call.with_changes(args=args)


class Autotune:
    name = "autotune"
    kind = "Autotune"
    changes_numerics = False

    def _configs(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> tuple[list[str], list[str], c.TilePlan]:
        plan = c.tile_plan(analysis, kernel)
        blocks = list(plan.params.values())
        if not blocks or not all(b.tunable for b in blocks):
            warps_only = _warps_only_configs(analysis, kernel, plan)
            if warps_only is not None:
                return warps_only, _size_keys(kernel, analysis.text), plan
            reasons = "; ".join(f"{b.name}: {b.reason}" for b in blocks if not b.tunable)
            raise ActionError(f"block sizes are not all tunable ({reasons or 'none found'})")
        spread = c.spread_launches(analysis, kernel)
        if spread:  # the configs would set what the dict passes too (Triton: conflicting meta-parameters)
            raise ActionError(f"a launch passes {spread}: the autotuner's configs cannot take over its values")
        flagged = sorted({f for b in blocks for f in b.even_flags})
        if flagged:  # the launch computes them from the host's block constant, which the configs would bypass
            raise ActionError(f"{', '.join(flagged)} at the launch read the host's block size, which configs would not set")
        keys = _size_keys(kernel, analysis.text)
        if not keys:
            raise ActionError("no size argument to key the tuning on")
        configs: list[str] = []
        if plan.has_dot:
            roles = {b.role: b.name for b in blocks}
            if set(roles) != {"m", "n", "k"} or len(blocks) != 3:
                raise ActionError("a tl.dot kernel needs exactly BLOCK_M, BLOCK_N and BLOCK_K to autotune")
            elem = c.element_bytes(analysis.text)
            bucket = 90 if target.arch >= 90 else 80 if target.arch >= 80 else 70
            for bm, bn, bk, warps, stages in (FMA_DOT_CONFIGS if plan.exact_dot else DOT_CONFIGS[bucket]):
                if c.dot_shared_bytes(bm, bn, bk, stages, elem) > target.max_shared_per_block:
                    continue
                if bm * bn // (32 * warps) > c.MAX_ACC_REGS_PER_THREAD:
                    continue
                values = {roles["m"]: bm, roles["n"]: bn, roles["k"]: bk}
                configs.append(f"triton.Config({_dict(values)}, num_warps={warps}, num_stages={stages})")
        elif len(blocks) == 2:  # a 2-D tile without tl.dot (transpose, 2-D reductions)
            for first, second in TILES_2D:
                configs.append(f"triton.Config({_dict({blocks[0].name: first, blocks[1].name: second})}, num_warps=4)")
        else:
            if len(blocks) != 1:
                raise ActionError("autotune handles one or two block sizes for kernels without tl.dot")
            for block, warps in ROW_CONFIGS:
                configs.append(f"triton.Config({_dict({blocks[0].name: block})}, num_warps={warps})")
        if not configs:
            raise ActionError(f"no config fits {target.name}")
        current = _current_config(analysis, kernel, plan, blocks)
        if current is not None and current not in configs:
            # The launch's own tile stays a choice: no size the file ran at gets a slower config than it had.
            configs.append(current)
        return configs, keys, plan

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            configs, keys, _plan = self._configs(analysis, kernel, target)
        except ActionError:
            return []
        return [Candidate(self.name, self.kind, kernel.name, {"configs": len(configs)},
                          f"Autotune {kernel.name} over {len(configs)} configs for {target.key.upper()} (key: {', '.join(keys)})",
                          c.kernel_line(kernel))]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        try:
            self._configs(analysis, kernel, target)
        except ActionError as exc:
            return str(exc)
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        configs, keys, plan = self._configs(analysis, kernel, target)
        wanted = params.get("configs", len(configs))
        if not isinstance(wanted, int) or wanted < 1:
            raise ActionError(f"configs={wanted!r}: give how many configs to keep (1..{len(configs)})")
        configs = configs[:wanted]
        module = c.parse(text)
        kdef, launches = c.locate(module, kernel.name)
        block_names = set() if _tunes_warps_only(configs) else set(plan.params)
        pairs: list[tuple[cst.CSTNode, object]] = []
        dead_host: list[tuple[cst.FunctionDef, cst.Assign]] = []
        for launch in launches:
            mapping: dict[str, str] = {}  # host name in the grid -> block parameter
            for name in block_names:
                how, node = c.binding_of(launch, kernel, name)
                if how == "host":
                    mapping[node.targets[0].target.value] = name
                elif how == "param":  # the helper's parameter stays (with its default); the grid reads META
                    mapping[node.name.value] = name
                elif how == "callers":  # the same: callers still pass it, the configs choose the block
                    mapping[node.param.name.value] = name
                elif how not in ("literal", "default"):
                    raise ActionError(f"the launch sets {name} in a way autotune cannot take over")
            sites, why = c.grid_literal_sites(launch, kernel, c.launch_values(launch, kernel), shared_ok=True)
            literal = {id(site.node): site for site in sites if site.block in block_names}
            new_call = _without_tuned(launch.call, kernel, block_names | set(LAUNCH_OPTIONS))
            grid_node = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
            grid = c.grid_expression(launch)
            body = grid.body if isinstance(grid, cst.Lambda) else grid
            meta = grid.params.params[0].name.value if isinstance(grid, cst.Lambda) else "META"
            new_body = body.visit(_MetaNames(mapping, literal, meta)) if mapping or literal else body
            for host_name in mapping:
                assign = c.any_assignment(launch.host, host_name) if launch.host is not None else None
                reads = c.count_name(grid, host_name) + sum(
                    c.count_name(a.value, host_name) for a in launch.call.args if c.arg_param(a, launch.call, kernel) in block_names)
                if assign is not None and c.count_name(launch.host, host_name) == 1 + reads:
                    dead_host.append((launch.host, assign))
            if not set(mapping) & c.names_in(grid) and not literal and not isinstance(grid, cst.Lambda):
                pairs.append((launch.call, new_call))  # the grid does not depend on the block sizes
                continue
            new_grid = c.expr(f"lambda {meta}: {c.code(new_body)}")
            if grid is not grid_node and c.count_name(launch.host, grid_node.value) == 2:
                pairs.append((grid, new_grid))  # ``grid = ...`` used by this launch only
            else:
                new_call = new_call.with_changes(func=new_call.func.with_changes(
                    slice=[new_call.func.slice[0].with_changes(slice=cst.Index(new_grid))]))
            pairs.append((launch.call, new_call))
        for host, assign in dead_host:
            statement = c.statement_holding(host, assign)
            if statement is not None and len(statement.body) == 1:
                pairs.append((statement, cst.RemovalSentinel.REMOVE))
        restore = rewritten_pointers(analysis, kernel, target)
        decorator_code = "@triton.autotune(\n    configs=[\n" + "".join(f"        {cfg},\n" for cfg in configs) + \
            f"    ],\n    key=[{', '.join(_quoted(keys))}],\n" + \
            (f"    restore_value=[{', '.join(_quoted(restore))}],\n" if restore else "") + ")\n"
        if kernel.jit_call is not None:  # ``f = triton.jit(f)``: the autotuner wraps that call instead
            jit = _jitting_call(module, kernel.name)
            pairs.append((jit, c.expr(f"{decorator_code[1:].rstrip()}({c.code(jit)})")))
            module = c.replace_all(module, pairs)
            return c.finish(text, module, f"autotune {kernel.name} over {len(configs)} configs keyed on {', '.join(keys)}")
        decorator = cst.parse_module(decorator_code + "def _f():\n    pass\n").body[0].decorators[0]
        decorators = list(kdef.decorators)
        # Above the first Triton decorator, @triton.heuristics included: the autotuner must run first, so that
        # a heuristic reading an autotuned block (EVEN_K from BLOCK_K) sees the config's value.
        jit_index = next(i for i, d in enumerate(decorators) if "jit" in c.code(d.decorator) or "heuristics" in c.code(d.decorator))
        decorators.insert(jit_index, decorator)
        if jit_index == 0:
            decorators[0] = decorators[0].with_changes(leading_lines=decorators[1].leading_lines)
            decorators[1] = decorators[1].with_changes(leading_lines=[])
        pairs.append((kdef, kdef.with_changes(decorators=decorators)))
        module = c.replace_all(module, pairs)
        return c.finish(text, module, f"autotune {kernel.name} over {len(configs)} configs keyed on {', '.join(keys)}")


def _jitting_call(module: cst.Module, name: str) -> cst.Call:
    """The one ``triton.jit(name)`` / ``triton.jit(...)(name)`` call that makes the kernel ``name``."""
    found: list[cst.Call] = []

    class Find(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            positional = [a for a in node.args if a.keyword is None]
            func = node.func.func if isinstance(node.func, cst.Call) else node.func
            if (len(positional) == 1 and isinstance(positional[0].value, cst.Name) and positional[0].value.value == name
                    and not positional[0].star and c.code(func).split(".")[-1] == "jit"):
                found.append(node)

    module.visit(Find())
    if len(found) != 1:
        raise ActionError(f"{name} is jitted by {len(found)} calls here; expected one `triton.jit({name})`")
    return found[0]


def _current_config(analysis: FileAnalysis, kernel: Kernel, plan: c.TilePlan, blocks: list[c.BlockParam]) -> str | None:
    """The launch's own blocks, warps and stages as a ``triton.Config`` written like the others (None when a value is
    computed at run time or differs between launches)."""
    if any(not isinstance(b.value, int) for b in blocks):
        return None
    _kdef, launches = c.locate(c.parse(analysis.text), kernel.name)
    if not launches or not all(c.option_settable(launch, "num_warps") and c.option_settable(launch, "num_stages")
                               for launch in launches):
        return None  # a computed num_warps or num_stages is not what the plan reads
    values = {b.name: b.value for b in blocks}
    if plan.has_dot:
        roles = {b.role: b.name for b in blocks}
        values = {roles[r]: values[roles[r]] for r in "mnk"}
        stages = plan.num_stages or c.DEFAULT_NUM_STAGES
        return f"triton.Config({_dict(values)}, num_warps={plan.num_warps}, num_stages={stages})"
    stages = f", num_stages={plan.num_stages}" if plan.num_stages else ""
    return f"triton.Config({_dict(values)}, num_warps={plan.num_warps}{stages})"


# Warp counts tried when the launch computes its block from the row (Liger's and unsloth's calculate_settings,
# ``triton.next_power_of_2(n)``): the block stays the launch's, the autotuner picks the warps per size.
WARPS_ONLY = (2, 4, 8, 16, 32)


def _warps_only_configs(analysis: FileAnalysis, kernel: Kernel, plan: c.TilePlan) -> list[str] | None:
    """Configs that set only ``num_warps`` when every block is computed at run time at every launch (a size of
    the row, not a constant the configs could choose) and the warps are a constant or computed too; None
    otherwise. Keyed on the sizes, each row length gets its own warp count."""
    module = c.parse(analysis.text)
    _kdef, launches = c.locate(module, kernel.name)
    if kernel.is_autotuned or not launches or not plan.params or plan.has_dot or c.spread_launches(analysis, kernel):
        return None
    for launch in launches:
        for name in plan.params:
            how, _node = c.binding_of(launch, kernel, name)
            if how != "other":
                return None
        stages = c.kwarg(launch.call, "num_stages")
        if stages is not None or any(c.kwarg(launch.call, o) is not None for o in ("num_ctas", "maxnreg")):
            return None
    if not _size_keys(kernel, analysis.text):
        return None
    return [f"triton.Config({{}}, num_warps={w})" for w in WARPS_ONLY]


def _tunes_warps_only(configs: list[str]) -> bool:
    return all(cfg.startswith("triton.Config({},") for cfg in configs)


def _quoted(names: list[str]) -> list[str]:
    return [f'"{name}"' for name in names]


def rewritten_pointers(analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[str]:
    """Pointer parameters a run of the kernel changes in a way the next run reads: written by an atomic, or
    loaded and stored (in place). The autotuner times every config on the real arguments, so without
    ``restore_value`` each timed run adds into, or rewrites, what the real run then starts from (an
    embedding backward's ``tl.atomic_add`` into a zeroed table came out 16x the reference)."""
    facts = CheckContext(analysis, target).facts(kernel)  # the memory ops and assignments the mask check reads
    if facts is None:
        return []
    pointers = {p.name for p in kernel.params if p.kind == "pointer"}

    def bases(expr: ast.AST) -> set[str]:
        """The pointer parameters ``expr`` addresses from, through the names it is built from; a loaded value
        (an index read from another buffer) is data, not an address base."""
        found, stack, seen = set(), [expr], set()
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call) and facts.tl_op(node.func) == "load":
                continue
            if isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                found |= {node.id} & pointers
                stack.extend(facts.assignments.get(node.id, []))
            stack.extend(ast.iter_child_nodes(node))
        return found

    by_op: dict[str, set[str]] = {"load": set(), "store": set(), "atomic": set()}
    for op in facts.memory_ops:
        kind = "atomic" if op.op.startswith("atomic_") else op.op
        if kind in by_op and op.pointer is not None:
            by_op[kind] |= bases(op.pointer)
    return sorted(by_op["atomic"] | (by_op["load"] & by_op["store"]))


def _dict(values: dict[str, int]) -> str:
    return "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"


ACTION = Autotune()
