"""Static evaluation of ``@triton.autotune`` configs written as code rather than a literal list.

Public kernels build their configs with list comprehensions, module-level names, helper functions,
``+`` and filters. This module evaluates such an expression over a restricted subset of Python,
reading the AST only (no user code ever runs): literals, names bound once at module level to such
expressions, ``range``/``list``/``tuple``, comprehensions, arithmetic and comparisons on literals,
the ``kwargs``/``num_warps``/``num_stages`` of configs it built, helper functions of no arguments
whose body only assigns names and returns, and ``triton.Config(...)`` itself. Anything else raises
``ConfigsRefused`` with the reason, and the configs stay unknown.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Callable

from .model import TritonNames

MAX_ITEMS = 4096  # longest list or range, and most configs, the evaluator builds
MAX_STEPS = 200_000  # nodes visited per evaluation: a bound on the work, whatever the source
CONFIG_NAMES = frozenset({"triton.Config", "triton.runtime.Config", "triton.runtime.autotuner.Config"})
# triton.Config(kwargs, num_warps, num_stages, num_ctas, maxnreg, pre_hook, ir_override), in order.
CONFIG_POSITIONAL = ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg", "pre_hook", "ir_override")
CONFIG_EVALUATED = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})
# Hooks are functions the autotuner calls at launch: named, never called here.
CONFIG_OPAQUE = frozenset({"pre_hook", "ir_override"})
CONFIG_FIELDS = frozenset({"kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg"})
# Calls that pass a module-level list along without changing it.
NON_MUTATING_CALLS = frozenset({"autotune", "Config", "range", "list", "tuple", "len", "sorted", "enumerate", "zip",
                                "print", "isinstance"})

_BINARY: dict[type, Callable] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.Div: operator.truediv,
}
_COMPARE: dict[type, Callable] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}


class ConfigsRefused(Exception):
    """The configs expression uses something the evaluator does not evaluate; ``str()`` says what."""


@dataclass(frozen=True)
class ConfigValue:
    """One ``triton.Config(...)`` the evaluator built."""

    kwargs: dict
    options: dict  # num_warps, num_stages, num_ctas, maxnreg as given (absent when not given)
    node: ast.Call  # the call in the source (a comprehension's one call stands for all its configs)
    hooks: tuple[tuple[str, str], ...] = field(default=())  # (option, function name), unevaluated: pre_hook


@dataclass
class ModuleScope:
    """What the evaluator may read at module level: single bindings, helper functions, the triton names."""

    names: TritonNames
    values: dict[str, ast.expr]  # name -> its one module-level ``name = value``
    functions: dict[str, ast.FunctionDef]  # name -> its one module-level def
    refused: dict[str, str]  # name -> why it cannot be read (bound twice, mutated, imported, ...)


def module_scope(tree: ast.Module, names: TritonNames) -> ModuleScope:
    """The module-level names of ``tree`` the evaluator may read, and why the others cannot be read."""
    bindings: dict[str, int] = {}
    values: dict[str, ast.expr] = {}
    functions: dict[str, ast.FunctionDef] = {}
    refused: dict[str, str] = {}

    def bind(name: str) -> None:
        bindings[name] = bindings.get(name, 0) + 1

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.FunctionDef) and not stmt.decorator_list:
            functions[stmt.name] = stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bind(stmt.name)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            for alias in stmt.names:
                name = alias.asname or alias.name.split(".")[0]
                bind(name)
                refused[name] = f"`{name}` is imported"
        # Names bound anywhere at module level, in any statement (loops, ifs, with, try, walrus).
        for node in _module_level_nodes(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
                bind(node.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global | ast.Nonlocal):
            for name in node.names:
                refused.setdefault(name, f"`{name}` is rebound by a `global` statement")
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            refused.setdefault(node.target.id, f"`{node.target.id}` is changed by `{ast.unparse(node).strip()}`")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in values:
            # ``configs.append(...)``, ``configs.sort()``: a list value is changed through its methods.
            refused.setdefault(node.value.id, f"`{ast.unparse(node)}` is read from `{node.value.id}`, which may change it")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del) and \
                isinstance(node.value, ast.Name):
            refused.setdefault(node.value.id, f"`{node.value.id}` is changed by an item assignment")
        elif isinstance(node, ast.Call):
            callee = names.canonical(node.func) or ""
            if callee.rsplit(".", 1)[-1] in NON_MUTATING_CALLS:
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                arg = arg.value if isinstance(arg, ast.Starred) else arg
                if isinstance(arg, ast.Name) and arg.id in values:
                    refused.setdefault(arg.id, f"`{arg.id}` is passed to `{callee or ast.unparse(node.func)}(...)`, "
                                               "which may change it")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in values:
            refused.setdefault(node.value.id, f"`{node.value.id}` is bound to another name, which may change it")
    for name, count in bindings.items():
        if count > 1:
            refused.setdefault(name, f"`{name}` is bound more than once at module level")
    return ModuleScope(names, values, functions, refused)


def _module_level_nodes(stmt: ast.stmt):
    """The nodes of ``stmt`` in module scope (not inside function or class bodies, lambdas or comprehensions)."""
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            continue
        stack.extend(ast.iter_child_nodes(node))


def evaluate_configs(node: ast.expr, scope: ModuleScope) -> tuple[list[ConfigValue], str]:
    """The configs ``node`` evaluates to and the sequence type ("list" or "tuple"); ``ConfigsRefused`` when
    it is not evaluable, or is not a sequence of ``triton.Config``."""
    evaluator = _Evaluator(scope)
    value = evaluator.eval(node, {})
    if not isinstance(value, list | tuple):
        raise ConfigsRefused(f"`{_short(node)}` is not a list of triton.Config")
    if not value:
        raise ConfigsRefused(f"`{_short(node)}` evaluates to no configs")
    bad = next((v for v in value if not isinstance(v, ConfigValue)), None)
    if bad is not None:
        raise ConfigsRefused(f"`{_short(node)}` holds {type(bad).__name__} values, not only triton.Config")
    return list(value), type(value).__name__


def _short(node: ast.AST, limit: int = 60) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Evaluator:
    def __init__(self, scope: ModuleScope):
        self.scope = scope
        self.steps = 0
        self.active: set[str] = set()  # module names and functions being evaluated (a cycle is refused)
        self.module_cache: dict[str, object] = {}

    def eval(self, node: ast.AST, local: dict[str, object]):
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise ConfigsRefused("the configs take too long to evaluate")
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ConfigsRefused(f"`{_short(node)}`: {type(node).__name__} is not evaluated")
        return method(node, local)

    # ---- leaves ----------------------------------------------------------------------------------
    def _Constant(self, node: ast.Constant, local):
        if not isinstance(node.value, int | float | str | bool | type(None)):
            raise ConfigsRefused(f"`{_short(node)}` is not a number, string or None")
        return node.value

    def _Name(self, node: ast.Name, local):
        if node.id in local:
            return local[node.id]
        return self.module_value(node.id)

    def module_value(self, name: str):
        """The value of the one module-level ``name = ...``."""
        if name in self.module_cache:
            return self.module_cache[name]
        if name in self.scope.refused:
            raise ConfigsRefused(self.scope.refused[name])
        if name not in self.scope.values:
            what = "a function" if name in self.scope.functions else "not bound at module level to a value"
            raise ConfigsRefused(f"`{name}` is {what}")
        if name in self.active:
            raise ConfigsRefused(f"`{name}` refers to itself")
        self.active.add(name)
        try:
            value = self.eval(self.scope.values[name], {})
        finally:
            self.active.discard(name)
        self.module_cache[name] = value
        return value

    # ---- containers ------------------------------------------------------------------------------
    def _List(self, node: ast.List, local):
        return self._elements(node.elts, local)

    def _Tuple(self, node: ast.Tuple, local):
        return tuple(self._elements(node.elts, local))

    def _elements(self, elts: list[ast.expr], local) -> list:
        out: list = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                out.extend(self._iterable(elt.value, local))
            else:
                out.append(self.eval(elt, local))
            _check_size(out)
        return out

    def _Dict(self, node: ast.Dict, local):
        out: dict = {}
        for key, value in zip(node.keys, node.values):
            if key is None:  # ``{**base, "BLOCK": 64}``
                spread = self.eval(value, local)
                if not isinstance(spread, dict):
                    raise ConfigsRefused(f"`**{_short(value)}` is not a dict")
                out.update(spread)
            else:
                out[_hashable(self.eval(key, local), key)] = self.eval(value, local)
        return out

    # ---- operators -------------------------------------------------------------------------------
    def _BinOp(self, node: ast.BinOp, local):
        op = _BINARY.get(type(node.op))
        if op is None:
            raise ConfigsRefused(f"`{_short(node)}`: the operator is not evaluated")
        left, right = self.eval(node.left, local), self.eval(node.right, local)
        numbers = all(isinstance(v, int | float) for v in (left, right))
        sequences = isinstance(left, list | tuple) and type(left) is type(right)
        if isinstance(node.op, ast.Add) and sequences:
            return _check_size(left + right)
        if isinstance(node.op, ast.Mult) and (isinstance(left, list | tuple) and isinstance(right, int)
                                               and not isinstance(right, bool)):
            if len(left) * max(right, 0) > MAX_ITEMS:
                raise ConfigsRefused(f"`{_short(node)}` is too long")
            return left * right
        if not numbers:
            raise ConfigsRefused(f"`{_short(node)}`: `{type(node.op).__name__}` on these values is not evaluated")
        if isinstance(node.op, ast.Pow) and abs(right) > 64 or isinstance(node.op, ast.LShift) and right > 64:
            raise ConfigsRefused(f"`{_short(node)}` is too large")
        try:
            return op(left, right)
        except ArithmeticError as error:
            raise ConfigsRefused(f"`{_short(node)}`: {error}") from None

    def _UnaryOp(self, node: ast.UnaryOp, local):
        value = self.eval(node.operand, local)
        if isinstance(node.op, ast.Not):
            return not value
        if not isinstance(value, int | float):
            raise ConfigsRefused(f"`{_short(node)}` negates a value that is not a number")
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        raise ConfigsRefused(f"`{_short(node)}`: the operator is not evaluated")

    def _BoolOp(self, node: ast.BoolOp, local):
        value = None
        for operand in node.values:  # Python's short circuit, value for value
            value = self.eval(operand, local)
            if bool(value) is isinstance(node.op, ast.Or):
                return value
        return value

    def _Compare(self, node: ast.Compare, local):
        left = self.eval(node.left, local)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.eval(comparator, local)
            if not _comparable(left, right, op):
                raise ConfigsRefused(f"`{_short(node)}` compares values the evaluator does not compare")
            try:
                holds = _COMPARE[type(op)](left, right)
            except TypeError:
                raise ConfigsRefused(f"`{_short(node)}` compares values of different kinds") from None
            if not holds:
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp, local):
        return self.eval(node.body if self.eval(node.test, local) else node.orelse, local)

    def _Subscript(self, node: ast.Subscript, local):
        container = self.eval(node.value, local)
        if not isinstance(container, list | tuple | dict | str):
            raise ConfigsRefused(f"`{_short(node)}` indexes a value that is not a list, tuple or dict")
        if isinstance(node.slice, ast.Slice):
            parts = [self.eval(p, local) if p is not None else None for p in (node.slice.lower, node.slice.upper, node.slice.step)]
            if isinstance(container, dict) or not all(p is None or isinstance(p, int) for p in parts):
                raise ConfigsRefused(f"`{_short(node)}` slices with values that are not integers")
            return container[slice(*parts)]
        index = self.eval(node.slice, local)
        try:
            return container[index]
        except (KeyError, IndexError, TypeError) as error:
            raise ConfigsRefused(f"`{_short(node)}`: {type(error).__name__} {error}") from None

    def _Attribute(self, node: ast.Attribute, local):
        # Only the fields of a config the evaluator built: ``cfg.kwargs["BLOCK_M"]``, ``cfg.num_warps``.
        if isinstance(node.value, ast.Name) and node.value.id in local:
            owner = local[node.value.id]
            if isinstance(owner, ConfigValue) and node.attr in CONFIG_FIELDS:
                return owner.kwargs if node.attr == "kwargs" else owner.options.get(node.attr, _CONFIG_DEFAULTS[node.attr])
        raise ConfigsRefused(f"`{_short(node)}`: attribute access is evaluated only for the fields of a triton.Config")

    # ---- comprehensions --------------------------------------------------------------------------
    def _ListComp(self, node: ast.ListComp, local):
        return self._comprehension(node.elt, node.generators, local)

    def _GeneratorExp(self, node: ast.GeneratorExp, local):
        # Elsewhere than in list()/tuple() it is a one-shot generator, not a sequence of configs.
        raise ConfigsRefused(f"`{_short(node)}`: a generator expression is evaluated only inside list() or tuple()")

    def _comprehension(self, elt: ast.expr, generators: list[ast.comprehension], local) -> list:
        out: list = []

        def walk(index: int, scope: dict[str, object]) -> None:
            if index == len(generators):
                out.append(self.eval(elt, scope))
                _check_size(out)
                return
            generator = generators[index]
            if generator.is_async:
                raise ConfigsRefused("an async comprehension is not evaluated")
            for item in self._iterable(generator.iter, scope):
                inner = dict(scope)
                _assign(generator.target, item, inner)
                if all(self.eval(test, inner) for test in generator.ifs):
                    walk(index + 1, inner)

        walk(0, dict(local))
        return out

    def _iterable(self, node: ast.expr, local) -> list:
        value = self.eval(node, local)
        if isinstance(value, dict):
            return list(value)
        if not isinstance(value, list | tuple | str):
            raise ConfigsRefused(f"`{_short(node)}` is not a list, tuple or range")
        return list(value)

    # ---- calls -----------------------------------------------------------------------------------
    def _Call(self, node: ast.Call, local):
        callee = self.scope.names.canonical(node.func)
        if callee in CONFIG_NAMES:
            return self._config(node, local)
        if isinstance(node.func, ast.Name) and node.func.id not in local:
            name = node.func.id
            if name in ("range", "list", "tuple") and name not in self.scope.values and name not in self.scope.functions \
                    and name not in self.scope.refused:
                return self._builtin(name, node, local)
            if name in self.scope.functions and name not in self.scope.refused:
                return self._helper(self.scope.functions[name], node)
        raise ConfigsRefused(f"`{_short(node)}` calls `{_short(node.func)}`: only triton.Config, range, list, tuple "
                             "and module-level helper functions without arguments are evaluated")

    def _builtin(self, name: str, node: ast.Call, local):
        if node.keywords:
            raise ConfigsRefused(f"`{_short(node)}`: keyword arguments to {name}() are not evaluated")
        args = [self._iterable(a.value, local) if isinstance(a, ast.Starred)
                else [self._comprehension(a.elt, a.generators, local)] if isinstance(a, ast.GeneratorExp)
                else [self.eval(a, local)] for a in node.args]
        flat = [v for part in args for v in part]
        if name == "range":
            if not 1 <= len(flat) <= 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
                raise ConfigsRefused(f"`{_short(node)}`: range() of values that are not integers")
            numbers = range(*flat)
            if len(numbers) > MAX_ITEMS:
                raise ConfigsRefused(f"`{_short(node)}` is too long")
            return list(numbers)
        if len(flat) > 1:
            raise ConfigsRefused(f"`{_short(node)}`: {name}() takes one argument")
        items = [] if not flat else self._iterable_value(flat[0], node)
        return list(items) if name == "list" else tuple(items)

    @staticmethod
    def _iterable_value(value, node: ast.AST) -> list:
        if isinstance(value, dict):
            return list(value)
        if not isinstance(value, list | tuple | str):
            raise ConfigsRefused(f"`{_short(node)}`: the argument is not a list, tuple or range")
        return list(value)

    def _helper(self, fn: ast.FunctionDef, node: ast.Call):
        """A module-level ``def get_configs(): [name = expr ...] return expr`` called with no arguments."""
        if node.args or node.keywords:
            raise ConfigsRefused(f"`{_short(node)}` passes arguments to `{fn.name}`: only helpers without arguments "
                                 "are evaluated")
        arguments = fn.args
        if arguments.posonlyargs or arguments.args or arguments.kwonlyargs or arguments.vararg or arguments.kwarg:
            raise ConfigsRefused(f"`{fn.name}` takes arguments")
        if fn.name in self.active:
            raise ConfigsRefused(f"`{fn.name}` calls itself")
        body = list(fn.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        local: dict[str, object] = {}
        self.active.add(fn.name)
        try:
            for stmt in body[:-1]:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                        and stmt.targets[0].id not in local):
                    raise ConfigsRefused(f"`{fn.name}` does more than bind names once and return: "
                                         f"`{_short(stmt)}`")
                local[stmt.targets[0].id] = self.eval(stmt.value, local)
            if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
                raise ConfigsRefused(f"`{fn.name}` does not end by returning its configs")
            return self.eval(body[-1].value, local)
        finally:
            self.active.discard(fn.name)

    def _config(self, node: ast.Call, local) -> ConfigValue:
        given: dict[str, ast.expr] = {}
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise ConfigsRefused(f"`{_short(node)}`: *args or **kwargs in triton.Config are not evaluated")
        if len(node.args) > len(CONFIG_POSITIONAL):
            raise ConfigsRefused(f"`{_short(node)}` passes too many arguments")
        for name, arg in zip(CONFIG_POSITIONAL, node.args):
            given[name] = arg
        for keyword in node.keywords:
            if keyword.arg not in CONFIG_POSITIONAL or keyword.arg in given:
                raise ConfigsRefused(f"`{_short(node)}`: triton.Config option `{keyword.arg}` is not understood")
            given[keyword.arg] = keyword.value
        kwargs = self.eval(given.pop("kwargs"), local) if "kwargs" in given else None
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise ConfigsRefused(f"`{_short(node)}`: the config's parameters are not a dict with string keys")
        options: dict[str, object] = {}
        hooks: list[tuple[str, str]] = []
        for name, value in given.items():
            if name in CONFIG_OPAQUE:
                # A hook is a function the autotuner calls; it is named, never evaluated or called here.
                if not (isinstance(value, ast.Name) and value.id not in local
                        or isinstance(value, ast.Constant) and value.value is None):
                    raise ConfigsRefused(f"`{_short(node)}`: {name} is not a plain function name")
                if isinstance(value, ast.Name):
                    hooks.append((name, value.id))
                continue
            option = self.eval(value, local)
            if option is not None and (not isinstance(option, int) or isinstance(option, bool)):
                raise ConfigsRefused(f"`{_short(node)}`: {name} is not an integer")
            options[name] = option
        return ConfigValue(dict(kwargs), options, node, tuple(hooks))


_CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}


def _assign(target: ast.expr, value, scope: dict[str, object]) -> None:
    """Bind a comprehension target (a name or a tuple of them) to ``value``."""
    if isinstance(target, ast.Name):
        scope[target.id] = value
        return
    if isinstance(target, ast.Tuple | ast.List) and not any(isinstance(e, ast.Starred) for e in target.elts):
        if not isinstance(value, list | tuple) or len(value) != len(target.elts):
            raise ConfigsRefused(f"`{_short(target)}` does not unpack `{value!r}`")
        for element, item in zip(target.elts, value):
            _assign(element, item, scope)
        return
    raise ConfigsRefused(f"`{_short(target)}`: only names and tuples of names are bound in a comprehension")


def _check_size(items: list | tuple) -> list | tuple:
    if len(items) > MAX_ITEMS:
        raise ConfigsRefused(f"more than {MAX_ITEMS} items")
    return items


def _hashable(key, node: ast.AST):
    if not isinstance(key, int | float | str | bool | type(None) | tuple):
        raise ConfigsRefused(f"`{_short(node)}` is not a valid dict key")
    return key


def _comparable(left, right, op: ast.cmpop) -> bool:
    """Comparisons of plain values only (never of configs, whose equality Python defines by identity)."""
    plain = (int, float, str, bool, type(None), list, tuple, dict)
    if isinstance(left, ConfigValue) or isinstance(right, ConfigValue):
        return False
    return isinstance(left, plain) and isinstance(right, plain)
