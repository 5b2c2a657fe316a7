"""Diagnostics end to end: bundled examples, planted problems, versions, syntax errors, bad input."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.checks import run_checks
from mtmc_lsp.optimizer.hardware import get_profile

from .editor import EXAMPLES, PLANTED, EditorClient


def codes(diagnostics) -> list[str]:
    return sorted(str(d.code) for d in diagnostics)


@pytest.mark.parametrize("example", ["matmul.py", "softmax.py", "gelu_bias.py"])
async def test_bundled_examples_match_the_checks(client: EditorClient, workspace, example):
    text = (EXAMPLES / example).read_text()
    uri = (workspace / example).as_uri()
    client.open(uri, text)
    diagnostics = await client.diagnostics_for(uri, version=1)
    expected = run_checks(analyze(text), get_profile("h100"))
    assert codes(diagnostics) == sorted(f.code for f in expected)
    for diagnostic, finding in zip(sorted(diagnostics, key=lambda d: (d.range.start.line, str(d.code))),
                                   sorted(expected, key=lambda f: (f.span.start.line, f.code))):
        assert diagnostic.source == "mtmc"
        assert diagnostic.range.start.line == finding.span.start.line
        assert diagnostic.code_description.href == finding.docs_url


async def test_planted_problem_is_reported_with_code_and_docs_link(client: EditorClient, workspace):
    uri = (workspace / "planted.py").as_uri()
    client.open(uri, PLANTED)
    diagnostics = await client.diagnostics_for(uri, version=1)
    (warps,) = [d for d in diagnostics if d.code == "MTMC105"]
    assert warps.severity == types.DiagnosticSeverity.Error
    assert warps.source == "mtmc"
    assert warps.code_description.href.endswith("#mtmc105")
    line = PLANTED.splitlines()[warps.range.start.line]
    assert line[warps.range.start.character:warps.range.end.character].startswith("num_warps=6")
    assert warps.data["kernel"] == "scale_kernel" and warps.data["num_warps"] == 6


async def test_incremental_edits_publish_versioned_diagnostics(client: EditorClient, workspace):
    uri = (workspace / "planted.py").as_uri()
    client.open(uri, PLANTED)
    assert "MTMC105" in codes(await client.diagnostics_for(uri, version=1))
    line = next(i for i, l in enumerate(PLANTED.splitlines()) if "num_warps=6" in l)
    col = PLANTED.splitlines()[line].index("num_warps=6") + len("num_warps=")
    version = client.edit(uri, (line, col), (line, col + 1), "8")
    fixed = await client.diagnostics_for(uri, version=version)
    assert "MTMC105" not in codes(fixed)
    # Three quick edits inside the debounce window: only the last version gets diagnostics.
    v1 = client.edit(uri, (line, col), (line, col + 1), "3")
    v2 = client.edit(uri, (line, col), (line, col + 1), "5")
    v3 = client.edit(uri, (line, col), (line, col + 1), "7")
    final = await client.diagnostics_for(uri, version=v3)
    assert "MTMC105" in codes(final)
    assert "num_warps=7" in next(d.message for d in final if d.code == "MTMC105")
    assert not [p for p in client.published if p.uri == uri and p.version in (v1, v2)]
    assert client.buffer_text(uri).count("num_warps=7") == 1


async def test_syntax_error_keeps_last_analysis(client: EditorClient, workspace):
    uri = (workspace / "planted.py").as_uri()
    client.open(uri, PLANTED)
    await client.diagnostics_for(uri, version=1)
    lines = PLANTED.splitlines()
    line = next(i for i, l in enumerate(lines) if l.startswith("def scale("))
    version = client.edit(uri, (line, len(lines[line])), (line, len(lines[line])), " (")
    diagnostics = await client.diagnostics_for(uri, version=version)
    assert "MTMC001" in codes(diagnostics)
    syntax = next(d for d in diagnostics if d.code == "MTMC001")
    assert "last version that parsed" in syntax.message
    assert "MTMC105" in codes(diagnostics)  # from the kernels of the last good version
    lens = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert [l.command.arguments[1] for l in lens] == ["scale_kernel"]


BAD_INPUTS = ["", "   \n\n", "@triton.jit\ndef k(x_ptr, BLOCK: tl.cons", "def f(:\n  tl.load(", "\x00\x01binary",
              "x = '\U0001F600' ; @\n", "\r\n\r", "@triton.jit\n" * 200, "(" * 5000]


async def test_bad_input_does_not_crash(client: EditorClient, workspace):
    for i, text in enumerate(BAD_INPUTS):
        uri = (workspace / f"bad{i}.py").as_uri()
        client.open(uri, text)
        await client.diagnostics_for(uri, version=1)
        hover = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=3)))
        assert hover is None
        lenses = await client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri)))
        assert not lenses
        version = client.edit(uri, (0, 0), (0, 0), "import triton\n")
        await client.diagnostics_for(uri, version=version)
    # Still healthy: a real file gets its findings.
    uri = (workspace / "planted.py").as_uri()
    client.open(uri, PLANTED)
    assert "MTMC105" in codes(await client.diagnostics_for(uri, version=1))


async def test_ranges_use_the_negotiated_position_encoding(client: EditorClient, workspace):
    text = PLANTED.replace("    scale_kernel[", '    note = "é😀"; scale_kernel[')
    uri = (workspace / "unicode.py").as_uri()
    client.open(uri, text)
    warps = next(d for d in await client.diagnostics_for(uri, version=1) if d.code == "MTMC105")
    line = text.splitlines()[warps.range.start.line]
    encoding = client.capabilities.general.position_encodings[0] if client.capabilities.general and \
        client.capabilities.general.position_encodings else "utf-16"
    units = {"utf-8": lambda s: len(s.encode("utf-8")), "utf-16": lambda s: len(s.encode("utf-16-le")) // 2,
             "utf-32": len}[encoding]
    start = line.index("num_warps=6")
    assert warps.range.start.character == units(line[:start])
    assert warps.range.end.character == units(line[:start + len("num_warps=6")])


async def test_five_megabyte_document_is_skipped_not_fatal(client: EditorClient, workspace):
    uri = (workspace / "huge.py").as_uri()
    body = "x = 1  # " + "a" * 90 + "\n"
    client.open(uri, body * (5_000_000 // len(body)))
    assert len(await client.diagnostics_for(uri, version=1)) == 0
    assert any("MB" in m.message for m in client.log_messages)
    # The server still answers for other documents.
    small = (workspace / "planted.py").as_uri()
    client.open(small, PLANTED)
    assert "MTMC105" in codes(await client.diagnostics_for(small, version=1))


async def test_close_clears_diagnostics(client: EditorClient, workspace):
    uri = (workspace / "planted.py").as_uri()
    client.open(uri, PLANTED)
    await client.diagnostics_for(uri, version=1)
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    await client.diagnostics_for(uri, predicate=lambda d: len(d) == 0)
    await asyncio.sleep(0.1)
    assert len(client.published[-1].diagnostics) == 0


async def test_a_kernel_launched_from_another_module_is_checked_with_that_launchs_values(client: EditorClient, workspace):
    """``ops.py`` beside the open file launches its kernel with a block of 100: reported at the kernel's name."""
    kernels = "\n".join(l for l in PLANTED.splitlines() if "scale_kernel[" not in l) + "\n"
    (workspace / "ops.py").write_text(
        "import triton\nfrom planted_kernels import scale_kernel\n\n\ndef scale(x, n):\n"
        "    scale_kernel[(triton.cdiv(n, 100),)](x, n, BLOCK=100)\n")
    path = workspace / "planted_kernels.py"
    path.write_text(kernels)
    uri = path.as_uri()
    client.open(uri, kernels)
    diagnostics = await client.diagnostics_for(uri, version=1)
    (pow2,) = [d for d in diagnostics if d.code == "MTMC101"]
    assert "BLOCK=100 from the launch in ops.py line 6, scale()" in pow2.message
    assert kernels.splitlines()[pow2.range.start.line][pow2.range.start.character:].startswith("scale_kernel")
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=pow2.range.start))
    assert "**Launches** (1)" in hover.contents.value and "ops.py, `scale()` line 6" in hover.contents.value
