"""Step edits: compute one for the version it was offered on, apply it through the client, record it.

Shared by code action resolve, the step commands, the optimize loop and the LLM coder's steps.
"""

from __future__ import annotations

import asyncio

from lsprotocol import types

from .steps import step_label
from .verification import verify_step
from .workspace_edit import can_preview, document_edit


class StaleDocument(Exception):
    """The document changed since the action was offered; its edit would not fit the text."""


async def compute_step_edit(ls, uri: str, version: int | None, candidate):
    """The step's edit for ``uri`` at ``version``: (before, Edit). Raises StaleDocument or ActionError."""
    document = ls.workspace.get_text_document(uri)
    if not isinstance(version, int) or isinstance(version, bool):  # no version: staleness cannot be checked
        raise StaleDocument("the step carries no document version; ask for code actions again")
    if document.version != version:
        raise StaleDocument(
            f"the document changed since this step was offered (version {version}, now {document.version}); "
            "ask for code actions again"
        )
    from ..optimizer.actions import apply_candidate

    before = document.source
    loop = asyncio.get_running_loop()
    edit = await loop.run_in_executor(ls.step_executor, apply_candidate, before, candidate, ls.target)
    if ls.workspace.get_text_document(uri).version != document.version:
        raise StaleDocument("the document changed while the step was being computed; ask for code actions again")
    return before, edit


def refuse(ls, message: str) -> None:
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"MTMC: {message}"))
    ls.log(message, types.MessageType.Warning)


# How long to wait for the client's didChange after it says an edit was applied.
APPLIED_TEXT_WAIT_S = 5.0


async def wait_for_text(ls, uri: str, text: str, timeout: float = APPLIED_TEXT_WAIT_S) -> bool:
    """True once the server's copy of ``uri`` equals ``text`` (the client's didChange arrived)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while ls.workspace.get_text_document(uri).source != text:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def record_applied(ls, uri: str, token: str) -> dict:
    """Record proposal ``token`` as an applied step (if the document holds it) and verify it."""
    step, reason = ls.steps.record(token, ls.workspace.get_text_document(uri).source)
    if step is None:
        ls.log(f"step not recorded: {reason}", types.MessageType.Info)
        return {"recorded": False, "reason": reason}
    if reason == "applied":  # else recorded (and being verified) already, e.g. by the document change
        _recorded(ls, uri, step)
    return {"recorded": True, "reason": reason, "step": step.to_json()}


def record_changed(ls, uri: str) -> None:
    """After a document change: record (and verify) the offered step whose edit the document now holds."""
    step = ls.steps.record_changed(uri, ls.workspace.get_text_document(uri).source)
    if step is not None:
        _recorded(ls, uri, step)


def _recorded(ls, uri: str, step) -> None:
    for text in (step.text_before, step.text_after):  # held by the document in this session
        ls.protocol.seen_texts.saw(uri, text)
    ls.log(f"applied {step_label(step)}")
    ls.notify_steps_changed(uri)
    asyncio.ensure_future(verify_step(ls, uri, step))


async def apply_step_edit(ls, uri: str, label: str, before: str, after: str, confirm: bool,
                          description: str = "") -> tuple[bool, str]:
    """Send ``before -> after`` with workspace/applyEdit; True when applied and seen in a didChange."""
    if not ls.client_supports("workspace.apply_edit"):
        return False, "the client does not support workspace/applyEdit"
    version = ls.workspace.get_text_document(uri).version
    edit = document_edit(ls, uri, version, before, after, label, description)
    if not confirm and edit.change_annotations:
        for annotation in edit.change_annotations.values():
            annotation.needs_confirmation = False
    result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=label))
    if not result.applied:
        return False, result.failure_reason or "the client did not apply the edit"
    if not await wait_for_text(ls, uri, after):
        return False, "the client reported the edit applied, but the document differs from it"
    return True, "applied"


REVERT, KEEP = "Revert", "Keep"


async def confirm_revert(ls, step, current: str, reverted: str) -> bool:
    """Clients that cannot preview an annotated edit are asked first, with the lines; one that
    cannot be asked either gets no revert (the text put back comes from a file in the workspace)."""
    if can_preview(ls):
        return True  # the client opens its refactor preview for the annotated edit (needsConfirmation)
    removed, added = _changed_lines(current, reverted)
    shown = "\n".join([*(f"- {line}" for line in removed[:6]), *(f"+ {line}" for line in added[:6])])
    more = "" if len(removed) <= 6 and len(added) <= 6 else "\n..."
    try:
        answer = await ls.window_show_message_request_async(types.ShowMessageRequestParams(
            type=types.MessageType.Warning,
            message=f"MTMC: revert {step_label(step)}? It changes these lines:\n{shown}{more}",
            actions=[types.MessageActionItem(title=REVERT), types.MessageActionItem(title=KEEP)],
        ))
    except Exception as exc:  # a client without window/showMessageRequest: nothing to confirm with
        ls.log(f"could not ask to confirm the revert: {exc}", types.MessageType.Warning)
        refuse(ls, f"{step_label(step)} was not reverted: this editor can neither preview the revert nor "
                   "ask to confirm it")
        return False
    return answer is not None and answer.title == REVERT


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    import difflib

    removed, added = [], []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:])
        elif line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    return removed, added
