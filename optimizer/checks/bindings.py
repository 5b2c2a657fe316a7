"""What one ``run_checks`` call shares: ``CheckContext`` (the analysis, the target, each kernel's facts)
and the *bindings* of a kernel's constexprs.

A binding is one way the kernel's constexprs get values: a launch site, an autotune config, or
the parameter defaults. Checks evaluate sizes under every binding and report at the place that
set the offending value. ``CheckContext.node_span`` maps the facts' nodes into the file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ..analysis import FileAnalysis, Kernel, SourceMap, Span, const_eval
from ..hardware import GpuProfile
from ._text import dict_entry_span, keyword_span, name_span
from .kernel_facts import KernelFacts, cached_source, kernel_facts


@dataclass
class Binding:
    """One way the kernel's constexprs get values: a launch, an autotune config, or the defaults."""

    label: str  # "the launch in matmul()", "autotune config 2", "the defaults"
    values: dict[str, object]
    where: dict[str, Span]  # constexpr -> the span that set it
    fallback: Span  # where to report when no specific span is known
    num_warps: int | None
    num_stages: int | None
    kind: str  # "launch" | "config" | "defaults"
    defaulted: frozenset[str] = frozenset()  # names whose value is the parameter default

    def origin(self, name: str) -> str:
        """Where ``name``'s value comes from, for messages."""
        return f"the default of {name}" if name in self.defaulted or self.kind == "defaults" else self.label


class CheckContext:
    """One ``run_checks`` call: the analysis, the target, and lazily computed shared facts."""

    def __init__(self, analysis: FileAnalysis, target: GpuProfile):
        self.analysis = analysis
        self.target = target
        self.text = analysis.text
        self._map: SourceMap | None = None
        self._facts: dict[tuple[str, int], KernelFacts | None] = {}
        self._bindings: dict[str, list[Binding]] = {}
        self.launches_by_kernel: dict[str, list] = {}
        for launch in analysis.launches:
            self.launches_by_kernel.setdefault(launch.kernel, []).append(launch)
        self.foreign_by_kernel: dict[str, list] = {}  # launches in other modules (their spans are there)
        for launch in analysis.foreign_launches:
            self.foreign_by_kernel.setdefault(launch.kernel, []).append(launch)

    @property
    def source_map(self) -> SourceMap:
        if self._map is None:
            self._map = SourceMap(self.text)
        return self._map

    def facts(self, kernel: Kernel) -> KernelFacts | None:
        key = (kernel.name, kernel.def_span.start_offset)  # two factories may define kernels of one name
        if key not in self._facts:
            span = kernel.def_span
            source = cached_source(self.text, kernel)
            self._facts[key] = kernel_facts(source, span.start.character > 0, self.analysis.names, kernel.node,
                                            span.start.line)
        return self._facts[key]

    def node_span(self, kernel: Kernel, facts: KernelFacts, node: ast.AST) -> Span:
        """The file span of a node from ``facts`` (kernel-relative lines, file-relative columns)."""
        base = kernel.def_span.start.line  # 0-based line of ``def``; the snippet's line 1 (or 2 if indented)
        start, start_offset = self.source_map.position(base + node.lineno + facts.line_shift, node.col_offset)
        end, end_offset = self.source_map.position(
            base + (node.end_lineno or node.lineno) + facts.line_shift, node.end_col_offset or node.col_offset
        )
        return Span(start, end, start_offset, end_offset)

    def bindings(self, kernel: Kernel) -> list[Binding]:
        """Every known way the kernel's constexprs are bound (launches, configs, else defaults)."""
        if kernel.name in self._bindings:
            return self._bindings[kernel.name]
        defaults = {p.name: p.default_value for p in kernel.params if p.kind == "constexpr" and p.default_value is not None}
        default_where = {p.name: p.span for p in kernel.params if p.name in defaults}
        out: list[Binding] = []
        configs = kernel.autotune.configs if kernel.autotune else []
        for index, config in enumerate(configs):
            values = {**defaults, **config.kwargs}
            where = dict(default_where)
            for name in config.kwargs:
                where[name] = keyword_span(self.text, config.span, name) or _quoted_key_span(self.text, config.span, name)
            out.append(Binding(f"autotune config {index}", values, where, config.span, config.num_warps,
                               config.num_stages, "config", frozenset(defaults) - set(config.kwargs)))
        for launch in self.launches_by_kernel.get(kernel.name, []):
            values, bound = _launch_values(kernel, launch, defaults)
            where = {**default_where, **{a.param: a.span for a in launch.args if a.param in bound and a.value is not None}}
            host = f"{launch.host_function}()" if launch.host_function else "module level"
            out.append(Binding(f"the launch at line {launch.span.start.line + 1} ({host})", values, where, launch.span,
                               launch.num_warps, launch.num_stages, "launch", frozenset(defaults) - bound))
        foreign = [] if out else self.foreign_by_kernel.get(kernel.name, [])  # only where the file says nothing
        for launch in foreign:
            values, bound = _launch_values(kernel, launch, defaults)
            host = f", {launch.host_function}()" if launch.host_function else ""
            label = f"the launch in {Path(launch.file or '').name} line {launch.span.start.line + 1}{host}"
            # Its positions are in that file: what it sets is reported at the kernel's name here.
            where = {**default_where, **{name: kernel.name_span for name in bound if name in values}}
            out.append(Binding(label, values, where, kernel.name_span, launch.num_warps,
                               launch.num_stages, "launch", frozenset(defaults) - bound))
        if not out:
            out.append(Binding("the parameter defaults", dict(defaults), default_where, kernel.name_span, None, None,
                               "defaults"))
        self._bindings[kernel.name] = out
        return out

    def env(self, kernel: Kernel, binding: Binding) -> dict[str, object]:
        """Names a size expression may use under ``binding``: module constants, locals, constexprs."""
        return {**self.analysis.constants, **kernel.local_constants, **binding.values}


def _launch_values(kernel: Kernel, launch, defaults: dict[str, object]) -> tuple[dict[str, object], set[str]]:
    """The constexpr values a launch binds over the defaults, and the names it binds."""
    values = dict(defaults)
    bound: set[str] = set()
    for arg in launch.args:
        param = kernel.param(arg.param) if arg.param is not None else None
        if param is not None and param.kind == "constexpr":
            bound.add(arg.param)
            if arg.value is not None:
                values[arg.param] = arg.value
            else:  # bound to something not constant there: the default does not apply
                values.pop(arg.param, None)
    return values, bound


def _quoted_key_span(text: str, outer: Span, name: str) -> Span:
    """``"BLOCK": 128`` inside a ``triton.Config({...})``; the whole config when not found."""
    return dict_entry_span(text, outer, name) or name_span(text, outer, name) or outer


def evaluate(node: ast.AST, env: dict[str, object]):
    """``const_eval`` that returns only ints (sizes)."""
    value = const_eval(node, env)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
