"""Where and as whom a verification worker runs: the sandbox's folders, identities and command line, and the
sweep that kills whatever a job left running.

Each worker starts through ``runtime/sandbox.py`` (new PID, mount, IPC and network namespaces; as root, an
unprivileged user of its own). The candidate and its checker are two users (as root) or two user
namespaces (otherwise) that see neither each other nor the server. Each has one writable folder of its
own (temporary files, home, compile caches); the candidate also writes its outputs into two transfer
folders, which the checker may only read. ``MTMC_VERIFY_SANDBOX``: ``auto`` (default: the strongest the
platform allows, else none, said in each report), ``required`` (a worker that cannot be contained does
not start), ``user`` (root: only the two users, no namespaces) or ``none``. See docs/verification.md,
"Containment".
"""

from __future__ import annotations

import grp
import itertools
import os
import pwd
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .runtime.names import remove_dead_owners_folders

SANDBOX_SCRIPT = Path(__file__).resolve().parent / "runtime" / "sandbox.py"
MODE_ENV = "MTMC_VERIFY_SANDBOX"
MODES = ("auto", "required", "user", "none")
# The sandbox users (root only): two ids per worker (its candidate and its checker) that name no user or
# group, from a block of 32 per pool, unique among live pools (by the pool's pid and a count). Without
# namespaces the pool kills every process of a worker's user, so no two workers share one.
FIRST_ID = 200_000
IDS_PER_POOL = 32
_pool_numbers = itertools.count()
SHARED_MEMORY = Path("/dev/shm")
GPU_LOCK_ENV = "MTMC_GPU_LOCK"  # runtime/gpu_lock.py: a lock file the pools of one GPU share
WORKER_NS_PID = 2  # the worker's pid inside its namespace (init's first child)


FOLDER_PREFIX = "mtmc-verify-sandbox-"  # + the pool's pid


def _open_to_others(folder: Path) -> bool:
    """Whether any user may enter ``folder`` (it and every folder above it)."""
    try:
        return all(os.stat(p).st_mode & 0o001 for p in (folder, *folder.parents))
    except OSError:
        return False


def sandbox_mode() -> str:
    mode = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def _pool_ids() -> int:
    """The first id of a new pool's block."""
    return FIRST_ID + 64 * IDS_PER_POOL * (os.getpid() % 1_000_000) + IDS_PER_POOL * (next(_pool_numbers) % 64)


def _free_ids(count: int, candidate: int) -> list[int]:
    """``count`` ids from ``candidate`` on that are neither a user's nor a group's on this machine."""
    found = []
    while len(found) < count:
        try:
            pwd.getpwuid(candidate)
            candidate += 1
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(candidate)
        except KeyError:
            found.append(candidate)
        candidate += 1
    return found


@dataclass
class Placement:
    """One worker's sandbox: who it runs as, what it may write and read, and its environment."""

    uid: int
    gid: int
    groups: list[int]
    home: Path  # its one writable folder (tmp/, home/, cache/)
    transfer: list[Path] = field(default_factory=list)  # a candidate's outputs: [memory, disk]
    readable: list[Path] = field(default_factory=list)  # a checker's: its candidate's transfer folders


class Containment:
    """The sandbox folders and identities of one pool's workers (created lazily, removed by ``close``)."""

    def __init__(self, mode: str | None = None):
        self.mode = mode or sandbox_mode()
        self.root = os.geteuid() == 0 if hasattr(os, "geteuid") else False
        self._base: Path | None = None
        self._memory_base: Path | None = None
        self._next_id: int | None = None
        self._ids: dict[str, int] = {}  # tag -> its user id
        self._placements: dict[str, Placement] = {}

    @property
    def active(self) -> bool:
        return self.mode != "none" and sys.platform == "linux"

    def _folders(self) -> tuple[Path, Path | None]:
        if self._base is None:
            prefix = f"{FOLDER_PREFIX}{os.getpid()}-"
            parent = Path(tempfile.gettempdir())
            if self.root and not _open_to_others(parent) and _open_to_others(Path("/tmp")):
                # The server's private temporary folder (0700): a sandbox user without a mount namespace could
                # not reach its folders there.
                parent = Path("/tmp")
            remove_dead_owners_folders(parent, FOLDER_PREFIX)
            self._base = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            self._base.chmod(0o711)  # users of the sandbox reach their own folders, list nothing
            if SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK):
                remove_dead_owners_folders(SHARED_MEMORY, FOLDER_PREFIX)
                self._memory_base = Path(tempfile.mkdtemp(prefix=prefix, dir=SHARED_MEMORY))
                self._memory_base.chmod(0o711)
        return self._base, self._memory_base

    @staticmethod
    def _device_groups() -> list[int]:
        """The groups that open the GPU's device nodes where others may not (a node of mode 0660, group video)."""
        groups = set()
        for node in Path("/dev").glob("nvidia*"):
            try:
                mode = node.stat()
            except OSError:
                continue
            if mode.st_mode & 0o006 != 0o006 and mode.st_mode & 0o060 == 0o060 and mode.st_gid != 0:
                groups.add(mode.st_gid)
        return sorted(groups)

    def _identity(self, tag: str) -> tuple[int, int]:
        if not self.root:
            return os.getuid(), os.getgid()
        if tag not in self._ids:
            if self._next_id is None:
                self._next_id = _pool_ids()
            (self._ids[tag],) = _free_ids(1, self._next_id)
            self._next_id = self._ids[tag] + 1
        return self._ids[tag], self._ids[tag]

    def _own_folder(self, path: Path, uid: int, gid: int, mode: int) -> Path:
        path.mkdir(exist_ok=True)
        if self.root:
            os.chown(path, uid, gid)
        path.chmod(mode)
        return path

    def placement(self, tag: str, role: str, partner: str | None = None) -> Placement:
        """The folders of the worker ``tag`` (made once per pool); a checker reads its ``partner``'s transfer folders."""
        if tag in self._placements:
            return self._placements[tag]
        base, memory = self._folders()
        uid, gid = self._identity(tag)
        groups: list[int] = self._device_groups() if self.root else []
        readable: list[Path] = []
        if role == "checker" and partner is not None:
            candidate = self.placement(partner, "candidate")
            groups += [candidate.gid] if self.root else []
            readable = list(candidate.transfer)
        home = self._own_folder(base / tag, uid, gid, 0o700)
        for sub in ("tmp", "home", "cache"):
            self._own_folder(home / sub, uid, gid, 0o700)
        transfer = []
        if role == "candidate":
            if memory is not None:
                transfer.append(self._own_folder(memory / tag, uid, gid, 0o750))
            transfer.append(self._own_folder(base / f"{tag}-transfer", uid, gid, 0o750))
        placed = Placement(uid, gid, groups, home, transfer, readable)
        self._placements[tag] = placed
        return placed

    def prepare(self, tag: str, role: str, partner: str | None, env: dict, argv: list[str],
                fds: list[int]) -> list[str]:
        """The command line that starts ``argv`` in its sandbox; sets the sandbox's variables in ``env``."""
        if not self.active:
            env["MTMC_VERIFY_CONTAINMENT"] = ("none: MTMC_VERIFY_SANDBOX=none" if self.mode == "none"
                                              else f"none: no namespaces on {sys.platform}")
            return argv
        placed = self.placement(tag, role, partner)
        scratch = placed.home / "tmp"
        for stale in scratch.iterdir():  # what a killed predecessor left
            try:
                shutil.rmtree(stale) if stale.is_dir() and not stale.is_symlink() else stale.unlink()
            except OSError:  # a folder it made unwritable (and we are not root): it stays
                pass
        cache = placed.home / "cache"
        env.update(TMPDIR=str(scratch), HOME=str(placed.home / "home"), XDG_CACHE_HOME=str(cache),
                   TRITON_CACHE_DIR=str(cache / "triton"), TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
                   CUDA_CACHE_PATH=str(cache / "nv"), USER="mtmc-verify", LOGNAME="mtmc-verify",
                   # Inductor's compile workers would be processes the sweep kills after every job.
                   TORCHINDUCTOR_COMPILE_THREADS="1")
        writable = [str(placed.home)]
        if placed.transfer:
            writable += [str(p) for p in placed.transfer]
            memory = placed.transfer[0] if len(placed.transfer) > 1 else placed.transfer[-1]
            env["MTMC_VERIFY_TRANSFER"] = f"{memory}{os.pathsep}{placed.transfer[-1]}"
        lock = env.get(GPU_LOCK_ENV)
        if lock:  # the pools of one GPU share this lock: the sandbox binds the file, not a private copy
            for path in (lock, lock + ".turnstile"):
                os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o666))
                try:
                    os.chmod(path, 0o666)  # the sandbox users open it too
                except PermissionError:  # another user's file: as its owner left it
                    pass
                writable.append(path)
        import json

        config = {"mode": self.mode, "required": self.mode == "required",
                  "uid": placed.uid, "gid": placed.gid, "groups": placed.groups, "umask": 0o027,
                  "writable": writable, "readable": [str(p) for p in placed.readable], "cwd": str(scratch),
                  "fds": fds, "runtime": str(SANDBOX_SCRIPT.parent / "__init__.py"), "reach": _interpreter_paths()}
        return [sys.executable, "-I", "-S", str(SANDBOX_SCRIPT), json.dumps(config), "--", *argv]

    def sweep(self, tag: str, launcher_pid: int, contained: str) -> int:
        """Kill what a finished job left beside the worker ``tag`` (``contained``: what its sandbox reported)."""
        if contained.startswith("root without namespaces") and tag in self._placements:
            return sweep_user(self._placements[tag].uid, keep=launcher_pid)
        return sweep(launcher_pid, contained=not contained.startswith("none"))

    def transfer_folders(self, tag: str) -> list[Path]:
        placed = self._placements.get(tag)
        return list(placed.transfer) if placed is not None else []

    def close(self) -> None:
        for folder in (self._base, self._memory_base):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self._base = self._memory_base = None
        self._placements.clear()


def _interpreter_paths() -> list[str]:
    """What a worker reads to run: this interpreter, its prefixes, its import path, the verifier's runtime."""
    paths = {os.path.dirname(os.path.realpath(sys.executable)), str(SANDBOX_SCRIPT.parent)}
    for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path):
        if path and os.path.isdir(path):
            paths.add(os.path.realpath(path))
    return sorted(paths)


# -- what a job left running -----------------------------------------------------------------------

def _processes() -> dict[int, tuple[int, str]]:
    """Every process on the machine: pid -> (parent pid, state letter), from /proc."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        found[int(entry.name)] = (int(fields[1]), fields[0].decode())
    return found


def _namespace_pid(pid: int) -> int | None:
    """``pid``'s number in its innermost PID namespace (the last field of NSpid)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def _descendants(root: int, table: dict[int, tuple[int, str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _kill_until_gone(victims_now) -> int:
    """SIGKILL ``victims_now()`` until a pass finds none (a process may fork while we kill); how many."""
    killed: set[int] = set()
    for _ in range(50):
        victims = victims_now()
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    return len(killed)


def _real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def sweep_user(uid: int, keep: int) -> int:
    """Without namespaces: kill every live process of the sandbox user ``uid`` but the worker ``keep``."""
    if not Path("/proc/self/stat").exists():
        return 0
    return _kill_until_gone(lambda: [pid for pid, (_, state) in _processes().items()
                                     if pid != keep and state != "Z" and _real_uid(pid) == uid])


def sweep(launcher_pid: int, contained: bool) -> int:
    """Kill every process a finished job left beside its worker; how many were killed.

    In a sandbox every process of the job descends from the namespace's init (orphans, ``setsid``
    daemons included, are re-parented to it): all of them but the worker go. Without one, only the
    worker's own descendants can be found (a daemon that detached is out of reach)."""
    if not Path("/proc/self/stat").exists():
        return 0

    def victims() -> list[int]:
        table = _processes()
        found = []
        for pid in _descendants(launcher_pid, table):
            if table[pid][1] == "Z":
                continue
            if contained and (table[pid][0] == launcher_pid or _namespace_pid(pid) == WORKER_NS_PID):
                continue  # init (the launcher's child) and the worker itself
            found.append(pid)
        return found

    return _kill_until_gone(victims)
