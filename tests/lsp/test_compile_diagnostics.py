"""Compile findings arrive in the background for the version they were computed for, never older."""

from __future__ import annotations

import pytest
from lsprotocol import types

from .editor import EXAMPLES, EditorClient

MATMUL = (EXAMPLES / "matmul.py").read_text()

pytestmark = pytest.mark.slow  # real triton compilation in a worker process (seconds)


async def _enable_compile(client: EditorClient) -> None:
    client.set_configuration({"targetGpu": "h100", "diagnosticsDebounceMs": 20, "compileDiagnostics": True}, section="mtmc")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))


async def test_compile_findings_follow_static_ones_for_the_latest_version(client: EditorClient, workspace):
    await _enable_compile(client)
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    first = await client.diagnostics_for(uri, version=1)
    assert "MTMC200" not in [d.code for d in first]  # static findings come first, without waiting
    # Edit before the compile finishes: version 1's compile result must never be published.
    line = next(i for i, l in enumerate(MATMUL.splitlines()) if "num_warps=4, num_stages=1" in l)
    version = client.edit(uri, (line, 0), (line, 0), "        # tuned below\n")
    compiled = await client.diagnostics_for(uri, version=version, timeout=180,
                                            predicate=lambda d: any(x.code == "MTMC200" for x in d))
    summary = next(d for d in compiled if d.code == "MTMC200")
    assert "compiled for sm_90" in summary.message and "registers/thread" in summary.message
    assert summary.severity == types.DiagnosticSeverity.Information
    assert all(p.version == version for p in client.published
               if p.uri == uri and any(d.code == "MTMC200" for d in p.diagnostics))
    # Hover now shows compiled resources next to the estimate.
    text = client.buffer_text(uri)
    offset = text.index("def matmul_kernel") + 6
    position = types.Position(line=text.count("\n", 0, offset), character=offset - text.rfind("\n", 0, offset) - 1)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position))
    assert "regs/thread" in hover.contents.value and "| 4 KiB | 4 KiB |" in hover.contents.value
