"""Workspace Trust: in an untrusted workspace nothing the server starts may run the workspace's code.

Verification, optimization and LLM steps run the kernels; compiling for the target runs Triton's
compiler over the kernel (module-level values are only folded from literals, never executed:
optimizer/compile/static_safety.py), which is still kept for trusted workspaces. Static analysis,
hover, code lenses and code actions' edits only read the text, so they keep working. Trust is
parsed strictly: only a boolean ``true`` counts, and nothing runs before the client's settings are
known.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types

UNTRUSTED_MESSAGE = (
    "{what} runs the workspace's code (compilation, correctness and timing runs), so it is disabled "
    "while the workspace is not trusted. Static diagnostics still work; trust the workspace to enable it."
)


def trust_from_options(options: Any) -> bool | None:
    """``trusted`` from ``initializationOptions`` (top level or under ``mtmc``): only booleans count."""
    if not isinstance(options, dict):
        return None
    section = options.get("mtmc")
    said = [source.get("trusted") for source in (options, section if isinstance(section, dict) else {})]
    if any(value is False for value in said):
        return False
    return True if any(value is True for value in said) else None


def is_trusted(initial: bool | None, configured: bool | None, settings_known: bool) -> bool:
    """Trusted only when the client's settings are known, someone said ``true`` and nobody ``false``."""
    if not settings_known or initial is False or configured is False:
        return False
    return initial is True or configured is True


def invalid_trust_values(options: Any) -> list[str]:
    """``trusted`` values that are present but not booleans (``"false"``): ignored, and said so."""
    found = []
    if isinstance(options, dict):
        section = options.get("mtmc")
        for source in (options, section if isinstance(section, dict) else {}):
            if "trusted" in source and not isinstance(source["trusted"], bool):
                found.append(repr(source["trusted"]))
    return found


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
