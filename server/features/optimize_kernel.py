"""``mtmc.optimizeKernel``: the MTMC loop in the background (progress, cancel), then each kept step offered.

The loop (``optimizer.search.optimize``) proposes, applies and verifies steps in worker threads and
processes; the server only forwards progress. Kept steps are then offered one at a time as
reviewable edits; the first one the user declines (or any edit of theirs in between) ends the offer.
"""

from __future__ import annotations

import asyncio
import time

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ..app import MtmcLanguageServer
from ..progress import JobProgress
from ..step_edits import apply_step_edit
from ..steps import verification_json
from ..trust import refuse_untrusted

DEFAULT_STEPS = 3
DEFAULT_BUDGET_S = 600.0
MODEL_LOAD_WAIT_S = 120.0


def _ready_policy(ranker, policy_settings):
    """The configured policy, loaded (waits for the model in this worker thread), else the heuristic."""
    from ...optimizer.policy import HeuristicPolicy

    policy = ranker.policy(policy_settings)
    if policy.status != "ready":
        policy.start_loading()
        deadline = time.monotonic() + MODEL_LOAD_WAIT_S
        while policy.status == "loading" and time.monotonic() < deadline:
            time.sleep(0.2)
    return policy if policy.status == "ready" else HeuristicPolicy(f"the policy model is {policy.status}")


def _run_search(ranker, config, text: str, path: str | None, kernel: str | None, options: dict,
                progress: JobProgress):
    """The MTMC loop in a worker thread, on the configuration snapshot taken when it was asked for."""
    from ...optimizer.search import make_verifier, optimize
    from ...optimizer.verify import VerifyOptions

    target = config.target
    policy = _ready_policy(ranker, config.policy_settings)
    progress.report(f"policy: {policy.describe()}")
    verify_options = VerifyOptions.from_settings(config.settings.verification, kernel=kernel)
    verify = make_verifier(path, target, verify_options, progress=lambda message, pct: progress.report(message))

    def on_step(attempt) -> None:
        progress.report(f"step {attempt.depth}: {attempt.candidate.title}: {attempt.status}"
                        + (f" ({attempt.reason})" if attempt.reason else ""))

    return optimize(
        text, path, kernel, target, policy, verify,
        steps=int(options.get("steps", DEFAULT_STEPS)), beam=int(options.get("beam", 1)),
        budget_s=float(options.get("budgetS", DEFAULT_BUDGET_S)), on_step=on_step, cancel=progress.cancel,
        allow_precision=config.settings.allow_precision_changes,
    )


async def offer_steps(ls: MtmcLanguageServer, uri: str, original: str, result) -> tuple[int, str]:
    """Apply the kept steps one by one as reviewable edits; (steps applied, why the offer ended)."""
    from ...optimizer.actions import Edit

    current = original
    applied = 0
    for attempt in result.steps:
        if ls.workspace.get_text_document(uri).source != current:
            return applied, "the document changed; the remaining steps no longer fit"
        if attempt.parent_text and attempt.parent_text != current:
            return applied, "the steps do not chain onto the current text"
        version = ls.workspace.get_text_document(uri).version
        edit = Edit(new_text=attempt.new_text, changed_lines=attempt.changed_lines, summary=attempt.summary)
        proposal = ls.steps.propose(uri, version, attempt.candidate, current, edit)
        ok, reason = await apply_step_edit(ls, uri, proposal.label, current, attempt.new_text, confirm=True,
                                           description=attempt.summary)
        if not ok:
            return applied, f"{proposal.label} not applied: {reason}"
        recorded, _ = ls.steps.record(proposal.token, ls.workspace.get_text_document(uri).source)
        if recorded is not None and attempt.report is not None:  # verified inside the loop already
            ls.steps.set_verification(uri, recorded.id, verification_json(attempt.report))
        ls.notify_steps_changed(uri)
        applied += 1
        current = attempt.new_text
    return applied, "all kept steps applied" if result.steps else f"no step kept ({result.stopped})"


def register(server) -> None:
    @server.command("mtmc.optimizeKernel")
    async def optimize_kernel(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, kernelName?, {"steps", "beam", "budgetS"}?]: search, then offer the kept steps."""
        if not args or not isinstance(args[0], str):
            raise JsonRpcInvalidParams("mtmc.optimizeKernel takes [uri, kernelName?, options?]")
        uri = args[0]
        kernel = args[1] if len(args) > 1 and isinstance(args[1], str) else None
        options = args[2] if len(args) > 2 and isinstance(args[2], dict) else {}
        if not ls.trusted:  # the loop verifies every step: it runs the kernels
            return {"applied": 0, "stopped": "untrusted", "reason": refuse_untrusted(ls, "Optimize Kernel")}
        state = ls.documents.get(uri)
        text = ls.workspace.get_text_document(uri).source
        progress = await JobProgress(ls, f"MTMC: optimizing {kernel or 'all kernels'} for {ls.target.key.upper()}").begin()
        result = None
        try:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(
                ls.step_executor, _run_search, ls.ranker, ls.config, text, state.path if state else None, kernel, options, progress)
        except Exception as exc:
            ls.log(f"optimization of {kernel} failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
            return {"applied": 0, "stopped": "error", "reason": str(exc)}
        finally:
            progress.end(f"{len(result.steps)} step(s) kept, stopped: {result.stopped}" if result else "failed")
        ls.log(f"optimization of {kernel or 'the file'}: {len(result.steps)} kept of {len(result.attempts)} tried, "
               f"stopped: {result.stopped}" + (f"; {'; '.join(result.notes)}" if result.notes else ""))
        if progress.cancel.is_set():
            return {"applied": 0, "kept": len(result.steps), "stopped": "cancelled", "notes": result.notes}
        applied, why = await offer_steps(ls, uri, text, result)
        return {"applied": applied, "kept": len(result.steps), "tried": len(result.attempts),
                "stopped": result.stopped, "offer": why, "notes": result.notes, "policy": result.policy}
