"""The checks a patched file must pass before the LLM coder offers it as a step (before any verification).

In order: it changes something; at most ``max_changed_lines`` lines (per hunk, the larger of removed
and added, as ``optimizer.edits.changed_line_count`` counts for rule actions); it parses as Python;
every kernel of the old text still exists with the same parameters (names, order, constexpr or
not: defaults may change); and every change lies inside the chosen kernel or its launch code
(``region.py``; blank lines next to a region count as part of it). Each failure is one ``CoderError`` line.
"""

from __future__ import annotations

import difflib

from ..analysis import FileAnalysis, Kernel, analyze
from ..edits import changed_line_count
from .errors import CoderError
from .patch import split_lines
from .region import describe_regions, editable_regions, widen_over_blank_lines


def check_rewrite(old: FileAnalysis, kernel: Kernel, new_text: str, max_changed_lines: int) -> int:
    """The number of changed lines when ``new_text`` passes every check; ``CoderError`` otherwise."""
    if new_text == old.text:
        raise CoderError("the diff changes nothing")
    changed = changed_line_count(old.text, new_text)
    if changed > max_changed_lines:
        raise CoderError(f"the diff changes {changed} lines; the limit is {max_changed_lines}")
    try:
        compile(new_text, "<patched>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise CoderError(f"the patched file does not parse: line {exc.lineno}: {exc.msg}") from exc
    except ValueError as exc:  # e.g. a NUL character
        raise CoderError(f"the patched file does not parse: {exc}") from exc
    _check_signatures(old, analyze(new_text))
    _check_region(old, kernel, new_text)
    return changed


def _signature(kernel: Kernel) -> list[tuple[str, str]]:
    return [(p.name, p.kind) for p in kernel.params]


def _show(kernel: Kernel) -> str:
    return "(" + ", ".join(f"{p.name}: constexpr" if p.kind == "constexpr" else p.name for p in kernel.params) + ")"


def _check_signatures(old: FileAnalysis, new: FileAnalysis) -> None:
    for before in old.kernels:
        after = new.kernel(before.name)
        if after is None:
            raise CoderError(f"the patched file no longer defines kernel {before.name} (kernels must keep their names)")
        if _signature(after) != _signature(before):
            raise CoderError(f"kernel {before.name}'s parameters changed from {_show(before)} to {_show(after)}")


def _check_region(old: FileAnalysis, kernel: Kernel, new_text: str) -> None:
    regions = editable_regions(old, kernel)
    before, after = split_lines(old.text), split_lines(new_text)  # line numbers as the analysis counts them
    allowed = widen_over_blank_lines(regions, before)
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            outside = next((line for line in range(i1, i2) if not any(r.holds(line) for r in allowed)), None)
        else:  # a pure insertion before line i1
            outside = None if any(r.borders(i1) for r in allowed) else i1
        if outside is not None:
            raise CoderError(f"the diff changes line {outside + 1}, outside {kernel.name}'s code "
                             f"({describe_regions(regions)})")
