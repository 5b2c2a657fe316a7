"""A step without a document version is refused (its staleness cannot be checked); bad arguments are -32602."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from .conftest import TEST_SETTINGS
from .editor import CONFIG, EXAMPLES, EditorClient, code_actions, execute_command, initialize_params, position_of

MATMUL = (EXAMPLES / "matmul.py").read_text()


@pytest_lsp.fixture(config=CONFIG)
async def client(lsp_client: EditorClient, tmp_path):
    lsp_client.set_configuration({"mtmc": {**TEST_SETTINGS, "verification": {"enabled": False}}})
    await lsp_client.initialize_session(initialize_params("visual-studio-code", tmp_path))
    yield
    await lsp_client.shutdown_session()


async def test_a_resolve_without_a_version_is_refused(client: EditorClient, tmp_path):
    uri = (tmp_path / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    action = next(a for a in await code_actions(client, uri, position_of(MATMUL, "def matmul_kernel", 5))
                  if a.data and a.data.get("type") == "step")
    action.data = {**action.data, "version": None}
    with pytest.raises(JsonRpcException) as error:
        await client.code_action_resolve_async(action)
    assert "no document version" in str(error.value)
    assert client.buffer_text(uri) == MATMUL and not client.applied_edits


@pytest.mark.parametrize("command, args", [("mtmc.verifyKernel", []), ("mtmc.optimizeKernel", [7])])
async def test_wrong_command_arguments_are_invalid_params(client: EditorClient, command, args):
    with pytest.raises(JsonRpcException) as error:
        await execute_command(client, command, *args)
    assert error.value.code == -32602
