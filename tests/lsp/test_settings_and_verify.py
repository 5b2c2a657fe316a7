"""initializationOptions for clients without workspace/configuration; mtmc.verifyKernel end to end."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types

from .editor import CONFIG, EXAMPLES, EditorClient, initialize_params

BIG_TILES = ((EXAMPLES / "matmul.py").read_text().replace("BLOCK_M = 32", "BLOCK_M = 128")
             .replace("BLOCK_N = 32", "BLOCK_N = 128").replace("BLOCK_K = 32", "BLOCK_K = 64")
             .replace("num_stages=1", "num_stages=4"))


@pytest_lsp.fixture(config=CONFIG)
async def push_client(lsp_client: EditorClient, tmp_path):
    """A VS Code-like client that cannot answer workspace/configuration: settings come pushed."""
    params = initialize_params("visual-studio-code", tmp_path)
    params.capabilities.workspace.configuration = False
    params.initialization_options = {"mtmc": {"targetGpu": "v100", "diagnosticsDebounceMs": 20,
                                              "compileDiagnostics": False, "policy": "heuristic"}}
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


async def test_initialization_options_then_pushed_settings(push_client: EditorClient, tmp_path):
    uri = (tmp_path / "big.py").as_uri()
    push_client.open(uri, BIG_TILES)
    diagnostics = await push_client.diagnostics_for(uri, version=1)
    assert "MTMC104" in [d.code for d in diagnostics]  # 128 KiB > the V100's 96 KiB
    push_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"mtmc": {"targetGpu": "h100", "diagnosticsDebounceMs": 20, "compileDiagnostics": False}}))
    await push_client.diagnostics_for(uri, version=1, predicate=lambda d: not any(x.code == "MTMC104" for x in d))
    await asyncio.sleep(0.05)
    assert push_client.statuses[-1]["target"] == "h100"


@pytest.mark.slow  # runs the kernels in the Triton interpreter in a worker process
async def test_verify_kernel_reports_for_the_verified_version(client: EditorClient, workspace):
    text = (EXAMPLES / "matmul.py").read_text()
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    result = await asyncio.wait_for(client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="mtmc.verifyKernel", arguments=[uri, "matmul_kernel"])), 280)
    assert result["state"] == "passed" and result["mode"] == "interpreter" and result["version"] == 1, result
    assert result["speed"] is None  # no GPU: speed is never estimated
    diagnostics = await client.diagnostics_for(uri, version=1, predicate=lambda d: any(x.code == "MTMC300" for x in d))
    verified = next(d for d in diagnostics if d.code == "MTMC300")
    assert verified.severity == types.DiagnosticSeverity.Information
    assert text.splitlines()[verified.range.start.line].startswith("def matmul_kernel")
    reports = [r for r in client.progress_reports.values() if r]
    assert reports and type(reports[-1][-1]).__name__ == "WorkDoneProgressEnd"
