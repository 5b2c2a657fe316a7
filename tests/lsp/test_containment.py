"""The server writes only under the workspace's .mtmc/ or its own temporary folder (issue 16, item 3).

Documents outside the workspace and untitled ones keep their step history in memory; the
temporary folders of compile and verification workers are gone after shutdown, even when a
compile was still running; scratch folders of a server that was killed are removed by the next.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mtmc_lsp.optimizer.actions import applicable
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

from .raw_client import REPO, SETTINGS, RawClient

MATMUL = (REPO / "mtmc_lsp" / "examples" / "matmul.py").read_text()


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_step_on_a_document_outside_the_workspace_writes_nothing_beside_it(tmp_path_factory):
    workspace, outside = tmp_path_factory.mktemp("ws"), tmp_path_factory.mktemp("elsewhere")
    document = outside / "matmul.py"
    document.write_text(MATMUL)
    client = RawClient.in_process()
    try:
        client.initialize(workspace)
        for uri in (document.as_uri(), "untitled:Untitled-1"):
            client.open(uri, MATMUL)
            candidate = applicable(analyze(MATMUL), "matmul_kernel", get_profile("h100"))[0].to_json()
            reply = client.call("workspace/executeCommand", {"command": "mtmc.applyCandidate",
                                                             "arguments": [uri, 1, candidate]})
            assert reply["result"]["applied"] is True and reply["result"]["recorded"] is True
            history = client.call("workspace/executeCommand", {"command": "mtmc.stepHistory", "arguments": [uri]})
            assert len(history["result"]["steps"]) == 1
        assert _files(outside) == ["matmul.py"] and _files(workspace) == []
        assert not Path(os.getcwd(), ".mtmc", "history").exists() or not any(
            "Untitled" in p.name for p in Path(os.getcwd(), ".mtmc", "history").iterdir())
    finally:
        client.close()


def _compile_running(client: RawClient, scratch: Path) -> bool:
    return any(p.name.startswith("mtmc-compile-") for p in scratch.rglob("*"))


def test_no_temporary_folder_or_worker_survives_a_shutdown_during_a_compile(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    stale = tmp / "mtmc-lsp-999999999-left"  # a server that was killed: its pid does not exist
    (stale / "mtmc-compile-x").mkdir(parents=True)
    settings = dict(SETTINGS, compileDiagnostics=True)
    client = RawClient.subprocess(cwd=workspace, settings=settings, env=dict(os.environ, TMPDIR=str(tmp)))
    try:
        client.initialize(workspace)
        # A kernel no compile cache holds, so the worker really runs when the server stops.
        text = MATMUL.replace("pid_m = tl.program_id(0)", f"pid_m = tl.program_id(0) + {time.time_ns()} * 0")
        client.open((workspace / "m.py").as_uri(), text)
        deadline = time.monotonic() + 30
        while not _compile_running(client, tmp) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _compile_running(client, tmp), _files(tmp)
        assert not stale.exists()
        (scratch,) = [p for p in tmp.iterdir() if p.name.startswith("mtmc-lsp-")]
    finally:
        client.close()
    assert client.process.returncode == 0
    time.sleep(1.0)  # a surviving worker would write into the folder again
    assert _files(tmp) == []
    leftover = [pid for pid in os.listdir("/proc") if pid.isdigit() and _environ_names(pid, scratch)]
    assert leftover == []


def _environ_names(pid: str, folder: Path) -> bool:
    try:
        return f"TMPDIR={folder}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def test_trajectories_are_not_written_through_a_mtmc_symlink(tmp_path_factory):
    from mtmc_lsp.optimizer.trajectories import TrajectoryRecorder

    workspace, elsewhere = tmp_path_factory.mktemp("ws"), tmp_path_factory.mktemp("elsewhere")
    (workspace / ".mtmc").symlink_to(elsewhere, target_is_directory=True)
    recorder = TrajectoryRecorder(workspace)
    assert not recorder.enabled and "leads out of the workspace" in recorder.problem
    recorder.begin(path="k.py", kernel="k", target=get_profile("h100"), policy="heuristic", text="x", steps=1,
                   beam=1, budget_s=1.0)
    assert _files(elsewhere) == []
