"""MTMC106: a launch whose constant grid has fewer programs than the target has SMs."""

from __future__ import annotations

import math
import re
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
        kernel = ctx.analysis.kernel(launch.kernel)
        if programs > 1 and _walks_its_work(ctx, launch, kernel, grid):
            # The kernel is told how many programs there are (tl.num_programs, or the grid's count passed as an
            # argument) and loops over its work with that stride: a small grid is chosen (lightllm's KV transfer
            # keeps 20 programs to leave the SMs to compute). A note, not a warning.
            yield make_finding(
                CODE, "information", launch.grid_span,
                f"grid {shape} launches {programs} programs of {launch.kernel}, which walks its work with that "
                f"stride; the {ctx.target.name} has {sms} SMs: more programs would spread the work wider",
                launch.kernel, programs=programs, sm_count=sms, grid=list(grid),
            )
            continue
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


def _walks_its_work(ctx: CheckContext, launch, kernel, grid: tuple[int, ...]) -> bool:
    """The kernel reads its program count and steps by it: ``tl.num_programs``, or an argument the launch sets to a
    grid axis's count through a host name that a loop steps by (``range(pid, n, count)``, ``tid += count``)."""
    if kernel is None:
        return False
    if kernel.calls_of("num_programs"):
        return True
    body = kernel.body_span.text(ctx.analysis.text)
    for arg in launch.args:
        if arg.param is None or not isinstance(arg.value, int) or arg.value not in grid or not arg.source.isidentifier():
            continue
        steps = any(len(loop.iter_args) == 3 and loop.iter_args[2].strip() == arg.param for loop in kernel.loops)
        if steps or re.search(rf"\+=\s*{re.escape(arg.param)}\b", body):
            return True
    return False
