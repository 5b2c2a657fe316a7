"""What a compile for the target may load from the user's file without running the user's code.

Compiling imports a small module built from the file (``module_builder``): its imports, the
module-level values the kernel uses, its helpers and the kernel. Importing that module must not
run anything the user wrote, because compile diagnostics start as soon as a file is opened. So a
module-level statement is kept only when it is data: imports of Triton and a few standard
modules, and values made of literals, names, arithmetic and a short list of pure functions
(``tl.constexpr``, ``triton.next_power_of_2``, ``math.log2``, ``min``, ...). Decorators, default
values and annotations of the jit functions are held to the same rule, and so are the
``@triton.heuristics`` lambdas and non-literal defaults the worker evaluates. Inside jit bodies
(which Triton's compiler reads, not Python) no private attribute (``x.__class__``) and no
reflection builtin (``getattr``) may appear; the worker also checks at run time that every module
a body reaches belongs to ``triton.language`` or ``math`` (``worker.unsafe_module_reach``).

Anything else makes the compile say that the value is unknown instead of running it.
"""

from __future__ import annotations

import ast

# Import roots a compile unit may import: Triton itself and pure standard modules.
SAFE_IMPORT_ROOTS = frozenset({"triton", "math", "typing", "__future__", "functools", "operator"})
# Callables a module-level value may use, by their last dotted name.
SAFE_CALLS = frozenset({
    "constexpr", "next_power_of_2", "cdiv", "jit", "int", "float", "bool", "str", "min", "max", "abs", "round",
    "tuple", "list", "dict", "len", "range", "log2", "log", "sqrt", "exp", "exp2", "ceil", "floor", "pow", "prod",
    "Config", "dtype", "pointer_type", "block_type",
})
# Builtins that reach objects by name at run time: never inside a jit body or a value.
REFLECTION = frozenset({
    "getattr", "setattr", "delattr", "hasattr", "eval", "exec", "__import__", "globals", "locals", "vars", "open",
})
NEVER_RUN = "its value is unknown: compile diagnostics never run the file's code"


class UnsafeCode(Exception):
    """A statement or expression that compiling would have to execute; ``line`` is 1-based."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def check_expression(node: ast.AST | None, where: str) -> None:
    """Raise UnsafeCode unless ``node`` is data: literals, names, operators and the safe calls."""
    if node is None:
        return
    for sub in reversed(list(ast.walk(node))):  # innermost first: the message names what would run first
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
            raise UnsafeCode(f"{where} reads the private attribute .{sub.attr}", getattr(sub, "lineno", None))
        if isinstance(sub, ast.Name) and sub.id in REFLECTION:
            raise UnsafeCode(f"{where} uses {sub.id}()", sub.lineno)
        if isinstance(sub, ast.Call):
            name = _dotted(sub.func)
            if name is None or name.rsplit(".", 1)[-1] not in SAFE_CALLS:
                shown = name or ast.unparse(sub.func)
                raise UnsafeCode(f"{where} calls {shown}()", sub.lineno)
        elif isinstance(sub, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.ListComp, ast.SetComp,
                              ast.DictComp, ast.GeneratorExp, ast.Starred)):
            raise UnsafeCode(f"{where} is not a plain value ({type(sub).__name__})", getattr(sub, "lineno", None))


def check_import(stmt: ast.Import | ast.ImportFrom) -> None:
    """Only Triton and pure standard modules: anything else could be the workspace's own code."""
    if isinstance(stmt, ast.ImportFrom):
        if stmt.level:
            raise UnsafeCode("a relative import would load the workspace's own code", stmt.lineno)
        modules = [stmt.module or ""]
    else:
        modules = [alias.name for alias in stmt.names]
    for module in modules:
        if module.split(".")[0] not in SAFE_IMPORT_ROOTS:
            raise UnsafeCode(f"importing {module} would run its code", stmt.lineno)


def check_jit_function(fn: ast.FunctionDef, is_wrapping) -> None:
    """Decorators, defaults and annotations are evaluated by Python; the body is read by Triton."""
    for decorator in fn.decorator_list:
        if is_wrapping(decorator):
            continue  # dropped from the compile unit (the caller picks the config)
        check_expression(decorator, f"the decorator of {fn.name}")
    arguments = fn.args
    for default in [*arguments.defaults, *arguments.kw_defaults]:
        check_expression(default, f"a default value of {fn.name}")
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
        if arg is not None:
            check_expression(arg.annotation, f"the annotation of {fn.name}({arg.arg})")
    check_expression(fn.returns, f"the return annotation of {fn.name}")
    for sub in (node for statement in fn.body for node in ast.walk(statement)):
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
            raise UnsafeCode(f"{fn.name} reads the private attribute .{sub.attr}", sub.lineno)
        if isinstance(sub, ast.Name) and sub.id in REFLECTION:
            raise UnsafeCode(f"{fn.name} uses {sub.id}()", sub.lineno)
        if isinstance(sub, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)) or (
                isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))):
            raise UnsafeCode(f"{fn.name} contains a {type(sub).__name__} statement", getattr(sub, "lineno", None))


def check_statement(stmt: ast.stmt, is_jit, is_wrapping) -> None:
    """Raise UnsafeCode unless importing ``stmt`` runs nothing the user wrote."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        check_import(stmt)
    elif isinstance(stmt, ast.FunctionDef) and is_jit(stmt):
        check_jit_function(stmt, is_wrapping)
    elif isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if not all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Store)) for n in ast.walk(target)):
                raise UnsafeCode("a module-level assignment to something other than a name", stmt.lineno)
        check_expression(stmt.value, f"the value of {ast.unparse(stmt.targets[0])}")
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        check_expression(stmt.annotation, f"the annotation of {stmt.target.id}")
        check_expression(stmt.value, f"the value of {stmt.target.id}")
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        check_expression(stmt.value, f"the value of {stmt.target.id}")
    else:
        what = getattr(stmt, "name", None) or type(stmt).__name__
        raise UnsafeCode(f"the kernel uses {what}, which is Python code", stmt.lineno)


def check_source_expression(source: str, where: str) -> None:
    """A heuristics lambda or a default's source: a lambda over data, or data."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise UnsafeCode(f"{where} does not parse: {exc.msg}") from exc
    if isinstance(node, ast.Lambda):
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            check_expression(default, where)
        node = node.body
    check_expression(node, where)
