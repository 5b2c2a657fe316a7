"""Hover on a kernel: parameters, launches, autotune configs, resources per config, intensity."""

from __future__ import annotations

from lsprotocol import types

from ...optimizer.analysis import FileAnalysis, Kernel
from ...optimizer.hardware import KIB, GpuProfile
from ..kernel_facts import (
    DEFAULT_NUM_STAGES,
    DEFAULT_NUM_WARPS,
    arithmetic_intensity,
    estimate_shared_bytes,
    format_bytes,
    kernel_configs,
)
from ..state import DocumentState


def _value(v) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _report_field(report, *names):
    for name in names:
        value = report.get(name) if isinstance(report, dict) else getattr(report, name, None)
        if value is not None:
            return value
    return None


def kernel_markdown(analysis: FileAnalysis, kernel: Kernel, target: GpuProfile, reports: list | None) -> str:
    """The hover text for one kernel (Markdown)."""
    lines = [f"**`{kernel.name}`**: Triton kernel, target **{target.name}** ({target.sm_name}, "
             f"{target.sm_count} SMs, {target.max_shared_per_block // KIB} KiB shared/block)"]
    if analysis.stale:
        lines.append("\n_The file does not parse; this is the last version that did._")
    groups = {"pointer": [], "scalar": [], "constexpr": []}
    for p in kernel.params:
        text = f"`{p.name}`" + (f" = {p.default}" if p.default else "")
        groups.setdefault(p.kind, []).append(text)
    lines.append("")
    lines.append(f"**Parameters** ({len(kernel.params)})")
    for kind, label in (("pointer", "pointers"), ("scalar", "scalars"), ("constexpr", "constexprs")):
        if groups.get(kind):
            lines.append(f"- {label}: " + ", ".join(groups[kind]))

    launches = analysis.launches_of(kernel.name)
    lines.append("")
    lines.append(f"**Launches** ({len(launches)})")
    for launch in launches:
        where = launch.host_function or "module level"
        consts = ", ".join(f"{k}={_value(v)}" for k, v in launch.constexpr_values(kernel).items())
        options = []
        if launch.num_warps is not None:
            options.append(f"num_warps={launch.num_warps}")
        if launch.num_stages is not None:
            options.append(f"num_stages={launch.num_stages}")
        grid = launch.grid_source if len(launch.grid_source) <= 60 else launch.grid_source[:57] + "..."
        details = " · ".join(x for x in (f"grid `{grid}`", consts, ", ".join(options)) if x)
        lines.append(f"- `{where}` line {launch.span.start.line + 1}: {details}")

    if kernel.autotune is not None:
        key = ", ".join(kernel.autotune.key) or "none"
        count = len(kernel.autotune.configs) if kernel.autotune.configs_are_literal else "?"
        lines.append("")
        lines.append(f"**Autotune**: {count} configs, key [{key}]")

    configs = kernel_configs(analysis, kernel)
    by_label = {}
    for report in reports or []:
        label = _report_field(report, "label", "config")
        if label is not None:
            by_label[str(label)] = report
    if configs:
        compiled = bool(by_label)
        lines.append("")
        title = f"**Resources per config on {target.key.upper()}**" + ("" if compiled else " (static estimate)")
        lines.append(title)
        header = "| config | constexprs | warps | stages | smem est. |"
        rule = "|---|---|---|---|---|"
        if compiled:
            header += " smem | regs/thread | spills |"
            rule += "---|---|---|"
        lines += ["", header, rule]
        for config in configs:
            smem = estimate_shared_bytes(kernel, config)
            smem_text = "-" if smem is None else format_bytes(smem)
            if smem is not None and smem > target.max_shared_per_block:
                smem_text += " (over limit)"
            consts = ", ".join(f"{k}={_value(v)}" for k, v in config.constexprs.items()) or "-"
            row = (f"| {config.label} | {consts} | {config.num_warps or DEFAULT_NUM_WARPS} | "
                   f"{config.num_stages if config.num_stages is not None else DEFAULT_NUM_STAGES} | {smem_text} |")
            if compiled:
                report = by_label.get(config.label)
                shared = _report_field(report, "shared", "shared_bytes", "shared_memory") if report else None
                regs = _report_field(report, "registers", "n_regs") if report else None
                spills = _report_field(report, "spills", "n_spills") if report else None
                row += f" {format_bytes(shared) if isinstance(shared, int) else '-'} | {regs if regs is not None else '-'} | {spills if spills is not None else '-'} |"
            lines.append(row)

    for config in configs:
        intensity = arithmetic_intensity(kernel, config)
        if intensity is not None:
            ridge = target.ridge_point("fp16")
            bound = "compute-bound" if intensity >= ridge else "memory-bound"
            shape = ", ".join(f"{k}={config.launch_scalars[k]}" for k in ("M", "N", "K"))
            lines.append("")
            lines.append(f"**Arithmetic intensity** ({shape}, 2-byte operands): {intensity:.1f} FLOP/byte; "
                         f"ridge point on {target.key.upper()} {ridge:.0f} FLOP/byte, so {bound}")
            break
    return "\n".join(lines)


def hover_for(ls, state: DocumentState, position: types.Position) -> types.Hover | None:
    analysis = state.analysis
    if analysis is None:
        return None
    index = ls.index(analysis.text)
    offset = index.offset_at(position)
    hits = [k for k in analysis.kernels if k.span.start_offset <= offset <= k.span.end_offset]
    if not hits:
        return None
    kernel = min(hits, key=lambda k: k.span.end_offset - k.span.start_offset)
    # Hover only on the kernel's header (decorators, def line, signature): the body has its own meaning.
    if offset > kernel.body_span.start_offset:
        return None
    reports = state.compile_reports.get(kernel.name) if state.compile_version == state.version else None
    text = kernel_markdown(analysis, kernel, ls.target, reports)
    formats = ls.client_supports("text_document.hover.content_format", None) or [types.MarkupKind.Markdown]
    kind = types.MarkupKind.Markdown if types.MarkupKind.Markdown in formats else types.MarkupKind.PlainText
    on_name = kernel.name_span.start_offset <= offset <= kernel.name_span.end_offset
    return types.Hover(
        contents=types.MarkupContent(kind=kind, value=text),
        range=index.range_of(kernel.name_span) if on_name else None,
    )


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls, params: types.HoverParams) -> types.Hover | None:
        state = ls.documents.get(params.text_document.uri)
        if state is None:
            return None
        return hover_for(ls, state, params.position)
