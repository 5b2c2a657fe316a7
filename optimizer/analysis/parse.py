"""From source text to a ``FileAnalysis``: kernels, their calls and loops, and their launches."""

from __future__ import annotations

import ast
import contextlib
import logging
import math
import sys
import threading

from .model import (
    Autotune,
    AutotuneConfig,
    Decorator,
    FileAnalysis,
    HostFunction,
    Kernel,
    LaunchArg,
    LaunchSite,
    Loop,
    Param,
    SyntaxErrorInfo,
    TlCall,
    TritonNames,
    Value,
)
from . import config_eval
from .positions import SourceMap, Span

log = logging.getLogger(__name__)

LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "grid"})
# Calls that make a kernel of a plain def (``f = triton.autotune(...)(triton.jit(f))``); ``jit`` innermost.
JIT_WRAPPERS = frozenset({"jit", "autotune", "heuristics"})
POINTER_BASE_OPS = frozenset({"load", "store", "make_block_ptr", "make_tensor_descriptor"}) | frozenset(
    {"atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg", "atomic_cas"}
)


def _triton_names(tree: ast.AST) -> tuple[TritonNames, bool]:
    """How this file spells ``triton`` and ``triton.language``, and whether it imports triton at all."""
    prefix: dict[str, str] = {}  # local name -> canonical dotted name
    imports_triton = False
    for node in _statements(tree):  # imports are statements: no need to visit expressions
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "triton" or alias.name.startswith("triton."):
                    imports_triton = True
                    if alias.asname:
                        prefix[alias.asname] = alias.name
                    else:
                        prefix["triton"] = "triton"
        elif isinstance(node, ast.ImportFrom) and node.module and (
            node.module == "triton" or node.module.startswith("triton.")
        ):
            imports_triton = True
            for alias in node.names:
                prefix[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return TritonNames(prefix), imports_triton


def const_eval(node: ast.AST | None, env: dict[str, object]) -> Value | tuple | dict:
    """Evaluate a constant expression over known names; None when it is not constant."""
    if node is None:
        return None
    try:
        return _eval(node, env)
    except Exception:  # noqa: BLE001 - anything unevaluable is simply "not constant"
        return None


def _eval(node: ast.AST, env: dict[str, object]):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise KeyError(node.id)
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.Dict):
        return {_eval(k, env): _eval(v, env) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        if isinstance(node.op, ast.Not):
            return not value
        raise ValueError
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        ops = {
            ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
            ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b, ast.Mod: lambda a, b: a % b,
            ast.Pow: lambda a, b: a**b, ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
        }
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError
        return ops[type(node.op)](left, right)
    if isinstance(node, ast.Subscript):
        container = _eval(node.value, env)
        return container[_eval(node.slice, env)]
    if isinstance(node, ast.Attribute) and node.attr == "constexpr":
        raise ValueError
    if isinstance(node, ast.Call):
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
        args = [_eval(a, env) for a in node.args]
        if name == "cdiv" and len(args) == 2:
            return -(-args[0] // args[1])
        if name == "next_power_of_2" and len(args) == 1:
            return 1 if args[0] <= 1 else 1 << (int(args[0]) - 1).bit_length()
        if name in ("min", "max", "int", "abs") and args:
            return {"min": min, "max": max, "int": int, "abs": abs}[name](*args)
        if name == "constexpr" and len(args) == 1:
            return args[0]
        if name == "ceil" and len(args) == 1:
            return math.ceil(args[0])
        raise ValueError
    raise ValueError


def _is_value(v) -> bool:
    return isinstance(v, int | float | bool | str) or v is None


class _Analyzer:
    def __init__(self, text: str, path: str | None):
        self.text = text
        self.path = path
        self.map = SourceMap(text)
        self.jitted: dict[int, tuple[list[ast.Call], list[str], ast.stmt, bool]] = {}  # id(def) -> its jitting call
        self.kernel_defs: set[int] = set()  # id() of the defs that are kernels
        self.factories: dict[str, Kernel] = {}  # module-level function name -> the kernel it returns

    def span(self, node: ast.AST) -> Span:
        return self.map.span(node)

    @staticmethod
    def _deep(walk, *args):
        """``walk(*args)``; a function too deep for the default recursion limit (a 500-term sum is 500
        nested BinOps) is walked again with a higher one (the walkers are pure Python: since 3.11
        that costs no C stack), and ``_TOO_DEEP`` when even that is not enough."""
        try:
            return walk(*args)
        except RecursionError:
            pass
        try:
            with _recursion_limit(DEEP_WALK_LIMIT):
                return walk(*args)
        except RecursionError:
            return _TOO_DEEP

    def src(self, node: ast.AST) -> str:
        return self.map.text_of(node)

    def run(self) -> FileAnalysis:
        tree = ast.parse(self.text, filename=self.path or "<unknown>")
        self.tree, self.config_scope = tree, None  # the scope is built on the first configs that need it
        self.names, self.imports_triton = _triton_names(tree)
        self.constants = self._module_constants(tree)
        self.module_nodes = {
            t.id: stmt.value
            for stmt in tree.body
            if isinstance(stmt, ast.Assign)
            for t in stmt.targets
            if isinstance(t, ast.Name)
        }
        kernels: list[Kernel] = []
        functions: list[tuple[ast.FunctionDef, str | None]] = []
        self._collect_functions(tree, None, functions)
        self.jitted = self._jitted_by_call(tree)
        for fn, parent in functions:
            kernel = self._deep(self._kernel, fn, parent)
            if kernel is _TOO_DEEP:  # one pathological kernel must not hide the others
                log.warning("kernel %s is too deeply nested to analyse; skipped", fn.name)
                continue
            if kernel is not None:
                kernels.append(kernel)
        self.kernel_defs = {id(k.node) for k in kernels}
        self.factories = self._factories(tree, functions, kernels)
        kernel_by_name = {k.name: k for k in kernels}
        for kernel in kernels:  # ``kernel = triton.jit(f)``, ``relu = make_kernel("relu")``
            for alias in kernel.launch_names:
                kernel_by_name.setdefault(alias, kernel)
        launches: list[LaunchSite] = []
        hosts: list[HostFunction] = []
        for fn, found in self._function_launches(functions, kernel_by_name):
            launches.extend(found)
            hosts.append(HostFunction(fn.name, self.span(fn), [a.arg for a in fn.args.args], sorted({l.kernel for l in found})))
        # Launches at module level (scripts that launch directly).
        module_fn = ast.FunctionDef(name="<module>", args=ast.arguments([], [], None, [], [], None, []), body=[
            s for s in tree.body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ], decorator_list=[], lineno=1, col_offset=0)
        for launch in self._launches(module_fn, kernel_by_name):
            launch.host_function = None
            launches.append(launch)
        launches.sort(key=lambda l: l.span.start_offset)
        return FileAnalysis(
            path=self.path,
            text=self.text,
            kernels=kernels,
            launches=launches,
            host_functions=hosts,
            constants={k: v for k, v in self.constants.items() if _is_value(v)},
            imports_triton=self.imports_triton,
            names=self.names,
        )

    # ---- module level -------------------------------------------------------------------
    def _module_constants(self, tree: ast.Module) -> dict[str, object]:
        env: dict[str, object] = {}
        for stmt in tree.body:
            for target, value in _bindings(stmt):
                v = const_eval(value, env) if value is not None else None
                if v is not None and _is_value(v):
                    env[target] = v
                else:
                    env.pop(target, None)
        return env

    def _collect_functions(self, node: ast.AST, parent: str | None, out: list) -> None:
        # Definitions are statements, so only statement lists are walked (expressions cannot hold one).
        for child in _child_statements(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((child, parent))
                self._collect_functions(child, child.name, out)
            else:
                self._collect_functions(child, parent, out)

    # ---- kernels ------------------------------------------------------------------------
    def _decorator_name(self, node: ast.AST) -> str:
        target = node.func if isinstance(node, ast.Call) else node
        return self.names.canonical(target) or self.src(target)

    def _is_kernel_def(self, fn) -> bool:
        return any(self._decorator_name(d) in ("triton.jit", "triton.runtime.jit.jit") for d in fn.decorator_list)

    def _kernel(self, fn: ast.FunctionDef, parent: str | None) -> Kernel | None:
        if isinstance(fn, ast.AsyncFunctionDef):
            return None
        decorated = self._is_kernel_def(fn)
        jitting = None if decorated else self.jitted.get(id(fn))
        if not decorated and jitting is None:
            return None
        decorators: list[Decorator] = []
        jit_kwargs: dict[str, str] = {}
        autotune: Autotune | None = None
        heuristics: dict[str, str] = {}
        # A jitting call's wrappers read as the decorators they stand for, outermost first.
        for dec in fn.decorator_list if jitting is None else jitting[0]:
            canonical = self._decorator_name(dec)
            short = canonical.rsplit(".", 1)[-1]
            kwargs = {k.arg: self.src(k.value) for k in dec.keywords if k.arg} if isinstance(dec, ast.Call) else {}
            decorators.append(Decorator(short if canonical.startswith("triton") else canonical, self.src(dec), self.span(dec), kwargs))
            if short == "jit":
                jit_kwargs = kwargs
            elif short == "autotune" and isinstance(dec, ast.Call):
                autotune = self._autotune(dec)
            elif short == "heuristics" and isinstance(dec, ast.Call):
                mapping = dec.args[0] if dec.args else next((k.value for k in dec.keywords if k.arg == "values"), None)
                if isinstance(mapping, ast.Dict):
                    for key, value in zip(mapping.keys, mapping.values):
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            heuristics[key.value] = self.src(value)
        first = fn.decorator_list[0] if fn.decorator_list and jitting is None else fn
        whole = self.span(fn)
        start = self.span(first)
        span = Span(start.start, whole.end, start.start_offset, whole.end_offset)
        def_start, def_offset = self.map.position(fn.lineno, fn.col_offset)
        def_span = Span(def_start, whole.end, def_offset, whole.end_offset)
        name_span = self._name_span(fn)
        body_span = Span(self.span(fn.body[0]).start, whole.end, self.span(fn.body[0]).start_offset, whole.end_offset)

        local_env = dict(self.constants)
        walker = _BodyWalker(self)
        for stmt in fn.body:
            walker.visit(stmt)
        local_constants: dict[str, Value] = {}
        for name, values in walker.assigned.items():
            if len(values) == 1:
                v = const_eval(values[0], local_env)
                if v is not None and _is_value(v):
                    local_constants[name] = v
        params = self._params(fn, walker.pointer_names())
        return Kernel(
            name=fn.name,
            span=span,
            def_span=def_span,
            name_span=name_span,
            body_span=body_span,
            decorators=decorators,
            jit_kwargs=jit_kwargs,
            autotune=autotune,
            heuristics=heuristics,
            params=params,
            calls=walker.calls,
            loops=walker.loops,
            local_constants=local_constants,
            docstring=ast.get_docstring(fn),
            enclosing_function=parent,
            called_functions=sorted(walker.called),
            node=fn,
            jit_call=self.span(jitting[2]) if jitting is not None else None,
            # Names a function binds are its own: only module-level ones launch it from anywhere.
            launch_names=[name for name in jitting[1] if name != fn.name] if jitting is not None and jitting[3] else [],
        )

    def _wrapper(self, func: ast.AST) -> str | None:
        """"jit", "autotune" or "heuristics" when ``func`` names that triton function."""
        canonical = self.names.canonical(func)
        if canonical is None or not canonical.startswith("triton."):
            return None
        short = canonical.rsplit(".", 1)[-1]
        return short if short in JIT_WRAPPERS else None

    def _unwrap_jit(self, value: ast.AST, kernel: bool = False) -> tuple[str, list[ast.Call]] | None:
        """``triton.autotune(...)(triton.jit(f))`` -> ("f", [the autotune(...) call, the jit call]): the
        def a jitting expression wraps and its wrappers, outermost first; None for anything else. With
        ``kernel``, autotune/heuristics wrappers of a name that is a kernel already (``f = triton.autotune(...)(f)``)."""
        chain: list[ast.Call] = []
        node = value
        while isinstance(node, ast.Call) and len(node.args) == 1 and not isinstance(node.args[0], ast.Starred):
            if isinstance(node.func, ast.Call) and not node.keywords and self._wrapper(node.func.func):
                chain.append(node.func)  # triton.autotune(configs=...)(inner), triton.jit(debug=True)(f)
            elif self._wrapper(node.func) == "jit" and isinstance(node.args[0], ast.Name):
                chain.append(node)  # triton.jit(f), triton.jit(f, do_not_specialize=[...])
            else:
                return None
            node = node.args[0]
        if not chain or not isinstance(node, ast.Name):
            return None
        # jit makes the kernel, so it is innermost; autotune and heuristics wrap a kernel, never a def.
        jits = [self._wrapper(c.func) == "jit" for c in chain]
        if (not kernel and not jits[-1]) or any(jits[:-1]) or (kernel and any(jits)):
            return None
        return node.id, chain

    def _jitted_by_call(self, tree: ast.Module) -> dict[int, tuple[list[ast.Call], list[str], ast.stmt, bool]]:
        """Plain defs jitted by an assignment in their own scope (``f = triton.jit(f)``, ``kernel =
        triton.autotune(...)(triton.jit(f))``): id(def) -> (wrapper calls, the names bound, the statement,
        True at module level)."""
        found: dict[int, tuple[list[ast.Call], list[str], ast.stmt, bool]] = {}
        if "jit" not in self.text:
            return found
        scopes: list[ast.AST] = [tree]
        while scopes:
            scope = scopes.pop()
            defs: dict[str, ast.AST] = {}  # the def each name holds so far in this scope
            made: dict[str, int] = {}  # names a jitting statement bound so far -> id(def)
            for stmt in _scope_statements(scope):
                if isinstance(stmt, _NESTED_DEFS):
                    scopes.append(stmt)
                    defs[stmt.name] = stmt
                    made.pop(stmt.name, None)
                    continue
                targets, value = _assignment(stmt)
                unwrapped = self._unwrap_jit(value) if targets and value is not None else None
                fn = defs.get(unwrapped[0]) if unwrapped else None
                rewrapped = self._unwrap_jit(value, kernel=True) if targets and value is not None and not unwrapped else None
                if isinstance(fn, ast.FunctionDef) and not self._is_kernel_def(fn):
                    entry = found.setdefault(id(fn), (unwrapped[1], [], stmt, scope is tree))
                    entry[1].extend(t for t in targets if t not in entry[1])
                    made.update((t, id(fn)) for t in targets)
                elif rewrapped and targets == [rewrapped[0]] and rewrapped[0] in made:
                    # ``f = triton.jit(f)`` then ``f = triton.autotune(...)(f)``: the name stays one kernel, now
                    # tuned (a new name would leave the untuned kernel launchable too: not read as one).
                    chain, names, first, module_level = found[made[rewrapped[0]]]
                    found[made[rewrapped[0]]] = (rewrapped[1] + chain, names, first, module_level)
                    continue
                for target in targets:  # ``f = triton.jit(f)`` rebinds f: the def is no longer reachable as f
                    defs.pop(target, None)
                    if not (isinstance(fn, ast.FunctionDef) and target in made and made[target] == id(fn)):
                        made.pop(target, None)
        return found

    def _factories(self, tree: ast.Module, functions: list[tuple[ast.FunctionDef, str | None]],
                   kernels: list[Kernel]) -> dict[str, Kernel]:
        """Module-level functions that return one kernel defined inside them (directly or through a nested
        function they call), name -> kernel; module-level names bound to a factory's result become
        launch names of its kernel."""
        by_def = {id(k.node): k for k in kernels}
        top = {stmt.name: stmt for stmt in tree.body if isinstance(stmt, ast.FunctionDef)}
        returned: dict[int, Kernel] = {}  # id(function) -> the kernel it returns
        pending = [fn for fn, _parent in functions if id(fn) not in by_def]
        for _round in range(3):  # a factory may call a factory defined after it
            changed = False
            for fn in reversed(pending):  # inner functions first
                if id(fn) in returned:
                    continue
                kernel = self._returned_kernel(fn, by_def, returned, top)
                if kernel is not None:
                    returned[id(fn)] = kernel
                    changed = True
            if not changed:
                break
        factories = {stmt.name: returned[id(stmt)] for stmt in tree.body if id(stmt) in returned}
        for kernel in kernels:
            kernel.factories = sorted(name for name, k in factories.items() if k is kernel)
        bound: dict[str, int] = {}
        for stmt in _scope_statements(tree):
            for target in _assignment(stmt)[0]:
                bound[target] = bound.get(target, 0) + 1
        for stmt in tree.body:
            targets, value = _assignment(stmt)
            if len(targets) == 1 and bound[targets[0]] == 1 and isinstance(value, ast.Call):
                kernel = factories.get(_plain_name(value.func))
                if kernel is not None and targets[0] not in kernel.launch_names and targets[0] not in factories:
                    kernel.launch_names.append(targets[0])
        return factories

    def _returned_kernel(self, fn: ast.FunctionDef, by_def: dict[int, Kernel], returned: dict[int, Kernel],
                         top: dict[str, ast.FunctionDef]) -> Kernel | None:
        """The one kernel every ``return`` of ``fn`` hands back (a kernel or factory of ``fn``'s own scope, or a
        module-level factory), else None."""
        local: dict[str, ast.AST] = {}
        for stmt in _scope_statements(fn):
            if isinstance(stmt, _NESTED_DEFS):
                local[stmt.name] = stmt
        kernel: Kernel | None = None
        saw_return = False
        for node in _scope_statements(fn):
            if not isinstance(node, ast.Return):
                continue
            saw_return = True
            value = node.value
            found = None
            if isinstance(value, ast.Name) and value.id in local:
                found = by_def.get(id(local[value.id]))
            elif isinstance(value, ast.Name):  # ``k = triton.jit(f); return k``
                found = next((by_def.get(id(d)) for d in local.values()
                              if value.id in self.jitted.get(id(d), ((), ()))[1]), None)
            elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):  # ``return outer()``
                target = local.get(value.func.id, top.get(value.func.id))
                found = returned.get(id(target)) if target is not None else None
            if found is None or (kernel is not None and found is not kernel):
                return None
            kernel = found
        return kernel if saw_return else None

    def _name_span(self, fn: ast.FunctionDef) -> Span:
        start, offset = self.map.position(fn.lineno, fn.col_offset)
        line = self.map.lines[start.line]
        idx = line.find(fn.name, self.map.offset_of(start) - self.map._line_starts[start.line])
        if idx < 0:
            return Span(start, start, offset, offset)
        line_start = self.map._line_starts[start.line]
        s = self.map.position(start.line + 1, len(line[:idx].encode("utf-8")))
        e = self.map.position(start.line + 1, len(line[: idx + len(fn.name)].encode("utf-8")))
        return Span(s[0], e[0], line_start + idx, line_start + idx + len(fn.name))

    def _params(self, fn: ast.FunctionDef, pointer_names: set[str]) -> list[Param]:
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        positional = fn.args.posonlyargs + fn.args.args
        defaults: dict[str, ast.AST] = {}
        for arg, default in zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults):
            defaults[arg.arg] = default
        for arg, default in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
            if default is not None:
                defaults[arg.arg] = default
        params = []
        for index, arg in enumerate(args):
            annotation = self.src(arg.annotation) if arg.annotation is not None else None
            if annotation and "constexpr" in annotation:
                kind = "constexpr"
            elif (annotation and ("pointer" in annotation or "tensor" in annotation.lower())) or arg.arg in pointer_names:
                kind = "pointer"
            else:
                kind = "scalar"
            default = defaults.get(arg.arg)
            value = const_eval(default, self.constants) if default is not None else None
            params.append(
                Param(
                    name=arg.arg,
                    kind=kind,
                    annotation=annotation,
                    default=self.src(default) if default is not None else None,
                    default_value=value if _is_value(value) else None,
                    span=self.span(arg),
                    index=index,
                )
            )
        return params

    def _autotune(self, dec: ast.Call) -> Autotune:
        configs_node = dec.args[0] if dec.args else next((k.value for k in dec.keywords if k.arg == "configs"), None)
        key_node = dec.args[1] if len(dec.args) > 1 else next((k.value for k in dec.keywords if k.arg == "key"), None)
        resolved = configs_node
        if isinstance(configs_node, ast.Name) and configs_node.id in self.module_nodes:
            resolved = self.module_nodes[configs_node.id]
        configs: list[AutotuneConfig] = []
        literal = isinstance(resolved, ast.List | ast.Tuple)
        if literal:
            for element in resolved.elts:
                config = self._config(element)
                if config is None:
                    literal = False
                else:
                    configs.append(config)
        key: list[str] = []
        if isinstance(key_node, ast.List | ast.Tuple):
            key = [e.value for e in key_node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        is_literal = literal and isinstance(configs_node, ast.List | ast.Tuple)
        tune = Autotune(
            configs=configs,
            key=key,
            span=self.span(dec),
            configs_source=self.src(configs_node) if configs_node is not None else "",
            configs_are_literal=is_literal,
            configs_known=is_literal,
            configs_sequence="tuple" if isinstance(configs_node, ast.Tuple) else "list",
        )
        if not is_literal:
            self._evaluate_configs(tune, configs_node)
        return tune

    def _evaluate_configs(self, tune: Autotune, node: ast.AST | None) -> None:
        """Fill ``tune``'s configs from a statically evaluated expression (a comprehension, a name, a helper),
        or say why they stay unknown; what the literal reading found stays when evaluation refuses."""
        if node is None:
            tune.configs_unknown_reason = "the autotune decorator passes no configs"
            return
        if self.config_scope is None:
            self.config_scope = config_eval.module_scope(self.tree, self.names)
        try:
            values, sequence = config_eval.evaluate_configs(node, self.config_scope)
        except config_eval.ConfigsRefused as refused:
            tune.configs_unknown_reason = str(refused)
            return
        except RecursionError:
            tune.configs_unknown_reason = "the configs expression is nested too deeply to evaluate"
            return
        odd = next((f"{k}={v!r}" for value in values for k, v in value.kwargs.items() if not _is_value(v)), None)
        if odd is not None:  # the model keeps plain values only: a config would read as setting less than it does
            tune.configs_unknown_reason = f"a config sets {odd}, not a number, string or None"
            return
        tune.configs = [
            AutotuneConfig(
                kwargs={k: v for k, v in value.kwargs.items() if _is_value(v)},
                num_warps=value.options.get("num_warps"),
                num_stages=value.options.get("num_stages"),
                span=self.span(value.node),
                hooks=dict(value.hooks),
            )
            for value in values
        ]
        tune.configs_known = True
        tune.configs_sequence = sequence

    def _config(self, node: ast.AST) -> AutotuneConfig | None:
        if not isinstance(node, ast.Call) or (self.names.canonical(node.func) or "").rsplit(".", 1)[-1] != "Config":
            return None
        kwargs_node = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "kwargs"), None)
        kwargs = const_eval(kwargs_node, self.constants) if kwargs_node is not None else {}
        if not isinstance(kwargs, dict):
            return None
        options = {k.arg: const_eval(k.value, self.constants) for k in node.keywords if k.arg}
        return AutotuneConfig(
            kwargs={str(k): v for k, v in kwargs.items() if _is_value(v)},
            num_warps=options.get("num_warps") if isinstance(options.get("num_warps"), int) else None,
            num_stages=options.get("num_stages") if isinstance(options.get("num_stages"), int) else None,
            span=self.span(node),
            hooks={k.arg: self.src(k.value) for k in node.keywords if k.arg in config_eval.CONFIG_OPAQUE
                   and not (isinstance(k.value, ast.Constant) and k.value.value is None)},
        )

    def imported_launches(self, tree: ast.Module, kernels: dict[str, Kernel]) -> list[LaunchSite]:
        """Launches in the functions of this (other) file, parsed as ``tree``, of ``kernels`` (keyed by the
        name this file calls them by)."""
        self.names, self.imports_triton = _triton_names(tree)
        self.constants = self._module_constants(tree)
        functions: list[tuple[ast.FunctionDef, str | None]] = []
        self._collect_functions(tree, None, functions)
        launches = [launch for _fn, found in self._function_launches(functions, kernels) for launch in found]
        for launch in launches:
            launch.file = self.path
        return sorted(launches, key=lambda l: l.span.start_offset)

    # ---- launches -----------------------------------------------------------------------
    def _function_launches(self, functions: list[tuple[ast.FunctionDef, str | None]],
                           kernels: dict[str, Kernel]) -> list[tuple[ast.FunctionDef, list[LaunchSite]]]:
        """(function, its launches of ``kernels``) for every function that launches one (kernels skipped)."""
        out = []
        for fn, _parent in functions:
            if id(fn) in self.kernel_defs or (fn.name in kernels and self._is_kernel_def(fn)):
                continue
            if not self._may_launch(fn, kernels):
                continue
            found = self._deep(self._launches, fn, kernels)
            if found is _TOO_DEEP:
                log.warning("function %s is too deeply nested to read its launches; skipped", fn.name)
                continue
            if found:
                out.append((fn, found))
        return out

    def _may_launch(self, fn: ast.FunctionDef, kernels: dict[str, Kernel]) -> bool:
        """False when ``fn``'s text names no kernel, so it holds no launch (and need not be walked)."""
        source = self.map.text_of(fn)
        if not source.isascii():  # identifiers are NFKC-normalised: another spelling may name a kernel
            return True
        return any(name in source for name in kernels) or any(name in source for name in self.factories)

    def _launches(self, fn: ast.FunctionDef, kernels: dict[str, Kernel]) -> list[LaunchSite]:
        sites: list[LaunchSite] = []
        env = dict(self.constants)
        assigned: dict[str, ast.AST] = {}
        events, blocks = _binding_events(fn)
        made = self._factory_results(fn) if self.factories else {}
        for node in _walk_no_nested(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
                continue
            callee = node.func.value
            if isinstance(callee, ast.Call) and _plain_name(callee.func) in WRAPPERS and len(callee.args) == 1:
                kernel = kernels.get(_plain_name(callee.args[0]))  # ``wrap_triton(kernel)[grid](...)``
            elif isinstance(callee, ast.Call):  # ``make_kernel(...)[grid](...)``
                kernel = self.factories.get(_plain_name(callee.func))
            else:
                name = _plain_name(callee)
                kernel = kernels.get(name) or (made.get(name) if isinstance(callee, ast.Name) else None)
            if kernel is None:
                continue
            local_env = dict(env)
            local_nodes = dict(assigned)
            enclosing = _enclosing_blocks(blocks, node.lineno)
            for lineno, target, value, block in events:
                if lineno < node.lineno:
                    # A binding in a branch or loop the launch is not inside may or may not have run before it
                    # (Liger: ``sm_count = 1`` then ``if X.device.type == "cuda": sm_count = ...``): unknown.
                    value = value if block in enclosing else None
                    local_nodes[target] = value
                    v = const_eval(value, local_env) if value is not None else None
                    if v is not None and _is_value(v):
                        local_env[target] = v
                    else:
                        local_env.pop(target, None)
            sites.append(self._launch(node, kernel, fn, local_env, local_nodes))
        return sites

    def _factory_results(self, fn: ast.FunctionDef) -> dict[str, Kernel]:
        """Names ``fn`` binds once, to a factory's result (``kernel = make_kernel("relu")``) -> that kernel."""
        if not isinstance(fn, ast.FunctionDef) or fn.name == "<module>":
            return {}  # module level: those names are the kernels' launch names already
        stores: dict[str, int] = {}
        made: dict[str, Kernel] = {}
        for node in _walk_no_nested(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                stores[node.id] = stores.get(node.id, 0) + 1
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Call):
                kernel = self.factories.get(_plain_name(node.value.func))
                if kernel is not None:
                    made[node.targets[0].id] = kernel
        params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        return {name: k for name, k in made.items() if stores.get(name) == 1 and name not in params}

    def _launch(self, call: ast.Call, kernel: Kernel, fn, env, nodes) -> LaunchSite:
        args: list[LaunchArg] = []
        param_names = {p.name for p in kernel.params}
        after_star = False
        for index, arg in enumerate(call.args):
            # Past a ``*args`` the positions no longer say which parameter an argument binds.
            after_star = after_star or isinstance(arg, ast.Starred)
            param = kernel.params[index].name if index < len(kernel.params) and not after_star else None
            v = const_eval(arg, env)
            args.append(LaunchArg(param, self.src(arg), v if _is_value(v) else None, self.span(arg), False))
        options: dict[str, Value] = {}
        for kw in call.keywords:
            if kw.arg is None:
                args.append(LaunchArg(None, f"**{self.src(kw.value)}", None, self.span(kw), True))
                args += self._spread_args(kw.value, env, nodes, param_names, fn)
                continue
            v = const_eval(kw.value, env)
            v = v if _is_value(v) else None
            if kw.arg in LAUNCH_OPTIONS and kw.arg not in param_names:
                options[kw.arg] = v
            args.append(LaunchArg(kw.arg, self.src(kw.value), v, self.span(kw), True))
        grid_node = call.func.slice
        site = LaunchSite(
            kernel=kernel.name,
            span=self.span(call),
            grid_source=self.src(grid_node),
            grid_span=self.span(grid_node),
            args=[a for a in args if a.param not in LAUNCH_OPTIONS or a.param in param_names],
            num_warps=options.get("num_warps") if isinstance(options.get("num_warps"), int) else None,
            num_stages=options.get("num_stages") if isinstance(options.get("num_stages"), int) else None,
            host_function=fn.name,
            grid_value=None,
        )
        site.grid_value = self._grid_value(grid_node, env, nodes, site.constexpr_values(kernel))
        return site

    def _spread_args(self, value: ast.AST, env, nodes, param_names: set[str], fn) -> list[LaunchArg]:
        """``**config`` where the host binds ``config`` to a literal dict (vLLM's fused MoE) and never changes it: its
        entries, as keyword arguments at the dict's own positions (actions edit them there: ``_common.binding_of``)."""
        bound = nodes.get(value.id) if isinstance(value, ast.Name) else None
        if not isinstance(bound, ast.Dict) or _dict_mutated(fn, value.id):
            return []
        out = []
        for key, item in zip(bound.keys, bound.values):
            if key is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return []  # ``**other`` inside, or a computed key: which parameters it sets is not known
            v = const_eval(item, env)
            if key.value in param_names:
                out.append(LaunchArg(key.value, self.src(item), v if _is_value(v) else None, self.span(item), True))
        return out

    def _grid_value(self, node: ast.AST, env, nodes, meta: dict) -> tuple[int, ...] | None:
        if isinstance(node, ast.Name) and node.id in nodes and node.id not in env:
            node = nodes[node.id]
        if isinstance(node, ast.Lambda):
            if len(node.args.args) != 1:
                return None
            env = {**env, node.args.args[0].arg: meta}
            node = node.body
        value = const_eval(node, env)
        if isinstance(value, int) and not isinstance(value, bool):
            value = (value,)
        if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
            return value
        return None


# Nodes without child nodes that _BodyWalker has no visit_ method for: visiting them does nothing.
_LEAVES = frozenset(
    {ast.Name, ast.Constant}
    | {cls for base in (ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context) for cls in base.__subclasses__()}
)


class _BodyWalker(ast.NodeVisitor):
    """Collects ``tl.*`` calls, loops and simple assignments of a kernel body."""

    def __init__(self, analyzer: _Analyzer):
        self.a = analyzer
        self.calls: list[TlCall] = []
        self.loops: list[Loop] = []
        self.assigned: dict[str, list[ast.AST]] = {}
        self.pointer_exprs: list[ast.AST] = []
        self.scaled: set[str] = set()  # names multiplied, divided or taken modulo: numbers, never pointers
        self.called: set[str] = set()
        self.depth = 0
        self._target: str | None = None

    # Faster dispatch than ast.NodeVisitor's (string building + getattr per node, generator per field):
    # this walk runs over every kernel body on every analysis. Same visiting order and results.
    _methods: dict[type, object] = {}

    def visit(self, node: ast.AST):
        method = self._methods.get(node.__class__)
        if method is None:
            method = getattr(type(self), "visit_" + node.__class__.__name__, None) or type(self).generic_visit
            self._methods[node.__class__] = method
        return method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        for name in node._fields:
            value = getattr(node, name, None)
            if value.__class__ is list:
                for item in value:
                    if item.__class__ not in _LEAVES and isinstance(item, ast.AST):
                        self.visit(item)
            elif value.__class__ not in _LEAVES and isinstance(value, ast.AST) and name != "ctx":
                self.visit(value)

    def pointer_names(self) -> set[str]:
        """Names that reach a load/store address through additions (``ptr + offs``), not products."""
        seen: set[str] = set()
        found: set[str] = set()
        stack = list(self.pointer_exprs)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
                stack += [node.left, node.right]
            elif isinstance(node, ast.Subscript):
                stack.append(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "to", "cast", "multiple_of", "max_contiguous", "advance"
            ):
                stack += [node.func.value, *node.args[:1]]
            elif isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                found.add(node.id)
                stack += self.assigned.get(node.id, [])
        # ``x_ptr + row * 2 * half + half + col``: ``half`` is added to the address but also multiplied, so a size.
        return found - self.scaled

    def visit_BinOp(self, node: ast.BinOp):
        if isinstance(node.op, ast.Mult | ast.Div | ast.FloorDiv | ast.Mod):
            self.scaled.update(side.id for side in (node.left, node.right) if isinstance(side, ast.Name))
        self.generic_visit(node)

    def visit_FunctionDef(self, node):  # nested functions are their own kernels or helpers
        return

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node: ast.Assign):
        targets, value = _assignment(node)
        for t in targets:
            self.assigned.setdefault(t, []).append(value)
        self._target = targets[0] if len(targets) == 1 else None
        self.visit(node.value)
        self._target = None

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if isinstance(node.target, ast.Name) and node.value is not None:
            self.assigned.setdefault(node.target.id, []).append(node.value)
            self._target = node.target.id
            self.visit(node.value)
            self._target = None

    def visit_AugAssign(self, node: ast.AugAssign):
        if isinstance(node.target, ast.Name):
            self.assigned.setdefault(node.target.id, []).append(node.value)
            self._target = node.target.id
        self.visit(node.value)
        self._target = None

    def visit_For(self, node: ast.For):
        kind, iter_args, stages = "for", [], None
        if isinstance(node.iter, ast.Call):
            op = self.a.names.tl_op(node.iter.func)
            if op in ("range", "static_range"):
                kind = f"tl.{op}"
            elif isinstance(node.iter.func, ast.Name) and node.iter.func.id == "range":
                kind = "range"
            iter_args = [self.a.src(x) for x in node.iter.args]
            for kw in node.iter.keywords:
                if kw.arg == "num_stages":
                    v = const_eval(kw.value, self.a.constants)
                    stages = v if isinstance(v, int) else None
        self._loop(node, kind, node.target.id if isinstance(node.target, ast.Name) else None, iter_args, stages)
        self.visit(node.iter)

    def visit_While(self, node: ast.While):
        self._loop(node, "while", None, [self.a.src(node.test)], None)
        self.visit(node.test)

    def _loop(self, node, kind, var, iter_args, stages):
        self.depth += 1
        body_start = self.a.span(node.body[0])
        header_end = body_start.start
        whole = self.a.span(node)
        header = self.a.map.line_span(whole.start.line)
        if header_end.line == whole.start.line:  # one-line loop
            header = Span(whole.start, header_end, whole.start_offset, body_start.start_offset)
        else:
            header = Span(whole.start, header.end, whole.start_offset, header.end_offset)
        self.loops.append(Loop(kind, whole, header, var, iter_args, stages, self.depth))
        for stmt in node.body + node.orelse:
            self.visit(stmt)
        self.depth -= 1

    def visit_Call(self, node: ast.Call):
        op = self.a.names.tl_op(node.func)
        if op is not None:
            call = TlCall(
                op=op,
                qualname=self.a.src(node.func),
                span=self.a.span(node),
                args=[self.a.src(x) for x in node.args],
                kwargs={k.arg: self.a.src(k.value) for k in node.keywords if k.arg},
                loop_depth=self.depth,
                target=self._target,
            )
            self.calls.append(call)
            if op in POINTER_BASE_OPS:
                base = node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg in ("pointer", "base")), None
                )
                if base is not None:
                    self.pointer_exprs.append(base)
        elif isinstance(node.func, ast.Name):
            self.called.add(node.func.id)
        target = self._target
        self._target = None
        self.generic_visit(node)
        self._target = target


# torch.library's launch wrappers (``triton_op`` bodies launch ``wrap_triton(kernel)[grid](...)``; the older name
# was ``capture_triton``): the launch is the kernel's own.
WRAPPERS = frozenset({"wrap_triton", "capture_triton"})


def _plain_name(node: ast.AST) -> str | None:
    """``k`` for ``k`` and ``mod.k``; None for anything else."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def _assignment(stmt: ast.AST) -> tuple[list[str], ast.AST | None]:
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)], stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [stmt.target.id], stmt.value
    return [], None


def _bindings(stmt: ast.AST) -> list[tuple[str, ast.AST | None]]:
    """Each name a statement binds and the expression it gets: ``BT, BK = 64, 32`` binds each name to its element
    (flash-linear-attention sets its block sizes so); a value that cannot be split binds the names to None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple | ast.List):
        names = stmt.targets[0].elts
        values = stmt.value.elts if isinstance(stmt.value, ast.Tuple | ast.List) else None
        if values is not None and len(values) == len(names) and not any(isinstance(v, ast.Starred) for v in values):
            return [(n.id, v) for n, v in zip(names, values) if isinstance(n, ast.Name)]
        return [(n.id, None) for n in names if isinstance(n, ast.Name)]
    targets, value = _assignment(stmt)
    return [(t, value) for t in targets]


def _binding_events(fn: ast.AST) -> tuple[list[tuple[int, str, ast.AST | None, int]], list[tuple[int, int, int, frozenset[int]]]]:
    """Every name ``fn``'s own scope binds, in source order, as (line, name, value or None when unknown, block), and
    every statement as (first line, last line, depth, the blocks that hold it). A block is a statement list; a
    ``with`` body counts as its parent's (it always runs). Augmented assignments, loop targets, ``with ... as`` and
    ``:=`` bind to unknown values."""
    events: list[tuple[int, str, ast.AST | None, int]] = []
    blocks: list[tuple[int, int, int, frozenset[int]]] = []

    def visit(stmts: list, chain: frozenset[int], owner: int, depth: int) -> None:
        chain = chain | {id(stmts)}
        for st in stmts:
            blocks.append((st.lineno, getattr(st, "end_lineno", st.lineno) or st.lineno, depth, chain))
            for target, value in _bindings(st):
                events.append((st.lineno, target, value, owner))
            for target in _unknown_bindings(st):
                events.append((st.lineno, target, None, owner))
            if isinstance(st, _NESTED_DEFS):
                continue
            for name in st._fields:
                value = getattr(st, name, None)
                if value.__class__ is not list or not value:
                    continue
                if isinstance(value[0], ast.stmt):
                    same = isinstance(st, ast.With | ast.AsyncWith) and name == "body"
                    visit(value, chain, owner if same else id(value), depth + 1)
                elif isinstance(value[0], ast.excepthandler | ast.match_case):
                    for clause in value:
                        visit(clause.body, chain, id(clause.body), depth + 1)

    body = fn.body if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module) else []
    visit(body, frozenset(), id(body), 0)
    events.sort(key=lambda e: e[0])
    return events, blocks


def _enclosing_blocks(blocks: list[tuple[int, int, int, frozenset[int]]], line: int) -> frozenset[int]:
    """The blocks holding the innermost statement at ``line``."""
    best = max((b for b in blocks if b[0] <= line <= b[1]), key=lambda b: b[2], default=None)
    return best[3] if best is not None else frozenset()


def _unknown_bindings(stmt: ast.AST) -> list[str]:
    """Names a statement binds to a value the launch model does not follow."""
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.AugAssign):
        targets = [stmt.target]
    elif isinstance(stmt, ast.For | ast.AsyncFor):
        targets = [stmt.target]
    elif isinstance(stmt, ast.With | ast.AsyncWith):
        targets = [item.optional_vars for item in stmt.items if item.optional_vars is not None]
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    # ``:=`` in the statement's own expressions (not in nested statements, which are visited on their own)
    for name in stmt._fields:
        value = getattr(stmt, name, None)
        if isinstance(value, ast.expr):
            names += [n.target.id for n in ast.walk(value) if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name)]
    return names


_BLOCK_TYPES = (ast.stmt, ast.excepthandler, ast.match_case)
_NESTED_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _child_statements(node: ast.AST) -> list[ast.AST]:
    """The statements (and except/case clauses) directly inside ``node``, in source order."""
    out: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if value.__class__ is list and value and isinstance(value[0], _BLOCK_TYPES):
            out.extend(value)
    return out


def _statements(tree: ast.AST):
    """Every statement under ``tree`` (any order), skipping expressions: cheaper than ``ast.walk``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(_child_statements(node))


def _scope_statements(scope: ast.AST):
    """The statements of one scope in source order, nested blocks included; defs and classes are yielded
    but not entered (they are scopes of their own)."""
    stack = list(reversed(_child_statements(scope)))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _NESTED_DEFS):
            stack.extend(reversed(_child_statements(node)))


def _walk_no_nested(fn: ast.AST):
    """``ast.walk`` over a function body without descending into nested function definitions."""
    stack = list(fn.body) if isinstance(fn, ast.FunctionDef) else [fn]
    while stack:
        node = stack.pop()
        yield node
        # Direct field access instead of ast.iter_child_nodes: this runs over every host function.
        for name in node._fields:
            if name == "ctx":
                continue
            value = getattr(node, name, None)
            if value.__class__ is list:
                stack.extend(c for c in value if isinstance(c, ast.AST) and not isinstance(c, _NESTED_DEFS))
            elif isinstance(value, ast.AST) and not isinstance(value, _NESTED_DEFS):
                stack.append(value)


# The recursion limit while walking a file that is too deep for the default one.
DEEP_WALK_LIMIT = 20_000
_TOO_DEEP = object()
_LIMIT_LOCK = threading.Lock()
_raised = [0, 0]  # [walks holding the raised limit, the limit before the first]


@contextlib.contextmanager
def _recursion_limit(limit: int):
    """Raise the (process-wide) recursion limit until the last concurrent walk that needed it ends."""
    with _LIMIT_LOCK:
        if _raised[0] == 0:
            _raised[1] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_raised[1], limit))
        _raised[0] += 1
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            _raised[0] -= 1
            if _raised[0] == 0:
                sys.setrecursionlimit(_raised[1])


def analyze(text: str, path: str | None = None, previous: FileAnalysis | None = None) -> FileAnalysis:
    """Analyse one file. On a syntax error, keep ``previous``'s kernels (marked stale) if given."""
    try:
        try:
            return _Analyzer(text, path).run()
        except RecursionError:  # deep module-level code: the same higher limit as _Analyzer._deep
            with _recursion_limit(DEEP_WALK_LIMIT):
                return _Analyzer(text, path).run()
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        source_map = SourceMap(text)
        lineno = getattr(exc, "lineno", None) or 1
        line_index = min(max(lineno - 1, 0), len(source_map.lines) - 1)
        span = source_map.line_span(line_index)
        message = getattr(exc, "msg", None) or str(exc)
        error = SyntaxErrorInfo(f"syntax error: {message} (line {lineno})", span)
        if previous is not None:
            return FileAnalysis(
                path=path, text=previous.text, kernels=previous.kernels, launches=previous.launches,
                host_functions=previous.host_functions, constants=previous.constants,
                imports_triton=previous.imports_triton, syntax_error=error, stale=True, names=previous.names,
            )
        return FileAnalysis(path, text, [], [], [], {}, False, syntax_error=error)
    except RecursionError:
        span = SourceMap(text).line_span(0)
        error = SyntaxErrorInfo("file too deeply nested to analyse", span)
        return FileAnalysis(path, text, [], [], [], {}, False, syntax_error=error)


def imported_launches(text: str, path: str | None, tree: ast.Module, kernels: dict[str, Kernel]) -> list[LaunchSite]:
    """The launches in another module's ``text`` (already parsed as ``tree``) of ``kernels`` (local name ->
    the kernel it imports)."""
    return _Analyzer(text, path).imported_launches(tree, kernels)


# Methods that change a dict in place: a ``**config`` dict that calls one is not read as its literal
# (here, and in ``actions._common``'s twin over libcst trees).
DICT_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})


def _dict_mutated(fn: ast.AST, name: str) -> bool:
    """Whether ``fn`` changes the dict ``name`` in place (``name["K"] = v``, ``del name["K"]``, ``name.update(...)``)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del) and \
                isinstance(node.value, ast.Name) and node.value.id == name:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == name and \
                node.func.attr in DICT_MUTATORS:
            return True
    return False
