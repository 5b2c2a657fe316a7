"""Quick fixes for MTMC diagnostics whose data says what to change, offered as verified steps.

A fix is one small, exact text edit; like an optimization step it goes through the review
(change annotation) and is recorded in the step history and verified once applied.
"""

from __future__ import annotations

import re
import uuid

from lsprotocol import types

from .positions import TextIndex
from .steps import STEP_APPLIED_COMMAND
from .text_edits import apply_edits
from .workspace_edit import document_edit

# Finding code -> the MTMC action kind its fix belongs to (for the step history and the policy).
FIX_KINDS = {"MTMC105": "Warps", "MTMC101": "Tiling", "MTMC104": "Pipelining"}


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


def _fixes_for(diagnostic: types.Diagnostic, data: dict, text: str, index: TextIndex) -> list[tuple[str, dict, types.TextEdit]]:
    """(title, parameters, edit) for each fix of one diagnostic."""
    code = str(diagnostic.code)
    fixes: list[tuple[str, dict, types.TextEdit | None]] = []
    if code == "MTMC105" and isinstance(data.get("num_warps"), int):
        for value in _pow2_neighbours(data["num_warps"]):
            edit = _replace_in_range(text, index, diagnostic.range, r"(num_warps\s*=\s*)\d+", rf"\g<1>{value}")
            fixes.append((f"Use num_warps={value} (a power of 2)", {"num_warps": value}, edit))
    elif code == "MTMC101" and isinstance(data.get("size"), int) and isinstance(data.get("suggestion"), int):
        size, suggestion = data["size"], data["suggestion"]
        edit = _replace_in_range(text, index, diagnostic.range, rf"(?<![\w.]){size}(?![\w.])", str(suggestion))
        fixes.append((f"Use {suggestion} instead of {size} (a power of 2; mask the remainder)", {"size": suggestion}, edit))
    elif code == "MTMC104" and all(isinstance(data.get(k), int) for k in ("bytes", "limit", "stages")):
        per_stage = data["bytes"] // max(data["stages"], 1)
        fitting = data["limit"] // per_stage if per_stage else 0
        if 1 <= fitting < data["stages"]:
            edit = _replace_in_range(text, index, diagnostic.range, r"(num_stages\s*=\s*)\d+", rf"\g<1>{fitting}")
            fixes.append((f"Use num_stages={fitting} (fits the target's shared memory)", {"num_stages": fitting}, edit))
    return [(title, params, edit) for title, params, edit in fixes if edit is not None]


def quick_fixes(ls, state, uri: str, version: int | None, text: str,
                diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
    """Quick-fix code actions for the MTMC diagnostics the client sent along (current version only)."""
    from ..optimizer.actions import Candidate, Edit

    if state.version != version:
        return []  # the diagnostics' ranges belong to an older text
    index = ls.index(text)
    actions = []
    for diagnostic in diagnostics:
        if diagnostic.source != "mtmc":
            continue
        data = _finding_data(state, index, diagnostic)
        for title, params, edit in _fixes_for(diagnostic, data, text, index):
            code = str(diagnostic.code)
            candidate = Candidate(action=f"fix-{code.lower()}", kind=FIX_KINDS.get(code, "Fix"),
                                  kernel=data.get("kernel") or "", params=params, title=title,
                                  line=diagnostic.range.start.line)
            new_text = apply_edits(text, [edit], index)
            proposal = ls.steps.propose(uri, version, candidate, text, Edit(new_text, 1, f"{code}: {title}"),
                                        token=uuid.uuid4().hex, record_on_change=True)
            actions.append(types.CodeAction(
                title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic],
                edit=document_edit(ls, uri, version, text, new_text, proposal.label, diagnostic.message),
                command=types.Command(title="Record and verify the fix", command=STEP_APPLIED_COMMAND,
                                      arguments=[uri, proposal.token]),
                is_preferred=not actions,
            ))
    return actions
