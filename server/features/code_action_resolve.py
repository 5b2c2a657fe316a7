"""codeAction/resolve: compute a step's edit lazily, for the version the action was offered on."""

from __future__ import annotations

from lsprotocol import types

from ..app import MtmcLanguageServer
from ..step_edits import StaleDocument, compute_step_edit, refuse
from ..workspace_edit import document_edit


def register(server) -> None:
    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve(ls: MtmcLanguageServer, action: types.CodeAction) -> types.CodeAction:
        from ...optimizer.actions import ActionError, Candidate

        data = action.data if isinstance(action.data, dict) else {}
        if data.get("type") != "step":
            return action
        uri, version = data["uri"], data.get("version")
        candidate = Candidate.from_json(data["candidate"])
        try:
            before, edit = await compute_step_edit(ls, uri, version, candidate)
        except (StaleDocument, ActionError) as exc:
            refuse(ls, str(exc))
            raise  # the client reports the failed resolve; no edit is applied
        proposal = ls.steps.propose(uri, version, candidate, before, edit, token=data.get("token"),
                                    record_on_change=True)
        action.edit = document_edit(ls, uri, version, before, edit.new_text, proposal.label, edit.summary)
        return action
