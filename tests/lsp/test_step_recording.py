"""A step is recorded when its edit lands, even if the client drops the action's mtmc.stepApplied command."""

from __future__ import annotations

import asyncio

import pytest_lsp
from lsprotocol import types

from .conftest import TEST_SETTINGS
from .editor import (
    CLIENTS, CONFIG, EXAMPLES, EditorClient, apply_workspace_edit, code_actions, execute_command, initialize_params,
    position_of, settled_steps,
)

MATMUL = (EXAMPLES / "matmul.py").read_text()
PLANTED = MATMUL.replace("num_warps=4", "num_warps=6")
# Verification off: the step's verification state settles at once ("skipped") and runs no kernels.
SETTINGS = {**TEST_SETTINGS, "verification": {"enabled": False}}


@pytest_lsp.fixture(config=CONFIG, params=CLIENTS)
async def client(request, lsp_client: EditorClient, tmp_path):
    lsp_client.set_configuration({"mtmc": dict(SETTINGS)})
    await lsp_client.initialize_session(initialize_params(request.param, tmp_path))
    yield
    await lsp_client.shutdown_session()


def _applied_logs(client) -> list[str]:
    return [m.message for m in client.log_messages if m.message.startswith("applied MTMC step")]


async def test_resolved_step_is_recorded_by_the_document_change_without_its_command(client: EditorClient, tmp_path):
    uri = (tmp_path / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    position = position_of(MATMUL, "def matmul_kernel", 5)
    # Two lists of the same actions: two tokens whose edits produce the same text.
    first, second = [next(a for a in await code_actions(client, uri, position) if a.data["candidate"]["action"] == "tiling")
                     for _ in range(2)]
    resolved = await client.code_action_resolve_async(first)
    resolved_again = await client.code_action_resolve_async(second)
    assert resolved.edit is not None and resolved_again.edit is not None
    assert apply_workspace_edit(client, resolved.edit).applied  # the command is never sent, as in VS Code's preview
    (step,) = await settled_steps(client, uri, 1)
    assert step["index"] == 1 and step["status"] == "applied" and step["kernel"] == "matmul_kernel"
    assert step["textBefore"] == MATMUL and step["textAfter"] == client.buffer_text(uri)
    assert step["verification"]["state"] == "skipped"
    assert uri in [c["uri"] for c in client.steps_changed]

    # The command arriving late, for either token, finds the same step: nothing is recorded twice.
    tokens = {resolved.data["token"], resolved_again.data["token"]}
    assert len(tokens) == 2
    for token in tokens:
        late = await execute_command(client, "mtmc.stepApplied", uri, token)
        assert late["recorded"] is True and late["reason"] == "already recorded" and late["step"]["id"] == step["id"]
    assert len((await execute_command(client, "mtmc.stepHistory", uri))["steps"]) == 1
    assert len(_applied_logs(client)) == 1  # recorded (and verified) once


async def test_quick_fix_recorded_on_change_then_command_is_idempotent(client: EditorClient, tmp_path):
    uri = (tmp_path / "planted.py").as_uri()
    client.open(uri, PLANTED)
    diagnostics = await client.diagnostics_for(uri, version=1)
    warps = next(d for d in diagnostics if d.code == "MTMC105")
    await code_actions(client, uri, warps.range.start, [warps], only=[types.CodeActionKind.QuickFix])
    # An unrelated edit: it matches no offered step, so nothing is recorded.
    version = client.edit(uri, (0, 0), (0, 0), "# edited\n")
    await asyncio.sleep(0.2)
    assert (await execute_command(client, "mtmc.stepHistory", uri))["steps"] == []
    diagnostics = await client.diagnostics_for(uri, version=version)
    warps = next(d for d in diagnostics if d.code == "MTMC105")
    fixes = await code_actions(client, uri, warps.range.start, [warps], only=[types.CodeActionKind.QuickFix])
    fix = fixes[0]
    assert apply_workspace_edit(client, fix.edit).applied
    (step,) = await settled_steps(client, uri, 1)
    assert step["candidate"]["action"] == "fix-mtmc105" and step["textAfter"] == client.buffer_text(uri)
    again = await execute_command(client, fix.command.command, *fix.command.arguments)
    assert again["recorded"] is True and again["step"]["id"] == step["id"]
    # The fix that was not applied still records nothing.
    other = await execute_command(client, fixes[1].command.command, *fixes[1].command.arguments)
    assert other["recorded"] is False
    assert len((await execute_command(client, "mtmc.stepHistory", uri))["steps"]) == 1
