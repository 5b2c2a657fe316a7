"""Pipelining: ``num_stages`` for loops that feed ``tl.dot``, so the next tiles load while this one multiplies.

At the launch sites when the file launches the kernel, in every ``triton.Config`` of an autotuned
kernel, else on the loop itself as ``tl.range(..., num_stages=S)``. Only on targets with asynchronous copies (``cp.async``, Ampere and
later) and only while the staged A and B tiles fit the target's shared memory.

Example: kernel=mm_kernel target=h100 params={"num_stages": 4}

```python before
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(k + rk)[None, :] < K, other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * BLOCK_N + rn[None, :], mask=(k + rk)[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)
```

```python after
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=4):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(k + rk)[None, :] < K, other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * BLOCK_N + rn[None, :], mask=(k + rk)[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)
```
"""

from __future__ import annotations

import re

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

_DESCRIPTOR_STORE = re.compile(r"\.store\(\s*\[")

# Preferred stage counts, best first: Hopper hides more latency with 4, Ampere with 3.
STAGES = {90: (4, 3, 5, 2), 80: (3, 4, 2)}
_WHERE = {"launch": "at the launch", "loop": "tl.range", "configs": "in every autotune config"}


class Pipelining:
    name = "pipelining"
    kind = "Pipelining"
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def _dot_loops(self, kernel: Kernel):
        dots = kernel.calls_of("dot")
        return [
            loop for loop in kernel.loops
            if loop.kind in ("range", "tl.range")
            and any(loop.span.start_offset <= d.span.start_offset < loop.span.end_offset for d in dots)
        ]

    def _legal(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> tuple[list[int], str, str]:
        """(stage counts best first, where: "launch" | "loop", reason when none)."""
        if not target.has("cp.async"):
            return [], "", f"{target.name} has no asynchronous copies: extra stages only cost shared memory"
        loops = self._dot_loops(kernel)
        if not loops:
            return [], "", "no loop feeds tl.dot"
        if kernel.is_autotuned:
            return self._legal_configs(analysis, kernel, target)
        module = c.parse(analysis.text)
        _kdef, launches = c.locate(module, kernel.name)
        plan = c.tile_plan(analysis, kernel, module)
        if launches:
            where, current = "launch", plan.num_stages or c.DEFAULT_NUM_STAGES
            for launch in launches:
                if not c.option_settable(launch, "num_stages"):
                    # e.g. ``num_stages=config["num_stages"]``: the caller tunes it; offering a value
                    # here would be a step that cannot apply.
                    return [], "", "num_stages at a launch comes from a value set at run time"
        else:
            if len(loops) != 1:
                return [], "", "more than one loop feeds tl.dot"
            if loops[0].kind == "range" and not _language_of(kernel):
                return [], "", "tl.dot is imported by name: no module name to write tl.range with"
            where, current = "loop", loops[0].num_stages or c.DEFAULT_NUM_STAGES
        blocks = {p.role: p.value for p in plan.params.values()}
        bm, bn, bk = blocks.get("m"), blocks.get("n"), blocks.get("k")
        elem = c.element_bytes(analysis.text)
        # A tensor descriptor's store (``c_desc.store([...], tile)``) stages the output tile in shared memory beside
        # the loop's stages: on the H200 the suite's persistent TMA matmul at 128x256x64 did not compile with 4.
        source = analysis.text[kernel.span.start_offset:kernel.span.end_offset]
        out_tile = bm * bn * elem if bm and bn and _DESCRIPTOR_STORE.search(source) else 0
        legal = []
        for s in STAGES[90 if target.arch >= 90 else 80]:
            if s == current:
                continue
            if bm and bn and bk and c.staged_shared_bytes(bm, bn, bk, s, elem, plan.extra_staged_tiles) + out_tile > target.max_shared_per_block:
                continue
            legal.append(s)
        return legal, where, "" if legal else "no other stage count fits the shared memory"

    def _legal_configs(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> tuple[list[int], str, str]:
        """Stage counts to set in every autotune config (each config's tiles must fit with it)."""
        tune = kernel.autotune
        if tune is None or not tune.configs_known or not tune.configs:
            why = tune.configs_unknown_reason if tune is not None else ""
            return [], "", "the autotune configs cannot be read statically" + (f": {why}" if why else "")
        elem = c.element_bytes(analysis.text)
        extra = c.tile_plan(analysis, kernel).extra_staged_tiles
        legal = []
        for s in STAGES[90 if target.arch >= 90 else 80]:
            if all(cfg.num_stages == s for cfg in tune.configs):
                continue
            fits = True
            for cfg in tune.configs:
                blocks = {c.block_role(k): v for k, v in cfg.kwargs.items() if c.is_block_name(k)}
                bm, bn, bk = blocks.get("m"), blocks.get("n"), blocks.get("k")
                if not (bm and bn and bk) or c.staged_shared_bytes(bm, bn, bk, s, elem, extra) > target.max_shared_per_block:
                    fits = False
            if fits:
                legal.append(s)
        if legal and not tune.configs_are_literal:
            # Read from configs built by code, the check holds; the edit would set num_stages inside the code
            # that builds them (a comprehension's loop, a helper), which is no small reviewable step.
            return [], "", (f"num_stages={legal[0]} fits every one of the {len(tune.configs)} autotune configs, but they "
                            f"are built by `{_short(tune.configs_source)}`: pipelining sets num_stages in each "
                            "config of a literal list only")
        return legal, "configs", "" if legal else "no stage count fits every config's tiles"

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        legal, where, _ = self._legal(analysis, kernel, target)
        line = self._dot_loops(kernel)[0].span.start.line if legal else 0
        return [
            Candidate(self.name, self.kind, kernel.name, {"num_stages": s},
                      f"Pipeline the tl.dot loop with num_stages={s} for {target.key.upper()} ({_WHERE[where]})",
                      line)
            for s in legal
        ]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        legal, _where, why = self._legal(analysis, kernel, target)
        return None if legal else why or "no other stage count fits"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        legal, where, reason = self._legal(analysis, kernel, target)
        value = params.get("num_stages")
        if value not in legal:
            raise ActionError(f"num_stages={value!r} is not offered for {kernel.name}: {reason or f'legal values are {legal}'}")
        module = c.parse(text)
        if where == "launch":
            module = c.set_launch_option(module, kernel.name, "num_stages", int(value))
        elif where == "configs":
            kdef, _ = c.locate(module, kernel.name)
            _lst, configs = c.autotune_configs(kdef, module)
            module = c.replace_all(module, [(cfg, c.set_kwarg(cfg, "num_stages", cst.Integer(str(value)))) for cfg in configs])
        else:
            module = self._set_loop_stages(module, kernel, int(value), c.language_roots(analysis))
        return c.finish(text, module, f"num_stages={value} for {kernel.name}")

    @staticmethod
    def _set_loop_stages(module: cst.Module, kernel: Kernel, stages: int, roots: frozenset[str]) -> cst.Module:
        kdef, _ = c.locate(module, kernel.name)
        pairs = []

        class Find(cst.CSTVisitor):
            def visit_For(self, node: cst.For) -> None:
                it = node.iter
                if not isinstance(it, cst.Call) or "dot" not in c.code(node.body):
                    return
                if isinstance(it.func, cst.Name) and it.func.value == "range":
                    # tl.range spelled like the kernel's tl.dot (``tl2.dot`` -> ``tl2.range``).
                    spelled = f"{_language_of(kernel)}.range"
                    new = c.set_kwarg(it.with_changes(func=c.expr(spelled)), "num_stages", cst.Integer(str(stages)))
                elif isinstance(it.func, cst.Attribute) and it.func.attr.value == "range" and c.code(it.func.value) in roots:
                    new = c.set_kwarg(it, "num_stages", cst.Integer(str(stages)))
                else:
                    return
                pairs.append((it, new))

        kdef.visit(Find())
        if len(pairs) != 1:
            raise ActionError("expected exactly one loop feeding tl.dot")
        return c.replace_all(module, pairs)


def _short(source: str, limit: int = 50) -> str:
    text = " ".join(source.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _language_of(kernel: Kernel) -> str:
    """The module part of the kernel's ``tl.dot`` as written (``tl``, ``tl2``, ``triton.language``; "" when bare)."""
    dots = kernel.calls_of("dot")
    return dots[0].qualname.rpartition(".")[0] if dots else ""


ACTION = Pipelining()
