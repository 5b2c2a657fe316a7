"""Quick fixes for MTMC diagnostics whose data says what to change (one small, exact text edit)."""

from __future__ import annotations

import re

from lsprotocol import types

from ..positions import TextIndex


def _pow2_neighbours(value: int) -> list[int]:
    lower = 1 << (value.bit_length() - 1) if value > 0 else 1
    return [v for v in (lower, lower * 2) if v != value]


def _replace_in_range(text: str, index: TextIndex, rng: types.Range, pattern: str, replacement: str):
    """The edit replacing the single match of ``pattern`` inside ``rng``; None when not exactly one."""
    start, end = index.offset_at(rng.start), index.offset_at(rng.end)
    matches = list(re.finditer(pattern, text[start:end]))
    if len(matches) != 1:
        return None
    m = matches[0]
    return types.TextEdit(
        range=types.Range(start=index.position_at(start + m.start()), end=index.position_at(start + m.end())),
        new_text=m.expand(replacement),
    )


def _finding_data(state, index: TextIndex, diagnostic: types.Diagnostic) -> dict:
    """The server's own data for a diagnostic (clients without ``dataSupport`` drop the field)."""
    for finding in state.findings():
        if finding.code == str(diagnostic.code) and index.range_of(finding.span) == diagnostic.range:
            return {"kernel": finding.kernel, **finding.data}
    return diagnostic.data if isinstance(diagnostic.data, dict) else {}


def _fixes_for(diagnostic: types.Diagnostic, data: dict, text: str, index: TextIndex) -> list[tuple[str, types.TextEdit]]:
    code = str(diagnostic.code)
    fixes: list[tuple[str, types.TextEdit | None]] = []
    if code == "MTMC105" and isinstance(data.get("num_warps"), int):
        for value in _pow2_neighbours(data["num_warps"]):
            edit = _replace_in_range(text, index, diagnostic.range, r"(num_warps\s*=\s*)\d+", rf"\g<1>{value}")
            fixes.append((f"Use num_warps={value} (a power of 2)", edit))
    elif code == "MTMC101" and isinstance(data.get("size"), int) and isinstance(data.get("suggestion"), int):
        size, suggestion = data["size"], data["suggestion"]
        edit = _replace_in_range(text, index, diagnostic.range, rf"(?<![\w.]){size}(?![\w.])", str(suggestion))
        fixes.append((f"Use {suggestion} instead of {size} (a power of 2; mask the remainder)", edit))
    elif code == "MTMC104" and all(isinstance(data.get(k), int) for k in ("bytes", "limit", "stages")):
        per_stage = data["bytes"] // max(data["stages"], 1)
        fitting = data["limit"] // per_stage if per_stage else 0
        if 1 <= fitting < data["stages"]:
            edit = _replace_in_range(text, index, diagnostic.range, r"(num_stages\s*=\s*)\d+", rf"\g<1>{fitting}")
            fixes.append((f"Use num_stages={fitting} (fits the target's shared memory)", edit))
    return [(title, edit) for title, edit in fixes if edit is not None]


def quick_fixes(ls, state, uri: str, version: int | None, text: str,
                diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
    """Quick-fix code actions for the MTMC diagnostics the client sent along (current version only)."""
    if state.version != version:
        return []  # the diagnostics' ranges belong to an older text
    index = ls.index(text)
    actions = []
    for diagnostic in diagnostics:
        if diagnostic.source != "mtmc":
            continue
        data = _finding_data(state, index, diagnostic)
        for title, edit in _fixes_for(diagnostic, data, text, index):
            if ls.client_supports("workspace.workspace_edit.document_changes"):
                workspace_edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                    edits=[edit])])
            else:
                workspace_edit = types.WorkspaceEdit(changes={uri: [edit]})
            actions.append(types.CodeAction(
                title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic], edit=workspace_edit,
                is_preferred=not actions,
            ))
    return actions
