"""Step commands: record an applied step, apply a candidate, accept, reject (revert), history."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from ...optimizer.edits import three_way_revert
from ..steps import step_label
from ..trust import refuse_untrusted
from ..workspace_edit import document_edit
from .code_action_resolve import StaleDocument, compute_step_edit, refuse
from .verify_kernel import verify_step

# How long to wait for the client's didChange after it says an edit was applied.
APPLIED_TEXT_WAIT_S = 5.0


def _args(args, *names: str) -> list:
    """The first ``len(names)`` arguments; a missing one, or a uri/id that is not a string, is -32602."""
    from pygls.exceptions import JsonRpcInvalidParams

    if len(args) < len(names):
        raise JsonRpcInvalidParams(f"expected arguments [{', '.join(names)}], got {len(args)}")
    for name, value in zip(names, args):
        if name in ("uri", "token", "stepId") and not isinstance(value, str):
            raise JsonRpcInvalidParams(f"argument {name} must be a string, got {value!r:.60}")
    return list(args[: len(names)])


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
    """Clients that cannot preview an edit (no change annotations) are asked first, with the lines."""
    if ls.client_supports("workspace.workspace_edit.change_annotation_support", None) is not None:
        return True  # the client opens its refactor preview for the annotated edit
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


def register(server) -> None:
    @server.command("mtmc.stepApplied")
    def step_applied(ls, *args) -> dict:
        """[uri, token]: runs after the client applied a resolved step edit."""
        uri, token = _args(args, "uri", "token")
        return record_applied(ls, uri, token)

    @server.command("mtmc.applyCandidate")
    async def apply_candidate_command(ls, *args) -> dict:
        """[uri, version, candidate JSON]: compute the step and apply it through workspace/applyEdit."""
        from ...optimizer.actions import ActionError, Candidate

        from pygls.exceptions import JsonRpcInvalidParams

        uri, version, raw = _args(args, "uri", "version", "candidate")
        # The version is what makes the edit safe: without one a stale edit could be applied.
        if not isinstance(version, int) or isinstance(version, bool):
            raise JsonRpcInvalidParams(f"argument version must be the document's version (an integer), got {version!r:.40}")
        try:
            candidate = Candidate.from_json(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise JsonRpcInvalidParams(f"argument candidate is not a candidate: {exc!r:.100}") from exc
        try:
            before, edit = await compute_step_edit(ls, uri, version, candidate)
        except (StaleDocument, ActionError) as exc:
            refuse(ls, str(exc))
            return {"applied": False, "reason": str(exc)}
        proposal = ls.steps.propose(uri, version, candidate, before, edit)
        applied, reason = await apply_step_edit(ls, uri, proposal.label, before, edit.new_text, confirm=True,
                                                description=edit.summary)
        if not applied:
            ls.log(f"{proposal.label} not applied: {reason}")
            return {"applied": False, "reason": reason}
        return {"applied": True, **record_applied(ls, uri, proposal.token)}

    @server.command("mtmc.acceptStep")
    def accept_step(ls, *args) -> dict:
        """[uri, stepId]: keep the step; later verifications compare against its text."""
        uri, step_id = _args(args, "uri", "stepId")
        step = ls.steps.history(uri).accept(step_id)  # HistoryError (unknown, rejected) -> error reply
        ls.notify_steps_changed(uri)
        return step.to_json()

    @server.command("mtmc.rejectStep")
    async def reject_step(ls, *args) -> dict:
        """[uri, stepId]: revert the step's hunks in the current text (later edits elsewhere stay)."""
        from ...optimizer.history import HistoryError

        uri, step_id = _args(args, "uri", "stepId")
        if not ls.trusted:  # the history is the workspace's data: a cloned repository can plant one
            reason = refuse_untrusted(ls, "Reject Step")
            return {"rejected": False, "reason": reason}
        history = ls.steps.history(uri)
        step = history.get(step_id)
        if step.status == "rejected":
            return {"rejected": True, "reason": "already rejected", "step": step.to_json()}
        current = ls.workspace.get_text_document(uri).source
        reverted, reason = three_way_revert(step.text_before, step.text_after, current)
        if reverted is not None and not await confirm_revert(ls, step, current, reverted):
            return {"rejected": False, "reason": "the revert was not confirmed"}
        if reverted is None:
            try:
                history.reject(step_id, current)  # fails again, and says which later step is in the way
            except HistoryError as exc:
                reason = str(exc)
            refuse(ls, reason)
            return {"rejected": False, "reason": reason}
        # The history marks the step rejected only once the client really reverted the text.
        # Always reviewable: the text put back comes from a file in the workspace.
        applied, why = await apply_step_edit(ls, uri, f"Revert {step_label(step)}", current, reverted, confirm=True)
        if not applied:
            refuse(ls, f"revert of {step_label(step)} not applied: {why}")
            return {"rejected": False, "reason": why}
        history.reject(step_id, current)
        ls.notify_steps_changed(uri)
        return {"rejected": True, "reason": reason, "step": history.get(step_id).to_json()}

    @server.command("mtmc.stepHistory")
    def step_history(ls, *args) -> dict:
        """[uri] -> {"uri", "steps": [step JSON]}."""
        (uri,) = _args(args, "uri")
        return {"uri": uri, "steps": [s.to_json() for s in ls.steps.steps(uri)]}
