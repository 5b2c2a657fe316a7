"""Minimal line edits and client positions: applying the edits reproduces the new text exactly."""

import random

import pytest
from lsprotocol import types

from mtmc_lsp.server.positions import TextIndex
from mtmc_lsp.server.text_edits import apply_edits, line_edits

PIECES = ["a\n", "b\r\n", "é😀 = 1\n", "x = 1\n", "\n", "    tl.load(p)\n", "z\r"]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_random_edits_round_trip(encoding):
    rng = random.Random(encoding)
    for _ in range(1500):
        old = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12))) + rng.choice(["", "tail"])
        lines = old.splitlines(keepends=True)
        for _ in range(rng.randint(0, 4)):
            op = rng.random()
            if op < 0.4 and lines:
                lines[rng.randrange(len(lines))] = rng.choice(PIECES)
            elif op < 0.7:
                lines.insert(rng.randint(0, len(lines)), rng.choice(PIECES))
            elif lines:
                del lines[rng.randrange(len(lines))]
        new = "".join(lines) + rng.choice(["", "end"])
        index = TextIndex(old, encoding)
        assert apply_edits(old, line_edits(old, new, index), index) == new


def test_edits_are_minimal_hunks():
    old = "".join(f"line {i}\n" for i in range(100))
    new = old.replace("line 10\n", "line ten\n").replace("line 80\n", "line 80\nextra\n")
    edits = line_edits(old, new, TextIndex(old))
    assert [(e.range.start.line, e.range.end.line, e.new_text) for e in edits] == [
        (10, 11, "line ten\n"), (81, 81, "extra\n")]


def test_positions_count_units_of_the_negotiated_encoding():
    text = "x = '😀é'\ny\n"
    offset = text.index("'", 5)  # the closing quote
    assert TextIndex(text, "utf-16").position_at(offset) == types.Position(line=0, character=8)
    assert TextIndex(text, "utf-8").position_at(offset) == types.Position(line=0, character=11)
    assert TextIndex(text, "utf-32").position_at(offset) == types.Position(line=0, character=7)
    for encoding in ("utf-8", "utf-16", "utf-32"):
        index = TextIndex(text, encoding)
        assert index.offset_at(index.position_at(offset)) == offset
