"""Compile findings (registers, spills, real shared memory) in the background, for one version only."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from lsprotocol import types

from .publishing import publish
from .state import DocumentState


def start(ls, state: DocumentState, target) -> None:
    """Compile the kernels of ``state``'s current analysis unless already done for this version/target."""
    analysis = state.analysis
    # Defence in depth: the compile unit holds only data (optimizer/compile/static_safety.py), and
    # Triton's compiler still reads the workspace's kernels, so it runs for trusted workspaces only.
    if not ls.trusted or not ls.settings.compile_diagnostics or analysis is None or analysis.stale or not analysis.kernels:
        return
    if state.compile_version == state.version and state.compile_target == target.key:
        return
    if state.compile_task is not None and not state.compile_task.done():
        state.compile_task.cancel()
    state.compile_task = asyncio.ensure_future(_run(ls, state, target, state.version, analysis))


def _call(analysis, target, settings, cancel: threading.Event) -> tuple[list, dict[str, list[Any]]]:
    """Compile in a worker thread (the compile itself runs in a subprocess); reports grouped by kernel."""
    from ..optimizer.compile import compile_file_findings

    if cancel.is_set():  # the document changed while this job waited for the executor
        return [], {}
    findings, reports = compile_file_findings(analysis, target, timeout_s=settings.verification.compile_timeout_s, cancel=cancel)
    by_kernel: dict[str, list[Any]] = {}
    for report in reports:
        by_kernel.setdefault(report.kernel, []).append(report)
    return list(findings), by_kernel


async def _run(ls, state: DocumentState, target, version: int | None, analysis) -> None:
    cancel = threading.Event()
    loop = asyncio.get_running_loop()
    ls.job_started()
    try:
        findings, reports = await loop.run_in_executor(
            ls.compile_executor, _call, analysis, target, ls.settings, cancel
        )
    except asyncio.CancelledError:
        cancel.set()  # the worker stops its subprocess; its result is never published
        raise
    except Exception as exc:
        ls.log(f"compile diagnostics failed for {state.uri}: {type(exc).__name__}: {exc}", types.MessageType.Warning)
        return
    finally:
        ls.job_finished()
    if (state.version != version or ls.documents.get(state.uri) is not state or ls.target.key != target.key
            or not ls.trusted):
        return
    state.compile_findings, state.compile_reports = findings, reports
    state.compile_version, state.compile_target = version, target.key
    publish(ls, state)
