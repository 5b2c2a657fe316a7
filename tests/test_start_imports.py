"""A workspace's files never run when the server starts in it, whichever way it is started, nor in its workers.

The workspace carries a folder named like our package and shadows of a standard module and of
dependencies the server imports; each writes a marker file when imported. The server is started
with the workspace as its working directory (as editors do), gets initialize/shutdown/exit over
stdio, and must answer without any marker appearing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer import safe_exec

REPO = Path(__file__).resolve().parents[1]
CLIENT_PYTHON_TS = REPO / "client-vscode" / "src" / "python.ts"
DEPENDENCY_SHADOWS = ["json", "pygls", "libcst", "lsprotocol"]


def _marker_code(name: str) -> str:
    return f"open('RAN-' + {name!r}, 'w').close()  # relative: the working directory is the workspace\n"


def _plant(workspace: Path, with_package: bool) -> Path:
    """Shadows that write ``RAN-<name>`` into the working directory when imported."""
    for name in DEPENDENCY_SHADOWS:
        if name == "json":
            (workspace / "json.py").write_text(_marker_code(name))
        else:
            (workspace / name).mkdir()
            (workspace / name / "__init__.py").write_text(_marker_code(name))
    if with_package:
        (workspace / "mtmc_lsp").mkdir()
        (workspace / "mtmc_lsp" / "__init__.py").write_text(_marker_code("mtmc_lsp"))
        (workspace / "mtmc_lsp" / "__main__.py").write_text(_marker_code("mtmc_lsp.__main__"))
    return workspace


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _messages(data: bytes) -> list[dict]:
    out = []
    while data:
        header, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        length = int(re.search(rb"Content-Length: *(\d+)", header).group(1))
        out.append(json.loads(rest[:length]))
        data = rest[length:]
    return out


def _start_and_stop(argv: list[str], workspace: Path, env_extra: dict | None = None) -> list[dict]:
    """initialize, shutdown, exit over stdio with cwd = workspace; the server's messages."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONMALLOC", "PYTHONSAFEPATH")}
    env.update(env_extra or {})
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "processId": None, "rootUri": workspace.as_uri(), "capabilities": {},
        "initializationOptions": {"mtmc": {"policy": "heuristic", "compileDiagnostics": False}, "trusted": False}}}
    stdin = (_frame(initialize) + _frame({"jsonrpc": "2.0", "method": "initialized", "params": {}})
             + _frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
             + _frame({"jsonrpc": "2.0", "method": "exit"}))
    proc = subprocess.run(argv, input=stdin, capture_output=True, cwd=workspace, env=env, timeout=120)
    return _messages(proc.stdout)


def _assert_answered_and_nothing_ran(messages: list[dict], workspace: Path) -> None:
    ran = sorted(p.name for p in workspace.iterdir() if p.name.startswith("RAN-"))
    assert not ran, f"the workspace's code ran: {ran}"
    answers = {m.get("id"): m for m in messages if "id" in m and "method" not in m}
    assert "capabilities" in answers[1]["result"], messages
    assert answers[2].get("result", "missing") is None, messages


def client_serve_args() -> list[str]:
    """SERVE_ARGS as the VS Code client builds them (client-vscode/src/python.ts)."""
    match = re.search(r"export const SERVE_ARGS = (\[.*?\]);", CLIENT_PYTHON_TS.read_text(encoding="utf-8"))
    return json.loads(match.group(1))


def test_the_vs_code_clients_command_runs_nothing_from_the_workspace(tmp_path):
    workspace = _plant(tmp_path, with_package=True)
    _assert_answered_and_nothing_ran(_start_and_stop([sys.executable, *client_serve_args()], workspace), workspace)


@pytest.mark.parametrize("allocator_restart", [True, False], ids=["re-exec", "no-re-exec"])
def test_mtmc_serve_runs_nothing_from_the_workspace(tmp_path, allocator_restart):
    """The console script, then (unless PYTHONMALLOC is set) its re-exec for the C allocator."""
    workspace = _plant(tmp_path, with_package=True)
    mtmc = Path(sys.executable).with_name("mtmc")
    if not mtmc.exists():
        pytest.skip(f"no mtmc console script beside {sys.executable}")
    env = {} if allocator_restart else {"PYTHONMALLOC": "pymalloc"}
    _assert_answered_and_nothing_ran(_start_and_stop([str(mtmc), "serve"], workspace, env), workspace)


def test_python_dash_p_runs_nothing_from_the_workspace(tmp_path):
    workspace = _plant(tmp_path, with_package=True)
    argv = safe_exec.safe_module_argv("mtmc_lsp", "serve")
    _assert_answered_and_nothing_ran(_start_and_stop(argv, workspace), workspace)


@pytest.mark.parametrize("allocator_restart", [True, False], ids=["re-exec", "no-re-exec"])
def test_plain_python_m_drops_the_working_directory_before_importing_dependencies(tmp_path, allocator_restart):
    """Without -P/-I Python imports a workspace ``mtmc_lsp/`` before our code runs (docs/server.md);
    shadows of everything after that are kept out by ``mtmc_lsp/__main__.py``."""
    workspace = _plant(tmp_path, with_package=False)
    env = {} if allocator_restart else {"PYTHONMALLOC": "pymalloc"}
    messages = _start_and_stop([sys.executable, "-m", "mtmc_lsp", "serve"], workspace, env)
    _assert_answered_and_nothing_ran(messages, workspace)


@pytest.mark.parametrize("has_flag", [True, False], ids=["-P", "3.10-trampoline"])
def test_safe_module_argv_keeps_the_working_directory_off_sys_path(tmp_path, monkeypatch, has_flag):
    """Both forms (the 3.10 one forced here) import from the installed packages with the environment kept."""
    (tmp_path / "ws").mkdir()
    workspace = _plant(tmp_path / "ws", with_package=True)
    library = tmp_path / "lib"
    library.mkdir()
    (library / "mtmc_probe.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'env': os.environ.get('MTMC_PROBE'), 'argv': sys.argv[1:],\n"
        "                  'cwd_on_path': '' in sys.path or os.getcwd() in sys.path}))\n")
    monkeypatch.setattr(safe_exec, "_has_safe_path_flag", lambda python: has_flag)
    argv = safe_exec.safe_module_argv("mtmc_probe", "a", "b")
    assert ("-P" in argv) == has_flag
    out = subprocess.run(argv, capture_output=True, text=True, cwd=workspace, timeout=60,
                         env={**os.environ, "MTMC_PROBE": "kept", "PYTHONPATH": str(library)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"env": "kept", "argv": ["a", "b"], "cwd_on_path": False}
    assert not list(workspace.glob("RAN-*"))


def test_the_write_triton_worker_runs_nothing_from_the_workspace(tmp_path, monkeypatch):
    from mtmc_lsp.server.features.write_triton import generate_in_subprocess

    workspace = _plant(tmp_path, with_package=True)
    monkeypatch.chdir(workspace)
    result = asyncio.run(generate_in_subprocess("this is not python(", "problem"))
    assert "error" in result and not list(workspace.glob("RAN-*")), result


def test_code_and_scripts_get_a_safe_path_flag(tmp_path):
    """What the verification pool (-c) and the KernelBench runner (a script) start with."""
    workspace = _plant(tmp_path, with_package=True)
    script = workspace / "runner.py"
    script.write_text("import sys, json\nprint(json.dumps(sorted(set(sys.path) & {'', sys.argv[1]})))\n")
    for argv in ([*safe_exec.safe_python_argv(), "-c", "import json, pygls, sys; print(json.dumps(''))"],
                 [*safe_exec.safe_python_argv(), str(script), str(workspace)]):
        out = subprocess.run(argv, capture_output=True, text=True, cwd=workspace, timeout=60)
        assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    assert not list(workspace.glob("RAN-*"))
