"""Compile findings arrive in the background for the version they were computed for, never older."""

from __future__ import annotations

import uuid

import pytest
from lsprotocol import types

from .editor import EXAMPLES, EditorClient

# A comment unique to this run inside the kernel: its compile is never in the cache (a cached result
# could arrive before the edit below and leave the race this test is about unexercised).
MATMUL = (EXAMPLES / "matmul.py").read_text().replace(
    "    pid_m = tl.program_id(0)", f"    # compile {uuid.uuid4().hex}\n    pid_m = tl.program_id(0)", 1)

pytestmark = pytest.mark.slow  # real triton compilation in a worker process (seconds)


async def _enable_compile(client: EditorClient) -> None:
    client.set_configuration({"targetGpu": "h100", "diagnosticsDebounceMs": 20, "compileDiagnostics": True,
                              "trusted": True}, section="mtmc")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))


async def test_compile_findings_follow_static_ones_for_the_latest_version(client: EditorClient, workspace):
    await _enable_compile(client)
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    first = await client.diagnostics_for(uri, version=1)
    assert "MTMC200" not in [d.code for d in first]  # static findings come first, without waiting
    # Edit, usually before the compile finishes (with a warm compile cache it may already be done):
    # once the server has published for the new version, version 1's result must never follow.
    line = next(i for i, l in enumerate(MATMUL.splitlines()) if "num_warps=4, num_stages=1" in l)
    version = client.edit(uri, (line, 0), (line, 0), "        # tuned below\n")
    compiled = await client.diagnostics_for(uri, version=version, timeout=180,
                                            predicate=lambda d: any(x.code == "MTMC200" for x in d))
    summary = next(d for d in compiled if d.code == "MTMC200")
    assert "compiled for sm_90" in summary.message and "registers/thread" in summary.message
    assert summary.severity == types.DiagnosticSeverity.Information
    mine = [p for p in client.published if p.uri == uri]
    first_new = next(i for i, p in enumerate(mine) if p.version == version)
    assert all(p.version == version for p in mine[first_new:] if any(d.code == "MTMC200" for d in p.diagnostics))
    # Hover now shows compiled resources next to the estimate.
    text = client.buffer_text(uri)
    offset = text.index("def matmul_kernel") + 6
    position = types.Position(line=text.count("\n", 0, offset), character=offset - text.rfind("\n", 0, offset) - 1)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position))
    assert "regs/thread" in hover.contents.value and "| 4 KiB | 4 KiB |" in hover.contents.value
