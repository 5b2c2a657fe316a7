"""Findings from the optimizer to LSP diagnostics (code, docs link, source "mtmc")."""

from __future__ import annotations

from lsprotocol import types

from ..optimizer.checks import Finding
from .positions import TextIndex

SOURCE = "mtmc"

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}


def to_diagnostic(finding: Finding, index: TextIndex, *, with_code_description: bool = True) -> types.Diagnostic:
    """One finding as a diagnostic; ``data`` carries the kernel and the facts quick fixes need."""
    data = {"code": finding.code, "kernel": finding.kernel, **finding.data}
    return types.Diagnostic(
        range=index.range_of(finding.span),
        message=finding.message,
        severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning),
        code=finding.code,
        code_description=types.CodeDescription(href=finding.docs_url) if with_code_description and finding.docs_url else None,
        source=SOURCE,
        data=data,
    )
