"""Span arithmetic inside a known span, without re-parsing: find keyword arguments and names."""

from __future__ import annotations

import re

from ..analysis import Position, Span, utf16_len


def offset_span(text: str, outer: Span, start: int, end: int) -> Span:
    """The span of text offsets ``start:end`` that lie inside ``outer``."""
    return Span(_position(text, outer, start), _position(text, outer, end), start, end)


def _position(text: str, outer: Span, offset: int) -> Position:
    segment = text[outer.start_offset:offset]
    newlines = segment.count("\n")
    if newlines == 0:
        return Position(outer.start.line, outer.start.character + utf16_len(segment))
    tail = segment[segment.rfind("\n") + 1:]
    return Position(outer.start.line + newlines, utf16_len(tail))


def keyword_span(text: str, outer: Span, name: str) -> Span | None:
    """The span of ``name=value`` (the value up to the next comma or bracket) inside ``outer``."""
    source = outer.text(text)
    match = re.search(rf"(?<![\w.]){re.escape(name)}\s*=(?!=)\s*([^,()\[\]{{}}\n]*)", source)
    if match is None:
        return None
    return _trimmed_span(text, outer, outer.start_offset + match.start(), outer.start_offset + match.end(1))


def name_span(text: str, outer: Span, name: str) -> Span | None:
    """The span of the first whole-word occurrence of ``name`` inside ``outer``."""
    match = re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", outer.text(text))
    if match is None:
        return None
    return offset_span(text, outer, outer.start_offset + match.start(), outer.start_offset + match.end())


def dict_entry_span(text: str, outer: Span, key: str) -> Span | None:
    """The span of ``"key": value`` inside ``outer`` (a dict literal such as a Config's kwargs)."""
    source = outer.text(text)
    match = re.search(rf"""(["']){re.escape(key)}\1\s*:\s*([^,(){{}}\[\]\n]*)""", source)
    if match is None:
        return None
    return _trimmed_span(text, outer, outer.start_offset + match.start(), outer.start_offset + match.end(2))


def _trimmed_span(text: str, outer: Span, start: int, end: int) -> Span:
    """The span from ``start`` to ``end`` without the white space before ``end`` (a value ends at its last character)."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return offset_span(text, outer, start, end)
