"""Positions between the analysis (UTF-16 spans with code-point offsets) and the client's encoding."""

from __future__ import annotations

import bisect
import re

from lsprotocol import types

from ..optimizer.analysis import Span

# Each encoding a client can negotiate: (codec, bytes per unit). Conversions encode a slice once in C
# instead of counting per character in Python (seconds on a 5 MB line).
_CODECS = {
    types.PositionEncodingKind.Utf8: ("utf-8", 1),
    types.PositionEncodingKind.Utf16: ("utf-16-le", 2),
    types.PositionEncodingKind.Utf32: ("utf-32-le", 4),
}


def units_of(text: str, encoding: str = types.PositionEncodingKind.Utf16) -> int:
    """The number of ``encoding`` code units ``text`` takes."""
    if text.isascii():
        return len(text)
    codec, width = _CODECS.get(encoding, _CODECS[types.PositionEncodingKind.Utf16])
    return len(text.encode(codec, errors="surrogatepass")) // width


def code_points_in(text: str, units: int, encoding: str = types.PositionEncodingKind.Utf16) -> int:
    """How many code points of ``text`` its first ``units`` code units cover (a split character is not counted)."""
    if units <= 0:
        return 0
    head = text[:units]  # a code point is at least one unit: the answer lies within the first ``units``
    if head.isascii():
        return len(head)
    codec, width = _CODECS.get(encoding, _CODECS[types.PositionEncodingKind.Utf16])
    encoded = head.encode(codec, errors="surrogatepass")[: units * width]
    return len(encoded.decode(codec, errors="ignore"))


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class TextIndex:
    """Line starts of one text, to move between code-point offsets and client positions."""

    def __init__(self, text: str, encoding: str = types.PositionEncodingKind.Utf16):
        self.text = text
        self.encoding = encoding
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

    def position_at(self, offset: int) -> types.Position:
        """The client position of a code-point offset (clamped to the text)."""
        offset = min(max(offset, 0), len(self.text))
        line = bisect.bisect_right(self._starts, offset) - 1
        start = self._starts[line]
        prefix = self.text[start:offset]
        if prefix.isascii():
            return types.Position(line=line, character=len(prefix))
        return types.Position(line=line, character=units_of(prefix.rstrip("\r\n"), self.encoding))

    def offset_at(self, position: types.Position) -> int:
        """The code-point offset of a client position (clamped to its line and to the text)."""
        if position.line >= len(self._starts):
            return len(self.text)
        line = max(position.line, 0)
        start = self._starts[line]
        end = self._starts[line + 1] if line + 1 < len(self._starts) else len(self.text)
        if line + 1 < len(self._starts):  # a position past the line's end clamps to before its break
            end -= 2 if self.text.startswith("\r\n", end - 2) else 1
        # Only the first ``character`` code points can matter (each is at least one unit).
        head = self.text[start: min(end, start + max(position.character, 0))]
        return start + code_points_in(head, position.character, self.encoding)

    def range_of(self, span: Span) -> types.Range:
        """The client range of an analysis span of this text."""
        return types.Range(start=self.position_at(span.start_offset), end=self.position_at(span.end_offset))
