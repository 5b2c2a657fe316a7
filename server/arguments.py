"""Arguments of ``workspace/executeCommand`` requests, checked: a wrong one is -32602, not a crash."""

from __future__ import annotations


def command_args(args, *names: str) -> list:
    """The first ``len(names)`` arguments; a missing one, or a uri/id that is not a string, is -32602."""
    from pygls.exceptions import JsonRpcInvalidParams

    if len(args) < len(names):
        raise JsonRpcInvalidParams(f"expected arguments [{', '.join(names)}], got {len(args)}")
    for name, value in zip(names, args):
        if name in ("uri", "token", "stepId") and not isinstance(value, str):
            raise JsonRpcInvalidParams(f"argument {name} must be a string, got {value!r:.60}")
    return list(args[: len(names)])
