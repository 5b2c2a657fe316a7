"""The editor stays responsive while a verification hangs or crashes: hovers answer meanwhile."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types

from .conftest import TEST_SETTINGS
from .editor import CONFIG, EditorClient, execute_command, initialize_params, position_of

FAULTS = Path(__file__).resolve().parents[1] / "corpus" / "faults"

pytestmark = pytest.mark.slow  # a verification worker in the interpreter, killed after its timeout


@pytest_lsp.fixture(config=CONFIG)
async def client(lsp_client: EditorClient, tmp_path):
    lsp_client.set_configuration({"mtmc": {**TEST_SETTINGS, "verification": {
        "enabled": True, "seeds": 1, "compileTimeoutS": 30, "runTimeoutS": 8}}})
    await lsp_client.initialize_session(initialize_params("visual-studio-code", tmp_path))
    yield
    await lsp_client.shutdown_session()


@pytest.mark.parametrize("fault, status", [("hang", "timeout"), ("crash_segfault", "crash")])
async def test_hovers_answer_while_a_faulty_kernel_is_verified(client: EditorClient, tmp_path, fault, status):
    text = (FAULTS / f"{fault}.py").read_text()
    uri = (tmp_path / f"{fault}.py").as_uri()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    verifying = asyncio.ensure_future(execute_command(client, "mtmc.verifyKernel", uri, "scale_add_kernel"))
    position = position_of(text, "def scale_add_kernel", 5)
    latencies = []
    while not verifying.done() and len(latencies) < 400:
        started = time.perf_counter()
        hover = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=position))
        latencies.append(time.perf_counter() - started)
        assert hover is not None and "scale_add_kernel" in str(hover.contents)
        await asyncio.sleep(0.05)
    result = await asyncio.wait_for(verifying, 120)
    assert result["status"] == status, result
    assert len(latencies) >= 10  # the fault took long enough to measure beside it
    p95 = statistics.quantiles(latencies, n=20)[-1]
    assert p95 < 0.25, f"hover p95 {p95 * 1000:.0f} ms during the {fault}"
    # The worker was replaced: the next verification of a correct file works.
    base = (FAULTS / "base.py").read_text()
    client.replace_all(uri, base)
    await client.diagnostics_for(uri, version=2)
    again = await asyncio.wait_for(execute_command(client, "mtmc.verifyKernel", uri, "scale_add_kernel"), 120)
    assert again["status"] == "verified", again
