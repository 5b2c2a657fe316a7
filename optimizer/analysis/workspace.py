"""Launches of a file's kernels in other modules (``from .kernels import add_kernel`` in ``ops.py``).

Library code often keeps kernels in one module and launches them from another (a quarter of the public
kernels surveyed in benchmarks/results/public). Their block sizes and launch options are then only
known there, and a step that changes such a kernel's interface would break that module.
``with_foreign_launches`` looks for them in the file's folder and, when that folder is a package, in
the package above it and its other subpackages, reading files from disk (bounded in count and size,
cached by modification time), and records what it finds in ``FileAnalysis.foreign_launches``: the
checks and the compile diagnostics use their values where the file has no launch of its own, and
``actions.applicable`` offers only interface-keeping steps for those kernels. No action edits another file.
Cost on the 2-core development machine: 16-27 ms the first time in a 164-file package (FlagGems' ops,
Liger's), 2-4 ms once its files are cached; it runs in the server's analysis thread, after the debounce.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import threading
from pathlib import Path

from .model import FileAnalysis, Kernel, LaunchSite
from .parse import imported_launches

MAX_FILES = 200  # files looked at per search (stat and a text search each; only matches are parsed)
MAX_FOLDERS = 32  # the parent package's subpackages looked into
MAX_BYTES = 512 * 1024  # larger files are generated code, not the wrapper that launches a kernel

_cache_lock = threading.Lock()
# path -> ((mtime_ns, size), the launches found there for a (module, kernels) question)
_cache: dict[tuple[str, str, tuple[str, ...]], tuple[tuple[int, int], list[LaunchSite]]] = {}
_CACHE_LIMIT = 512


def with_foreign_launches(analysis: FileAnalysis, path: str | None = None) -> FileAnalysis:
    """``analysis`` with the launches of its kernels found in the modules that import them (``foreign_searched``
    set either way)."""
    path = path or analysis.path
    searched = dataclasses.replace(analysis, foreign_searched=True)
    if not path or analysis.syntax_error is not None or not analysis.kernels:
        return searched
    own = Path(path)
    if not own.is_file():
        return searched
    # ``kernel = triton.jit(_kernel)``: other modules import and launch it by the name bound there.
    kernels = {name: k for k in analysis.kernels for name in (k.name, *k.launch_names)}
    found: list[LaunchSite] = []
    for other in _neighbours(own):
        found.extend(_launches_in(other, own.stem, kernels))
    return dataclasses.replace(searched, foreign_launches=found)


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


def _launches_in(other: Path, module: str, kernels: dict[str, Kernel]) -> list[LaunchSite]:
    try:
        stat = other.stat()
    except OSError:
        return []
    if stat.st_size > MAX_BYTES:
        return []
    key = (str(other), module, tuple(sorted(kernels)))
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    launches = _read_launches(other, module, kernels)
    with _cache_lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = (stamp, launches)
    return launches


def _read_launches(other: Path, module: str, kernels: dict[str, Kernel]) -> list[LaunchSite]:
    try:
        text = other.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if module not in text or not any(name in text for name in kernels):
        return []  # the cheap test first: most neighbours never mention the module
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
