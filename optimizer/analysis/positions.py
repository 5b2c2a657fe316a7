"""Source positions: Python's UTF-8 byte columns to LSP's UTF-16 positions and back."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Position:
    """A 0-based line and UTF-16 character, as LSP counts them."""

    line: int
    character: int


@dataclass(frozen=True)
class Span:
    """A source range: LSP positions plus code-point offsets into the text (for edits)."""

    start: Position
    end: Position
    start_offset: int
    end_offset: int

    def contains(self, pos: Position) -> bool:
        return self.start <= pos <= self.end

    def text(self, source: str) -> str:
        return source[self.start_offset : self.end_offset]

    def to_json(self) -> dict:
        return {
            "start": {"line": self.start.line, "character": self.start.character},
            "end": {"line": self.end.line, "character": self.end.character},
        }


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (astral characters count twice)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class SourceMap:
    """Maps ``ast`` locations (1-based lines, UTF-8 byte columns) of one text to spans."""

    def __init__(self, text: str):
        self.text = text
        # Lines end at \n, \r\n or \r only, as for Python's parser and LSP; str.splitlines would
        # also break at form feeds, \x1c-\x1e, \x85 and \u2028/\u2029 and shift every later line.
        self.lines = _LINE.findall(text) or [""]
        self._line_starts: list[int] = []
        offset = 0
        for line in self.lines:
            self._line_starts.append(offset)
            offset += len(line)
        self._line_starts.append(offset)
        self._ascii = text.isascii()
        # Per line: its length when it is ASCII (byte column = code point = UTF-16 unit), else None.
        self._ascii_lengths = [len(line) if self._ascii or line.isascii() else None for line in self.lines]

    def _code_points(self, line_index: int, byte_col: int) -> int:
        if line_index >= len(self.lines):
            return 0
        line = self.lines[line_index]
        if self._ascii or line.isascii():
            return min(byte_col, len(line))
        return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def position(self, lineno: int, byte_col: int) -> tuple[Position, int]:
        """LSP position and text offset of an ``ast`` (lineno, col_offset) pair."""
        index = lineno - 1 if lineno > 0 else 0
        if index < len(self.lines):
            length = self._ascii_lengths[index]
            if length is not None:  # the common case, without the general path's calls
                cps = byte_col if byte_col < length else length
                return Position(index, cps), self._line_starts[index] + cps
        if index >= len(self.lines):
            end = len(self.text)
            return Position(len(self.lines) - 1, utf16_len(self.lines[-1])), end
        cps = self._code_points(index, byte_col)
        line = self.lines[index]
        character = cps if self._ascii or line.isascii() else utf16_len(line[:cps])
        return Position(index, character), self._line_starts[index] + cps

    def offset(self, lineno: int, byte_col: int) -> int:
        """The text offset alone of an ``ast`` (lineno, col_offset) pair (as ``position`` computes it)."""
        index = lineno - 1 if lineno > 0 else 0
        if index < len(self.lines):
            length = self._ascii_lengths[index]
            if length is not None:
                return self._line_starts[index] + (byte_col if byte_col < length else length)
        return self.position(lineno, byte_col)[1]

    def text_of(self, node) -> str:
        """The source text of an ``ast`` node: ``span(node).text(text)`` without building the span."""
        end_lineno = getattr(node, "end_lineno", None) or node.lineno
        end_col = getattr(node, "end_col_offset", None)
        if end_col is None:
            end_col = node.col_offset
        return self.text[self.offset(node.lineno, node.col_offset) : self.offset(end_lineno, end_col)]

    def span(self, node) -> Span:
        """The span of an ``ast`` node (anything with lineno/col_offset/end_lineno/end_col_offset)."""
        start, start_offset = self.position(node.lineno, node.col_offset)
        end_lineno = getattr(node, "end_lineno", None) or node.lineno
        end_col = getattr(node, "end_col_offset", None)
        if end_col is None:
            end_col = node.col_offset
        end, end_offset = self.position(end_lineno, end_col)
        return Span(start, end, start_offset, end_offset)

    def line_span(self, line_index: int) -> Span:
        """The whole of one 0-based line, without its line break."""
        line_index = min(max(line_index, 0), len(self.lines) - 1)
        line = self.lines[line_index].rstrip("\r\n")
        start = self._line_starts[line_index]
        return Span(Position(line_index, 0), Position(line_index, utf16_len(line)), start, start + len(line))

    def offset_of(self, pos: Position) -> int:
        """Text offset of an LSP position (clamped to the text)."""
        if pos.line >= len(self.lines):
            return len(self.text)
        line = self.lines[max(pos.line, 0)]
        units = 0
        for i, ch in enumerate(line):
            if units >= pos.character:
                return self._line_starts[pos.line] + i
            units += 2 if ord(ch) > 0xFFFF else 1
        return self._line_starts[pos.line] + len(line.rstrip("\r\n"))
