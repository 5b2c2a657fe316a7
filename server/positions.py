"""Positions between the analysis (UTF-16 spans with code-point offsets) and the client's encoding."""

from __future__ import annotations

import bisect
import re

from lsprotocol import types

from ..optimizer.analysis import Span

# The units one character takes in each encoding a client can negotiate.
_UNITS = {
    types.PositionEncodingKind.Utf8: lambda ch: len(ch.encode("utf-8")),
    types.PositionEncodingKind.Utf16: lambda ch: 2 if ord(ch) > 0xFFFF else 1,
    types.PositionEncodingKind.Utf32: lambda ch: 1,
}


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class TextIndex:
    """Line starts of one text, to move between code-point offsets and client positions."""

    def __init__(self, text: str, encoding: str = types.PositionEncodingKind.Utf16):
        self.text = text
        self.encoding = encoding
        self._units = _UNITS.get(encoding, _UNITS[types.PositionEncodingKind.Utf16])
        # LSP lines end at \n, \r\n or \r only (str.splitlines knows more separators).
        if "\r" in text:
            self._starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
        else:
            self._starts = [0]
            find, index = text.find, text.find("\n")
            while index >= 0:
                self._starts.append(index + 1)
                index = find("\n", index + 1)

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
