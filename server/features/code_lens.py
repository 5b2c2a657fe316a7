"""Code lens: one summary line above each kernel (launches, configs, shared memory, target)."""

from __future__ import annotations

from lsprotocol import types

from ..app import MtmcLanguageServer
from ..kernel_facts import lens_title

# A lens must carry a command to be shown; the summary opens the optimize flow for its kernel.
LENS_COMMAND = "mtmc.optimizeKernel"


def _compiled_shared(state, kernel_name: str) -> int | None:
    if state.compile_version != state.version:
        return None
    values = [r.shared_bytes for r in state.compile_reports.get(kernel_name) or [] if r.ok and r.shared_bytes is not None]
    return max(values) if values else None


def lenses_for(ls: MtmcLanguageServer, state) -> list[types.CodeLens]:
    target = ls.target
    ctx = state.check_context(target)
    if ctx is None:
        return []
    index = ls.index(ctx.analysis.text)
    lenses = []
    for kernel in ctx.analysis.kernels:
        title = lens_title(ctx, kernel, target, _compiled_shared(state, kernel.name))
        lenses.append(types.CodeLens(
            range=_first_line(index, kernel),
            command=types.Command(title=title, command=LENS_COMMAND, arguments=[state.uri, kernel.name]),
        ))
    return lenses


def _first_line(index, kernel) -> types.Range:
    start = index.position_at(kernel.span.start_offset)
    return types.Range(start=start, end=start)


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
    def code_lens(ls: MtmcLanguageServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        state = ls.documents.get(params.text_document.uri)
        if state is None:
            return []
        return lenses_for(ls, state)
