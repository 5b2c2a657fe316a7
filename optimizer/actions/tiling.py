"""Tiling: choose block sizes per dimension for the target, within its shared-memory and register budget.

Block sizes are changed where they are set: a host constant the launch and the grid both read, a
literal at the launch (when the grid does not depend on it), or the constexpr default. A block
size is only offered when the grid or a loop is derived from it and every access is masked, so any
power of two keeps the result the same. For ``tl.dot`` kernels the A and B tiles times
``num_stages`` must fit the target's shared memory, and the fp32 accumulator must fit the threads'
registers (at most 128 values per thread); a tile that needs more warps than the launch has is
offered with ``num_warps`` raised to 8 or 16 in the same step, and where the launches pin fewer than
Triton's default 3 stages on sm_80+, with 3 (``_raises_stages``). A row block that
``@triton.heuristics`` sets to ``min(next_power_of_2(N), CAP)`` gets larger caps (never smaller: a
branch that holds the whole row when N <= CAP keeps a block at least as long as the row). A block the
host computes as ``min(next_power_of_2(n), CAP)`` or ``min(K, CAP)`` gets new caps where a loop or the
grid steps by it (``_computed_cap_options``); one that must hold a whole row keeps its size.

Example: kernel=add_kernel target=h100 params={"BLOCK_SIZE": 1024}

```python before
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    BLOCK_SIZE = 128  # elements per program
    add_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)
    return out
```

```python after
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    BLOCK_SIZE = 1024  # elements per program
    add_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)
    return out
```
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

# Tile shapes (BLOCK_M, BLOCK_N, BLOCK_K) by architecture, largest first: Hopper's wgmma likes
# 128x256x64 (docs/measurements.md: 629 TFLOP/s measured), Ampere 128x128x32 or 128x256x32.
MATMUL_TILES: dict[int, list[tuple[int, int, int]]] = {
    # 256 x 128 ran faster than 128 x 128 (8 warps) on all three fp16 suite matmuls on the H200, and than
    # 128 x 256 where B is stored (N, K) (results/h200/suite_tiles: 1.07 vs 1.13 ms at 8192x8192x4096).
    90: [(128, 256, 64), (256, 128, 64), (128, 128, 64), (64, 128, 64)],
    80: [(128, 256, 32), (128, 128, 32), (64, 128, 32)],
    70: [(128, 128, 32), (64, 128, 32), (64, 64, 32)],
}
# An fp32 product pinned to IEEE precision runs on FMA units, where the tensor cores' tiles lose: on the H200
# 128 x 256 x 64 ran an IEEE sgemm at 0.31-0.33x of cuBLAS, 64 x 64 x 32 (4 warps) at 0.83-1.05x, the best of 18
# tiles at every size from 1024^3 to 4096^3 (results/h200/fma_tiles/).
FMA_TILES: list[tuple[int, int, int]] = [(64, 64, 32), (128, 64, 32), (64, 64, 16)]
# (BLOCK_M, BLOCK_N) of a tl.dot kernel without a K block, e.g. flash attention (the tutorial's
# Hopper configs use 128 x 64 and 128 x 128; 64 x 64 suits smaller GPUs). H200, session 5:
# the 16 x 16 flash kernel of benchmarks/flash_attention_gpu.py ran 2.9-12.9x faster at 64 x 64.
MN_TILES = ((128, 64), (128, 128), (64, 64))
MN_INNER_GUESS = 128
# Elements per program for 1-D and row kernels: wide enough to keep every load 128-bit and the
# memory system busy (docs/measurements.md: BLOCK 128 -> 4096 moved gelu from 1,690 to 4,388 GB/s).
ROW_BLOCKS = (1024, 2048, 4096)
# One block that is a side of a 2-D tile, the other side a fixed size such as a head dimension
# (decode attention's [BLOCK_T, HEAD_SIZE] keys): ROW_BLOCKS there would make 512 K-element tiles.
AXIS_BLOCKS = (32, 64, 128)
# A column block whose row block the launch computes from it (``_derived_blocks``): longer contiguous reads per row.
FOLLOWED_BLOCKS = (128, 256, 512)
# 2-D tiles of kernels without tl.dot: (first block, second block) in the kernel's parameter order.
TILES_2D = ((64, 64), (32, 128), (128, 32))
MAX_ROW_BLOCK = 16384


def arch_bucket(target: GpuProfile) -> int:
    return 90 if target.arch >= 90 else 80 if target.arch >= 80 else 70


def gpu_label(target: GpuProfile) -> str:
    return target.key.upper()


def _query_and_key_blocks(plan: c.TilePlan, kernel: Kernel) -> dict[str, c.BlockParam] | None:
    """{"m": query block, "n": key block} of a flash-style tl.dot kernel whose key loop steps by a tunable block and
    whose other blocks are run-time sizes (a head dim passed as ``BLOCK_DMODEL=D``); None for other kernels.
    dot_block_roles reads the key block as the P @ V dot's reduction ("k") and such a head dim as its "n"."""
    m = next((p for p in plan.params.values() if p.role == "m" and p.tunable), None)
    keys = [p for p in plan.params.values() if p is not m and p.tunable]
    if m is None or len(keys) != 1 or not c.loop_tiled(kernel, keys[0].name):
        return None
    if any(p.value is not None for p in plan.params.values() if not p.tunable):  # a constant block kept by a refusal
        return None
    return {"m": m, "n": keys[0]}


class Tiling:
    name = "tiling"
    kind = "Tiling"
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        if kernel.is_autotuned:
            return [
                Candidate(self.name, self.kind, kernel.name, params,
                          f"Apply tiling for {gpu_label(target)} ({c.fmt_params(params)}) as an autotune config",
                          kernel.autotune.span.start.line)
                for params, _config in self._autotune_options(analysis, kernel, target)
            ]
        plan = c.tile_plan(analysis, kernel)
        out: list[Candidate] = []
        for params in self._options(plan, analysis, target, kernel):
            out.append(Candidate(
                action=self.name, kind=self.kind, kernel=kernel.name, params=params,
                title=f"Apply tiling for {gpu_label(target)} ({c.fmt_params(params)})", line=c.kernel_line(kernel),
            ))
        for params in _heuristic_cap_options(analysis, kernel):
            out.append(Candidate(
                action=self.name, kind=self.kind, kernel=kernel.name, params=params,
                title=f"Apply tiling for {gpu_label(target)} ({c.fmt_params(params)}) as the @triton.heuristics cap",
                line=c.kernel_line(kernel),
            ))
        for params in _computed_cap_options(analysis, kernel)[0]:
            out.append(Candidate(
                action=self.name, kind=self.kind, kernel=kernel.name, params=params,
                title=f"Apply tiling for {gpu_label(target)} ({c.fmt_params(params)}) as the launch's cap",
                line=c.kernel_line(kernel),
            ))
        return out

    def _options(self, plan: c.TilePlan, analysis: FileAnalysis, target: GpuProfile,
                 kernel: Kernel) -> list[dict[str, Value]]:
        options = self._all_options(plan, analysis, target, kernel)
        if not options:
            return options
        # Blocks one host constant sets (BLOCK_M=BLOCK, BLOCK_N=BLOCK) take equal sizes only.
        _kdef, launches = c.locate(c.parse(analysis.text), kernel.name)
        groups = c.shared_bindings(launches, kernel, list(plan.params))
        return [o for o in options if all(len({o.get(n, plan.params[n].value) for n in g}) == 1 for g in groups)]

    def _all_options(self, plan: c.TilePlan, analysis: FileAnalysis, target: GpuProfile,
                     kernel: Kernel) -> list[dict[str, Value]]:
        tunable = {p.role: p for p in plan.params.values() if p.tunable}
        if plan.has_dot:
            if all(r in tunable for r in "mn") and "k" not in {p.role for p in plan.params.values()}:
                return self._mn_options(plan, tunable, analysis, target)
            flash = _query_and_key_blocks(plan, kernel)
            if flash is not None:
                return self._mn_options(plan, flash, analysis, target)
            fixed = [p for p in plan.params.values() if not p.tunable]
            tiles = FMA_TILES if plan.exact_dot else MATMUL_TILES[arch_bucket(target)]
            if len(fixed) == 1 and fixed[0].role in "mn" and fixed[0].value and \
                    all(r in tunable for r in "mnk".replace(fixed[0].role, "")):
                # One side the host fixes (vLLM's fused_moe pads each expert's rows to BLOCK_SIZE_M): the other
                # side and K change, the fixed side kept.
                tunable[fixed[0].role] = fixed[0]
                side = "mn".index(fixed[0].role)
                free = sorted({t[1 - side] for t in tiles} | {t[1 - side] // 2 for t in tiles}, reverse=True)
                tiles = [(fixed[0].value, f, k) if side == 0 else (f, fixed[0].value, k)
                         for f in free for k in sorted({t[2] for t in tiles}, reverse=True)]
            if not all(r in tunable for r in "mnk"):
                return []
            names = (tunable["m"].name, tunable["n"].name, tunable["k"].name)
            current = tuple(tunable[r].value for r in "mnk")
            options: list[dict[str, Value]] = []
            for tile in tiles:
                if tile == current:
                    continue
                # A tile too big for the current warps' registers comes with the warps it needs; one whose stages
                # overflow shared memory (a loop that stages more than two tiles) with two stages, where the
                # launches can say so.
                warp_options = [{}] + [{"num_warps": w} for w in (8, 16) if w > plan.num_warps and plan.warps_settable]
                stage_options = [{}]
                if _raises_stages(plan, target):
                    stage_options.insert(0, {"num_stages": c.DEFAULT_NUM_STAGES})
                if plan.extra_staged_tiles and (plan.num_stages or c.DEFAULT_NUM_STAGES) > 2 and plan.stages_settable:
                    stage_options.append({"num_stages": 2})
                for extra in ({**w, **s} for s in stage_options for w in warp_options):
                    fitted = replace(plan, **extra)
                    if self._fits(tile, fitted, analysis, target) is None:
                        options.append({**{n: v for n, v in zip(names, tile) if plan.params[n].tunable}, **extra})
                        break
            return options
        tunable_params = [p for p in plan.params.values() if p.tunable]
        derived = _derived_blocks(analysis, kernel, plan)
        if len(tunable_params) + len(derived) != len(plan.params) or not 1 <= len(tunable_params) <= 2:
            return []
        if len(tunable_params) == 1:  # one block, whatever its name says (BLOCK_N of a row kernel too)
            only = tunable_params[0]
            if derived:  # the other side follows it (rows per program): wider column blocks, the tile's size kept
                return [{only.name: b} for b in FOLLOWED_BLOCKS if b != only.value]
            if c.block_is_tile_axis(analysis, kernel, only.name):
                return self._axis_options(only, plan)
            return [{only.name: b} for b in ROW_BLOCKS if b != only.value]
        # Two blocks without tl.dot (a 2-D tile: transpose, column or row reductions in any
        # orientation): square and both elongated tiles of 4096 elements.
        first, second = tunable_params
        return [{first.name: a, second.name: b} for a, b in TILES_2D if (a, b) != (first.value, second.value)]

    @staticmethod
    def _axis_options(block: c.BlockParam, plan: c.TilePlan) -> list[dict[str, Value]]:
        """One side of a 2-D tile whose other side is a fixed size (a head dimension beside a key block):
        aim at tiles of 4-16 K elements, as if the other side were MN_INNER_GUESS wide."""
        options: list[dict[str, Value]] = []
        for b in AXIS_BLOCKS:
            if b == block.value:
                continue
            warps = 8 if b * MN_INNER_GUESS > 8192 else None
            if warps is None or warps <= plan.num_warps:
                options.append({block.name: b})
            elif plan.warps_settable:
                options.append({block.name: b, "num_warps": warps})
        return options

    def _mn_options(self, plan: c.TilePlan, tunable: dict, analysis: FileAnalysis,
                    target: GpuProfile) -> list[dict[str, Value]]:
        """Tiles of a tl.dot kernel with no K block (the dot's inner size is fixed: flash-style attention's
        head dimension, a K small enough to load whole): only BLOCK_M and BLOCK_N change, BLOCK_M a
        multiple of BLOCK_N, which causal attention kernels assume when they split their key loop."""
        m, n = tunable["m"], tunable["n"]
        inner = MN_INNER_GUESS  # unknown here; the fit is checked as if it were the common largest head dim
        options: list[dict[str, Value]] = []
        for bm, bn in MN_TILES:
            if (bm, bn) == (m.value, n.value) or bm % bn:
                continue
            warps = 8 if bm * bn >= 128 * 64 else 4
            warps_param = {"num_warps": warps} if warps > plan.num_warps and plan.warps_settable else {}
            fitted = replace(plan, num_warps=max(plan.num_warps, warps)) if warps_param else plan
            if self._fits((bm, bn, inner), fitted, analysis, target) is None:
                options.append({m.name: bm, n.name: bn, **warps_param})
        return options

    def _autotune_options(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[tuple[dict, str]]:
        """(block sizes, new ``triton.Config(...)`` source) for tiles the configs do not hold yet."""
        # Known configs (a literal list, or one the analysis evaluated) say which tiles are present.
        if kernel.autotune is None or not kernel.autotune.configs_known or not kernel.autotune.configs:
            return []
        names = sorted({k for cfg in kernel.autotune.configs for k in cfg.kwargs if c.is_block_name(k)})
        if not names or c.autotuned_blocks_tunable(analysis, kernel, names) is not None:
            return []
        present = {tuple(cfg.kwargs.get(n) for n in names) for cfg in kernel.autotune.configs}
        # A hook every config shares (a pre_hook that sizes TMA descriptors) goes with the new config too.
        hook_args = _shared_hooks(kernel.autotune.configs)
        if hook_args is None:
            return []
        # Parameters other than blocks (GROUP_SIZE_M) go with the new config when every config agrees on them.
        fixed, why = _shared_settings(kernel.autotune.configs, names)
        if why:
            return []
        stages = 3 if target.has("cp.async") else 1
        roles = {c.block_role(n): n for n in names}
        options = []
        if kernel.calls_of("dot"):
            if set(roles) != {"m", "n", "k"} or len(names) != 3:
                return []
            for bm, bn, bk in MATMUL_TILES[arch_bucket(target)]:
                warps = max(4, min(8, bm * bn // (32 * 64)))
                plan = c.TilePlan(num_warps=warps, num_stages=stages, has_dot=True)
                values = {roles["m"]: bm, roles["n"]: bn, roles["k"]: bk}
                if tuple(values[n] for n in names) in present or self._fits((bm, bn, bk), plan, analysis, target):
                    continue
                options.append((values, f"triton.Config({_dict({**values, **fixed})}, num_warps={warps}, "
                                        f"num_stages={stages}{hook_args})"))
        elif len(names) == 1:
            for block in ROW_BLOCKS:
                if (block,) not in present:
                    warps = max(4, min(16, block // 512))
                    options.append(({names[0]: block},
                                    f"triton.Config({_dict({names[0]: block, **fixed})}, num_warps={warps}{hook_args})"))
        return options

    @staticmethod
    def _fits(tile: tuple[int, int, int], plan: c.TilePlan, analysis: FileAnalysis, target: GpuProfile) -> str | None:
        bm, bn, bk = tile
        stages = plan.num_stages or c.DEFAULT_NUM_STAGES
        shared = c.staged_shared_bytes(bm, bn, bk, stages, c.element_bytes(analysis.text), plan.extra_staged_tiles)
        if shared > target.max_shared_per_block:
            return f"{bm}x{bn}x{bk} with {stages} stages needs {shared // 1024} KiB of shared memory; {target.name} has {target.max_shared_per_block // 1024} KiB"
        per_thread = bm * bn // (32 * plan.num_warps)
        if per_thread > c.MAX_ACC_REGS_PER_THREAD:
            return f"a {bm}x{bn} fp32 accumulator over {plan.num_warps} warps is {per_thread} registers per thread (spills); raise num_warps first"
        regs = c.dot_regs_per_thread(bm, bn, bk, plan.num_warps, c.element_bytes(analysis.text), target.arch)
        if regs > c.MAX_REGS_PER_THREAD:
            return (f"a {bm}x{bn}x{bk} tile over {plan.num_warps} warps needs about {regs} registers per thread "
                    f"(accumulator, operands, pointers; over {c.MAX_REGS_PER_THREAD} spills); raise num_warps first")
        return None

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something): each block's reason."""
        if self.candidates(analysis, kernel, target):
            return None
        if kernel.is_autotuned:
            names = sorted({k for cfg in (kernel.autotune.configs if kernel.autotune else []) for k in cfg.kwargs
                            if c.is_block_name(k)})
            if kernel.autotune is None or not kernel.autotune.configs_known:
                why = kernel.autotune.configs_unknown_reason if kernel.autotune else ""
                return f"the autotune configs cannot be read statically: {why}" if why else \
                    "the autotune configs cannot be read statically"
            if not names:
                return "no autotune config sets a block size"
            unsafe = c.autotuned_blocks_tunable(analysis, kernel, names)
            if unsafe:
                return unsafe
            if _shared_hooks(kernel.autotune.configs) is None:
                return "the autotune configs have different hooks: a new config would not know which one it needs"
            return _shared_settings(kernel.autotune.configs, names)[1] or \
                "the autotune configs already hold every tile this action would add"
        plan = c.tile_plan(analysis, kernel)
        if not plan.params:
            return "no block-size parameter (a tl.constexpr whose name has BLOCK or TILE)"
        computed_reasons = _computed_cap_options(analysis, kernel)[1]
        refused = [f"{p.name}: {computed_reasons.get(p.name, p.reason)}" for p in plan.params.values() if not p.tunable]
        if refused:
            return "; ".join(refused)
        if plan.has_dot:
            return "a tl.dot kernel gets tiles for BLOCK_M, BLOCK_N and BLOCK_K (or M and N alone); no new one fits"
        return "tiles over two blocks are offered for two-block kernels only" if len(plan.params) > 2 else \
            "the block already has the size this action would offer"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        if kernel.is_autotuned:
            option = next((cfg for values, cfg in self._autotune_options(analysis, kernel, target) if values == params), None)
            if option is None:
                raise ActionError(f"{c.fmt_params(params)} is not a new legal autotune config of {kernel.name} on {target.name}")
            kdef, _ = c.locate(module, kernel.name)
            if kernel.autotune.configs_are_literal:
                lst, _configs = c.autotune_configs(kdef, module)
                module = c.replace_all(module, [(lst, c.append_element(lst, c.expr(option)))])
            else:
                # Configs built by code (a comprehension, a name, a helper) stay as written: the new one is
                # appended to this decorator's expression, so a list other kernels share is not changed.
                arg = c.autotune_configs_arg(kdef, module)
                if arg is None:
                    raise ActionError(f"no configs argument found on {kernel.name}'s autotune")
                extended = c.extended_configs(arg.value, c.expr(option), kernel.autotune.configs_sequence)
                module = c.replace_all(module, [(arg.value, extended)])
            return c.finish(text, module, f"tiling of {kernel.name}: autotune config {c.fmt_params(params)}")
        if params and set(params) <= set(kernel.heuristics):
            if params not in _heuristic_cap_options(analysis, kernel):
                raise ActionError(f"{c.fmt_params(params)} does not raise a @triton.heuristics cap of {kernel.name}")
            kdef, _ = c.locate(module, kernel.name)
            caps = {name: _heuristic_cap(kdef, name)[0] for name in params}
            module = c.replace_all(module, [(caps[n], cst.Integer(str(int(v)))) for n, v in params.items()])
            return c.finish(text, module, f"tiling of {kernel.name}: @triton.heuristics cap {c.fmt_params(params)}")
        if params and params in _computed_cap_options(analysis, kernel)[0]:
            return self._apply_computed_cap(text, analysis, kernel, params, module)
        plan = c.tile_plan(analysis, kernel, module)
        params = dict(params)
        warps = params.pop("num_warps", None)
        if warps is not None:
            if warps not in (8, 16) or warps <= plan.num_warps or not plan.warps_settable:
                raise ActionError(f"num_warps={warps!r}: tiling only raises num_warps to 8 or 16 where the launches set it")
            plan = replace(plan, num_warps=int(warps))
        stages = params.pop("num_stages", None)
        if stages is not None:
            lowers = stages == 2 and plan.extra_staged_tiles and plan.stages_settable and \
                (plan.num_stages or c.DEFAULT_NUM_STAGES) > 2
            if not lowers and not (stages == c.DEFAULT_NUM_STAGES and _raises_stages(plan, target)):
                raise ActionError(f"num_stages={stages!r}: tiling only lowers num_stages to 2, for loops that stage "
                                  f"more than two tiles, or raises a launch's num_stages=1 or 2 to "
                                  f"{c.DEFAULT_NUM_STAGES} on sm_80+, where the launches set it")
            raised_from = plan.num_stages
            plan = replace(plan, num_stages=int(stages))
        values: dict[str, int] = {}
        for name, value in params.items():
            bp = plan.params.get(name)
            if bp is None:
                raise ActionError(f"{kernel.name} has no block-size parameter {name}")
            if not bp.tunable:
                raise ActionError(f"cannot change {name}: {bp.reason}")
            if not c.is_pow2(value) or not 16 <= int(value) <= MAX_ROW_BLOCK:
                raise ActionError(f"{name}={value!r}: block sizes are powers of two from 16 to {MAX_ROW_BLOCK}")
            values[name] = int(value)
        if not values:
            raise ActionError("no block sizes given")
        if plan.has_dot:
            merged = {p.role: values.get(p.name, p.value) for p in plan.params.values()}
            if all(isinstance(merged.get(r), int) for r in "mnk"):
                problem = self._fits((merged["m"], merged["n"], merged["k"]), plan, analysis, target)
                if problem:
                    raise ActionError(problem)
        notes = self._shared_notes(analysis, kernel, module, values)
        module = c.set_constexpr(module, analysis, kernel, values)
        if warps is not None:
            module = c.set_launch_option(module, kernel.name, "num_warps", int(warps))
            values["num_warps"] = int(warps)
        if stages is not None:
            module = c.set_launch_option(module, kernel.name, "num_stages", int(stages))
            values["num_stages"] = int(stages)
            if stages == 2:
                notes.append(f"num_stages=2: the loop stages {plan.extra_staged_tiles + 2} tiles, three stages of "
                             "them overflow shared memory")
            else:
                notes.append(f"num_stages={stages} (was {raised_from}): a tile is chosen with the stages that keep "
                             "its K loop's copies in flight")
        return c.finish(text, module, f"tiling of {kernel.name}: {c.fmt_params(values)}", notes)

    @staticmethod
    def _apply_computed_cap(text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value],
                            module: cst.Module) -> Edit:
        """Set the cap of each launch's ``min(next_power_of_2(n), CAP)`` where it is written."""
        blocks = _computed_cap_options(analysis, kernel, module)[2]
        pairs: dict[int, tuple[cst.CSTNode, cst.CSTNode]] = {}
        for name, value in params.items():
            for block in blocks[name]:
                for node, new in c.cap_rewrites(block, int(value)):
                    pairs[id(node)] = (node, new)  # two launches of one host share its assignment
        module = c.replace_all(module, list(pairs.values()))
        return c.finish(text, module, f"tiling of {kernel.name}: the launch's cap {c.fmt_params(params)}")

    @staticmethod
    def _shared_notes(analysis: FileAnalysis, kernel: Kernel, module, values: dict[str, int]) -> list[str]:
        """Say which other launches a changed host constant also feeds (reviewers should know)."""
        notes = []
        _kdef, launches = c.locate(module, kernel.name)
        for name in values:
            for launch in launches:
                how, node = c.binding_of(launch, kernel, name)
                if how != "host":
                    continue
                var = node.targets[0].target.value
                others = sorted({s.kernel for s in analysis.launches if s.kernel != kernel.name
                                 and any(a.source.strip() == var for a in s.args)})
                if others:
                    notes.append(f"{var} also sets the block of {', '.join(others)} (same grid rule, also tunable)")
        return notes


def _derived_blocks(analysis: FileAnalysis, kernel: Kernel, plan: c.TilePlan) -> set[str]:
    """Blocks the launches compute from a tunable block's constant, so they follow it: rows_per_program's
    ``BLOCK_M = max(1, min(8192 // BLOCK_SIZE, ...))`` rows beside a column block ``BLOCK_SIZE = 64``. They do not
    keep the tunable block from being tiled (before, a row kernel given rows per program could not retile its
    column loop)."""
    fixed = {p.name for p in plan.params.values() if not p.tunable}
    tunable = [p.name for p in plan.params.values() if p.tunable]
    if not fixed or not tunable:
        return set()
    _kdef, launches = c.locate(c.parse(analysis.text), kernel.name)
    derived = fixed if launches else set()
    for launch in launches:
        # The host constants this launch passes for the tunable blocks: what a following block must read.
        sources = set()
        for name in tunable:
            how, node = c.binding_of(launch, kernel, name)
            if how == "host":
                sources.add(node.targets[0].target.value)  # type: ignore[union-attr]
        for name in list(derived):
            how, node = c.binding_of(launch, kernel, name)
            value = getattr(node, "value", None) if how == "other" else None
            if isinstance(value, cst.Name):
                assign, _at_module = c.launch_assignment(launch, value.value)
                value = assign.value if assign is not None else None
            if value is None or not sources & c.names_in(value):
                derived.discard(name)
    return derived


def _raises_stages(plan: c.TilePlan, target: GpuProfile) -> bool:
    """Whether a dot tile comes with Triton's default stages: the launches pin fewer (``num_stages=1``) on a GPU
    that pipelines the K loop's copies (sm_80+). A 128x256x64 tile in one stage is no config anyone tunes: on the
    H200 the suite's matmuls ran their new tiles 1.8-2.2x faster once staged (``pipelining``, the step that used to
    follow), and one step with both leaves the search's budget for the steps after."""
    return (target.arch >= 80 and plan.stages_settable and plan.num_stages is not None
            and plan.num_stages < c.DEFAULT_NUM_STAGES)


def _heuristic_cap(kdef: cst.FunctionDef, name: str) -> tuple[cst.Integer, str] | None:
    """``"BLOCK": lambda args: min(triton.next_power_of_2(args["N"]), 1024)`` -> (the 1024 node, "N")."""
    found = c.heuristics_entry(kdef, name)
    if found is None or not isinstance(found[2].value, cst.Lambda):
        return None
    fn = found[2].value
    params = fn.params.params
    body = fn.body
    if len(params) != 1 or not (isinstance(body, cst.Call) and c.code(body.func) == "min" and len(body.args) == 2):
        return None
    caps = [a.value for a in body.args if isinstance(a.value, cst.Integer)]
    rest = [a.value for a in body.args if not isinstance(a.value, cst.Integer)]
    if len(caps) != 1 or len(rest) != 1 or any(a.keyword or a.star for a in body.args):
        return None
    pow2 = rest[0]
    if not (isinstance(pow2, cst.Call) and c.code(pow2.func) in ("triton.next_power_of_2", "next_power_of_2")
            and len(pow2.args) == 1 and isinstance(pow2.args[0].value, cst.Subscript)):
        return None
    sub = pow2.args[0].value
    index = sub.slice[0].slice if len(sub.slice) == 1 else None
    if not (isinstance(sub.value, cst.Name) and sub.value.value == params[0].name.value
            and isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)):
        return None
    return caps[0], index.value.evaluated_value


def _heuristic_cap_options(analysis: FileAnalysis, kernel: Kernel) -> list[dict[str, Value]]:
    """Larger caps for a row block that ``@triton.heuristics`` sets to ``min(next_power_of_2(N), CAP)``.

    Only raised: for every N the block stays a power of two no smaller than before and no larger than
    ``next_power_of_2(N)``, so a branch that holds a whole row in one block when N <= CAP still does. The
    block must step a loop, and every access it can move must be masked.
    """
    if kernel.is_autotuned or kernel.calls_of("dot") or not kernel.heuristics:
        return []
    kdef, _launches = c.locate(c.parse(analysis.text), kernel.name)
    options: list[dict[str, Value]] = []
    for name in kernel.heuristics:
        found = _heuristic_cap(kdef, name) if name in kernel.constexpr_names else None
        if found is None or kernel.param(found[1]) is None:
            continue
        if not c.loop_tiled(kernel, name) or not c.accesses_masked_for(kernel, analysis.text, name, False):
            continue
        cap = int(found[0].evaluated_value)
        options += [{name: b} for b in ROW_BLOCKS if b > cap]
    return options


def _computed_cap_options(analysis: FileAnalysis, kernel: Kernel, module: cst.Module | None = None
                          ) -> tuple[list[dict[str, Value]], dict[str, str], dict[str, list[c.ComputedBlock]]]:
    """(options, reasons, blocks) for block sizes the host computes as ``min(next_power_of_2(n), CAP)`` or
    ``min(K, CAP)``: new caps, why a computed block keeps its size, and each launch's computation.

    A loop or the grid must step by the block and every access it can move must be masked, so any power of
    two gives the same results. Without that the block holds a whole row and keeps its size. A cap is
    lowered only when no branch of the kernel reads a constexpr or the block is read only inside loops that
    step by it (a whole-row branch chosen by the host for ``n <= CAP`` needs a block as long as the row); raising a plain ``min(K, CAP)`` rounds K up to a
    power of two (``min(K, 32)`` already needs K a power of two when K < 32).
    """
    if kernel.is_autotuned or kernel.calls_of("dot"):
        return [], {}, {}
    module = module or c.parse(analysis.text)
    try:
        _kdef, launches = c.locate(module, kernel.name)
    except ActionError:
        return [], {}, {}
    if not launches:
        return [], {}, {}
    plan = c.tile_plan(analysis, kernel, module)
    reasons: dict[str, str] = {}
    blocks: dict[str, list[c.ComputedBlock]] = {}
    for bp in plan.params.values():
        if bp.tunable:
            continue
        found = [c.computed_block(launch, kernel, bp.name) for launch in launches]
        if any(f is None for f in found):
            continue
        problem = _computed_block_problem(analysis, module, kernel, launches, found, bp.name)  # type: ignore[arg-type]
        if problem:
            reasons[bp.name] = problem
        else:
            blocks[bp.name] = found  # type: ignore[assignment]
    if not blocks or set(blocks) != set(plan.params):
        return [], reasons, blocks
    caps = {name: found[0].cap_value for name, found in blocks.items()}
    names = list(caps)
    if len(names) == 1:
        sizes = AXIS_BLOCKS if c.block_is_tile_axis(analysis, kernel, names[0]) else ROW_BLOCKS
        tiles = [(b,) for b in sizes]
    else:
        tiles = list(TILES_2D) if len(names) == 2 else []
    lowering_ok = not _branches_on_constexpr(kernel) or all(_read_only_in_block_loops(kernel, n) for n in names)
    import_triton = re.search(r"^import triton\s*$", analysis.text, re.M) is not None
    options: list[dict[str, Value]] = []
    for tile in tiles:
        if tuple(caps[n] for n in names) == tile:
            continue
        legal = True
        for name, new in zip(names, tile):
            old = caps[name]
            if (new < old and not lowering_ok) or (new > old and not blocks[name][0].pow2 and not import_triton):
                legal = False
        if legal:
            options.append(dict(zip(names, tile)))
    return options, reasons, blocks


def _computed_block_problem(analysis: FileAnalysis, module: cst.Module, kernel: Kernel, launches: list,
                            found: list[c.ComputedBlock], name: str) -> str | None:
    """Why the computed block ``name`` keeps its size (None when its cap may change)."""
    first = found[0]
    for launch, block in zip(launches, found):
        via_grid = c.computed_block_grid_derived(launch, block, name)
        if block.why_not and block.cap_value is not None:  # a constant, not a computed size
            return f"the launch passes `{block.shown}`: {block.why_not}"
        if not via_grid and not c.loop_tiled(kernel, name):
            if _passed_to_helper(kernel, name):
                return (f"the launch computes `{block.shown}`, and neither the grid nor a loop of the kernel itself "
                        "steps by it (a helper it calls may); tiling keeps it")
            return (f"the launch computes `{block.shown}`, one block that covers the whole row (no loop or grid "
                    "steps by it): another size would drop or repeat elements, so tiling keeps it")
        if block.why_not:
            return f"the launch computes `{block.shown}`: {block.why_not}; tiling changes only a cap it can prove safe"
        if block.cap_value != first.cap_value or block.pow2 != first.pow2:
            return "the launches cap the block differently"
        if not c.accesses_masked_for(kernel, analysis.text, name, via_grid):
            return "a load or store has no mask, so a different block size could go out of bounds"
        if block.cap_value in c._ints_in(c.grid_expression(launch)):
            return f"the grid repeats the cap {block.cap_value} as a literal"
        if block.host_var is not None:
            problem = c._shared_constant_problem(analysis, module, kernel, launch, block.host_var)
            if problem:
                return problem
    return None


def _passed_to_helper(kernel: Kernel, name: str) -> bool:
    """The kernel passes ``name`` to a function it calls (a ``@triton.jit`` helper that may loop by it)."""
    if kernel.node is None:
        return False
    helpers = set(kernel.called_functions)
    for node in ast.walk(kernel.node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers and any(
                isinstance(n, ast.Name) and n.id == name for a in [*node.args, *(k.value for k in node.keywords)]
                for n in ast.walk(a)):
            return True
    return False


def _read_only_in_block_loops(kernel: Kernel, name: str) -> bool:
    """Every read of ``name`` in the kernel body is inside a loop that steps by it (so no branch can use
    it as one block over a whole row)."""
    if kernel.node is None:
        return False
    cdiv = re.compile(rf"^(?:\w+\.)*cdiv\(\s*\w+\s*,\s*{re.escape(name)}\s*\)$")

    def steps_by(loop: ast.For) -> bool:
        call = loop.iter
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) in ("range", "tl.range")):
            return False
        args = [ast.unparse(a) for a in call.args]
        return (len(args) == 3 and args[2] in (name, f"-{name}")) or (len(args) == 1 and cdiv.match(args[0]) is not None) \
            or (len(args) == 2 and args[0] == "0" and cdiv.match(args[1]) is not None)

    def reads_outside(node: ast.AST, inside: bool) -> bool:
        if isinstance(node, ast.Name) and node.id == name and not inside:
            return True
        if isinstance(node, ast.For) and steps_by(node):
            return reads_outside(node.target, inside) or any(reads_outside(n, True) for n in [*node.body, *node.orelse])
        return any(reads_outside(child, inside) for child in ast.iter_child_nodes(node))

    return not any(reads_outside(statement, False) for statement in kernel.node.body)


def _branches_on_constexpr(kernel: Kernel) -> bool:
    """Some ``if`` (or conditional expression) of the kernel tests a constexpr parameter."""
    if kernel.node is None:
        return True
    constexprs = set(kernel.constexpr_names)
    for node in ast.walk(kernel.node):
        if isinstance(node, ast.If | ast.IfExp) and {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)} & constexprs:
            return True
    return False


def _dict(values: dict[str, Value]) -> str:
    return "{" + ", ".join(f'"{k}": {v!r}' for k, v in values.items()) + "}"


def _shared_hooks(configs: list) -> str | None:
    """The hooks every config sets, as arguments for a new ``triton.Config`` (``, pre_hook=f``); None when they differ."""
    hooks = {tuple(sorted(cfg.hooks.items())) for cfg in configs}
    if len(hooks) > 1:
        return None
    return "".join(f", {option}={function}" for option, function in next(iter(hooks), ()))


def _shared_settings(configs: list, blocks: list[str]) -> tuple[dict[str, Value], str]:
    """(the non-block parameters every config sets, each to a value a new tile can take; why not, when a config
    lacks one or its values depend on the tile: a new config could not know its value).

    A parameter every config sets to one value keeps it. One the configs cross with every tile (each tile
    with the same values: ``for GS in [1, 8]`` next to the tile loops) is independent of the tile, so the
    new tile takes the first config's value, as the configs show it works with every tile."""
    others = sorted({k for cfg in configs for k in cfg.kwargs if k not in blocks})
    fixed: dict[str, Value] = {}
    for name in others:
        values = {repr(cfg.kwargs.get(name, "<unset>")) for cfg in configs}
        per_tile: dict[tuple, set[str]] = {}
        for cfg in configs:
            per_tile.setdefault(tuple(cfg.kwargs.get(b) for b in blocks), set()).add(repr(cfg.kwargs.get(name, "<unset>")))
        crossed = len(per_tile) > 1 and all(seen == values for seen in per_tile.values())
        if any(name not in cfg.kwargs for cfg in configs) or (len(values) != 1 and not crossed):
            return {}, (f"the autotune configs also choose {name} ({', '.join(sorted(values))}) with the tile: "
                        "a new config would not know its value")
        fixed[name] = configs[0].kwargs[name]
    return fixed, ""


ACTION = Tiling()
