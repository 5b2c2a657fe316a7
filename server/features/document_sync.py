"""didOpen / didChange / didClose: keep per-document state and schedule diagnostics."""

from __future__ import annotations

from lsprotocol import types

from .. import diagnostics
from ..app import MtmcLanguageServer
from ..state import RELEASE_AFTER_CHARS, forget_closed, release_memory
from ..step_edits import record_changed


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MtmcLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        document = ls.workspace.get_text_document(params.text_document.uri)
        ls.documents.open(document.uri, document.path)
        diagnostics.schedule(ls, document.uri, delay_s=0.0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MtmcLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = ls.documents.get(uri)
        if state is None:
            return
        # Anything computed for an older version is now stale: stop it before it publishes.
        if state.compile_task is not None and not state.compile_task.done():
            state.compile_task.cancel()
        diagnostics.schedule(ls, uri, delay_s=ls.settings.diagnostics_debounce_ms / 1000)
        # An offered step's edit may have landed without its mtmc.stepApplied command following.
        record_changed(ls, uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MtmcLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = ls.documents.close(uri)
        ls.steps.forget(uri)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        if state is None:
            return
        texts = [state.text] + [a.text for a in (state.analysis, state.last_good) if a is not None]
        ls.forget_indexes(texts)
        forget_closed(state, ls.documents)  # its kernels' syntax trees in the checks' facts cache
        if max(len(t) for t in texts) > RELEASE_AFTER_CHARS:
            # After the analysis running now (if any) lets go of its tree: in the analysis thread.
            ls.analysis_executor.submit(release_memory)
