"""The checks read triton.language through the analysis' import resolution: every spelling, same findings."""

from __future__ import annotations

import re

import pytest

from mtmc_lsp.optimizer.analysis import TritonNames, analyze
from mtmc_lsp.optimizer.checks import run_checks
from mtmc_lsp.optimizer.checks.kernel_facts import clear_facts_cache
from mtmc_lsp.optimizer.hardware import get_profile

H100 = get_profile("h100")
HEADER_LINES = 4  # every spelling's header is padded to this many lines, so findings sit on the same lines

# One file that trips every static check, written with ``tl.``; each spelling rewrites ``tl.`` (and ``triton.``).
KERNELS = '''
@triton.jit
def planted(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, tl.math.exp(x))
    a = tl.zeros((8, 12), dtype=tl.float32)
    b = tl.zeros((12, 8), dtype=tl.float32)
    c = tl.dot(a, b)


@triton.jit
def big_tiles(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=4):
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :]).to(tl.float32)
        b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :]).to(tl.float32)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def run(x, y, a, b, c):
    planted[(4,)](x, y, x.numel(), BLOCK=100, num_warps=3)
    big_tiles[(1,)](a, b, c, 256, BM=128, BN=128, BK=128)
'''

# name -> (import lines, the prefix that replaces ``tl.``, the spelling of ``triton.``)
SPELLINGS = {
    "import triton.language as tl": ("import triton\nimport triton.language as tl\n", "tl.", "triton."),
    "another alias": ("import triton\nimport triton.language as tlang\n", "tlang.", "triton."),
    "from triton import language as L": ("import triton\nfrom triton import language as L\n", "L.", "triton."),
    "from triton import language": ("import triton\nfrom triton import language\n", "language.", "triton."),
    "triton.language spelled out": ("import triton\n", "triton.language.", "triton."),
    "import triton as tr": ("import triton as tr\n", "tr.language.", "tr."),
    "from triton.language import names": (
        "import triton\nfrom triton.language import (arange, cdiv, constexpr, dot, float32, load, math,\n"
        "    program_id, range, store, zeros)\n", "", "triton.",
    ),
    # A trailing comment and a second module on the import line: a line scan read neither.
    "alias with a comment": ("import triton\nimport triton.language as T  # the language\n", "T.", "triton."),
    "alias then another module": ("import triton.language as tl2, triton\n", "tl2.", "triton."),
}


def _spelled(name: str) -> tuple[str, str]:
    header, tl_prefix, triton_prefix = SPELLINGS[name]
    header += "#\n" * (HEADER_LINES - header.count("\n"))
    assert header.count("\n") == HEADER_LINES
    body = re.sub(r"\btl\.", tl_prefix, KERNELS)
    body = re.sub(r"(?<![\w.])triton\.", triton_prefix, body)
    return header + body, tl_prefix


def _comparable(text: str, tl_prefix: str, findings) -> list[tuple]:
    """Findings as (code, lines, message, data, spanned text with the spelling of triton.language removed)."""
    out = []
    for f in findings:
        spanned = f.span.text(text)
        if tl_prefix:
            spanned = spanned.replace(tl_prefix, "")
        out.append((f.code, f.span.start.line, f.span.end.line, f.message, f.data, spanned))
    return out


def _reference() -> list[tuple]:
    text, prefix = _spelled("import triton.language as tl")
    return _comparable(text, prefix, run_checks(analyze(text), H100))


def test_the_planted_file_trips_every_static_check():
    codes = {row[0] for row in _reference()}
    assert codes == {"MTMC101", "MTMC102", "MTMC103", "MTMC104", "MTMC105", "MTMC106"}
    # The MTMC104 estimate uses the explicit fp32 cast: 4 bytes, not the fp16 assumption.
    (shared,) = [row for row in _reference() if row[0] == "MTMC104"]
    assert "524,288 bytes" in shared[3] and "(4-byte and 4-byte elements)" in shared[3], shared[3]


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_of_triton_language_gives_the_same_findings(spelling):
    clear_facts_cache()  # each spelling's facts are built from its own tree
    text, prefix = _spelled(spelling)
    analysis = analyze(text)
    assert [k.name for k in analysis.kernels] == ["planted", "big_tiles"]
    assert _comparable(text, prefix, run_checks(analysis, H100)) == _reference()


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_a_syntax_error_keeps_the_same_kernel_findings_under_every_spelling(spelling):
    """MTMC001 plus the last parsable version's findings: the stale analysis keeps that version's names."""
    text, prefix = _spelled(spelling)
    broken = text + "\ndef half_typed(:\n"
    stale = analyze(broken, previous=analyze(text))
    assert stale.stale and stale.names == analyze(text).names
    findings = run_checks(stale, H100)
    assert [f.code for f in findings].count("MTMC001") == 1
    kernel_findings = [f for f in findings if f.code != "MTMC001"]
    assert _comparable(text, prefix, kernel_findings) == _reference()


def test_cached_facts_are_not_shared_between_files_that_spell_the_language_differently():
    """The same kernel source reads as Triton in one file and not in another: the facts cache keys on the imports."""
    kernel = (
        "@triton.jit\ndef k(x_ptr, n_elements, BLOCK: lang.constexpr):\n"
        "    offs = lang.program_id(0) * BLOCK + lang.arange(0, BLOCK)\n"
        "    lang.store(x_ptr + offs, lang.load(x_ptr + offs) + 1)\n"
    )
    clear_facts_cache()
    bound = run_checks(analyze("import triton\nfrom triton import language as lang\n" + kernel), H100)
    unbound = run_checks(analyze("import triton\nimport lang\n" + kernel), H100)
    assert [f.code for f in bound] == ["MTMC103", "MTMC103"]
    assert unbound == []


def test_names_resolve_every_spelling_to_triton_language():
    import ast

    def op(imports: str, expression: str) -> str | None:
        names = analyze(imports + "\n").names
        return names.tl_op(ast.parse(expression, mode="eval").body)

    assert op("import triton.language as tl", "tl.load") == "load"
    assert op("import triton.language as tl", "tl.math.exp") == "exp"
    assert op("import triton", "triton.language.load") == "load"
    assert op("import triton", "triton.cdiv") is None  # triton, not triton.language
    assert op("import triton as tr", "tr.language.extra.libdevice.exp") == "exp"
    assert op("from triton.language import load as ld", "ld") == "load"
    assert op("from triton import language", "language.store") == "store"
    assert op("import numpy as np", "np.load") is None
    assert op("", "tl.load") == "load"  # a snippet without imports still reads as Triton
    assert op("import triton.language as tl", "load") is None  # a bare name nobody imported
    assert analyze("import triton.language as tl\n").names == TritonNames({"tl": "triton.language"})
    assert analyze("import triton.language as tl\n").names != analyze("import triton.language as T\n").names


def test_kernels_jitted_by_a_call_give_the_same_findings():
    """``f = triton.jit(f)`` (and through another name) in place of ``@triton.jit``: the same kernels, same findings."""
    text, prefix = _spelled("import triton.language as tl")
    jitted = text.replace("@triton.jit\n", "# jitted below\n").replace("big_tiles[", "tiles[") + (
        "\n\nplanted = triton.jit(planted)\n"
        'tiles = triton.heuristics({})(triton.jit(do_not_specialize=["K"])(big_tiles))\n'
    )
    analysis = analyze(jitted)
    assert [(k.name, k.launch_names) for k in analysis.kernels] == [("planted", []), ("big_tiles", ["tiles"])]
    # Launches through the new name read as the reference's launches of big_tiles.
    found = [(*row[:-1], re.sub(r"(?<!big_)tiles\[", "big_tiles[", row[-1]))
             for row in _comparable(jitted, prefix, run_checks(analysis, H100))]
    assert found == _reference()
