"""Diagnostics scheduling: debounced static checks for the latest version, then compile findings."""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass

from lsprotocol import types

from ..optimizer.analysis import FileAnalysis, analyze
from ..optimizer.analysis.workspace import with_foreign_launches
from ..optimizer.checks import Finding, run_checks
from ..optimizer.hardware import GpuProfile
from . import compile_diagnostics
from .publishing import publish
from .state import DocumentState

# Larger documents are not analysed (a 1 MB Python file is generated, not a kernel someone edits);
# the server says so in the log and publishes no findings for them.
MAX_ANALYSIS_CHARS = 1_000_000
# How long the first diagnostics wait for the client's settings before using the defaults.
SETTINGS_WAIT_S = 2.0


@dataclass
class StaticResult:
    analysis: FileAnalysis
    findings: list[Finding]
    seconds: float


def analyse(text: str, path: str | None, previous: FileAnalysis | None, target: GpuProfile) -> StaticResult:
    """Analysis plus static checks; runs in the analysis thread, touches no server state."""
    started = time.perf_counter()
    # Parsing allocates hundreds of thousands of AST nodes without reference cycles: the cyclic
    # collector only adds pauses here (measured: 70-110 ms instead of 80-260 ms for 2,000 lines).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        analysis = with_foreign_launches(analyze(text, path, previous=previous))  # reads neighbours from disk
        findings = run_checks(analysis, target)
    finally:
        if was_enabled:
            gc.enable()
    return StaticResult(analysis, findings, time.perf_counter() - started)


def schedule(ls, uri: str, delay_s: float) -> None:
    """(Re)start the diagnostics job of ``uri``: wait ``delay_s``, analyse the newest text, publish."""
    state = ls.documents.get(uri)
    if state is None:
        return
    if state.analysis_task is not None and not state.analysis_task.done():
        state.analysis_task.cancel()
    state.analysis_task = asyncio.ensure_future(_run(ls, state, delay_s))


def refresh_all(ls) -> None:
    """Recompute every open document now (target or settings changed)."""
    for state in ls.documents:
        state.compile_version = None
        schedule(ls, state.uri, delay_s=0.0)


async def _run(ls, state: DocumentState, delay_s: float) -> None:
    if not ls.settings_ready.is_set():
        try:
            await asyncio.wait_for(ls.settings_ready.wait(), SETTINGS_WAIT_S)
        except asyncio.TimeoutError:
            ls.settings_ready.set()  # the client never answered: go on with what we have
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    document = ls.workspace.get_text_document(state.uri)
    text, version = document.source, document.version
    target = ls.target
    if len(text) > MAX_ANALYSIS_CHARS:
        _skip(ls, state, text, version, f"document is {len(text) / 1e6:.1f} MB; MTMC analyses files up to "
              f"{MAX_ANALYSIS_CHARS / 1e6:.0f} MB")
        return
    with GC_PAUSE:  # the collections the analysis' survivors cause run after the publish
        result = await _analyse_and_publish(ls, state, text, version, target)
    if result is None:
        return
    if ls.protocol.trace != types.TraceValue.Off:
        ls.log_trace(types.LogTraceParams(
            message=f"analysed {state.uri} v{version}: {len(result.analysis.kernels)} kernels, "
            f"{len(result.findings)} findings in {result.seconds * 1000:.0f} ms"
        ))
    compile_diagnostics.start(ls, state, target)


async def _analyse_and_publish(ls, state: DocumentState, text: str, version: int | None,
                               target: GpuProfile) -> StaticResult | None:
    """Analyse in the analysis thread and publish; None when the result was not published."""
    loop = asyncio.get_running_loop()
    try:
        result = await loop.run_in_executor(ls.analysis_executor, analyse, text, state.path, state.last_good, target)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a crash in a check must not take diagnostics down for good
        ls.log(f"analysis of {state.uri} failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
        _skip(ls, state, text, version, f"analysis failed: {exc}")
        return None
    if ls.workspace.get_text_document(state.uri).version != version or ls.documents.get(state.uri) is not state:
        return None  # a newer version is already scheduled
    state.text, state.version, state.skipped_reason = text, version, None
    state.analysis = result.analysis
    if not result.analysis.stale and result.analysis.syntax_error is None:
        state.last_good = result.analysis
    state.static_findings = result.findings
    publish(ls, state)
    return result


class CyclicGcPause:
    """Keeps the cyclic GC off from the start of an analysis until its diagnostics are published.

    The analysis' survivors (the kernels' syntax trees, kept for the checks and hover) made the
    first collections after it expensive: a generation-1 scan of 30-50 ms every few analyses,
    which landed before the publish. Only the event loop enters and leaves it (a counter covers
    overlapping jobs); leaving it restores the collector as it was.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.resume = False

    def __enter__(self) -> None:
        if self.depth == 0:
            self.resume = gc.isenabled()
            gc.disable()
        self.depth += 1

    def __exit__(self, *exc) -> None:
        self.depth -= 1
        if self.depth == 0 and self.resume:
            gc.enable()


GC_PAUSE = CyclicGcPause()


def _skip(ls, state: DocumentState, text: str, version: int | None, reason: str) -> None:
    state.text, state.version = text, version
    state.analysis, state.static_findings, state.compile_findings = None, [], []
    if state.skipped_reason != reason:
        ls.log(f"{state.uri}: {reason}", types.MessageType.Warning)
    state.skipped_reason = reason
    publish(ls, state)
