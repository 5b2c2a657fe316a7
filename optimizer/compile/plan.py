"""Which configs of a kernel to compile: each launch site, each autotune config, else the defaults."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..analysis import FileAnalysis, Kernel, Span
from ..checks.bindings import CheckContext
from ..hardware import GpuProfile
from ..triton_rules import DEFAULT_NUM_STAGES, DEFAULT_NUM_WARPS
from .compiler import CompileJob, Expression


@dataclass
class PlannedJob:
    job: CompileJob
    span: Span  # where findings about this config belong (the launch, the config, the kernel name)


def plan_jobs(analysis: FileAnalysis, target: GpuProfile, kernels: list[str] | None = None,
              max_per_kernel: int = 8) -> list[PlannedJob]:
    """One job per distinct (constexprs, num_warps, num_stages) of each kernel, in source order."""
    ctx = CheckContext(analysis, target)
    planned: list[PlannedJob] = []
    helpers = _helpers(analysis)
    for kernel in analysis.kernels:
        if kernels is not None and kernel.name not in kernels:
            continue
        if kernel.name in helpers and not ctx.launches_by_kernel.get(kernel.name) and kernel.autotune is None:
            continue  # a @triton.jit helper: compiled inside the kernels that call it, not on its own
        seen = set()
        bindings = ctx.bindings(kernel)
        if kernel.autotune is not None and kernel.autotune.configs:
            bindings = [b for b in bindings if b.kind == "config"]  # launches leave the tuned values to the configs
        unit = _unit_stride_params(kernel, ctx.launches_by_kernel.get(kernel.name, []))
        for binding in bindings:
            values = {k: v for k, v in binding.values.items() if _is_constexpr(kernel, k)}
            values.update({name: 1 for name in unit})  # the runtime specializes ints equal to 1
            if binding.kind in ("launch", "config"):
                site = _binding_site(ctx.launches_by_kernel.get(kernel.name, []), binding)
                values.update(_computed_flags(kernel, site, values))
                values.update(_dtype_constants(kernel, site, values))
            warps = binding.num_warps or DEFAULT_NUM_WARPS
            stages = binding.num_stages or DEFAULT_NUM_STAGES
            key = (tuple(sorted(values.items(), key=lambda kv: kv[0])), warps, stages)
            if key in seen:
                continue
            seen.add(key)
            span = binding.fallback if binding.kind != "defaults" else kernel.name_span
            planned.append(PlannedJob(CompileJob(kernel.name, values, warps, stages, label=binding.label), span))
            if len(seen) >= max_per_kernel:
                break
    return planned


def _is_constexpr(kernel: Kernel, name: str) -> bool:
    param = kernel.param(name)
    return param is not None and param.kind == "constexpr"


def _helpers(analysis: FileAnalysis) -> set[str]:
    """Jit functions that other kernels call or pass along (``tl.reduce(x, 0, combine)``)."""
    names = {k.name for k in analysis.kernels}
    used: set[str] = set()
    for kernel in analysis.kernels:
        used.update(n for n in kernel.called_functions if n in names and n != kernel.name)
        body = kernel.body_span.text(analysis.text)
        used.update(n for n in names if n != kernel.name and re.search(rf"\b{re.escape(n)}\b", body))
    return used


def _binding_site(launches: list, binding):
    """The launch a binding's values come from; for an autotune config, the (first) launch, which computes the
    values the config does not tune."""
    site = next((launch for launch in launches if launch.span == binding.fallback), None)
    if site is None and binding.kind == "config" and launches:
        site = launches[0]
    return site


# A Triton dtype passed as a constexpr (vLLM's ``compute_type=tl.bfloat16``): compiled as that dtype.
_DTYPE = re.compile(r"^\s*(?:tl|triton\.language)\.(?:float(?:8\w*|16|32|64)|bfloat16|u?int(?:1|8|16|32|64))\s*$")


def _dtype_constants(kernel: Kernel, site, values: dict) -> dict[str, Expression]:
    """Constexprs the launch sets to a Triton dtype (``tl.float16``), as expressions the compile worker evaluates
    in the file's namespace (where ``tl`` is its own import)."""
    return {arg.param: Expression(arg.source.strip()) for arg in (site.args if site is not None else [])
            if arg.param is not None and arg.param not in values and arg.value is None
            and _is_constexpr(kernel, arg.param) and _DTYPE.match(arg.source)}


def _computed_flags(kernel: Kernel, site, values: dict) -> dict[str, bool]:
    """Constexprs the launch computes as a comparison (mask_free_k's ``EVEN_K=K % BLOCK_K == 0``) or a conjunction of
    checks (tensor_descriptor's ``USE_TMA=_tma_ready(a, ...) and ...``), known only at run time: compiled as False,
    the branch the launch takes whenever a check fails."""
    flags: dict[str, bool] = {}
    for arg in site.args if site is not None else []:
        if arg.param is None or arg.param in values or arg.value is not None or not _is_constexpr(kernel, arg.param):
            continue
        try:
            node = ast.parse(arg.source.strip(), mode="eval").body
        except SyntaxError:
            continue
        if isinstance(node, ast.Compare) or (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And)):
            flags[arg.param] = False
    return flags


_STRIDE_CALL = re.compile(r"^\s*(\w+)\.stride\(\s*(-?\d+)\s*\)\s*$")


def _unit_stride_params(kernel: Kernel, launches: list) -> set[str]:
    """Scalar parameters every launch binds to 1: a literal 1, ``x.stride(-1)``, or the last
    ``x.stride(i)`` the launch passes for a tensor (contiguous row-major, the common case)."""
    result: set[str] | None = None
    for launch in launches:
        calls: dict[str, int] = {}
        for arg in launch.args:
            match = _STRIDE_CALL.match(arg.source)
            if match and int(match.group(2)) >= 0:
                calls[match.group(1)] = max(calls.get(match.group(1), 0), int(match.group(2)))
        unit = set()
        for arg in launch.args:
            param = kernel.param(arg.param) if arg.param else None
            if param is None or param.kind == "constexpr":
                continue
            match = _STRIDE_CALL.match(arg.source)
            if arg.value == 1 and not isinstance(arg.value, bool):
                unit.add(param.name)
            elif match and (int(match.group(2)) == -1 or (calls.get(match.group(1)) == int(match.group(2)) > 0)):
                unit.add(param.name)
        result = unit if result is None else result & unit
    return result or set()
