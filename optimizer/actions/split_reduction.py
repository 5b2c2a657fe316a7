"""Split a reduction loop: SPLIT programs each walk every SPLIT-th block of the loop and add their partial sums.

A column sum over a tall matrix (a bias or LayerNorm weight gradient: ``dw = sum over rows of dy * xhat``)
launches one program per column block, often fewer programs than the GPU has SMs, and each walks every
row. This adds a grid axis: program ``pid_split`` takes the blocks ``pid_split, pid_split + SPLIT, ...``
of the loop and adds what it summed into the outputs with ``tl.atomic_add``; the outputs are allocated
zeroed, in fp32 when they may be half precision (cast once after the launch). Offered when the loop (one
top-level ``range`` loop, no ``tl.dot``: that is split_k's) carries only sums, ``acc += <per-block value>``
started at zero, and pointers stepped by loop-invariant amounts; each sum reaches one ``tl.store`` through
linear steps only (``tl.sum`` along any axis, a cast, a product or quotient by a value that is not a sum:
a mean), which is what makes adding the partial results equal to the whole; the kernel stores nothing
else; each output is allocated with ``torch.empty`` in the launching function and never read by the kernel;
the grid is a tuple of one or two axes. The sum's order changes (atomics), so results match within the
dtype's tolerance, not bit for bit.

Example: kernel=col_sum_kernel target=h100 params={"SPLIT": 8}

```python before
@triton.jit
def col_sum_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        acc += tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr + cols, total.to(tl.float16), mask=cols < N)


def col_sum(x):
    M, N = x.shape
    out = torch.empty((N,), device=x.device, dtype=torch.float16)
    col_sum_kernel[(triton.cdiv(N, 64),)](x, out, M, N, BLOCK_M=32, BLOCK_N=64)
    return out
```

```python after
@triton.jit
def col_sum_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    pid_split = tl.program_id(1)
    for start in range(pid_split * BLOCK_M, M, SPLIT * BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        acc += tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.atomic_add(out_ptr + cols, total, mask=cols < N)


def col_sum(x):
    M, N = x.shape
    out = torch.zeros((N,), device=x.device, dtype=torch.float32)
    col_sum_kernel[(triton.cdiv(N, 64), 8)](x, out, M, N, BLOCK_M=32, BLOCK_N=64, SPLIT=8)
    out = out.to(torch.float16)
    return out
```
"""

from __future__ import annotations

import libcst as cst

from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError
from .split_k import SplitK, _is_tl

_SCALINGS = (cst.Multiply, cst.Divide)


class SplitReduction(SplitK):
    name = "split_reduction"
    split_param = "SPLIT"
    pid_name = "pid_split"
    splits = (8, 4, 16)  # best first: a column reduction's grid is often a few dozen programs
    _no_loop = "no single top-level loop that only sums (a tl.dot loop is split_k's)"
    _iterations = "loop iterations"

    def _loops(self, body: list[cst.BaseStatement]) -> list[cst.For]:
        return [s for s in body if isinstance(s, cst.For) and "dot(" not in c.code(s.body)
                and any(isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign)
                        and "load(" in c.code(small.value)
                        for line in s.body.body if isinstance(line, cst.SimpleStatementLine) for small in line.body)]

    def _accumulates(self, value: cst.BaseExpression, variant: set[str]) -> bool:
        return "dot(" not in c.code(value) and bool(c.names_in(value) & variant or "load(" in c.code(value))

    def _check_accumulators(self, accumulators: list[str]) -> None:
        if not accumulators:
            raise ActionError("the loop sums nothing")
        if len(set(accumulators)) != len(accumulators):
            raise ActionError("an accumulator is added to twice in one iteration")

    def _final_stores(self, after: list[cst.BaseStatement], accumulators: list[str]) -> list[cst.Call]:
        """One ``tl.store`` per sum, reached through linear steps only."""
        carries = set(accumulators)
        reached: dict[str, str] = {acc: acc for acc in accumulators}  # name -> the sum it carries
        stores: dict[str, cst.Call] = {}
        for statement in after:
            if not isinstance(statement, cst.SimpleStatementLine):
                if c.names_in(statement) & carries:
                    raise ActionError("a sum is used inside a block after the loop")
                continue
            for small in statement.body:
                used = c.names_in(small) & carries
                if not used:
                    continue
                if isinstance(small, cst.Expr) and _is_tl(small.value, "store"):
                    call = small.value
                    value = call.args[1].value if len(call.args) > 1 and call.args[1].keyword is None else None
                    if value is None or c.names_in(call.args[0].value) & carries:
                        raise ActionError("a sum's store is not tl.store(pointer, value, ...)")
                    source = self._linear_source(value, carries)
                    if any(a.keyword is not None and a.keyword.value != "mask" for a in call.args) or len(call.args) > 3:
                        raise ActionError("the store has options tl.atomic_add does not take")
                    if reached[source] in stores:
                        raise ActionError(f"{reached[source]} is stored twice")
                    stores[reached[source]] = call
                elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    source = self._linear_source(small.value, carries)
                    name = small.targets[0].target.value
                    if name in carries:
                        raise ActionError(f"{name} is assigned twice after the loop")
                    carries.add(name)
                    reached[name] = reached[source]
                else:
                    raise ActionError("a sum is used after the loop other than summed, scaled, cast and stored")
        missing = [acc for acc in accumulators if acc not in stores]
        if missing:
            raise ActionError(f"{', '.join(missing)} does not reach a tl.store")
        return [stores[acc] for acc in accumulators]

    @staticmethod
    def _linear_source(value: cst.BaseExpression, carries: set[str]) -> str:
        """The one carried name ``value`` is a linear function of: ``tl.sum(x, axis=...)``, ``x.to(...)``,
        ``x * s``, ``s * x``, ``x / s`` with ``s`` free of sums; refuses anything else."""
        node = c.unparen(value)
        while True:
            if isinstance(node, cst.Name):
                if node.value not in carries:
                    break
                return node.value
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
                if any(c.names_in(a.value) & carries for a in node.args):
                    break
                node = c.unparen(node.func.value)
            elif isinstance(node, cst.Call) and _is_tl(node, "sum") and node.args and node.args[0].keyword is None:
                rest = [a for a in node.args[1:] if a.keyword is None or a.keyword.value in ("axis", "keep_dims")]
                if len(rest) != len(node.args) - 1 or any(c.names_in(a.value) & carries for a in rest):
                    break
                node = c.unparen(node.args[0].value)
            elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _SCALINGS):
                left, right = c.names_in(node.left) & carries, c.names_in(node.right) & carries
                if left and not right:
                    node = c.unparen(node.left)
                elif right and not left and isinstance(node.operator, cst.Multiply):
                    node = c.unparen(node.right)
                else:
                    break
            else:
                break
        raise ActionError("a sum is transformed after the loop by more than a sum, a scale or a cast "
                          "(that step would apply to each split's part)")

    def _title(self, split: int, target: GpuProfile) -> str:
        return (f"Split the reduction loop over {self.split_param}={split} programs (atomic adds) "
                f"for grids with few programs on {target.key.upper()}")


ACTION = SplitReduction()
