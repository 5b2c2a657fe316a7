"""MTMC106: a launch whose constant grid has fewer programs than the target has SMs."""

from __future__ import annotations

import math
from collections.abc import Iterator

from .bindings import CheckContext
from .finding import Finding, make_finding

CODE = "MTMC106"
SEVERITY = "warning"
TITLE = "grid too small to fill the GPU"


def check(ctx: CheckContext) -> Iterator[Finding]:
    sms = ctx.target.sm_count
    for launch in ctx.analysis.launches:
        grid = launch.grid_value
        if not grid:
            continue
        programs = math.prod(grid)
        if programs >= sms:
            continue
        shape = "x".join(str(g) for g in grid)
        yield make_finding(
            CODE, SEVERITY, launch.grid_span,
            f"grid {shape} launches {programs} program{'s' if programs != 1 else ''} of {launch.kernel}, but the "
            f"{ctx.target.name} has {sms} SMs: {sms - programs} SMs ({(sms - programs) * 100 // sms}%) stay idle; "
            f"use smaller blocks or split the work (e.g. split-K) for at least {sms} programs",
            launch.kernel, programs=programs, sm_count=sms, grid=list(grid),
        )
