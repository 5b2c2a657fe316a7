"""Verification in the background, for an applied step or on demand, off the event loop.

Results go into the step (``mtmc.stepHistory``), into ``mtmc/stepsChanged``, and into the
document's diagnostics, but only while the document still holds the text that was verified.
"""

from __future__ import annotations

import asyncio

from lsprotocol import types

from ..optimizer.analysis import Span
from ..optimizer.analysis.positions import SourceMap
from ..optimizer.checks import Finding
from .progress import JobProgress
from .publishing import publish
from .steps import step_label, verification_json
from .trust import refusal

VERIFIED, FAILED, NOT_VERIFIED = "MTMC300", "MTMC301", "MTMC302"
_FAILED_STATES = {"incorrect", "compile_error", "timeout", "crash", "error"}


def verify_options(ls, kernel: str | None, step_label: str | None = None):
    from ..optimizer.verify import VerifyOptions

    return VerifyOptions.from_settings(ls.settings.verification, kernel=kernel, step_label=step_label)


def report_findings(report, text: str, kernel_name: str | None, analysis) -> list[Finding]:
    """One diagnostic for a verification: where it failed, else on the kernel's name."""
    source_map = SourceMap(text)
    kernel = analysis.kernel(kernel_name) if analysis is not None and kernel_name else None
    span: Span = kernel.name_span if kernel is not None else source_map.line_span(0)
    line = getattr(report, "error_line", None)
    if line is not None and 0 <= line < len(source_map.lines):
        span = source_map.line_span(line)
    status = report.status
    if status == "verified":
        return [Finding(VERIFIED, "information", span, f"MTMC verification: {report.summary}", "", kernel_name,
                        {"mode": report.mode})]
    if status in _FAILED_STATES:
        return [Finding(FAILED, "error", span, f"MTMC verification failed: {report.summary}", "", kernel_name,
                        {"status": status, "mode": report.mode})]
    if status == "no_harness":
        return [Finding(NOT_VERIFIED, "information", span, f"MTMC: {report.summary}", "", kernel_name,
                        {"status": status})]
    return []


async def run_verification(ls, uri: str, new_text: str, old_text: str | None, kernel: str | None,
                           title: str, step_label: str | None = None):
    """verify_file in a worker thread with a cancellable progress bar; returns the report."""
    from ..optimizer.verify import verify_file

    state = ls.documents.get(uri)
    path = state.path if state is not None else None
    progress = await JobProgress(ls, title).begin("starting a worker")
    options = verify_options(ls, kernel, step_label)
    options.key = uri  # a newer verification of this document supersedes an older one
    loop = asyncio.get_running_loop()
    report = None
    target = ls.target  # read here, on the event loop: the worker thread gets the snapshot
    try:
        report = await loop.run_in_executor(
            ls.step_executor,
            lambda: verify_file(new_text, old_text, path, target, options, progress=progress.report,
                                cancel=progress.cancel),
        )
        return report
    finally:
        progress.end(report.summary if report is not None else "stopped")


def publish_report(ls, uri: str, text: str, kernel: str | None, report) -> None:
    """Show the verification as a diagnostic if the document still holds ``text``."""
    state = ls.documents.get(uri)
    if state is None or state.text != text or ls.workspace.get_text_document(uri).version != state.version:
        return  # verified text is gone: the diagnostic would point at the wrong code
    state.verification_findings = report_findings(report, text, kernel, state.analysis)
    state.verification_version = state.version
    publish(ls, state)


async def verify_step(ls, uri: str, step) -> None:
    """Verify an applied step against the text before it; store the result in the step's history."""
    if not ls.trusted:
        ls.steps.set_verification(uri, step.id, {"state": "skipped", "message": refusal("Verification")})
        ls.notify_steps_changed(uri)
        return
    ls.steps.set_verification(uri, step.id, {"state": "running"})
    ls.notify_steps_changed(uri)
    if not ls.settings.verification.enabled:
        ls.steps.set_verification(uri, step.id, {"state": "skipped", "message": "verification is off (mtmc.verification.enabled)"})
        ls.notify_steps_changed(uri)
        return
    try:
        report = await run_verification(ls, uri, step.text_after, step.text_before, step.kernel,
                                         f"Verifying {step_label(step)}", step_label=f"step {step.index}")
    except Exception as exc:
        ls.steps.set_verification(uri, step.id, {"state": "failed", "message": f"verification could not run: {exc}"})
        ls.log(f"verification of step {step.index} failed to run: {exc}", types.MessageType.Error)
    else:
        ls.steps.set_verification(uri, step.id, verification_json(report))
        ls.log(f"{step_label(step)}: {report.summary}")
        await settle(ls, uri)
        publish_report(ls, uri, step.text_after, step.kernel, report)
    ls.notify_steps_changed(uri)


async def settle(ls, uri: str) -> None:
    """Let pending diagnostics for the latest version finish, so the report lands on that version."""
    state = ls.documents.get(uri)
    if state is not None and state.analysis_task is not None and not state.analysis_task.done():
        try:
            await asyncio.wait_for(asyncio.shield(state.analysis_task), 10)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
