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


def require_open(ls, uri: str) -> None:
    """A command about a document the editor does not have open is -32602 (pygls would read the file from disk)."""
    from urllib.parse import unquote

    from pygls.exceptions import JsonRpcInvalidParams

    if unquote(uri) not in ls.workspace.text_documents:
        raise JsonRpcInvalidParams(f"{uri!r:.100} is not open in the editor: open it first")
