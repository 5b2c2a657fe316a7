"""Command lines for the Python processes we start: they import installed code only, never the workspace's.

Python puts the working directory (``-m``, ``-c``) or a script's folder first on ``sys.path``. The
server runs with the workspace folder as its working directory, so a cloned repository carrying
``mtmc_lsp/``, ``json.py`` or ``pygls/`` would run its code in every process we start, before any
trust. ``-P`` (Python 3.11+) leaves that entry out and keeps the environment; Python 3.10 has no
``-P``: a module runs through a ``-c`` trampoline that drops ``sys.path[0]`` before importing
anything, and code or a script gets ``-I`` (also ignores ``PYTHON*`` variables and the user's
site-packages, which those workers do not need).
"""

from __future__ import annotations

import functools
import subprocess
import sys

SAFE_PATH_SINCE = (3, 11)
# Python 3.10: under ``-c`` sys.path[0] is "" (the working directory) and nothing has been imported
# from it yet; drop it, then let runpy run the module as ``-m`` would.
_TRAMPOLINE = ("import sys; del sys.path[0]; import runpy; "
               "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


@functools.lru_cache(maxsize=8)
def _has_safe_path_flag(python: str) -> bool:
    """Whether ``python`` knows ``-P``: this interpreter by its version, another one by asking it (under -I)."""
    if python == sys.executable:
        return sys.version_info >= SAFE_PATH_SINCE
    try:
        out = subprocess.run([python, "-I", "-c", "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip() == "True"


def safe_python_argv(python: str | None = None) -> list[str]:
    """The interpreter and its flag for ``-c CODE`` or a script, without the working directory on ``sys.path``."""
    python = python or sys.executable
    return [python, "-P" if _has_safe_path_flag(python) else "-I"]


def safe_module_argv(module: str, *args: str, python: str | None = None) -> list[str]:
    """``python -m module args`` without the working directory on ``sys.path``, environment kept."""
    python = python or sys.executable
    if _has_safe_path_flag(python):
        return [python, "-P", "-m", module, *args]
    return [python, "-c", _TRAMPOLINE.format(module=module), *args]
