"""codeAction/resolve: compute a step's edit lazily, for the version the action was offered on."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from ..workspace_edit import document_edit


class StaleDocument(Exception):
    """The document changed since the action was offered; its edit would not fit the text."""


async def compute_step_edit(ls, uri: str, version: int | None, candidate):
    """The step's edit for ``uri`` at ``version``: (before, Edit). Raises StaleDocument or ActionError."""
    document = ls.workspace.get_text_document(uri)
    if version is not None and document.version != version:
        raise StaleDocument(
            f"the document changed since this step was offered (version {version}, now {document.version}); "
            "ask for code actions again"
        )
    from ...optimizer.actions import apply_candidate

    before = document.source
    loop = asyncio.get_running_loop()
    edit = await loop.run_in_executor(ls.step_executor, apply_candidate, before, candidate, ls.target)
    if ls.workspace.get_text_document(uri).version != document.version:
        raise StaleDocument("the document changed while the step was being computed; ask for code actions again")
    return before, edit


def refuse(ls, message: str) -> None:
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"MTMC: {message}"))
    ls.log(message, types.MessageType.Warning)


def register(server) -> None:
    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve(ls, action: types.CodeAction) -> types.CodeAction:
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
