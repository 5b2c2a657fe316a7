"""The real server over stdio, driven with the VS Code and the Neovim client capability sets."""

from __future__ import annotations

import pytest
import pytest_lsp

from .editor import CLIENTS, CONFIG, EditorClient, initialize_params
from .raw_client import RawClient

# Short debounce so tests do not wait on the 200 ms default; compile diagnostics off unless a test
# asks for them (they compile in subprocesses for seconds); the heuristic policy (no model load);
# the workspace trusted explicitly, as a client without Workspace Trust (Neovim) must say it.
TEST_SETTINGS = {
    "targetGpu": "h100", "diagnosticsDebounceMs": 20, "compileDiagnostics": False, "policy": "heuristic",
    "trusted": True,
    "verification": {"seeds": 1, "compileTimeoutS": 120, "runTimeoutS": 120},
}


@pytest_lsp.fixture(config=CONFIG, params=CLIENTS)
async def client(request, lsp_client: EditorClient, tmp_path):
    lsp_client.set_configuration({"mtmc": dict(TEST_SETTINGS)})
    await lsp_client.initialize_session(initialize_params(request.param, tmp_path))
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def workspace(tmp_path):
    return tmp_path


@pytest.fixture
def server(tmp_path):
    """A real server over stdio, driven byte by byte (raw_client.RawClient), initialized with ``tmp_path`` as root."""
    client = RawClient.subprocess(cwd=tmp_path)
    client.initialize(tmp_path)
    client.root = tmp_path
    yield client
    client.close()
