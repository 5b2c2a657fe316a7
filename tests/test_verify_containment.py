"""A candidate can neither forge its verdict nor outlive or escape its check (issue 33, attacks 3 and 4).

Each planted attack (tests/corpus/containment_attacks.py) computes 3x + y against an accepted 2x + y and
first tries a way out, the way the issue describes it: the checker's key read from /proc (environ,
cmdline, fd, mem) and signed "correct" verdicts written into the checker's pipes; the checker stopped or
killed; the server stopped with SIGSTOP; a setsid daemon; files written outside the scratch folder; and
a connection to the host. Each must fail, and the kernel must be reported incorrect. On Linux as root
(this machine, the GPU machines) the candidate runs in its own PID, mount, IPC and network namespaces as
an unprivileged user; as another user, in a user namespace. Where the platform gives neither, the tests
that need them skip and say why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from corpus.containment_attacks import (
    ATTACKS,
    StopWatch,
    aim,
    attack_text,
    escapes,
    process_state,
    process_tree,
    processes_named,
    reports,
)

from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file
from mtmc_lsp.optimizer.verify import containment as containment_module
from mtmc_lsp.optimizer.verify.containment import Containment

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "tests" / "corpus" / "faults" / "base.py").read_text()
LINUX = sys.platform == "linux"


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    report = verify(p, BASE)  # both workers started, expected outputs kept: the attacks meet a warm checker
    assert report.status == "verified", report.summary
    containment = report.raw["runtime"]["containment"]
    if any(value.startswith("none") for value in containment.values()):
        p.close()
        pytest.skip(f"this platform cannot contain a worker: {containment}")
    yield p
    p.close()


def verify(pool, text: str):
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60)
    return verify_file(text, BASE, "attack.py", "h100", options)


def _write_dirs(tmp_path: Path) -> list[Path]:
    """Places outside the scratch folder: the test's, the repository, home, the temporary folders."""
    return [tmp_path, ROOT, Path(os.path.expanduser("~")), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"),
            Path(os.environ.get("TMPDIR", "/tmp"))]


def _attack(pool, tmp_path: Path, name: str) -> tuple[object, dict, dict, list[str]]:
    """Run attack ``name``; (its report, what it said it managed, its targets, what got out as the host sees it)."""
    (worker,) = pool._workers
    targets = aim(worker.checker.proc.pid, _write_dirs(tmp_path))
    watch = StopWatch([os.getpid(), *targets["checker_pids"]], tmp_path / "stopped")
    try:
        report = verify(pool, attack_text(name, targets))
        log = worker.log_tail()
    finally:
        time.sleep(0.1)
        watch.close()
    said = reports(log)
    assert said and said[-1]["attack"] == name, log  # the attack ran (and told us what it managed)
    return report, said[-1], targets, escapes(name, said[-1], targets, watch.stopped())


def _assert_incorrect(report) -> None:
    assert report.status == "incorrect", report.summary
    assert "from the reference" in report.summary, report.summary  # judged by the checker: 3x + y is wrong
    assert report.raw["runtime"]["isolation"] == "checker process"


@pytest.mark.skipif(not LINUX, reason="containment needs Linux namespaces")
def test_the_checkers_key_is_nowhere_in_proc_and_forged_verdicts_are_not_believed(pool, tmp_path):
    report, said, targets, escaped = _attack(pool, tmp_path, "forge_verdict_from_proc")
    _assert_incorrect(report)
    assert escaped == []
    assert said["keys_found"] == [] and "forged" not in said
    # From the host: the key is in no environment and no command line of the checker's processes either.
    for pid in targets["checker_pids"]:
        for what in ("environ", "cmdline"):
            assert b"MTMC_VERIFY_KEY" not in Path(f"/proc/{pid}/{what}").read_bytes()


@pytest.mark.skipif(not LINUX, reason="containment needs Linux namespaces")
def test_the_checker_can_be_neither_stopped_nor_killed(pool, tmp_path):
    report, said, targets, escaped = _attack(pool, tmp_path, "stop_checker")
    _assert_incorrect(report)
    assert escaped == []
    assert said["refused"]  # it tried every one of them
    assert all(process_state(pid)[1] != "T" for pid in targets["checker_pids"])


@pytest.mark.skipif(not LINUX, reason="containment needs Linux namespaces")
def test_the_server_cannot_be_stopped(pool, tmp_path):
    report, said, _, escaped = _attack(pool, tmp_path, "stop_server")
    _assert_incorrect(report)
    assert escaped == []
    assert said["parent"] != os.getpid()  # its parent is its sandbox's init, not the server


@pytest.mark.skipif(not LINUX, reason="containment needs Linux namespaces")
def test_a_setsid_daemon_dies_with_the_job(pool, tmp_path):
    report, said, _, escaped = _attack(pool, tmp_path, "setsid_daemon")
    _assert_incorrect(report)
    assert said["daemon"] > 0  # it did start one
    assert escaped == []
    assert report.raw["runtime"].get("processes_killed", 0) >= 1
    assert verify(pool, BASE).status == "verified"  # the same worker goes on


@pytest.mark.skipif(not LINUX, reason="containment needs Linux namespaces")
def test_nothing_is_written_outside_the_scratch_folder(pool, tmp_path):
    report, said, _, escaped = _attack(pool, tmp_path, "write_outside")
    _assert_incorrect(report)
    assert said["scratch"]  # its own temporary folder is writable
    assert escaped == [], f"from its side it wrote {said['written']}"


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="dropping to other users needs root")
def test_as_root_candidate_and_checker_are_two_unprivileged_users(pool, tmp_path):
    report, said, _, _ = _attack(pool, tmp_path, "write_outside")
    containment = report.raw["runtime"]["containment"]
    assert said["uid"] != 0
    assert f"user {said['uid']}:" in containment["candidate"]
    assert "user" in containment["checker"] and f"user {said['uid']}:" not in containment["checker"]


@pytest.mark.skipif(not LINUX, reason="containment needs Linux namespaces")
def test_no_connection_reaches_the_host(pool, tmp_path):
    report, said, _, escaped = _attack(pool, tmp_path, "connect_out")
    _assert_incorrect(report)
    if "no network namespace" in report.raw["runtime"]["containment"]["candidate"]:
        pytest.skip("this platform gave the sandbox no network namespace")
    assert said["connected"] is False and escaped == []


def test_every_attack_has_a_test():
    tested = {"forge_verdict_from_proc", "stop_checker", "stop_server", "setsid_daemon", "write_outside",
              "connect_out"}
    assert set(ATTACKS) == tested


def test_the_key_reaches_the_checker_through_a_pipe_even_without_a_sandbox(monkeypatch):
    """No sandbox at all (MTMC_VERIFY_SANDBOX=none, or a platform without namespaces): still no key in /proc."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("no /proc on this platform")
    monkeypatch.setenv("MTMC_VERIFY_SANDBOX", "none")
    own = WorkerPool("interpreter")
    try:
        report = verify(own, BASE)
        assert report.status == "verified", report.summary
        assert report.raw["runtime"]["containment"]["checker"].startswith("none")
        checker = own._workers[0].checker
        key = checker._key.hex().encode()
        assert key
        for pid in process_tree(checker.proc.pid):
            for what in ("environ", "cmdline"):
                assert key not in Path(f"/proc/{pid}/{what}").read_bytes()
                assert b"MTMC_VERIFY_KEY" not in Path(f"/proc/{pid}/{what}").read_bytes()
    finally:
        own.close()


SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.mark.skipif(not LINUX, reason="/proc and process trees")
@pytest.mark.parametrize("mode", ["auto", "user"])
def test_the_sweep_kills_a_detached_process_and_keeps_the_worker(tmp_path, monkeypatch, mode):
    """The sweep after a job on a bare sandbox (no torch): a setsid grandchild goes, the worker stays. ``auto``:
    the PID namespace holds it; ``user`` (root without namespaces, a container without CAP_SYS_ADMIN): the
    sandbox's own user does."""
    python = sys.executable
    if mode == "user":
        if os.geteuid() != 0 or not SYSTEM_PYTHON.exists():
            pytest.skip("the user-only sandbox needs root (and a system Python any user can run)")
        python = str(SYSTEM_PYTHON)  # without a mount namespace the venv's interpreter may be out of the user's reach
        monkeypatch.setattr(containment_module, "_interpreter_paths", lambda: [])
    containment = Containment(mode)
    env = dict(os.environ)
    tag = uuid.uuid4().hex[:12]
    marker = f"mtmc-sweep-{tag}"  # built in the script: the launcher's own command line must not hold it
    script = ("import os, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              f"        os.execv('/bin/sleep', ['mtmc-sweep-' + {tag!r}, '600'])\n"
              "    os._exit(0)\n"
              "os.wait()\n"
              "print(os.getuid(), os.environ.get('MTMC_VERIFY_CONTAINMENT'), flush=True)\n"
              "time.sleep(600)\n")
    argv = containment.prepare("sweep-test", "candidate", None, env, [python, "-I", "-S", "-c", script], [])
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    described = ""
    try:
        uid, described = proc.stdout.readline().strip().split(" ", 1)
        if described.startswith("none"):
            pytest.skip(f"no sandbox here: {described}")
        if os.geteuid() == 0:
            assert int(uid) != 0, described
        deadline = time.monotonic() + 10
        while not processes_named(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_named(marker), "the daemon never started"
        assert containment.sweep("sweep-test", proc.pid, described) >= 1
        assert processes_named(marker) == []
        assert proc.poll() is None  # the worker itself is left running
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if described.startswith("root without namespaces"):  # no namespace ends with it: its user's processes
            containment.sweep("sweep-test", -1, described)
        containment.close()
    time.sleep(0.2)
    assert processes_named(marker) == []


USERNS_PROBE = """
import json, os
report = {"pid": os.getpid(), "visible": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
          "containment": os.environ.get("MTMC_VERIFY_CONTAINMENT"), "written": []}
for path in os.environ["PROBE_PATHS"].split(":"):
    try:
        open(path, "w").close()
        report["written"].append(path)
    except OSError:
        pass
print(json.dumps(report), flush=True)
"""


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="run as root, to try the sandbox of another user")
def test_a_user_who_is_not_root_gets_user_pid_and_mount_namespaces():
    """What a user's machine gets (no root): the sandbox in a user namespace, tried here as ``nobody``."""
    setpriv = next((p for p in ("/usr/bin/setpriv", "/bin/setpriv") if os.path.exists(p)), None)
    if setpriv is None or not SYSTEM_PYTHON.exists():
        pytest.skip("needs setpriv and a system Python to act as another user")
    nobody = 65534
    folder = Path(tempfile.mkdtemp(prefix="mtmc-userns-test-"))  # pytest's own is closed to other users
    try:
        _probe_as_nobody(setpriv, nobody, folder)
    finally:
        shutil.rmtree(folder)


def _probe_as_nobody(setpriv: str, nobody: int, folder: Path) -> None:
    folder.chmod(0o755)
    scratch = folder / "scratch"
    scratch.mkdir()
    os.chown(scratch, nobody, nobody)
    outside = folder / "outside"
    outside.mkdir()
    os.chown(outside, nobody, nobody)  # its own folder on the host, but outside the sandbox's writable ones
    config = {"writable": [str(scratch)], "cwd": str(scratch)}
    sandbox = ROOT / "optimizer" / "verify" / "runtime" / "sandbox.py"
    env = {"PATH": "/usr/bin:/bin", "PROBE_PATHS": f"{scratch}/ok:{outside}/escaped:/tmp/escape-{uuid.uuid4().hex}"}
    out = subprocess.run([setpriv, f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", str(SYSTEM_PYTHON),
                          "-I", "-S", str(sandbox), json.dumps(config), "--", str(SYSTEM_PYTHON), "-I", "-S", "-c",
                          USERNS_PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    if report["containment"].startswith("none"):
        pytest.skip(f"no user namespaces here: {report['containment']}")
    assert report["containment"].startswith("user namespace")
    assert report["pid"] == 2 and report["visible"] == [1, 2]  # its init and itself: nothing of the host's
    assert report["written"][0] == f"{scratch}/ok"
    assert not (outside / "escaped").exists()  # a folder it owns on the host is read-only in its sandbox
    assert len(report["written"]) <= 2  # /tmp is a private tmpfs: what it wrote there is not on the host
    assert not any(Path(p).exists() for p in report["written"][1:])


def test_a_checkers_outputs_must_come_from_the_candidates_transfer_folder():
    from mtmc_lsp.optimizer.verify.pool import _Relay

    relay = _Relay(object(), {"harness": {}, "new_text": "x"}, [Path("/dev/shm/sandbox/cpu")])
    reply, failure = relay({"seed": 0, "kind": "fresh", "outputs": "/dev/shm/sandbox/cpu/../../etc/shadow"},
                           float("inf"), lambda: False)
    assert failure is None and reply["trial"]["ok"] is False
    assert "outside the candidate's transfer folder" in json.dumps(reply)
