"""MTMC001: the file does not parse, so its kernels cannot be analysed (or are from an older version)."""

from __future__ import annotations

from collections.abc import Iterator

from .bindings import CheckContext
from .finding import Finding, make_finding

CODE = "MTMC001"
SEVERITY = "error"
TITLE = "syntax error"


def check(ctx: CheckContext) -> Iterator[Finding]:
    error = ctx.analysis.syntax_error
    if error is None:
        return
    message = error.message
    if ctx.analysis.stale:
        message += "; the other diagnostics are from the last version that parsed"
    yield make_finding(CODE, SEVERITY, error.span, message)
