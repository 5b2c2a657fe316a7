"""Workspace Trust: an untrusted workspace gets static features only; nothing runs its code."""

from __future__ import annotations

import asyncio

import pytest_lsp
from lsprotocol import types

from .conftest import TEST_SETTINGS
from .editor import CONFIG, EXAMPLES, EditorClient, apply_workspace_edit, execute_command, initialize_params

MATMUL = (EXAMPLES / "matmul.py").read_text()
PLANTED = MATMUL.replace("num_warps=4", "num_warps=6")
# Compile diagnostics and verification on: only the missing trust may keep them from running.
RUNNING_SETTINGS = {**TEST_SETTINGS, "compileDiagnostics": True, "verification": {"enabled": True, "seeds": 1}}


async def _start(client: EditorClient, tmp_path, section: dict, options) -> None:
    client.set_configuration({"mtmc": section})
    params = initialize_params("visual-studio-code", tmp_path)
    params.initialization_options = options
    await client.initialize_session(params)


@pytest_lsp.fixture(config=CONFIG)
async def untrusted_client(lsp_client: EditorClient, tmp_path):
    """Untrusted at initialize (top-level ``trusted``, as VS Code sends it); the pulled section omits it."""
    await _start(lsp_client, tmp_path, dict(RUNNING_SETTINGS), {"mtmc": dict(RUNNING_SETTINGS), "trusted": False})
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=CONFIG)
async def section_untrusted_client(lsp_client: EditorClient, tmp_path):
    """No initializationOptions: only the ``mtmc`` section pulled with workspace/configuration says untrusted."""
    await _start(lsp_client, tmp_path, {**RUNNING_SETTINGS, "trusted": False}, None)
    yield
    await lsp_client.shutdown_session()


def _warnings(client) -> list[str]:
    return [m.message for m in client.messages if m.type == types.MessageType.Warning]


async def _assert_user_code_refused(client: EditorClient, uri: str) -> None:
    verified = await execute_command(client, "mtmc.verifyKernel", uri, "matmul_kernel")
    assert verified["state"] == "skipped" and verified["status"] == "untrusted" and verified["version"] == 1
    assert "not trusted" in verified["message"]
    optimized = await execute_command(client, "mtmc.optimizeKernel", uri, "matmul_kernel")
    assert optimized["stopped"] == "untrusted" and optimized["applied"] == 0 and "not trusted" in optimized["reason"]
    warnings = _warnings(client)
    assert any(w.startswith("MTMC: Verify Kernel runs the workspace's code") for w in warnings), warnings
    assert any(w.startswith("MTMC: Optimize Kernel runs the workspace's code") for w in warnings), warnings
    assert not client.progress_reports  # no verification or search was started


async def test_untrusted_workspace_keeps_static_features_and_refuses_user_code(untrusted_client: EditorClient,
                                                                              tmp_path):
    client = untrusted_client
    uri = (tmp_path / "planted.py").as_uri()
    client.open(uri, PLANTED)
    diagnostics = await client.diagnostics_for(uri, version=1)
    warps = next(d for d in diagnostics if d.code == "MTMC105")  # static checks still run
    await asyncio.sleep(1.0)
    # A compile job would be announced as queue 1 in mtmc/status right after the diagnostics.
    assert client.statuses and all(s["queue"] == 0 for s in client.statuses), client.statuses
    assert not any(p.uri == uri and any(str(d.code).startswith("MTMC2") for d in p.diagnostics)
                   for p in client.published)

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=warps.range.start.line, character=0)))
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert lenses and any("matmul_kernel" in lens.command.title for lens in lenses)
    assert hover is None or hover.contents  # hover answers (None off a kernel); it must not fail

    await _assert_user_code_refused(client, uri)

    # A quick fix's edit still applies and is recorded; its verification is skipped, not run.
    fixes = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=warps.range,
        context=types.CodeActionContext(diagnostics=[warps], only=[types.CodeActionKind.QuickFix])))
    fix = fixes[0]
    assert apply_workspace_edit(client, fix.edit).applied
    recorded = await execute_command(client, fix.command.command, *fix.command.arguments)
    assert recorded["recorded"], recorded

    async def verification_state():
        while True:
            (step,) = (await execute_command(client, "mtmc.stepHistory", uri))["steps"]
            if step["verification"] and step["verification"].get("state") not in (None, "pending", "running"):
                return step["verification"]
            await asyncio.sleep(0.05)

    verification = await asyncio.wait_for(verification_state(), 10)
    assert verification["state"] == "skipped" and "not trusted" in verification["message"], verification
    assert not client.progress_reports


async def test_untrusted_settings_section_refuses_user_code(section_untrusted_client: EditorClient, tmp_path):
    client = section_untrusted_client
    uri = (tmp_path / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    await _assert_user_code_refused(client, uri)


async def test_trust_from_initialization_is_not_granted_by_later_settings(untrusted_client: EditorClient, tmp_path):
    client = untrusted_client
    client.set_configuration({"mtmc": {**RUNNING_SETTINGS, "trusted": True}})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    uri = (tmp_path / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    await _assert_user_code_refused(client, uri)
