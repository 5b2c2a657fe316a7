"""Workspace edits for steps: versioned, minimal, and annotated for review where the client can."""

from __future__ import annotations

import uuid

from lsprotocol import types

from .text_edits import line_edits


def can_preview(ls) -> bool:
    """Whether the client shows an edit for review before applying it: annotations that need
    confirmation live only in ``documentChanges`` (AnnotatedTextEdit), so it must announce both."""
    return bool(ls.client_supports("workspace.workspace_edit.document_changes")) and (
        ls.client_supports("workspace.workspace_edit.change_annotation_support", None) is not None)


def document_edit(ls, uri: str, version: int | None, before: str, after: str, label: str,
                  description: str = "") -> types.WorkspaceEdit:
    """``before -> after`` as a WorkspaceEdit for this client.

    With ``documentChanges`` the edit is a versioned TextDocumentEdit (the client refuses it once the
    document moved on); with change-annotation support each hunk carries an annotation that needs
    confirmation (VS Code opens its Refactor Preview). Clients without either get plain edits.
    """
    edits: list = line_edits(before, after, ls.index(before))
    if not ls.client_supports("workspace.workspace_edit.document_changes"):
        return types.WorkspaceEdit(changes={uri: edits})
    annotations = None
    if can_preview(ls):
        annotation_id = f"mtmc-{uuid.uuid4().hex[:12]}"
        annotations = {annotation_id: types.ChangeAnnotation(label=label, needs_confirmation=True,
                                                             description=description or None)}
        edits = [types.AnnotatedTextEdit(range=e.range, new_text=e.new_text, annotation_id=annotation_id) for e in edits]
    return types.WorkspaceEdit(
        document_changes=[types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=edits)],
        change_annotations=annotations,
    )
