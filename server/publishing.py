"""What the client shows: diagnostics for one document version, and code lens refreshes."""

from __future__ import annotations

from lsprotocol import types

from .diagnostics_convert import to_diagnostic
from .state import DocumentState


def publish(ls, state: DocumentState) -> None:
    """Publish the findings that belong to ``state.version``, tagged with that version."""
    if state.analysis is None:
        diagnostics: list[types.Diagnostic] = []
    else:
        # Spans refer to the analysed text: the current one, or the last that parsed when stale.
        index = ls.index(state.analysis.text)
        current = ls.index(state.text) if state.analysis.stale else index
        with_docs = ls.client_supports("text_document.publish_diagnostics.code_description_support", True)
        diagnostics = []
        for finding in state.findings():
            on_current = finding.code == "MTMC001" or not state.analysis.stale
            diagnostics.append(to_diagnostic(finding, current if on_current else index, with_code_description=with_docs))
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=state.uri, diagnostics=diagnostics, version=state.version)
    )


def refresh_code_lenses(ls) -> None:
    """Ask the client to re-request lenses (target changed) when it supports the refresh request."""
    if ls.client_supports("workspace.code_lens.refresh_support"):
        ls.workspace_code_lens_refresh(None)
