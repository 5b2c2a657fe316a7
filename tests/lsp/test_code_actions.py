"""Code actions end to end: list -> resolve -> apply -> history -> verify -> reject; stale versions refused."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from .editor import EXAMPLES, EditorClient, apply_workspace_edit, code_actions, execute_command, position_of

MATMUL = (EXAMPLES / "matmul.py").read_text()
PLANTED = MATMUL.replace("num_warps=4", "num_warps=6")


def _vscode(client) -> bool:
    return bool(client.capabilities.workspace.workspace_edit.change_annotation_support)


async def test_step_actions_are_ranked_candidates_for_the_kernel_under_the_cursor(client: EditorClient, workspace):
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    actions = await code_actions(client, uri, position_of(MATMUL, "acc += tl.dot"))
    steps = [a for a in actions if a.kind == types.CodeActionKind.RefactorRewrite]
    assert steps and steps[0].is_preferred and not any(a.is_preferred for a in steps[1:])
    assert all(a.edit is None and a.data["version"] == 1 for a in steps)  # edits are resolved lazily
    assert any("H100" in a.title for a in steps)
    assert [a.data["score"] for a in steps] == sorted((a.data["score"] for a in steps), reverse=True)
    assert {a.data["candidate"]["kernel"] for a in steps} == {"matmul_kernel"}
    # Outside a kernel: no steps; with only=quickfix: no steps either.
    assert not [a for a in await code_actions(client, uri, position_of(MATMUL, "def get_inputs")) if a.kind != "quickfix"]
    assert not await code_actions(client, uri, position_of(MATMUL, "acc += tl.dot"), only=[types.CodeActionKind.QuickFix])


async def test_quick_fix_for_num_warps_is_a_recorded_step(client: EditorClient, workspace):
    uri = (workspace / "planted.py").as_uri()
    client.open(uri, PLANTED)
    diagnostics = await client.diagnostics_for(uri, version=1)
    warps = next(d for d in diagnostics if d.code == "MTMC105")
    fixes = await code_actions(client, uri, warps.range.start, [warps], only=[types.CodeActionKind.QuickFix])
    assert [f.title for f in fixes] == ["Use num_warps=4 (a power of 2)", "Use num_warps=8 (a power of 2)"]
    fix = fixes[1]
    assert fix.is_preferred is not True and fixes[0].is_preferred and fix.diagnostics[0].code == "MTMC105"
    if _vscode(client):
        (annotation,) = fix.edit.change_annotations.values()
        assert annotation.needs_confirmation and annotation.label == "MTMC step 1: Use num_warps=8 (a power of 2)"
    assert apply_workspace_edit(client, fix.edit).applied
    assert client.buffer_text(uri) == MATMUL.replace("num_warps=4", "num_warps=8")
    recorded = await execute_command(client, fix.command.command, *fix.command.arguments)
    assert recorded["recorded"] and recorded["step"]["candidate"]["action"] == "fix-mtmc105"
    fixed = await client.diagnostics_for(uri, version=2)
    assert "MTMC105" not in [d.code for d in fixed]
    # The other fix was never applied: its command records nothing.
    assert (await execute_command(client, fixes[0].command.command, *fixes[0].command.arguments))["recorded"] is False


@pytest.mark.slow  # verification runs the kernels in the Triton interpreter in a worker process
async def test_resolve_apply_history_verify_reject_restores_the_text(client: EditorClient, workspace):
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    actions = await code_actions(client, uri, position_of(MATMUL, "def matmul_kernel", 5))
    action = next(a for a in actions if a.data and a.data["candidate"]["action"] == "tiling")
    resolved = await client.code_action_resolve_async(action)
    edit = resolved.edit
    if _vscode(client):
        (change,) = edit.document_changes
        assert change.text_document.version == 1
        (annotation,) = edit.change_annotations.values()
        assert annotation.needs_confirmation is True and annotation.label.startswith("MTMC step 1: ")
        edits = change.edits
        assert all(e.annotation_id in edit.change_annotations for e in edits)
    else:  # Neovim advertises neither documentChanges nor change annotations: plain edits
        assert edit.document_changes is None and edit.change_annotations is None
        edits = edit.changes[uri]
    assert 0 < len(edits) <= 3  # minimal hunks, not the whole document
    assert apply_workspace_edit(client, edit).applied
    after = client.buffer_text(uri)
    assert after != MATMUL and "BLOCK_M = 128" in after
    recorded = await execute_command(client, resolved.command.command, *resolved.command.arguments)
    assert recorded["recorded"] is True
    history = await execute_command(client, "mtmc.stepHistory", uri)
    (step,) = history["steps"]
    assert step["status"] == "applied" and step["index"] == 1 and step["kernel"] == "matmul_kernel"
    assert step["textBefore"] == MATMUL and step["textAfter"] == after

    async def verified():
        while True:
            (s,) = (await execute_command(client, "mtmc.stepHistory", uri))["steps"]
            if (s["verification"] or {}).get("state") not in (None, "pending", "running"):
                return s
            await asyncio.sleep(0.5)

    step = await asyncio.wait_for(verified(), 280)
    assert step["verification"]["state"] == "passed", step["verification"].get("summary")
    assert step["verification"]["mode"] == "interpreter" and "speedup" not in step["verification"]
    assert uri in [c["uri"] for c in client.steps_changed]
    version = client.buffer_version(uri)
    diagnostics = await client.diagnostics_for(uri, version=version, predicate=lambda d: any(x.code == "MTMC300" for x in d))
    assert "verified" in next(d for d in diagnostics if d.code == "MTMC300").message.lower()

    rejected = await execute_command(client, "mtmc.rejectStep", uri, step["id"])
    assert rejected["rejected"] is True
    assert client.buffer_text(uri) == MATMUL  # byte for byte
    (step,) = (await execute_command(client, "mtmc.stepHistory", uri))["steps"]
    assert step["status"] == "rejected"
    # The history lives in the workspace (optimizer.history) and survives a restart.
    (saved,) = (workspace / ".mtmc" / "history").glob("*.json")
    assert '"rejected"' in saved.read_text()


async def test_stale_versions_are_refused(client: EditorClient, workspace):
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, MATMUL)
    await client.diagnostics_for(uri, version=1)
    (action, *_) = await code_actions(client, uri, position_of(MATMUL, "acc += tl.dot"))
    client.edit(uri, (0, 0), (0, 0), "# edited\n")  # version 2
    with pytest.raises(JsonRpcException, match="changed since"):
        await client.code_action_resolve_async(action)
    assert any("changed since" in m.message for m in client.messages)
    refused = await execute_command(client, "mtmc.applyCandidate", uri, 1, action.data["candidate"])
    assert refused["applied"] is False and "changed since" in refused["reason"]
    assert client.buffer_text(uri).startswith("# edited\n") and client.buffer_version(uri) == 2
    # An edit resolved for version 2 is refused by a client whose buffer moved on (versioned edit).
    await client.diagnostics_for(uri, version=2)
    (action, *_) = await code_actions(client, uri, position_of(client.buffer_text(uri), "acc += tl.dot"))
    resolved = await client.code_action_resolve_async(action)
    client.edit(uri, (0, 0), (0, 0), "# again\n")  # version 3
    if _vscode(client):
        result = apply_workspace_edit(client, resolved.edit)
        assert result.applied is False and "stale" in result.failure_reason
    recorded = await execute_command(client, resolved.command.command, *resolved.command.arguments)
    assert recorded["recorded"] is False
    assert (await execute_command(client, "mtmc.stepHistory", uri))["steps"] == []


async def test_apply_candidate_command_applies_through_workspace_apply_edit(client: EditorClient, workspace):
    uri = (workspace / "softmax.py").as_uri()
    text = (EXAMPLES / "softmax.py").read_text()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    (action, *_) = await code_actions(client, uri, position_of(text, "def softmax_kernel", 5))
    result = await execute_command(client, "mtmc.applyCandidate", uri, 1, action.data["candidate"])
    assert result["applied"] is True and result["recorded"] is True
    assert client.buffer_text(uri) == result["step"]["textAfter"] != text
    (params,) = client.applied_edits
    if _vscode(client):
        assert params.edit.document_changes[0].text_document.version == 1


async def _wait(predicate, timeout=60.0):
    async def loop():
        while not predicate():
            await asyncio.sleep(0.05)
    await asyncio.wait_for(loop(), timeout)


@pytest.mark.slow  # the MTMC loop verifies each attempt in the Triton interpreter
async def test_optimize_kernel_reports_progress_then_offers_verified_steps(client: EditorClient, workspace):
    text = (EXAMPLES / "gelu_bias.py").read_text()
    uri = (workspace / "gelu_bias.py").as_uri()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    result = await asyncio.wait_for(
        execute_command(client, "mtmc.optimizeKernel", uri, "gelu_kernel", {"steps": 1, "budgetS": 240}), 300)
    assert result["kept"] == 1 and result["applied"] == 1, result
    (step,) = (await execute_command(client, "mtmc.stepHistory", uri))["steps"]
    assert step["kernel"] == "gelu_kernel" and step["status"] == "applied"
    assert step["textBefore"] == text and step["textAfter"] == client.buffer_text(uri)
    assert step["verification"]["state"] == "passed"
    (params,) = client.applied_edits
    if _vscode(client):
        (annotation,) = params.edit.change_annotations.values()
        assert annotation.needs_confirmation and annotation.label.startswith("MTMC step 1: ")
    reports = [r for r in client.progress_reports.values() if r]
    kinds = [type(v).__name__ for v in reports[0]]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd" and "WorkDoneProgressReport" in kinds


@pytest.mark.slow
async def test_optimize_kernel_is_cancellable(client: EditorClient, workspace):
    text = (EXAMPLES / "matmul.py").read_text()
    uri = (workspace / "matmul.py").as_uri()
    client.open(uri, text)
    await client.diagnostics_for(uri, version=1)
    task = asyncio.ensure_future(execute_command(client, "mtmc.optimizeKernel", uri, "matmul_kernel", {"steps": 3}))
    await _wait(lambda: any(client.progress_reports.values()))
    token = next(t for t, r in client.progress_reports.items() if r)
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(task, 200)
    assert result["stopped"] == "cancelled" and result["applied"] == 0
    assert client.buffer_text(uri) == text and not client.applied_edits


async def test_a_kernel_another_module_launches_is_not_offered_a_fusion(client: EditorClient, workspace):
    """``ops.py`` beside the file imports and launches ``add_kernel``: fusing it here would change ops.py's results."""
    from pathlib import Path

    chain = (Path(__file__).resolve().parents[2] / "benchmarks" / "wild" / "dev" / "ew_add_relu_chain.py").read_text()
    folder = workspace / "shared_kernels"
    folder.mkdir(exist_ok=True)
    path = folder / "chain.py"
    path.write_text(chain)
    uri = path.as_uri()
    client.open(uri, chain)
    await client.diagnostics_for(uri, version=1)
    where = position_of(chain, "tl.store(out_ptr + offsets, x + y")

    def fusions(actions) -> list:
        return [a for a in actions if a.kind == types.CodeActionKind.RefactorRewrite and a.data["candidate"]["action"] == "fusion"]

    assert fusions(await code_actions(client, uri, where))
    (folder / "ops.py").write_text("import triton\nfrom chain import add_kernel\n\n\ndef add(x, y, out):\n"
                                   "    add_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK_SIZE=128)\n")
    version = client.edit(uri, (0, 0), (0, 0), "# ops.py launches add_kernel too\n")
    await client.diagnostics_for(uri, version=version)
    text = client.buffer_text(uri)
    actions = await code_actions(client, uri, position_of(text, "tl.store(out_ptr + offsets, x + y"))
    assert actions and not fusions(actions)
    assert any(a.data["candidate"]["action"] == "tiling" for a in actions if a.kind == types.CodeActionKind.RefactorRewrite)
