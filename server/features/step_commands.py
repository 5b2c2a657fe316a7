"""Step commands: record an applied step, apply a candidate, accept, reject (revert), history."""

from __future__ import annotations

from contextlib import contextmanager

from lsprotocol import types

from ...optimizer.edits import three_way_revert
from ..app import MtmcLanguageServer
from ..arguments import command_args, require_open
from ..step_edits import (
    StaleDocument,
    apply_step_edit,
    compute_step_edit,
    confirm_revert,
    record_applied,
    refuse,
)
from ..steps import step_label
from ..trust import refuse_untrusted


@contextmanager
def history_errors_refused():
    """A HistoryError (no such step, already rejected) answers the request with RequestFailed (-32803)."""
    from pygls.exceptions import JsonRpcException

    from ...optimizer.history import HistoryError

    try:
        yield
    except HistoryError as exc:
        raise JsonRpcException(str(exc), code=types.LSPErrorCodes.RequestFailed.value) from None


def register(server) -> None:
    @server.command("mtmc.stepApplied")
    def step_applied(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, token]: runs after the client applied a resolved step edit."""
        uri, token = command_args(args, "uri", "token")
        require_open(ls, uri)
        return record_applied(ls, uri, token)

    @server.command("mtmc.applyCandidate")
    async def apply_candidate_command(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, version, candidate JSON]: compute the step and apply it through workspace/applyEdit."""
        from pygls.exceptions import JsonRpcInvalidParams

        from ...optimizer.actions import ActionError, Candidate

        uri, version, raw = command_args(args, "uri", "version", "candidate")
        require_open(ls, uri)
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
    def accept_step(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, stepId]: keep the step; later verifications compare against its text."""
        uri, step_id = command_args(args, "uri", "stepId")
        with history_errors_refused():  # an unknown or rejected step: RequestFailed, not an internal error
            step = ls.steps.history(uri).accept(step_id)
        ls.notify_steps_changed(uri)
        return step.to_json()

    @server.command("mtmc.rejectStep")
    async def reject_step(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, stepId]: revert the step's hunks in the current text (later edits elsewhere stay)."""
        from ...optimizer.history import HistoryError

        uri, step_id = command_args(args, "uri", "stepId")
        if not ls.trusted:  # the history is the workspace's data: a cloned repository can plant one
            reason = refuse_untrusted(ls, "Reject Step")
            return {"rejected": False, "reason": reason}
        require_open(ls, uri)  # the revert is computed from the editor's text
        history = ls.steps.history(uri)
        with history_errors_refused():
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
    def step_history(ls: MtmcLanguageServer, *args) -> dict:
        """[uri] -> {"uri", "steps": [step JSON]}."""
        (uri,) = command_args(args, "uri")
        return {"uri": uri, "steps": [s.to_json() for s in ls.steps.steps(uri)]}
