"""``mtmc serve`` restarts itself once under the C allocator (RSS returns after big files close), unless told otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix" or not os.path.isdir("/proc"), reason="reads /proc/PID/environ")


def _environ_after_start(env: dict) -> dict[str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "mtmc_lsp", "serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                pairs = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
            with open(f"/proc/{proc.pid}/cmdline", "rb") as fh:
                cmdline = fh.read().split(b"\0")
            if b"PYTHONMALLOC" in pairs:
                return {k.decode(): v.decode() for k, v in pairs.items()} | {"_cmdline": b" ".join(cmdline).decode()}
            time.sleep(0.1)  # not exec'd yet: a loaded machine may take seconds to get there
        raise AssertionError("the server never ran with PYTHONMALLOC set")
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_the_server_runs_under_the_c_allocator_and_keeps_its_pid():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
    seen = _environ_after_start(env)
    assert seen.get("PYTHONMALLOC") == "malloc" and "-m mtmc_lsp serve" in seen["_cmdline"]


def test_an_allocator_the_user_chose_is_kept():
    seen = _environ_after_start({**os.environ, "PYTHONMALLOC": "pymalloc"})
    assert seen.get("PYTHONMALLOC") == "pymalloc"
