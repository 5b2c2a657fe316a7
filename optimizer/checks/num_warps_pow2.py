"""MTMC105: ``num_warps`` must be a power of two (launch sites and autotune configs)."""

from __future__ import annotations

from collections.abc import Iterator

from ._text import keyword_span
from .bindings import CheckContext
from .finding import Finding, make_finding

CODE = "MTMC105"
SEVERITY = "error"
TITLE = "num_warps is not a power of 2"


def is_power_of_2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _message(value: int, where: str) -> str:
    lower = 1 << (value.bit_length() - 1) if value > 0 else 1
    return (
        f"num_warps={value} {where} is not a power of 2; Triton lays out warps in powers of 2 "
        f"and rejects it at compile time: use {lower} or {lower * 2}"
    )


def check(ctx: CheckContext) -> Iterator[Finding]:
    text = ctx.text
    for launch in ctx.analysis.launches:
        value = launch.num_warps
        if value is not None and not is_power_of_2(value):
            span = keyword_span(text, launch.span, "num_warps") or launch.span
            yield make_finding(
                CODE, SEVERITY, span, _message(value, f"at this launch of {launch.kernel}"),
                launch.kernel, num_warps=value,
            )
    for kernel in ctx.analysis.kernels:
        if kernel.autotune is None:
            continue
        for index, config in enumerate(kernel.autotune.configs):
            value = config.num_warps
            if value is not None and not is_power_of_2(value):
                span = keyword_span(text, config.span, "num_warps") or config.span
                yield make_finding(
                    CODE, SEVERITY, span, _message(value, f"in autotune config {index} of {kernel.name}"),
                    kernel.name, num_warps=value, config_index=index,
                )
