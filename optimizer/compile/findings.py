"""Compile reports as findings: MTMC201 compile error, MTMC202 spills, MTMC203 shared memory, MTMC200 summary."""

from __future__ import annotations

from ..analysis import FileAnalysis, SourceMap, Span
from ..checks.finding import Finding, make_finding
from ..hardware import GpuProfile
from .plan import PlannedJob
from .report import CompileReport

SUMMARY, ERROR, SPILLS, SHARED, NOT_COMPILED = "MTMC200", "MTMC201", "MTMC202", "MTMC203", "MTMC204"


def _config_text(report: CompileReport) -> str:
    values = ", ".join(f"{k}={v}" for k, v in report.constexprs.items())
    where = f" for {report.label}" if report.label else ""
    return f"{values + ', ' if values else ''}num_warps={report.num_warps}, num_stages={report.num_stages}{where}"


def compile_findings(analysis: FileAnalysis, reports: list[CompileReport], target: GpuProfile,
                     spans: list[Span] | None = None) -> list[Finding]:
    """Findings for compile reports; ``spans[i]`` is where report i's config is set (else the kernel name)."""
    source_map = SourceMap(analysis.text)
    findings: list[Finding] = []
    reported_errors: set[tuple] = set()
    for index, report in enumerate(reports):
        kernel = analysis.kernel(report.kernel)
        default_span = kernel.name_span if kernel else source_map.line_span(0)
        span = spans[index] if spans and index < len(spans) and spans[index] is not None else default_span
        config = _config_text(report)
        data = {"config": report.constexprs, "num_warps": report.num_warps, "num_stages": report.num_stages,
                "label": report.label, "report": report.to_json()}
        if report.status in ("error", "timeout"):
            key = (report.kernel, report.error_line if report.error_line is not None else span.start_offset,
                   report.error or "")
            if key in reported_errors:
                continue  # the same failure under several configs: say it once
            reported_errors.add(key)
            at = span
            if report.error_line is not None and 1 <= report.error_line <= len(source_map.lines):
                at = _line_span(source_map, report.error_line - 1, report.error_col)
            assumed = ", ".join(f"{k}: {v}" for k, v in report.signature.items() if v != "constexpr")
            findings.append(make_finding(
                ERROR, "error", at,
                f"{report.kernel} does not compile for {target.sm_name} ({config}): {report.error}"
                + (f" [parameters compiled as {assumed}]" if assumed and report.status == "error" else ""),
                report.kernel, **data,
            ))
            continue
        if report.status == "cancelled":
            continue
        if report.status == "skipped":
            findings.append(make_finding(
                NOT_COMPILED, "hint", span, f"{report.kernel} not compiled for {target.sm_name}: {report.error}",
                report.kernel, **data,
            ))
            continue
        if report.spills:
            findings.append(make_finding(
                SPILLS, "warning", span,
                f"{report.kernel} spills registers on {target.sm_name} ({config}): {report.registers} registers/thread, "
                f"{report.spill_stores} bytes spill stores and {report.spill_loads} bytes spill loads per thread; "
                f"use smaller tiles or more warps",
                report.kernel, **data,
            ))
        if report.shared_bytes is not None and report.shared_bytes > target.max_shared_per_block:
            findings.append(make_finding(
                SHARED, "error", span,
                f"{report.kernel} needs {report.shared_bytes:,} bytes of shared memory per block ({config}), over the "
                f"{target.name}'s {target.max_shared_per_block:,}-byte limit: the launch fails with out of resources; "
                f"lower num_stages or the tile sizes",
                report.kernel, **data,
            ))
        findings.append(make_finding(
            SUMMARY, "information", span,
            f"{report.kernel} compiled for {target.sm_name} ({config}): {report.registers} registers/thread, "
            f"{report.spills} bytes spilled, {report.shared_bytes:,} bytes shared memory"
            + (f", {report.compile_s:.1f} s" if report.compile_s is not None else "")
            + (" (cached)" if report.cached else ""),
            report.kernel, **data,
        ))
    findings.sort(key=lambda f: (f.span.start_offset, f.code))
    return findings


def _line_span(source_map: SourceMap, line_index: int, col: int | None) -> Span:
    """The failing line from its first non-blank character (or the reported column) to its end."""
    whole = source_map.line_span(line_index)
    line = whole.text(source_map.text)
    start_cp = len(line) - len(line.lstrip())
    if col is not None:
        start_cp = min(len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore")), len(line))
    start, start_offset = source_map.position(line_index + 1, len(line[:start_cp].encode("utf-8")))
    return Span(start, whole.end, start_offset, whole.end_offset)


def compile_file_findings(analysis: FileAnalysis, target: GpuProfile, kernels: list[str] | None = None,
                          timeout_s: float = 120, cache_dir="default",
                          cancel=None) -> tuple[list[Finding], list[CompileReport]]:
    """Plan, compile (one worker per file) and report every config of the file's kernels.

    ``cancel`` (a ``threading.Event``) stops the worker early; cancelled configs give no findings.
    """
    from .compiler import compile_jobs
    from .plan import plan_jobs

    planned: list[PlannedJob] = plan_jobs(analysis, target, kernels)
    reports = compile_jobs(analysis.text, [p.job for p in planned], target, timeout_s=timeout_s, analysis=analysis,
                           cache_dir=cache_dir, cancel=cancel)
    return compile_findings(analysis, reports, target, [p.span for p in planned]), reports
