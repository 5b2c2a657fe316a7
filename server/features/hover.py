"""Hover on a kernel: parameters, launches, autotune configs, resources per config, intensity."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from ...optimizer.analysis import FileAnalysis, Kernel
from ...optimizer.checks.bindings import CheckContext
from ...optimizer.hardware import KIB, GpuProfile
from ...optimizer.triton_rules import DEFAULT_NUM_STAGES, DEFAULT_NUM_WARPS
from ..app import MtmcLanguageServer
from ..kernel_facts import arithmetic_intensity, binding_facts, format_bytes
from ..state import DocumentState


def _value(v) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _parameters(kernel: Kernel) -> list[str]:
    groups: dict[str, list[str]] = {"pointer": [], "scalar": [], "constexpr": []}
    for p in kernel.params:
        groups.setdefault(p.kind, []).append(f"`{p.name}`" + (f" = {p.default}" if p.default else ""))
    lines = [f"**Parameters** ({len(kernel.params)})"]
    for kind, label in (("pointer", "pointers"), ("scalar", "scalars"), ("constexpr", "constexprs")):
        if groups.get(kind):
            lines.append(f"- {label}: " + ", ".join(groups[kind]))
    return lines


def _launches(analysis: FileAnalysis, kernel: Kernel) -> list[str]:
    launches = analysis.launches_of(kernel.name) or [f for f in analysis.foreign_launches if f.kernel == kernel.name]
    lines = [f"**Launches** ({len(launches)})"]
    for launch in launches:
        where = f"`{launch.host_function}()`" if launch.host_function else "module level"
        if launch.file:  # found in a module that imports this one (optimizer/analysis/workspace.py)
            where = f"{Path(launch.file).name}, {where}"
        consts = ", ".join(f"{k}={_value(v)}" for k, v in launch.constexpr_values(kernel).items())
        options = [f"{name}={value}" for name, value in (("num_warps", launch.num_warps), ("num_stages", launch.num_stages))
                   if value is not None]
        grid = launch.grid_source if len(launch.grid_source) <= 60 else launch.grid_source[:57] + "..."
        details = " · ".join(x for x in (f"grid `{grid}`", consts, ", ".join(options)) if x)
        lines.append(f"- {where} line {launch.span.start.line + 1}: {details}")
    return lines


def _resources(ctx: CheckContext, kernel: Kernel, target: GpuProfile, reports: list | None) -> list[str]:
    facts = binding_facts(ctx, kernel)
    compiled = {r.label: r for r in reports or [] if r.label}
    title = f"**Resources per config on {target.key.upper()}**" + ("" if compiled else " (static estimate; compile for registers)")
    header, rule = "| config | constexprs | warps | stages | smem est. |", "|---|---|---|---|---|"
    if compiled:
        header, rule = header + " smem | regs/thread | spills |", rule + "---|---|---|"
    lines = [title, "", header, rule]
    for f in facts:
        b = f.binding
        smem = "-" if f.shared_bytes is None else format_bytes(f.shared_bytes)
        if f.shared_bytes and f.shared_bytes > target.max_shared_per_block:
            smem += " (over limit)"
        consts = ", ".join(f"{k}={_value(v)}" for k, v in b.values.items() if k in kernel.constexpr_names) or "-"
        row = (f"| {b.label} | {consts} | {b.num_warps or DEFAULT_NUM_WARPS} | "
               f"{b.num_stages if b.num_stages is not None else DEFAULT_NUM_STAGES} | {smem} |")
        if compiled:
            report = compiled.get(b.label)
            if report is None:
                row += " - | - | - |"
            elif not report.ok:
                row += f" {report.status} | - | - |"
            else:
                shared = format_bytes(report.shared_bytes) if report.shared_bytes is not None else "-"
                row += f" {shared} | {report.registers if report.registers is not None else '-'} | {report.spills} B |"
        lines.append(row)
    for f in facts:
        intensity = arithmetic_intensity(f)
        if intensity is not None:
            ridge = target.ridge_point("fp16")
            bound = "compute-bound" if intensity >= ridge else "memory-bound"
            shape = ", ".join(f"{k}={f.shape[k]}" for k in ("M", "N", "K"))
            lines += ["", f"**Arithmetic intensity** ({shape}, 2-byte operands): {intensity:.1f} FLOP/byte; "
                          f"the {target.key.upper()} ridge point is {ridge:.0f} FLOP/byte, so {bound}"]
            break
    return lines


def kernel_markdown(ctx: CheckContext, kernel: Kernel, target: GpuProfile, reports: list | None) -> str:
    """The hover text for one kernel (Markdown)."""
    analysis = ctx.analysis
    lines = [f"**`{kernel.name}`**: Triton kernel, target **{target.name}** ({target.sm_name}, "
             f"{target.sm_count} SMs, {target.max_shared_per_block // KIB} KiB shared/block)"]
    if analysis.stale:
        lines += ["", "_The file does not parse; this is the last version that did._"]
    lines += [""] + _parameters(kernel) + [""] + _launches(analysis, kernel)
    if kernel.autotune is not None:
        key = ", ".join(kernel.autotune.key) or "none"
        count = len(kernel.autotune.configs) if kernel.autotune.configs_known else "?"
        lines += ["", f"**Autotune**: {count} configs, key [{key}]"]
    lines += [""] + _resources(ctx, kernel, target, reports)
    return "\n".join(lines)


def hover_for(ls: MtmcLanguageServer, state: DocumentState, position: types.Position) -> types.Hover | None:
    target = ls.target
    ctx = state.check_context(target)
    if ctx is None:
        return None
    index = ls.index(ctx.analysis.text)
    offset = index.offset_at(position)
    # ``kernel = triton.jit(f)`` stands for the decorators of a kernel jitted by a call: it hovers too.
    jitting = [k for k in ctx.analysis.kernels
               if k.jit_call is not None and k.jit_call.start_offset <= offset <= k.jit_call.end_offset]
    hits = [k for k in ctx.analysis.kernels if k.span.start_offset <= offset <= k.span.end_offset]
    if not hits and not jitting:
        return None
    kernel = jitting[0] if jitting else min(hits, key=lambda k: k.span.end_offset - k.span.start_offset)
    # Only on the kernel's header (decorators, def, signature): inside the body other hovers matter.
    if not jitting and offset >= kernel.body_span.start_offset:
        return None
    reports = state.compile_reports.get(kernel.name) if state.compile_version == state.version else None
    text = kernel_markdown(ctx, kernel, target, reports)
    formats = ls.client_supports("text_document.hover.content_format", None) or [types.MarkupKind.Markdown]
    kind = types.MarkupKind.Markdown if types.MarkupKind.Markdown in formats else types.MarkupKind.PlainText
    on_name = kernel.name_span.start_offset <= offset <= kernel.name_span.end_offset
    return types.Hover(
        contents=types.MarkupContent(kind=kind, value=text),
        range=index.range_of(kernel.name_span) if on_name else None,
    )


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: MtmcLanguageServer, params: types.HoverParams) -> types.Hover | None:
        state = ls.documents.get(params.text_document.uri)
        if state is None:
            return None
        return hover_for(ls, state, params.position)
