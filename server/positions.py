"""Positions between the analysis (UTF-16 spans with code-point offsets) and the client's encoding."""

from __future__ import annotations

import bisect

from lsprotocol import types

from ..optimizer.analysis import Span

# The units one character takes in each encoding a client can negotiate.
_UNITS = {
    types.PositionEncodingKind.Utf8: lambda ch: len(ch.encode("utf-8")),
    types.PositionEncodingKind.Utf16: lambda ch: 2 if ord(ch) > 0xFFFF else 1,
    types.PositionEncodingKind.Utf32: lambda ch: 1,
}


class TextIndex:
    """Line starts of one text, to move between code-point offsets and client positions."""

    def __init__(self, text: str, encoding: str = types.PositionEncodingKind.Utf16):
        self.text = text
        self._units = _UNITS.get(encoding, _UNITS[types.PositionEncodingKind.Utf16])
        self._starts = [0]
        # LSP lines end at \n, \r\n or \r only (str.splitlines knows more separators).
        index = 0
        length = len(text)
        while True:
            nl = text.find("\n", index)
            cr = text.find("\r", index)
            if nl < 0 and cr < 0:
                break
            if cr >= 0 and (nl < 0 or cr < nl):
                index = cr + 2 if cr + 1 < length and text[cr + 1] == "\n" else cr + 1
            else:
                index = nl + 1
            self._starts.append(index)

    @property
    def line_count(self) -> int:
        return len(self._starts)

    def _line_text(self, line: int) -> str:
        start = self._starts[line]
        end = self._starts[line + 1] if line + 1 < len(self._starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def position_at(self, offset: int) -> types.Position:
        """The client position of a code-point offset (clamped to the text)."""
        offset = min(max(offset, 0), len(self.text))
        line = bisect.bisect_right(self._starts, offset) - 1
        start = self._starts[line]
        prefix = self.text[start:offset]
        if prefix.isascii():
            return types.Position(line=line, character=len(prefix))
        prefix = prefix.rstrip("\r\n")
        return types.Position(line=line, character=sum(self._units(ch) for ch in prefix))

    def offset_at(self, position: types.Position) -> int:
        """The code-point offset of a client position (clamped to its line and to the text)."""
        if position.line >= len(self._starts):
            return len(self.text)
        line = max(position.line, 0)
        text = self._line_text(line)
        if text.isascii():
            return self._starts[line] + min(position.character, len(text))
        units = 0
        for i, ch in enumerate(text):
            if units >= position.character:
                return self._starts[line] + i
            units += self._units(ch)
        return self._starts[line] + len(text)

    def range_of(self, span: Span) -> types.Range:
        """The client range of an analysis span of this text."""
        return types.Range(start=self.position_at(span.start_offset), end=self.position_at(span.end_offset))
