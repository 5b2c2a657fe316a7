"""The smallest module that compiles one kernel: its imports, constants, helpers, and the kernel.

Only what the kernel needs is kept (transitively), so a file whose host code imports torch or
reads data does not pay for it or fail on it. Every kept statement stays on its own line number
and the rest become blank lines, so a line that triton reports is a line of the user's file.
Autotune and heuristics decorators are dropped: the caller picks the config to compile. A def jitted
by a call (``f = triton.autotune(...)(triton.jit(f))``) gets the jit call alone on that statement's line.
Every kept statement must be data (``static_safety``): building never admits code that importing
the module would run; such a file is reported as "not compiled", with the reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .static_safety import NEVER_RUN, FileNames, UnsafeCode, check_expression, check_statement

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
    names: FileNames  # what the file binds: the rule for values the worker evaluates (check_source_expression)


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


def _jitted_by_call(tree: ast.Module, text: str, name: str) -> tuple[ast.FunctionDef, ast.stmt, ast.Call] | None:
    """The def ``name`` that a statement jits by a call (as the analysis reads it), that statement, and its
    ``triton.jit(name)`` / ``triton.jit(...)(name)`` call; None when ``name`` is not such a kernel."""
    from ..analysis import analyze

    kernel = analyze(text).kernel(name)
    if kernel is None or kernel.jit_call is None or kernel.node is None:
        return None
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name
               and n.lineno == kernel.node.lineno), None)
    stmt = next((n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign)
                 and n.lineno == kernel.jit_call.start.line + 1), None)
    node = stmt.value if stmt is not None else None
    while fn is not None and isinstance(node, ast.Call) and len(node.args) == 1:
        if isinstance(node.args[0], ast.Name) and node.args[0].id == name:
            return fn, stmt, node
        node = node.args[0]
    return None


def build_module(text: str, kernel_name: str) -> BuiltModule:
    """The minimal, line-preserving module for ``kernel_name``; raises CompileSetupError."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        raise CompileSetupError(f"the file does not parse: {exc}") from exc
    kernel = _find_kernel(tree, kernel_name)
    jitting = _jitted_by_call(tree, text, kernel_name) if kernel is None else None
    if jitting is not None:
        kernel = jitting[0]
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
    # Parameters and names the body assigns are the kernel's own, even where a module-level def shares them.
    own = {a.arg for a in [*kernel.args.posonlyargs, *kernel.args.args, *kernel.args.kwonlyargs]}
    own |= {n.id for stmt in kernel.body for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    pending = sorted(_used_names(kernel, skip_decorators=True) - own)
    if jitting is not None:  # the jit call's names (``triton``), not the jitting statement itself
        kept_ids.add(id(jitting[1]))
        jit = jitting[2]
        pending += sorted(_used_names(jit.func) - {kernel_name})
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

    def is_jit(fn: ast.FunctionDef) -> bool:
        return _is_jit(fn) or fn is kernel

    names = FileNames.of(tree)
    imports_first = sorted(kept, key=lambda stmt: not isinstance(stmt, ast.Import | ast.ImportFrom))
    for stmt in [*imports_first, kernel]:  # an import of os says more than the value that reads os.environ
        try:
            check_statement(stmt, is_jit, _is_wrapping, names)
            if jitting is not None and stmt is kernel:
                check_expression(jit.func, f"the jit call of {kernel_name}")
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
    if jitting is not None:  # ``f = triton.jit(f)`` on its own line, below the def as in the file
        line = jitting[1].lineno - 1
        if out[line]:
            raise CompileSetupError(f"the statement that jits {kernel_name} shares its line with kept code")
        out[line] = f"{kernel_name} = {ast.unparse(jit)}"
    return BuiltModule("\n".join(out) + "\n", kernel_name, kernel.lineno, sorted(seen & set(definitions)), names)
