"""The server's private temporary folder: every temporary file of the server and its workers goes there.

Compilation and verification workers make temporary folders (``mtmc-compile-*``, Triton's caches,
worker logs); a worker killed at shutdown never removes its own. The server points ``TMPDIR``
(inherited by every subprocess) and ``tempfile.tempdir`` at ``<tmp>/mtmc-lsp-<pid>-*`` while it
serves and removes that folder when it stops; folders of servers that died without stopping
(SIGKILL) are removed by the next server that starts.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

PREFIX = "mtmc-lsp-"
_OWNER = re.compile(rf"^{PREFIX}(\d+)-")


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc; empty elsewhere)."""
    children: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return children
    for task in tasks:  # a child belongs to the thread that started it (the executors' threads)
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


# Servers of one process (a test's threads) may start and stop in any order. Each folder is made in the
# temporary folder as it was before the first of them, and while any is open the settings name the newest
# one still open: a server that stops first must neither remove the folder of one still serving (its
# temporary files vanish mid-verification) nor leave the settings naming a folder it removed.
_OPEN: list[ScratchSpace] = []
_LOCK = threading.Lock()  # servers in threads open and close at the same time
_BEFORE: tuple[str | None, str | None] | None = None  # tempfile.tempdir and TMPDIR before the first opened
_BASE = Path("/tmp")  # the temporary folder then (set by the first enter), where every scratch folder is made


def _point_at(space: ScratchSpace | None) -> None:
    """Temporary files into ``space``'s folder, or where they went before any was open."""
    if space is not None and space.path is not None:
        tempfile.tempdir = str(space.path)
        os.environ["TMPDIR"] = str(space.path)
        return
    tempdir, env = _BEFORE if _BEFORE is not None else (None, None)
    tempfile.tempdir = tempdir
    if env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = env


class ScratchSpace:
    """Enter: make the folder and point temporary files at it; leave: remove it and restore the settings."""

    def __init__(self) -> None:
        self.path: Path | None = None

    def enter(self) -> Path:
        global _BEFORE, _BASE
        with _LOCK:
            if not _OPEN:
                _BEFORE = (tempfile.tempdir, os.environ.get("TMPDIR"))
                _BASE = Path(tempfile.gettempdir())  # never inside another server's folder
            self.remove_stale(_BASE)
            self.path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=_BASE))
            _OPEN.append(self)
            _point_at(self)
        # Again at exit, after the executors' threads were joined: a compile that was still running
        # when the server stopped may have written into the folder after it was removed.
        atexit.register(shutil.rmtree, self.path, ignore_errors=True)
        return self.path

    def stop_workers(self) -> int:
        """Kill this server's worker processes (and their process groups): those started with our TMPDIR.

        A worker still compiling when the server stops would otherwise run on as an orphan and write
        into the folder after it was removed. Only children whose environment names this folder are
        touched, so other children of the same process (a test's servers) are left alone.
        """
        if self.path is None:
            return 0
        marker = f"TMPDIR={self.path}".encode()
        killed = 0
        for pid in _children(os.getpid()):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker not in environ:
                continue
            try:
                if os.getpgid(pid) == pid:  # its own session (start_new_session): take its children too
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        return killed

    def leave(self) -> None:
        with _LOCK:
            if self in _OPEN:
                _OPEN.remove(self)
                _point_at(_OPEN[-1] if _OPEN else None)
        if self.path is not None:
            self.stop_workers()
            shutil.rmtree(self.path, ignore_errors=True)
            logger.info("removed the scratch folder %s", self.path)
            self.path = None

    @staticmethod
    def remove_stale(base: Path) -> int:
        """Remove the scratch folders of servers that are no longer running; returns how many."""
        removed = 0
        try:
            entries = list(base.iterdir())
        except OSError:
            return 0
        for entry in entries:
            match = _OWNER.match(entry.name)
            if match and entry.is_dir() and not entry.is_symlink() and not _alive(int(match.group(1))):
                shutil.rmtree(entry, ignore_errors=True)
                removed += 1
        return removed
