"""Static diagnostics for Triton kernels: one module per check, each with a stable MTMC code.

``run_checks(analysis, target)`` runs every check over a ``FileAnalysis`` and returns the
findings sorted by position. Checks are pure functions of the analysis and the target: no
compilation and no user code, so they fit in the server's first-diagnostics budget. Compile
findings (MTMC2xx) come from ``optimizer.compile.compile_findings`` in the background.
"""

from __future__ import annotations

import gc
import logging

from ..analysis import FileAnalysis
from ..hardware import GpuProfile
from . import arange_pow2, dot_min_dims, grid_fill, num_warps_pow2, shared_memory, syntax_error, unmasked_access
from .bindings import CheckContext
from .finding import DOCS_FILE, SEVERITIES, Finding, docs_url, make_finding

log = logging.getLogger(__name__)

# Every check module has CODE, SEVERITY, TITLE and check(ctx) -> Iterable[Finding].
CHECKS = [syntax_error, arange_pow2, dot_min_dims, unmasked_access, shared_memory, num_warps_pow2, grid_fill]
CODES = {module.CODE: module for module in CHECKS}


def run_checks(analysis: FileAnalysis, target: GpuProfile) -> list[Finding]:
    """All static findings for one analysed file on ``target``, in document order."""
    ctx = CheckContext(analysis, target)
    findings: list[Finding] = []
    # The checks allocate many short-lived AST nodes and free them all at the end; a cyclic GC pass
    # in the middle only walks the (large) live heap of the caller, so skip it for this call.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for module in CHECKS:
            try:
                findings.extend(module.check(ctx))
            except Exception:  # noqa: BLE001 - one broken check must not hide the others' findings
                log.exception("check %s failed on %s", module.CODE, analysis.path or "<buffer>")
    finally:
        if gc_was_enabled:
            gc.enable()
    findings.sort(key=lambda f: (f.span.start_offset, f.code))
    return findings


__all__ = ["CHECKS", "CODES", "DOCS_FILE", "SEVERITIES", "Finding", "docs_url", "make_finding", "run_checks"]
