"""Workspace Trust: in an untrusted workspace nothing the server starts may run the workspace's code.

Compiling for the target imports the user's module (its module-level code runs in the worker),
verification and optimization run the kernels. Static analysis, hover, code lenses and code
actions' edits only read the text, so they keep working.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types

UNTRUSTED_MESSAGE = (
    "{what} runs the workspace's code (compilation, correctness and timing runs), so it is disabled "
    "while the workspace is not trusted. Static diagnostics still work; trust the workspace to enable it."
)


def trusted_from_options(options: Any) -> bool:
    """False when ``initializationOptions`` say ``trusted: false``, at the top level or under ``mtmc``."""
    if not isinstance(options, dict):
        return True
    section = options.get("mtmc")
    for source in (options, section if isinstance(section, dict) else {}):
        if source.get("trusted") is False:
            return False
    return True


def refusal(what: str) -> str:
    return UNTRUSTED_MESSAGE.format(what=what)


def refuse_untrusted(ls, what: str) -> str:
    """Tell the user why ``what`` does not run (a warning message and the log); returns the reason."""
    reason = refusal(what)
    if not ls.closing:
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"MTMC: {reason}"))
    ls.log(reason, types.MessageType.Warning)
    return reason


def stop_user_code(ls) -> None:
    """Trust was withdrawn: cancel running verifications, optimizations and compilations."""
    for job in list(ls.active_jobs):
        job.cancel.set()
    for state in ls.documents:
        if state.compile_task is not None and not state.compile_task.done():
            state.compile_task.cancel()
        state.compile_version = None
