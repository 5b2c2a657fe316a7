"""Minimal text edits between two versions of a document (whole changed lines, via difflib)."""

from __future__ import annotations

import difflib

from lsprotocol import types

from .positions import TextIndex


def line_edits(old: str, new: str, index: TextIndex) -> list[types.TextEdit]:
    """Edits that turn ``old`` into ``new``, one per changed block of lines; ``index`` is over ``old``.

    Replacing whole lines (with their line breaks) keeps every edit exact whatever the line
    endings, and a reviewer sees the same hunks a diff would show.
    """
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    starts = [0]
    for line in old_lines:
        starts.append(starts[-1] + len(line))
    edits = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(types.TextEdit(
            range=types.Range(start=index.position_at(starts[i1]), end=index.position_at(starts[i2])),
            new_text="".join(new_lines[j1:j2]),
        ))
    return edits


def apply_edits(text: str, edits: list[types.TextEdit], index: TextIndex) -> str:
    """Apply non-overlapping edits to ``text`` (``index`` over ``text``), as a client would."""
    spans = sorted(((index.offset_at(e.range.start), index.offset_at(e.range.end), e.new_text) for e in edits), reverse=True)
    for start, end, new_text in spans:
        text = text[:start] + new_text + text[end:]
    return text
