"""textDocument/codeAction: optimization steps for the kernel under the cursor, plus quick fixes.

Steps are listed cheaply (candidates ranked by the policy, cached per version) and carry only
data; ``codeAction/resolve`` computes the edit. Clients that cannot resolve edits get the
``mtmc.applyCandidate`` command instead, which applies the step through ``workspace/applyEdit``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from lsprotocol import types

from ..app import MtmcLanguageServer
from ..quick_fixes import quick_fixes
from ..steps import STEP_APPLIED_COMMAND
from ..write_triton_offer import write_triton_actions

if TYPE_CHECKING:
    from ...optimizer.policy import Ranked

STEP_KIND = types.CodeActionKind.RefactorRewrite
APPLY_CANDIDATE_COMMAND = "mtmc.applyCandidate"


def _wants(only, kind: str) -> bool:
    """Whether the client's ``only`` filter admits ``kind`` (a prefix match on the dotted kind)."""
    if not only:
        return True
    return any(kind == k or kind.startswith(f"{k}.") for k in only)


# A code action request waits this long for the policy model's ranking; after that it answers
# with the heuristic's order and the model's order is used from the next request on.
MODEL_RANK_WAIT_S = 0.5


def _candidates(ls: MtmcLanguageServer, state, kernel_name: str, target):
    """(PolicyState, candidates) for one kernel of the stored analysis (runs in a worker thread)."""
    from ...optimizer.actions import applicable
    from ...optimizer.policy import PolicyState

    analysis = state.analysis
    kernel = analysis.kernel(kernel_name)
    candidates = applicable(analysis, kernel, target, allow_precision=ls.settings.allow_precision_changes)
    return PolicyState(analysis, kernel, target), candidates


async def ranked_candidates(ls: MtmcLanguageServer, state, kernel_name: str) -> tuple[list[Ranked], str]:
    """Applicable candidates ranked by the policy, cached per (version, kernel, target, settings).

    Never waits long on a model: if its ranking takes longer than MODEL_RANK_WAIT_S, the heuristic
    order is returned now and the model's ranking replaces it in the cache when it is done.
    """
    target = ls.target
    key = (state.version, kernel_name, target.key, ls.settings.allow_precision_changes, ls.settings.policy)
    cached = state.candidates.get(key)
    if cached is not None and cached[1] != ls.ranker.fallback_name:
        return cached
    if not ls.ranker.is_cheap(ls.policy_settings):
        ls.ranker.policy(ls.policy_settings).start_loading()  # no-op once loaded or loading
        ls.watch_model_loading()
    loop = asyncio.get_running_loop()
    policy_state, candidates = await loop.run_in_executor(ls.step_executor, _candidates, ls, state, kernel_name, target)
    if not candidates:
        return [], ""
    ranking = loop.run_in_executor(ls.step_executor, ls.ranker.rank, ls.policy_settings, policy_state, candidates)

    def store(future) -> None:
        if not future.cancelled() and future.exception() is None:
            state.candidates = {k: v for k, v in state.candidates.items() if k[0] == state.version}
            state.candidates[key] = future.result()

    ranking.add_done_callback(store)
    done, _ = await asyncio.wait({ranking}, timeout=None if ls.ranker.is_cheap(ls.policy_settings) else MODEL_RANK_WAIT_S)
    if done:
        return ranking.result()
    return ls.ranker.fallback_rank(policy_state, candidates), ls.ranker.fallback_name


def _resolves_edits(ls: MtmcLanguageServer) -> bool:
    properties = ls.client_supports("text_document.code_action.resolve_support.properties", None) or []
    return "edit" in properties


def step_action(ls: MtmcLanguageServer, uri: str, version: int | None, ranked: Ranked, rank: int, policy_name: str) -> types.CodeAction:
    candidate = ranked.candidate
    title = candidate.title + (" (changes numerics)" if candidate.changes_numerics else "")
    data = {"type": "step", "uri": uri, "version": version, "candidate": candidate.to_json(), "rank": rank,
            "score": ranked.score, "policy": policy_name, "token": uuid.uuid4().hex}
    if _resolves_edits(ls):
        # Runs after the client applied the resolved edit: records the step and verifies it.
        command = types.Command(title="Record and verify the MTMC step", command=STEP_APPLIED_COMMAND,
                                arguments=[uri, data["token"]])
    else:
        command = types.Command(title=title, command=APPLY_CANDIDATE_COMMAND,
                                arguments=[uri, version, candidate.to_json()])
    return types.CodeAction(title=title, kind=STEP_KIND, data=data, command=command, is_preferred=rank == 0)


def kernel_at(ls: MtmcLanguageServer, state, position: types.Position):
    analysis = state.analysis
    offset = ls.index(analysis.text).offset_at(position)
    hits = [k for k in analysis.kernels if k.span.start_offset <= offset <= k.span.end_offset]
    return min(hits, key=lambda k: k.span.end_offset - k.span.start_offset) if hits else None


def register(server) -> None:
    options = types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, STEP_KIND], resolve_provider=True,
    )

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, options)
    async def code_action(ls: MtmcLanguageServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        uri = params.text_document.uri
        state = ls.documents.get(uri)
        if state is None or state.analysis is None:
            return None
        document = ls.workspace.get_text_document(uri)
        version, text = document.version, document.source
        only = params.context.only
        actions: list[types.CodeAction] = []
        if _wants(only, types.CodeActionKind.QuickFix):
            actions += quick_fixes(ls, state, uri, version, text, list(params.context.diagnostics))
        current = state.version == version and not state.analysis.stale and state.analysis.syntax_error is None
        if _wants(only, STEP_KIND) and current:
            kernel = kernel_at(ls, state, params.range.start)
            if kernel is not None:
                ranked, policy_name = await ranked_candidates(ls, state, kernel.name)
                if ls.workspace.get_text_document(uri).version != version:
                    return None  # the document changed while ranking: the client asks again
                actions += [step_action(ls, uri, version, r, i, policy_name) for i, r in enumerate(ranked)]
        if _wants(only, STEP_KIND):
            actions += write_triton_actions(uri, text, STEP_KIND)
        return actions or None
