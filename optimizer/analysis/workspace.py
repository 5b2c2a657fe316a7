"""Launches of a file's kernels in other modules (``from .kernels import add_kernel`` in ``ops.py``).

Library code often keeps kernels in one module and launches them from another (a quarter of the public
kernels surveyed in benchmarks/results/public). Their block sizes and launch options are then only
known there, and a step that changes such a kernel's interface would break that module.
``with_foreign_launches`` looks for them in the file's folder and, when that folder is a package, in
the package above it and its other subpackages, reading files from disk, and records what it finds
in ``FileAnalysis.foreign_launches``: the
checks and the compile diagnostics use their values where the file has no launch of its own, and
``actions.applicable`` offers only interface-keeping steps for those kernels. No action edits another file.
Cost on the 2-core development machine: 16-27 ms the first time in a 164-file package (FlagGems' ops,
Liger's), 2-4 ms once its files are cached; it runs in the server's analysis thread, after the debounce.

A folder is the workspace's, so it may hold anything (issue 33: 40 planted neighbours of 500 KB held
first diagnostics for 178 s and 1.95 GB). Each search is bounded: files over ``MAX_BYTES`` are never
read, a search reads at most ``SCAN_FILES`` files and ``SCAN_BYTES`` and parses at most
``SCAN_PARSED_BYTES`` (only files that import the module and name a kernel), and
what it found per file is cached by (path, mtime, size) for the open file, at most
``MAX_LAUNCHES_PER_FILE`` launches each, and dropped when that file closes (``forget_neighbours``).
Files left over by the budget are read by the next searches. Measured on the 2-core machine, the
worst search (one 126 KB planted file of 2,000 launches) takes 0.54 s and the server peaks at 86 MB;
40 files of 500 KB cost nothing (never read). With that bound the search runs in untrusted workspaces
too: it reads text, never runs it, and Restricted Mode's static checks want the launch values.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import os
import re
import threading
from pathlib import Path

from .model import FileAnalysis, Kernel, LaunchSite
from .parse import imported_launches

log = logging.getLogger(__name__)

MAX_FILES = 200  # files looked at per search (a stat each; only unread or changed ones are read)
MAX_FOLDERS = 32  # the parent package's subpackages looked into
MAX_BYTES = 128 * 1024  # larger files are generated code (or planted), not the wrapper that launches a kernel
# What one search may read and parse (files already cached cost nothing): a folder of large planted
# files costs the first diagnostics at most this much; later searches (each edit) read the rest.
SCAN_FILES = 24
SCAN_BYTES = 1024 * 1024
SCAN_PARSED_BYTES = 128 * 1024
MAX_LAUNCHES_PER_FILE = 64  # what the cache keeps of one file

_cache_lock = threading.Lock()
# (neighbour path, the open file asking, its kernel names) -> ((mtime_ns, size), launches found there)
_cache: dict[tuple[str, str, tuple[str, ...]], tuple[tuple[int, int], list[LaunchSite]]] = {}
_CACHE_LIMIT = 512


@dataclasses.dataclass
class ScanBudget:
    """What one search has read and parsed, against its limits."""

    files_read: int = 0
    bytes_read: int = 0
    files_parsed: int = 0
    bytes_parsed: int = 0
    skipped_large: int = 0  # over MAX_BYTES: never read
    left_for_later: int = 0  # unread because the budget ran out: read by a later search

    def can_read(self, size: int) -> bool:
        return self.files_read < SCAN_FILES and self.bytes_read + size <= SCAN_BYTES

    def can_parse(self, size: int) -> bool:
        return self.bytes_parsed + size <= SCAN_PARSED_BYTES


def with_foreign_launches(analysis: FileAnalysis, path: str | None = None) -> FileAnalysis:
    """``analysis`` with the launches of its kernels found in the modules that import them (``foreign_searched``
    set either way)."""
    path = path or analysis.path
    searched = dataclasses.replace(analysis, foreign_searched=True)
    if not path or analysis.syntax_error is not None or not analysis.kernels:
        return searched
    found, _budget = find_foreign_launches(Path(path), analysis.kernels)
    return dataclasses.replace(searched, foreign_launches=found)


def find_foreign_launches(own: Path, kernels_of_file: list[Kernel]) -> tuple[list[LaunchSite], ScanBudget]:
    """The launches of ``kernels_of_file`` in ``own``'s neighbours, and what finding them read."""
    budget = ScanBudget()
    if not own.is_file():
        return [], budget
    # ``kernel = triton.jit(_kernel)``: other modules import and launch it by the name bound there.
    kernels = {name: k for k in kernels_of_file for name in (k.name, *k.launch_names)}
    found: list[LaunchSite] = []
    for other in _neighbours(own):
        found.extend(_launches_in(other, own, kernels, budget))
    if budget.left_for_later or budget.skipped_large:
        log.info("neighbours of %s: %d read (%d bytes), %d parsed, %d over %d bytes skipped, %d left for later",
                 own.name, budget.files_read, budget.bytes_read, budget.files_parsed, budget.skipped_large,
                 MAX_BYTES, budget.left_for_later)
    return found, budget


def forget_neighbours(own_path: str) -> int:
    """Drop what the cache holds for a closed file; the number of entries dropped."""
    own = str(Path(own_path))
    with _cache_lock:
        keys = [key for key in _cache if key[1] == own]
        for key in keys:
            del _cache[key]
    return len(keys)


def _neighbours(own: Path) -> list[Path]:
    """Python files beside ``own`` and, in a package, in the package above and its other subpackages
    (at most ``MAX_FILES``, nearest first)."""
    folder = own.parent
    folders = [folder]
    if (folder / "__init__.py").is_file() and folder.parent != folder:
        # A package: the modules of the package it belongs to, and that package's other subpackages.
        folders.append(folder.parent)
        folders += [sub for sub in _entries(folder.parent, dirs=True)
                    if sub != folder and (sub / "__init__.py").is_file()][:MAX_FOLDERS]
    out: list[Path] = []
    for where in folders:
        for candidate in _entries(where, dirs=False):
            if candidate.suffix == ".py" and candidate != own:
                out.append(candidate)
                if len(out) >= MAX_FILES:
                    return out
    return out


def _entries(folder: Path, dirs: bool) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(folder) if (e.is_dir() if dirs else e.is_file()))
    except OSError:
        return []


def _launches_in(other: Path, own: Path, kernels: dict[str, Kernel], budget: ScanBudget) -> list[LaunchSite]:
    try:
        stat = other.stat()
    except OSError:
        return []
    if stat.st_size > MAX_BYTES:
        budget.skipped_large += 1
        return []
    key = (str(other), str(own), tuple(sorted(kernels)))
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    if not budget.can_read(stat.st_size):
        budget.left_for_later += 1
        return []
    launches = _read_launches(other, own.stem, kernels, budget)
    if launches is None:  # over the parse budget: not cached, a later search parses it
        budget.left_for_later += 1
        return []
    launches = launches[:MAX_LAUNCHES_PER_FILE]
    with _cache_lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = (stamp, launches)
    return launches


def _import_pattern(module: str) -> re.Pattern:
    """An import statement that names ``module`` (on its line, or inside ``from pkg import (...)``)."""
    name = re.escape(module)
    on_its_line = rf"^[ \t]*(?:from|import)[ \t][^\n]*\b{name}\b"
    in_parentheses = rf"^[ \t]*from[ \t][^\n]*import[ \t]*\([^)]{{0,2000}}\b{name}\b"  # bounded: no quadratic scan
    return re.compile(f"{on_its_line}|{in_parentheses}", re.MULTILINE)


def _read_launches(other: Path, module: str, kernels: dict[str, Kernel], budget: ScanBudget) -> list[LaunchSite] | None:
    """The launches in ``other`` ([] when it cannot have any); None when parsing it is over the budget."""
    try:
        with open(other, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)  # the file may have grown since its stat
    except OSError:
        return []
    budget.files_read += 1
    budget.bytes_read += len(data)
    if len(data) > MAX_BYTES:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return []
    # The cheap tests first: most neighbours never import the module or name its kernels.
    if not any(name in text for name in kernels) or not _import_pattern(module).search(text):
        return []
    if not budget.can_parse(len(data)):
        return None
    budget.files_parsed += 1
    budget.bytes_parsed += len(data)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    local = imported_kernels(tree, module, kernels)
    if not local:
        return []
    try:
        return imported_launches(text, str(other), tree, local)
    except (SyntaxError, ValueError, RecursionError):
        return []


def imported_kernels(tree: ast.Module, module: str, kernels: dict[str, Kernel]) -> dict[str, Kernel]:
    """The names ``tree`` calls ``module``'s kernels by: ``from .m import k as alias`` gives ``alias``;
    ``import pkg.m as M`` or ``from pkg import m`` gives the kernel names themselves (``M.k[grid]``)."""
    local: dict[str, Kernel] = {}
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if source == module or source.endswith("." + module):
                for alias in node.names:
                    if alias.name == "*":
                        local.update(kernels)
                    elif alias.name in kernels:
                        local[alias.asname or alias.name] = kernels[alias.name]
            elif any(alias.name == module for alias in node.names):
                local.update(kernels)  # ``from pkg import m``: launched as ``m.k[grid](...)``
        elif isinstance(node, ast.Import):
            if any(alias.name == module or alias.name.endswith("." + module) for alias in node.names):
                local.update(kernels)
    # A function of the same name defined here is that file's own, not the imported kernel.
    return {name: kernel for name, kernel in local.items() if name not in defined}
