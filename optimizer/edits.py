"""Text diff helpers shared by the actions, the step history and the CLI."""

from __future__ import annotations

import difflib
import re


def changed_line_count(old: str, new: str) -> int:
    """Lines an edit touches: per diff hunk, the larger of lines removed and lines added."""
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    total = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            total += max(i2 - i1, j2 - j1)
    return total


def unified_diff(old: str, new: str, path: str = "file.py", context: int = 3) -> str:
    """A ``diff -u`` style patch from ``old`` to ``new``."""
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=context
        )
    )


_TOKEN = re.compile(r"\w+|\s+|.", re.S)


def three_way_revert(before: str, after: str, current: str) -> tuple[str | None, str]:
    """Undo the change ``before -> after`` inside ``current``; ``(None, reason)`` when it no longer applies.

    The step's hunks are located in ``current`` through the lines ``current`` shares with ``after``
    (later edits elsewhere move them, but must not touch them); each hunk of ``after`` is then
    replaced by its ``before`` lines. When a later edit touched the same lines, the same is tried
    on tokens (a later step changing ``num_stages=1`` on the line where this step appended
    ``GROUP_M=8`` does not block it); a token-level result must still parse as Python.
    """
    if current == after:
        return before, "reverted"
    lines, why = _revert_units(before.splitlines(keepends=True), after.splitlines(keepends=True),
                               current.splitlines(keepends=True))
    if lines is not None:
        return "".join(lines), "reverted; later changes kept"
    tokens, _ = _revert_units(_TOKEN.findall(before), _TOKEN.findall(after), _TOKEN.findall(current))
    if tokens is not None:
        merged = "".join(tokens)
        try:
            compile(merged, "<revert>", "exec")
        except (SyntaxError, ValueError):
            return None, why
        return merged, "reverted; later changes on the same lines kept"
    return None, why


def _revert_units(before: list[str], after: list[str], current: list[str]) -> tuple[list[str] | None, str]:
    step = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
    # Map every unit of ``after`` to its place in ``current`` (None when a later edit changed it).
    where: dict[int, int] = {}
    for tag, a1, a2, c1, _c2 in difflib.SequenceMatcher(None, after, current, autojunk=False).get_opcodes():
        if tag == "equal":
            for offset in range(a2 - a1):
                where[a1 + offset] = c1 + offset
    replacements: list[tuple[int, int, list[str]]] = []  # (start, end) in current -> units
    for tag, b1, b2, a1, a2 in step:
        if tag == "equal":
            continue
        if a2 > a1:
            positions = [where.get(i) for i in range(a1, a2)]
            if any(p is None for p in positions) or positions != list(range(positions[0], positions[0] + len(positions))):
                return None, f"lines {a1 + 1}-{a2} that this step wrote were changed since (later edit)"
            start, end = positions[0], positions[-1] + 1
        else:  # pure deletion: anchor on the unit after (or before) the deleted block
            anchor = where.get(a1) if a1 < len(after) else len(current)
            if anchor is None and a1 > 0 and where.get(a1 - 1) is not None:
                anchor = where[a1 - 1] + 1
            if anchor is None:
                return None, f"the lines around line {a1 + 1}, where this step removed code, were changed since"
            start = end = anchor
        replacements.append((start, end, before[b1:b2]))
    result = list(current)
    for start, end, units in sorted(replacements, key=lambda r: r[0], reverse=True):
        result[start:end] = units
    return result, "reverted"
