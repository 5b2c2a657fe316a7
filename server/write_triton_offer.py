"""The offer of "MTMC: Write a Triton version": which files get it, and its code action.

Shared by the code_action feature (which offers it) and the write_triton feature (which runs the
command), so that no feature module imports another.
"""

from __future__ import annotations

import ast

from lsprotocol import types

WRITE_TRITON_COMMAND = "mtmc.writeTriton"
TITLE = "MTMC: Write a Triton version"


def is_pytorch_problem(text: str) -> bool:
    """``class Model(...)`` and ``def get_inputs`` at the top level, and no ``ModelNew`` yet."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return "Model" in names and "get_inputs" in names and "ModelNew" not in names


def write_triton_actions(uri: str, text: str, kind: str) -> list[types.CodeAction]:
    """The code action for a PyTorch module in KernelBench form (none for anything else)."""
    if not uri.endswith(".py") or not is_pytorch_problem(text):
        return []
    command = types.Command(title=TITLE, command=WRITE_TRITON_COMMAND, arguments=[uri])
    return [types.CodeAction(title=TITLE, kind=kind, command=command)]
