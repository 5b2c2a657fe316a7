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
        if programs == 1:
            # One program is a choice, not an accident: the combine stage after a multi-program
            # first stage (public code has many). A note, not a warning; it still matters when the
            # one program walks a whole tensor.
            yield make_finding(
                CODE, "information", launch.grid_span,
                f"grid {shape} runs {launch.kernel} as one program on one of the {ctx.target.name}'s {sms} SMs: "
                "fine for combining a few partial results, slow for a whole tensor (split the work across programs)",
                launch.kernel, programs=programs, sm_count=sms, grid=list(grid),
            )
            continue
        yield make_finding(
            CODE, SEVERITY, launch.grid_span,
            f"grid {shape} launches {programs} program{'s' if programs != 1 else ''} of {launch.kernel}, but the "
            f"{ctx.target.name} has {sms} SMs: {sms - programs} SMs ({(sms - programs) * 100 // sms}%) stay idle; "
            f"use smaller blocks or split the work (e.g. split-K) for at least {sms} programs",
            launch.kernel, programs=programs, sm_count=sms, grid=list(grid),
        )
