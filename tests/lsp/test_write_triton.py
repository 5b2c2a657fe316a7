""""MTMC: Write a Triton version" end to end: offered on a KernelBench-style module only, creates
``<name>_triton.py`` with a CreateFile + insert edit, opens it, and is refused in an untrusted workspace."""

from __future__ import annotations

from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig

from .conftest import TEST_SETTINGS
from .editor import CLIENTS, SERVER_COMMAND, EditorClient, code_actions, execute_command, initialize_params, \
    make_editor_client, position_of

PROBLEM = (Path(__file__).resolve().parents[1] / "kernelbench_problems" / "level2" / "1_Linear_BiasAdd_ReLU.py").read_text()


def _capture_edit(client: EditorClient, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
    client.applied_edits.append(params)
    return types.ApplyWorkspaceEditResult(applied=True)


def _capture_show(client: EditorClient, params: types.ShowDocumentParams) -> types.ShowDocumentResult:
    client.shown_documents = getattr(client, "shown_documents", []) + [params]
    return types.ShowDocumentResult(success=True)


def _client() -> EditorClient:
    return make_editor_client({types.WORKSPACE_APPLY_EDIT: _capture_edit, types.WINDOW_SHOW_DOCUMENT: _capture_show})


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER_COMMAND, client_factory=_client), params=CLIENTS)
async def client(request, lsp_client: EditorClient, tmp_path):
    settings = dict(TEST_SETTINGS)
    settings["trusted"] = "untrusted" not in request.node.name  # the untrusted test's workspace is not trusted
    lsp_client.set_configuration({"mtmc": settings})
    await lsp_client.initialize_session(initialize_params(request.param, tmp_path))
    yield
    await lsp_client.shutdown_session()


def _write_action(actions) -> types.CodeAction | None:
    return next((a for a in actions or [] if a.title == "MTMC: Write a Triton version"), None)


async def test_write_triton_creates_and_opens_the_model_new_file(client: EditorClient, tmp_path):
    uri = (tmp_path / "linear_relu.py").as_uri()
    client.open(uri, PROBLEM)
    await client.diagnostics_for(uri, version=1)
    action = _write_action(await code_actions(client, uri, position_of(PROBLEM, "def forward")))
    assert action is not None and action.kind == types.CodeActionKind.RefactorRewrite
    result = await execute_command(client, action.command.command, *action.command.arguments)
    target = (tmp_path / "linear_relu_triton.py").as_uri()
    assert result["written"] and result["uri"] == target
    assert result["kernels"] == ["linear_add_relu_kernel"] and result["fallbacks"] == []
    (params,) = client.applied_edits
    create, insert = params.edit.document_changes
    assert isinstance(create, types.CreateFile) and create.uri == target
    assert insert.text_document.uri == target
    text = insert.edits[0].new_text
    assert "class ModelNew(nn.Module):" in text and "@triton.jit" in text and "# linear_add_relu_kernel: " in text
    assert [d.uri for d in client.shown_documents] == [target]


async def test_not_offered_on_a_triton_file_or_a_solution(client: EditorClient, tmp_path):
    solution = PROBLEM + "\n\nclass ModelNew(Model):\n    def forward(self, x):\n        return x\n"
    uri = (tmp_path / "solution.py").as_uri()
    client.open(uri, solution)
    await client.diagnostics_for(uri, version=1)
    assert _write_action(await code_actions(client, uri, position_of(solution, "def forward"))) is None


async def test_untrusted_workspace_writes_nothing(client: EditorClient, tmp_path):
    uri = (tmp_path / "linear_relu.py").as_uri()
    client.open(uri, PROBLEM)
    await client.diagnostics_for(uri, version=1)
    action = _write_action(await code_actions(client, uri, position_of(PROBLEM, "def forward")))
    result = await execute_command(client, action.command.command, *action.command.arguments)
    assert result["written"] is False and not client.applied_edits
