"""Where the LLM micro coder may edit: the chosen kernel, plus the code that launches it.

The launch code is the whole host function around each launch of the kernel (block sizes, grids,
buffers and ``num_warps`` usually live in the wrapper, not on the launch line), or the launch
statement itself for a launch at module level. Other kernels, helpers and module constants are
out of bounds: a goal that needs them is beyond this coder (docs/coder.md, "Limits").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import FileAnalysis, Kernel


@dataclass(frozen=True)
class Region:
    """A block of lines an edit may touch: 0-based, ``start`` and ``end`` inclusive."""

    start: int
    end: int
    what: str  # "kernel", "host function softmax()", "launch"

    def holds(self, line: int) -> bool:
        return self.start <= line <= self.end

    def borders(self, line: int) -> bool:
        """An insertion before ``line`` lands inside or right after this region."""
        return self.start <= line <= self.end + 1


def editable_regions(analysis: FileAnalysis, kernel: Kernel) -> list[Region]:
    """The kernel's lines (decorators through body) first, then its launch code in file order."""
    regions = [Region(kernel.span.start.line, kernel.span.end.line, "kernel")]
    hosts = {h.name: h for h in analysis.host_functions}
    seen: set[str] = set()
    for launch in analysis.launches_of(kernel.name):
        host = hosts.get(launch.host_function) if launch.host_function else None
        if host is not None:
            if host.name not in seen:
                seen.add(host.name)
                regions.append(Region(host.span.start.line, host.span.end.line, f"host function {host.name}()"))
        else:
            regions.append(Region(launch.span.start.line, launch.span.end.line, "launch"))
    return regions[:1] + sorted(regions[1:], key=lambda r: r.start)


def describe_regions(regions: list[Region]) -> str:
    """``kernel lines 9-30, host function softmax() lines 33-38`` (1-based, as editors show lines)."""
    return ", ".join(f"{r.what} lines {r.start + 1}-{r.end + 1}" for r in regions)


def widen_over_blank_lines(regions: list[Region], lines: list[str]) -> list[Region]:
    """Each region grown over the blank lines around it: a diff may place an insertion anywhere in the
    blank gap after a kernel (difflib aligns blank lines arbitrarily), and blank lines change nothing."""
    out = []
    for region in regions:
        start, end = region.start, region.end
        while start > 0 and not lines[start - 1].strip():
            start -= 1
        while end + 1 < len(lines) and not lines[end + 1].strip():
            end += 1
        out.append(Region(start, end, region.what))
    return out
