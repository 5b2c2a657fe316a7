"""Load limits without a server: deep expressions per kernel, position conversion on huge lines (issue 16, item 6)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.server.positions import TextIndex
from mtmc_lsp.server.protocol import FastTextDocument

MATMUL = (Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples" / "matmul.py").read_text()
DEEP = '''
@triton.jit
def deep_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = {sum}
    tl.store(x_ptr + offs, y)
'''


def test_a_500_term_sum_is_analysed_with_the_other_kernels():
    analysis = analyze(MATMUL + DEEP.format(sum=" + ".join(["x"] * 500)))
    assert analysis.syntax_error is None
    assert [k.name for k in analysis.kernels] == ["matmul_kernel", "deep_kernel"]


def test_a_kernel_too_deep_even_for_the_raised_limit_hides_only_itself():
    analysis = analyze(MATMUL + DEEP.format(sum=" + ".join(["x"] * 30_000)))
    assert analysis.syntax_error is None and [k.name for k in analysis.kernels] == ["matmul_kernel"]
    import sys

    assert sys.getrecursionlimit() == 1000  # given back


# The worst edit allowed: ASCII lines convert positions without encoding (milliseconds); lines of
# non-ASCII text encode the line's head once per position in C (tens of ms for 4 million
# emoji). pygls' per-character loop took about 2.25 s per edit on a 5 MB line.
@pytest.mark.parametrize("filler, limit_s", [("1, ", 0.1), ("é, ", 0.5), ("😀, ", 0.5)], ids=["ascii", "bmp", "astral"])
def test_edits_on_a_5_mb_line_take_milliseconds(filler, limit_s):
    line = "x = [" + filler * (5_000_000 // len(filler)) + "]"
    document = FastTextDocument("file:///big.py", source=line, version=1,
                                position_codec=PositionCodec(types.PositionEncodingKind.Utf16))
    worst = 0.0
    for i in range(10):
        at = 4_000_000 + i  # far into the line, in UTF-16 units
        change = types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=0, character=at), end=types.Position(line=0, character=at + 1)),
            text="2")
        started = time.perf_counter()
        document.apply_change(change)
        worst = max(worst, time.perf_counter() - started)
    assert worst < limit_s, f"an edit took {worst * 1000:.0f} ms"
    index = TextIndex(document.source)
    started = time.perf_counter()
    position = index.position_at(len(document.source) - 1)
    assert index.offset_at(position) == len(document.source) - 1
    assert time.perf_counter() - started < limit_s
