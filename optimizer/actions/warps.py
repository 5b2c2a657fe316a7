"""Warps: set ``num_warps`` at the launch sites, sized to the tile each program works on.

Offered for values that give every thread work (32 x num_warps <= elements of the largest tile) and,
for ``tl.dot`` kernels, keep the fp32 accumulator between 16 and 128 values per thread. A kernel without a block
named as one (``BLOCK``, ``TILE``) is sized by the kernel model: the largest tile a load or store indexes with
``tl.arange`` (``tl.arange(0, HALF)`` with ``HALF=64`` at the launch: 64 elements). A launch
that computes ``num_warps`` is left alone (the action does not offer itself).

Example: kernel=scale_kernel target=h100 params={"num_warps": 8}

```python before
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)
    return out
```

```python after
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096, num_warps=8)
    return out
```
"""

from __future__ import annotations


import sympy as sp

from ..analysis import FileAnalysis, Kernel
from ..analysis.kernel_model import kernel_model
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

WARPS = (2, 4, 8, 16)


def _model_tile(analysis: FileAnalysis, kernel: Kernel) -> int | None:
    """Elements of the largest tile an access of ``kernel`` works on, its arange extents taken at the launches
    (the largest over launches); None when an extent is computed at a launch, 0 when no access has a tile."""
    model = kernel_model(analysis, kernel)
    tiled = [a for a in model.accesses if any(a.dims)]
    if not tiled:
        return 0
    largest = 0
    for values in (v for launch in model.launches for v in launch.constexprs):
        known = {model.params[n]: sp.Integer(v) for n, v in values.items()
                 if isinstance(v, int) and not isinstance(v, bool) and n in model.params}
        for access in tiled:
            elements = 1
            for dim in access.dims:
                extents = [model.aranges[a].size.xreplace(known) for a in dim if a in model.aranges]
                if any(not e.is_Integer for e in extents):
                    return None
                elements *= max((int(e) for e in extents), default=1)
            largest = max(largest, elements)
    return largest or None


class Warps:
    name = "warps"
    kind = "Warps"
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def _legal(self, analysis: FileAnalysis, kernel: Kernel) -> tuple[list[int], int, str]:
        """(legal values best first, current value, reason when none)."""
        if kernel.is_autotuned:
            return [], 0, "the kernel is autotuned: its configs set num_warps"
        module = c.parse(analysis.text)
        _kdef, launches = c.locate(module, kernel.name)
        if not launches:
            return [], 0, "no launch of the kernel in this file"
        for launch in launches:
            if not c.option_settable(launch, "num_warps"):
                return [], 0, "num_warps at a launch is computed"
        plan = c.tile_plan(analysis, kernel, module)
        current = plan.num_warps
        # By role for a dot's m and n; every block's value otherwise (two row blocks share the role "1d").
        sizes = [p.value for p in plan.params.values() if p.value]
        blocks = {p.role: p.value for p in plan.params.values() if p.value}
        legal: list[int] = []
        if plan.has_dot:
            bm, bn = blocks.get("m"), blocks.get("n")
            if not bm or not bn:
                return [], current, "the tile shape is not known"
            tile = bm * bn
            legal = [w for w in WARPS if 16 <= tile // (32 * w) <= c.MAX_ACC_REGS_PER_THREAD]
            best = max(4, min(16, tile // (32 * 64)))  # ~64 accumulator values per thread
        else:
            if not plan.params:  # no block by name: the tiles the kernel model sees (``tl.arange(0, HALF)``)
                tile = _model_tile(analysis, kernel)
                if tile == 0:
                    return [], current, "the kernel has no tile (no access indexed by tl.arange)"
                sizes = [tile] if tile else []
            if not sizes:  # computed at the launch (next_power_of_2 of a row): a row-sized block
                legal, best = [4, 8, 16], 8
            else:
                tile = max(sizes)
                legal = [w for w in WARPS if 32 * w <= tile]
                best = max(2, min(16, tile // 512))  # ~16 elements per thread
        legal = sorted((w for w in legal if w != current), key=lambda w: (abs(w - best), w))
        return legal, current, "" if legal else "no other warp count suits the tile"

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        legal, current, _ = self._legal(analysis, kernel)
        return [
            Candidate(self.name, self.kind, kernel.name, {"num_warps": w},
                      f"Set num_warps={w} for {target.key.upper()} (was {current})", c.kernel_line(kernel))
            for w in legal
        ]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        legal, current, why = self._legal(analysis, kernel)
        return None if legal else why or f"num_warps={current} is the only value that suits the tile"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        legal, _current, reason = self._legal(analysis, kernel)
        value = params.get("num_warps")
        if value not in legal:
            raise ActionError(f"num_warps={value!r} is not offered for {kernel.name}: {reason or f'legal values are {legal}'}")
        module = c.set_launch_option(c.parse(text), kernel.name, "num_warps", int(value))
        return c.finish(text, module, f"num_warps={value} for {kernel.name}")


ACTION = Warps()
