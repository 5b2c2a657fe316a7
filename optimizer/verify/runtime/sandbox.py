"""Starts a verification worker inside a sandbox the kernel provides, then runs it (stdlib only, run as a script).

``python -I -S sandbox.py CONFIG_JSON -- WORKER_ARGV...``. The pool (``containment.py``) writes the
config. On Linux this process:

1. enters new mount, PID, IPC and network namespaces (and a user namespace when it is not root);
2. makes every mount read-only, puts private tmpfs over /tmp, /var/tmp and /dev/shm, and binds back,
   at their own paths, the folders the worker may write (``writable``) or only read (``readable``);
3. forks the namespace's init (PID 1), which mounts a /proc of the new PID namespace, and forks the
   worker (PID 2): it takes the unprivileged ``uid``/``gid`` (root only; a user namespace maps the
   caller's own ids and the worker loses every capability at ``exec``), sets no-new-privileges, and
   execs the worker's command line;
4. waits, and exits as the worker did (its code, or its signal).

When the worker exits or is killed, init exits, and the kernel kills every process left in the
namespace (``setsid`` daemons included); killing this process's group kills init too. Nothing here
runs code of the candidate's. If a namespace cannot be made, root still drops the worker to its own
user (a container without CAP_SYS_ADMIN: the pool then kills that user's processes after each job);
otherwise (no user namespaces, not Linux) the worker runs as it is. ``MTMC_VERIFY_CONTAINMENT`` says
which (the worker reports it).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
# A remount must repeat these flags (a user namespace may not clear them on mounts it inherited).
MOUNT_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                      "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
O_PATH = getattr(os, "O_PATH", 0o10000000)
PRIVATE_TMPFS = ("/tmp", "/var/tmp", "/dev/shm")
WORKER_NS_PID = 2  # init's first child

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(OSError):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SandboxError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl {option}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _mount_points() -> list[tuple[str, int]]:
    """Each mount point of this namespace with the flags a remount must keep, outermost first."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            # Paths escape space, tab, newline and backslash as octal (\040).
            point = fields[4].encode().decode("unicode_escape").encode("latin-1").decode()
            flags = 0
            for option in fields[5].split(","):
                flags |= MOUNT_OPTION_FLAGS.get(option, 0)
            found.append((point, flags))
    return found


def _make_mount_point(path: str, is_dir: bool) -> None:
    """An empty directory or file at ``path`` to bind onto (inside a private tmpfs it does not exist yet)."""
    if is_dir:
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif not os.path.exists(path):
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _closed_ancestor(path: str) -> str | None:
    """The outermost folder above ``path`` that other users may not enter (root's home, say), if any."""
    parts = path.strip("/").split("/")
    for depth in range(len(parts)):
        folder = "/" + "/".join(parts[:depth])
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def confine_filesystem(writable: list[str], readable: list[str], reach: list[str]) -> list[str]:
    """Everything read-only, private temporary folders, the given folders bound back; what could not be done.

    ``reach``: what the worker needs to run (the interpreter, its packages) inside a folder other users cannot
    enter: that folder becomes an empty read-only tmpfs with only those paths bound back (the rest of it,
    root's home say, stays out of sight)."""
    notes = []
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host's mounts
    covers: dict[str, list[str]] = {}
    for path in reach:
        closed = _closed_ancestor(path) if os.path.exists(path) else None
        if closed is not None:  # the outermost: two covers are never one inside the other
            covers.setdefault(closed, []).append(path)
    exposed = [(path, os.open(path, O_PATH), os.path.isdir(path), False) for paths in covers.values() for path in paths]
    keep = [(path, os.open(path, O_PATH | os.O_NOFOLLOW), os.path.isdir(path), rw)
            for paths, rw in ((writable, True), (readable, False)) for path in paths if os.path.lexists(path)]
    for point, flags in _mount_points():
        if point.startswith(("/proc/", "/sys/")) or point in ("/proc", "/sys"):
            continue  # a fresh /proc comes next; /sys is read-only to an unprivileged user already
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except SandboxError as exc:
            if exc.errno not in (errno.ENOENT, errno.EACCES):  # one under another mount is out of reach
                notes.append(f"{point} stays writable ({exc.strerror})")
    for path in PRIVATE_TMPFS:
        if os.path.isdir(path) and not os.path.islink(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    for folder in covers:
        _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path, fd, is_dir, rw in exposed + keep:
        _make_mount_point(path, is_dir)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (0 if rw else MS_RDONLY))
        os.close(fd)
    for folder in covers:
        _mount(None, folder, None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=755")
    return notes


def _enter_namespaces(config: dict) -> str:
    """Unshare what this platform allows; a description of it, or raise SandboxError."""
    if sys.platform != "linux":
        raise SandboxError(errno.ENOSYS, f"no namespaces on {sys.platform}")
    root = os.geteuid() == 0
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (0 if root else CLONE_NEWUSER)
    uid, gid = os.geteuid(), os.getegid()
    # A network namespace of its own (a loopback, down): no connection out, nor to an abstract socket.
    kinds = "PID, mount, IPC and network namespaces"
    if _libc.unshare(flags | CLONE_NEWNET) != 0:
        _check(_libc.unshare(flags), "unshare")
        kinds = "PID, mount and IPC namespaces (no network namespace)"
    if root:
        return f"root: {kinds}, user {config['uid']}:{config['gid']}"
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    return f"user namespace: {kinds}, same user"


def _drop_capabilities() -> None:
    """No capability left (a user namespace's creator has them all there): what runs next cannot undo the mounts."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    _check(_libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "capset")


def _become_worker(config: dict, argv: list[str], root: bool, namespaced: bool = True) -> None:
    """In the forked worker: take the unprivileged identity and exec the worker (never returns)."""
    try:
        if namespaced:  # its parent is init (one thread); a pool's thread may end before the worker does
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if root:
            os.setgroups([int(g) for g in config.get("groups", [])])
            os.setresgid(config["gid"], config["gid"], config["gid"])
            os.setresuid(config["uid"], config["uid"], config["uid"])
        _prctl(PR_SET_NO_NEW_PRIVS, 1)  # a setuid program (su, sudo) gives nothing back
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.umask(int(config.get("umask", 0o027)))
        os.chdir(config.get("cwd") or "/")
        for path in (argv[0], config.get("runtime", "")):
            if path and not os.access(path, os.R_OK):
                raise SandboxError(errno.EACCES, f"user {os.getuid()} cannot read {path}: the install must be "
                                                 "readable by other users (or set MTMC_VERIFY_SANDBOX=none)")
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        os.execv(argv[0], argv)
    except BaseException as exc:  # noqa: BLE001 - the pool reads why from the log
        print(f"mtmc sandbox: the worker could not start: {exc}", file=sys.stderr, flush=True)
    os._exit(126)


def _run_init(config: dict, argv: list[str], root: bool, status_w: int, inherited: list[int]) -> None:
    """PID 1 of the namespace: a /proc of its own, the worker forked, orphans reaped, its status passed up."""
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except SandboxError as exc:
            # A container that masks parts of its /proc refuses a new one to a user namespace: then no /proc at
            # all (the host's would show the server's and the checker's processes).
            _mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=555")
            os.environ["MTMC_VERIFY_CONTAINMENT"] += f"; no /proc (a new one was refused: {exc.strerror})"
    except SandboxError as exc:
        print(f"mtmc sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(125)
    worker = os.fork()
    if worker == 0:
        os.close(status_w)
        _become_worker(config, argv, root)
    for fd in inherited:  # the worker's pipes: the pool must see their end when the worker's process ends
        os.close(fd)
    _prctl(PR_SET_DUMPABLE, 0)
    if not root:
        _drop_capabilities()
    signal.signal(signal.SIGUSR1, lambda *_: os.kill(worker, signal.SIGUSR1))  # the pool's "dump your stacks"
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == worker:
            os.write(status_w, str(status).encode())
            os._exit(0)  # the kernel now kills everything else in the namespace


def _exit_like(status: int | None) -> None:
    """End this process as the worker ended: its exit code, or the signal that killed it."""
    if status is None:
        os._exit(137)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main(config: dict, argv: list[str]) -> None:
    inherited = [int(fd) for fd in config.get("fds", [])]
    if config.get("mode") == "none":
        os.environ["MTMC_VERIFY_CONTAINMENT"] = "none: MTMC_VERIFY_SANDBOX=none"
        os.execv(argv[0], argv)
    try:
        if config.get("mode") == "user":
            raise SandboxError(errno.EPERM, "no namespaces asked for (MTMC_VERIFY_SANDBOX=user)")
        description = _enter_namespaces(config)
        notes = confine_filesystem(config.get("writable", []), config.get("readable", []), config.get("reach", []))
    except (SandboxError, OSError) as exc:
        if config.get("required"):
            print(f"mtmc sandbox: {exc}", file=sys.stderr, flush=True)
            os._exit(125)
        needed = config.get("reach", []) + config.get("writable", []) + config.get("readable", [])
        closed = [p for p in needed if os.path.exists(p) and _closed_ancestor(p)]
        if os.geteuid() == 0 and sys.platform == "linux" and not closed:
            os.environ["MTMC_VERIFY_CONTAINMENT"] = (f"root without namespaces ({exc}): "
                                                     f"user {config['uid']}:{config['gid']}")
            _become_worker(config, argv, root=True, namespaced=False)
        why = f"{exc}" + (f"; the sandbox's user cannot reach {closed[0]}" if os.geteuid() == 0 and closed else "")
        os.environ["MTMC_VERIFY_CONTAINMENT"] = f"none: {why}"
        os.execv(argv[0], argv)
    root = description.startswith("root")
    os.environ["MTMC_VERIFY_CONTAINMENT"] = description + "".join(f"; {n}" for n in notes)
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        _run_init(config, argv, root, status_w, inherited)
    os.close(status_w)
    for fd in inherited:
        os.close(fd)
    signal.signal(signal.SIGUSR1, lambda *_: os.kill(init, signal.SIGUSR1))
    os.waitpid(init, 0)
    reported = os.read(status_r, 64)
    _exit_like(int(reported) if reported else None)


if __name__ == "__main__":
    split = sys.argv.index("--")
    main(json.loads(sys.argv[1]), sys.argv[split + 1:])
