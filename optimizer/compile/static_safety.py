"""What a compile for the target may load from the user's file without running the user's code.

Compiling imports a small module built from the file (``module_builder``): its imports, the
module-level values the kernel uses, its helpers and the kernel. Importing that module must not
run anything the user wrote, because compile diagnostics start as soon as a file is opened. So a
module-level statement is kept only when it is data: imports of Triton and a few standard modules,
and values from an allow-list (``check_value``): literals, tuples and lists of them, arithmetic and
comparisons, other module-level values of the file, Triton dtypes and math constants
(``tl.float16``, ``math.pi``), and calls of a short list of pure functions (``tl.constexpr``,
``triton.next_power_of_2``, ``math.log2``, ``min``, ...) on such values. Never a name the file does
not bind (a builtin such as ``exec``), a dunder name (``__builtins__``), an attribute that is not a
dtype or a constant, a lambda, comprehension, walrus or f-string. Default values of jit functions
and the non-literal defaults and ``@triton.heuristics`` lambdas the worker evaluates are held to the
same rule; a jit function's only decorator is ``jit`` (autotune and heuristics are dropped). Inside
jit bodies (which Triton's compiler reads, not Python) no private attribute (``x.__class__``), no
dunder name and no reflection builtin (``getattr``) may appear; the worker also checks at run time
that every module a body reaches belongs to ``triton.language`` or ``math``
(``worker.unsafe_module_reach``) and that every global a body reads is data
(``worker.unsafe_global_value``): Triton's code generator calls whatever a ``tl.constexpr`` holds.

Anything else makes the compile say that the value is unknown instead of running it.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

# Import roots a compile unit may import: Triton itself and pure standard modules.
SAFE_IMPORT_ROOTS = frozenset({"triton", "math", "typing", "__future__", "functools", "operator"})
# Callables a module-level value may call, by their last dotted name (on a module the file imports).
SAFE_CALLS = frozenset({
    "constexpr", "next_power_of_2", "cdiv", "jit", "int", "float", "bool", "str", "min", "max", "abs", "round",
    "tuple", "list", "dict", "len", "range", "log2", "log", "sqrt", "exp", "exp2", "ceil", "floor", "pow", "prod",
    "Config", "dtype", "pointer_type", "block_type",
})
# Python builtins a value may call by name (when the file does not bind that name itself).
SAFE_BUILTIN_CALLS = frozenset({
    "int", "float", "bool", "str", "min", "max", "abs", "round", "tuple", "list", "dict", "len", "range", "pow",
})
# Attributes a value may read (not call) off a module it imports: Triton's dtypes and math's constants.
DATA_ATTRIBUTES = frozenset({
    "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
    "float32", "float64", "float8e5", "float8e5b16", "float8e4nv", "float8e4b8", "float8e4b15", "pi32_t", "void",
    "pi", "e", "tau", "inf", "nan",
})
# Builtins that reach objects by name at run time: never inside a jit body or a value.
REFLECTION = frozenset({
    "getattr", "setattr", "delattr", "hasattr", "eval", "exec", "__import__", "globals", "locals", "vars", "open",
})
# Names Python resolves to its builtins when the file does not bind them (``exec``, ``print``, ``vars``).
_BUILTIN_NAMES = frozenset(dir(builtins))
NEVER_RUN = "its value is unknown: compile diagnostics never run the file's code"
# Expression nodes a value may be made of (with the rules of ``check_value`` for names, attributes, calls).
_DATA_NODES = (
    ast.Constant, ast.Name, ast.Tuple, ast.List, ast.Dict, ast.Set, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare,
    ast.IfExp, ast.Subscript, ast.Slice, ast.Attribute, ast.Call, ast.keyword,
    ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
)


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


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def check_expression(node: ast.AST | None, where: str) -> None:
    """Raise UnsafeCode unless ``node`` is literals, names, operators and the safe calls (decorators, annotations)."""
    if node is None:
        return
    for sub in reversed(list(ast.walk(node))):  # innermost first: the message names what would run first
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
            raise UnsafeCode(f"{where} reads the private attribute .{sub.attr}", getattr(sub, "lineno", None))
        if isinstance(sub, ast.Name) and sub.id in REFLECTION:
            raise UnsafeCode(f"{where} uses {sub.id}()", sub.lineno)
        if isinstance(sub, ast.Name) and _is_dunder(sub.id):
            raise UnsafeCode(f"{where} reads {sub.id}, Python's internals", sub.lineno)
        if isinstance(sub, ast.Call):
            name = _dotted(sub.func)
            if name is None or name.rsplit(".", 1)[-1] not in SAFE_CALLS:
                shown = name or ast.unparse(sub.func)
                raise UnsafeCode(f"{where} calls {shown}()", sub.lineno)
        elif isinstance(sub, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.ListComp, ast.SetComp,
                              ast.DictComp, ast.GeneratorExp, ast.Starred, ast.Lambda, ast.JoinedStr)):
            raise UnsafeCode(f"{where} is not a plain value ({type(sub).__name__})", getattr(sub, "lineno", None))


@dataclass(frozen=True)
class FileNames:
    """What a file binds at module level: every name, and what each import binds its name to."""

    bound: frozenset[str]
    imported: dict[str, str]  # "tl" -> "triton.language", "cdiv" -> "cdiv" (``from triton import cdiv``)

    @classmethod
    def of(cls, tree: ast.Module) -> "FileNames":
        bound: set[str] = set()
        imported: dict[str, str] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    name = alias.asname or alias.name.split(".")[0]
                    imported[name] = alias.name if alias.asname else name
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if alias.name != "*":
                        imported[alias.asname or alias.name] = alias.name
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound.add(stmt.name)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                bound |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
        return cls(frozenset(bound | set(imported)), imported)


def _last(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def check_value(node: ast.AST | None, where: str, names: FileNames, params: frozenset[str] = frozenset()) -> None:
    """Raise UnsafeCode unless ``node`` is data: evaluating it may call only pure functions on data.

    The allow-list: literals, containers, operators and comparisons; names the file binds to data
    (``params``: a heuristics lambda's own argument); dtypes and constants read off an imported
    module (``tl.float16``, ``math.pi``); calls of ``SAFE_CALLS`` on an imported module or of
    ``SAFE_BUILTIN_CALLS`` by name. Never a builtin read by name, a dunder name, any other attribute.
    """
    if node is None:
        return
    check_expression(node, where)  # the deny-list's messages first (they name what would run)
    _check_value(node, where, names, params)


def _check_value(node: ast.AST, where: str, names: FileNames, params: frozenset[str]) -> None:
    line = getattr(node, "lineno", None)
    if not isinstance(node, _DATA_NODES):
        raise UnsafeCode(f"{where} is not a plain value ({type(node).__name__})", line)
    if isinstance(node, ast.Name):
        _check_name(node, where, names, params)
    elif isinstance(node, ast.Attribute):
        dotted = _dotted(node)
        root = dotted.split(".")[0] if dotted else None
        if root not in names.imported or root in params or node.attr not in DATA_ATTRIBUTES:
            shown = dotted or ast.unparse(node)
            raise UnsafeCode(f"{where} reads {shown}, which is not a Triton dtype or a math constant", line)
    elif isinstance(node, ast.Call):
        _check_callee(node, where, names, params)
        for arg in node.args:
            _check_value(arg, where, names, params)
        for keyword in node.keywords:
            if keyword.arg is None:
                raise UnsafeCode(f"{where} unpacks **{ast.unparse(keyword.value)} into a call", line)
            _check_value(keyword.value, where, names, params)
    else:
        for child in ast.iter_child_nodes(node):
            _check_value(child, where, names, params)


def _check_name(node: ast.Name, where: str, names: FileNames, params: frozenset[str]) -> None:
    if node.id in params:
        return
    if node.id not in names.bound:
        if node.id in _BUILTIN_NAMES:
            raise UnsafeCode(f"{where} reads the builtin {node.id}: only the file's own values are data", node.lineno)
        return  # a closure's value in a kernel moved out of its factory: a NameError on import, nothing runs
    imported = names.imported.get(node.id)
    if imported is not None and _last(imported) not in DATA_ATTRIBUTES:
        raise UnsafeCode(f"{where} reads {node.id}, which the file imports ({imported}): a module or a "
                         "function, not data", node.lineno)


def _check_callee(call: ast.Call, where: str, names: FileNames, params: frozenset[str]) -> None:
    func, line = call.func, call.lineno
    if isinstance(func, ast.Name):
        imported = names.imported.get(func.id)
        if func.id in params or (func.id in names.bound and (imported is None or _last(imported) not in SAFE_CALLS)):
            raise UnsafeCode(f"{where} calls {func.id}()", line)
        if func.id not in names.bound and func.id not in SAFE_BUILTIN_CALLS:
            raise UnsafeCode(f"{where} calls {func.id}()", line)
        return
    dotted = _dotted(func)
    if dotted is None or dotted.split(".")[0] not in names.imported or dotted.split(".")[0] in params:
        raise UnsafeCode(f"{where} calls {dotted or ast.unparse(func)}(), not a function of a module it imports",
                         line)


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


def check_jit_function(fn: ast.FunctionDef, is_wrapping, names: FileNames) -> None:
    """Decorators, defaults and annotations are evaluated by Python; the body is read by Triton."""
    for decorator in fn.decorator_list:
        if is_wrapping(decorator):
            continue  # dropped from the compile unit (the caller picks the config)
        where = f"the decorator of {fn.name}"
        check_expression(decorator, where)
        callee = decorator.func if isinstance(decorator, ast.Call) else decorator
        dotted = _dotted(callee) or ""
        if _last(dotted) != "jit" or dotted.split(".")[0] not in names.imported:
            raise UnsafeCode(f"{where} is @{ast.unparse(decorator)}: only triton.jit may decorate a kernel here",
                             decorator.lineno)
        if isinstance(decorator, ast.Call):
            for argument in [*decorator.args, *(k.value for k in decorator.keywords)]:
                check_value(argument, where, names)
    arguments = fn.args
    for default in [*arguments.defaults, *arguments.kw_defaults]:
        check_value(default, f"a default value of {fn.name}", names)
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
        if arg is not None:
            check_expression(arg.annotation, f"the annotation of {fn.name}({arg.arg})")
    check_expression(fn.returns, f"the return annotation of {fn.name}")
    for sub in (node for statement in fn.body for node in ast.walk(statement)):
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
            raise UnsafeCode(f"{fn.name} reads the private attribute .{sub.attr}", sub.lineno)
        if isinstance(sub, ast.Name) and sub.id in REFLECTION:
            raise UnsafeCode(f"{fn.name} uses {sub.id}()", sub.lineno)
        if isinstance(sub, ast.Name) and _is_dunder(sub.id):
            raise UnsafeCode(f"{fn.name} reads {sub.id}, Python's internals", sub.lineno)
        if isinstance(sub, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)) or (
                isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))):
            raise UnsafeCode(f"{fn.name} contains a {type(sub).__name__} statement", getattr(sub, "lineno", None))


def check_statement(stmt: ast.stmt, is_jit, is_wrapping, names: FileNames) -> None:
    """Raise UnsafeCode unless importing ``stmt`` runs nothing the user wrote."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        check_import(stmt)
    elif isinstance(stmt, ast.FunctionDef) and is_jit(stmt):
        check_jit_function(stmt, is_wrapping, names)
    elif isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if not all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Store)) for n in ast.walk(target)):
                raise UnsafeCode("a module-level assignment to something other than a name", stmt.lineno)
        check_value(stmt.value, f"the value of {ast.unparse(stmt.targets[0])}", names)
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        check_expression(stmt.annotation, f"the annotation of {stmt.target.id}")
        check_value(stmt.value, f"the value of {stmt.target.id}", names)
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        check_value(stmt.value, f"the value of {stmt.target.id}", names)
    else:
        what = getattr(stmt, "name", None) or type(stmt).__name__
        raise UnsafeCode(f"the kernel uses {what}, which is Python code", stmt.lineno)


def check_source_expression(source: str, where: str, names: FileNames) -> None:
    """A heuristics lambda or a default's source: a lambda over data, or data."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise UnsafeCode(f"{where} does not parse: {exc.msg}") from exc
    params: frozenset[str] = frozenset()
    if isinstance(node, ast.Lambda):
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            check_value(default, where, names)
        arguments = node.args
        params = frozenset(a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                           arguments.vararg, arguments.kwarg] if a is not None)
        node = node.body
    check_value(node, where, names, params)
