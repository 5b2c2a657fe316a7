"""Per-document state: the text the server has analysed, its last good analysis and its findings."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from dataclasses import dataclass, field
from typing import Any

from ..optimizer.analysis import FileAnalysis
from ..optimizer.checks import Finding
from ..optimizer.checks.bindings import CheckContext
from ..optimizer.checks.kernel_facts import cached_source
from ..optimizer.hardware import GpuProfile


@dataclass
class DocumentState:
    """What the server knows about one open document."""

    uri: str
    path: str | None
    # The version and text the current analysis and findings belong to.
    version: int | None = None
    text: str = ""
    analysis: FileAnalysis | None = None
    # The last analysis that parsed: passed as ``previous`` so a syntax error keeps the kernels.
    last_good: FileAnalysis | None = None
    static_findings: list[Finding] = field(default_factory=list)
    # Compile findings and reports, valid only for ``compile_version``.
    compile_findings: list[Finding] = field(default_factory=list)
    compile_reports: dict[str, list[Any]] = field(default_factory=dict)
    compile_version: int | None = None
    compile_target: str | None = None
    # The last verification's diagnostic, valid only for ``verification_version``.
    verification_findings: list[Finding] = field(default_factory=list)
    verification_version: int | None = None
    # Background jobs of this document, cancelled when a newer version arrives.
    analysis_task: asyncio.Task | None = None
    compile_task: asyncio.Task | None = None
    # Set when the last analysis was skipped (document too large, or analysis crashed).
    skipped_reason: str | None = None
    # Ranked candidates per (version, kernel, target, precision setting, policy) for code actions.
    candidates: dict = field(default_factory=dict)
    _context: CheckContext | None = None
    # hash() of the source of every kernel any analysis of this document had (each edit of a kernel is
    # a new source): the entries it may have added to the checks' facts cache, dropped when it closes.
    kernel_sources: set[int] = field(default_factory=set, repr=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if (name in ("analysis", "last_good") and value is not None and "kernel_sources" in self.__dict__
                and not (name == "last_good" and value is self.__dict__.get("analysis"))):  # recorded already
            self.kernel_sources.update(hash(cached_source(value.text, kernel)) for kernel in value.kernels)

    def check_context(self, target: GpuProfile) -> CheckContext | None:
        """The checks' view of the current analysis (kernel facts, bindings), cached per target."""
        if self.analysis is None:
            return None
        ctx = self._context
        if ctx is None or ctx.analysis is not self.analysis or ctx.target.key != target.key:
            ctx = self._context = CheckContext(self.analysis, target)
        return ctx

    def findings(self) -> list[Finding]:
        """Static findings plus the compile findings that belong to the current version."""
        findings = list(self.static_findings)
        if self.compile_version is not None and self.compile_version == self.version:
            findings += self.compile_findings
        if self.verification_version is not None and self.verification_version == self.version:
            findings += self.verification_findings
        return findings

    def cancel_jobs(self) -> None:
        for task in (self.analysis_task, self.compile_task):
            if task is not None and not task.done():
                task.cancel()


class DocumentStore:
    """Open documents by URI."""

    def __init__(self) -> None:
        self._docs: dict[str, DocumentState] = {}

    def open(self, uri: str, path: str | None) -> DocumentState:
        state = self._docs.get(uri)
        if state is None:
            state = self._docs[uri] = DocumentState(uri, path)
        return state

    def get(self, uri: str) -> DocumentState | None:
        return self._docs.get(uri)

    def close(self, uri: str) -> DocumentState | None:
        state = self._docs.pop(uri, None)
        if state is not None:
            state.cancel_jobs()
        return state

    def __iter__(self):
        return iter(list(self._docs.values()))


def forget_closed(closed: DocumentState, store: DocumentStore) -> int:
    """Drop what the checks' facts cache and the neighbour-launch cache hold for a closed document
    (kernels no open document still has)."""
    from ..optimizer.analysis.workspace import forget_neighbours
    from ..optimizer.checks.kernel_facts import forget_facts

    if closed.path and all(state.path != closed.path for state in store):
        forget_neighbours(closed.path)

    still_open: set[int] = set()
    for state in store:
        still_open |= state.kernel_sources
    return forget_facts(closed.kernel_sources - still_open)


# Closing a document this large gives its memory back to the system (see release_memory).
RELEASE_AFTER_CHARS = 256_000
_libc = None


def release_memory() -> None:
    """Collect the closed document's cycles and ask glibc to return free heap pages (``malloc_trim``).

    The analysis of a large file allocates hundreds of MB of syntax tree; once freed, glibc keeps
    the pages for reuse and the server's RSS stays at its peak. Trimming after a large document
    closes returns them. A no-op where there is no glibc.
    """
    global _libc
    gc.collect()
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)
