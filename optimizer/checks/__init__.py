"""Static diagnostics for Triton kernels: one module per check, each with a stable MTMC code.

``run_checks(analysis, target)`` runs every check over a ``FileAnalysis`` and returns the
findings sorted by position. Checks are pure functions of the analysis and the target: no
compilation, no imports of user code, so they fit in the server's first-diagnostics budget.
"""

from __future__ import annotations

from ..analysis import FileAnalysis
from ..hardware import GpuProfile
from . import num_warps_pow2, syntax_error
from .finding import DOCS_FILE, SEVERITIES, Finding, docs_url, make_finding

# Every check module: CODE, SEVERITY, TITLE and check(analysis, target) -> Iterable[Finding].
CHECKS = [num_warps_pow2]


def run_checks(analysis: FileAnalysis, target: GpuProfile) -> list[Finding]:
    """All static findings for one analysed file on ``target``, in document order."""
    findings: list[Finding] = list(syntax_error.check(analysis, target))
    if not analysis.stale or analysis.kernels:
        for module in CHECKS:
            findings.extend(module.check(analysis, target))
    findings.sort(key=lambda f: (f.span.start_offset, f.code))
    return findings


__all__ = ["CHECKS", "DOCS_FILE", "SEVERITIES", "Finding", "docs_url", "make_finding", "run_checks"]
