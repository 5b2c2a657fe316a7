"""The smallest module that compiles one kernel: its imports, constants, helpers, and the kernel.

Only what the kernel needs is kept (transitively), so a file whose host code imports torch or
reads data does not pay for it or fail on it. Every kept statement stays on its own line number
and the rest become blank lines, so a line that triton reports is a line of the user's file.
Autotune and heuristics decorators are dropped: the caller picks the config to compile.
Every kept statement must be data (``static_safety``): building never admits code that importing
the module would run; such a file is reported as "not compiled", with the reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .static_safety import NEVER_RUN, UnsafeCode, check_statement

WRAPPING_DECORATORS = frozenset({"autotune", "heuristics", "staticmethod"})  # the caller picks configs; classes are left behind


class CompileSetupError(Exception):
    """The kernel cannot be compiled from this text (not found, not parsable, or it would run code)."""


def _is_wrapping(decorator: ast.AST) -> bool:
    return _decorator_short_name(decorator) in WRAPPING_DECORATORS


@dataclass
class BuiltModule:
    text: str
    kernel: str
    def_line: int  # 1-based line of ``def kernel``
    included: list[str]  # names of the module-level statements kept


def _decorator_short_name(node: ast.AST) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(_decorator_short_name(d) == "jit" for d in fn.decorator_list)


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Import):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    if isinstance(stmt, ast.ImportFrom):
        return [a.asname or a.name for a in stmt.names if a.name != "*"]
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        names = []
        for target in stmt.targets:
            names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        return names
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _used_names(node: ast.AST, skip_decorators: bool = False) -> set[str]:
    names: set[str] = set()
    roots = [node]
    if skip_decorators and isinstance(node, ast.FunctionDef):
        roots = [*node.body, node.args, *(d for d in node.decorator_list if _decorator_short_name(d) not in WRAPPING_DECORATORS)]
        if node.returns is not None:
            roots.append(node.returns)
    for root in roots:
        for sub in ast.walk(root):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


def _find_kernel(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name and _is_jit(node):
            return node
    return None


def build_module(text: str, kernel_name: str) -> BuiltModule:
    """The minimal, line-preserving module for ``kernel_name``; raises CompileSetupError."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        raise CompileSetupError(f"the file does not parse: {exc}") from exc
    kernel = _find_kernel(tree, kernel_name)
    if kernel is None:
        raise CompileSetupError(f"no @triton.jit function named {kernel_name}")
    lines = text.splitlines()
    out = [""] * len(lines)

    definitions: dict[str, list[ast.stmt]] = {}
    future: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            future.append(stmt)
        for name in _bound_names(stmt):
            definitions.setdefault(name, []).append(stmt)

    kept: list[ast.stmt] = list(future)
    kept_ids: set[int] = {id(s) for s in future}
    pending = list(_used_names(kernel, skip_decorators=True))
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for stmt in definitions.get(name, []):
            if id(stmt) in kept_ids or stmt is kernel:
                continue
            kept_ids.add(id(stmt))
            kept.append(stmt)
            pending.extend(_used_names(stmt, skip_decorators=isinstance(stmt, ast.FunctionDef)))

    for stmt in [*kept, kernel]:
        try:
            check_statement(stmt, _is_jit, _is_wrapping)
        except UnsafeCode as exc:
            where = f" (line {exc.line})" if exc.line else ""
            raise CompileSetupError(f"{exc}{where}; {NEVER_RUN}") from exc

    def copy(first: int, last: int, dedent: int = 0) -> None:
        for index in range(first - 1, min(last, len(lines))):
            line = lines[index]
            if dedent and line[:dedent].strip() == "":
                line = line[dedent:]
            out[index] = line

    def copy_function(fn: ast.FunctionDef, dedent: int = 0) -> None:
        first = min([d.lineno for d in fn.decorator_list] + [fn.lineno])
        copy(first, fn.end_lineno, dedent)
        for decorator in fn.decorator_list:  # the caller picks the config: drop autotune/heuristics
            if _decorator_short_name(decorator) in WRAPPING_DECORATORS:
                for index in range(decorator.lineno - 1, decorator.end_lineno):
                    out[index] = ""  # the "@" shares the first line with the expression

    for stmt in kept:
        if isinstance(stmt, ast.FunctionDef):
            copy_function(stmt)
        elif isinstance(stmt, ast.ClassDef | ast.AsyncFunctionDef):
            copy(min([d.lineno for d in stmt.decorator_list] + [stmt.lineno]), stmt.end_lineno)
        else:
            copy(stmt.lineno, stmt.end_lineno)
    copy_function(kernel, dedent=kernel.col_offset)  # a kernel from a factory moves to module level
    return BuiltModule("\n".join(out) + "\n", kernel_name, kernel.lineno, sorted(seen & set(definitions)))
