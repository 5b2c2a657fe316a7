"""Argument types for an offline compile: from the harness's inputs, else inferred from use in the kernel.

Without a launch there are no arguments to read types from, so the compile has to assume them.
Assuming every pointer is ``*fp32`` calls correct kernels broken: a cross-entropy kernel that
loads a target from an int64 tensor and adds it to a pointer does not compile with the target as
fp32. Two sources, best first:

- **harness**: ``get_inputs()`` builds the arguments (``torch.randint`` -> int64, ``dtype=`` ...),
  the entry host function passes them (and the buffers it allocates: ``torch.empty(..., dtype=)``,
  ``empty_like(x)``) to the launch; followed statically, no user code runs;
- **use**: a pointer whose loaded value is used as an index (added to another pointer), a mask, or
  in bitwise arithmetic holds integers (``*i64``, ``*i1``, ``*i32``).

Each inferred type comes with its provenance, so a compile failure over an assumed type can say
that the types were assumed instead of blaming the kernel.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..analysis import FileAnalysis, Kernel

TORCH_DTYPES = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "double": "fp64", "int64": "i64", "long": "i64", "int32": "i32", "int": "i32", "int16": "i16", "short": "i16",
    "int8": "i8", "uint8": "u8", "bool": "i1", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5",
}
# Tensor methods that convert: ``x.half()`` -> fp16.
CONVERSION_METHODS = {"float": "fp32", "half": "fp16", "bfloat16": "bf16", "double": "fp64", "long": "i64",
                      "int": "i32", "short": "i16", "bool": "i1", "byte": "u8", "char": "i8"}
DEFAULT_FLOAT = "fp32"
INTEGER_FACTORIES = {"randint": "i64", "arange": None, "randperm": "i64", "multinomial": "i64", "argmax": "i64",
                     "argmin": "i64", "argsort": "i64", "nonzero": "i64", "bincount": "i64", "searchsorted": "i64"}
FLOAT_FACTORIES = {"randn", "rand", "empty", "zeros", "ones", "full", "normal", "randn_like", "rand_like", "tensor",
                   "linspace", "logspace", "eye", "softmax", "log_softmax"}
LIKE_FACTORIES = {"empty_like", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like", "clone"}
SHAPE_PRESERVING_METHODS = {"contiguous", "clone", "cuda", "cpu", "detach", "t", "view", "reshape", "transpose",
                            "permute", "expand", "flatten", "squeeze", "unsqueeze", "requires_grad_", "abs", "exp",
                            "neg", "sigmoid", "relu", "softmax", "mul", "add", "sub", "div"}


@dataclass
class InferredTypes:
    """Per kernel: parameter -> Triton type, and where each came from ("harness" | "use")."""

    types: dict[str, dict[str, str]] = field(default_factory=dict)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    def set(self, kernel: str, param: str, triton_type: str, source: str) -> None:
        if param in self.types.get(kernel, {}) and self.sources[kernel][param] == "harness":
            return  # the harness's type is the real one; use only guesses
        self.types.setdefault(kernel, {})[param] = triton_type
        self.sources.setdefault(kernel, {})[param] = source

    def for_kernel(self, kernel: str) -> tuple[dict[str, str], dict[str, str]]:
        return dict(self.types.get(kernel, {})), dict(self.sources.get(kernel, {}))


def infer_types(analysis: FileAnalysis) -> InferredTypes:
    """Every kernel's parameter types that can be known or inferred (harness first, then use)."""
    inferred = InferredTypes()
    try:
        tree = ast.parse(analysis.text)
    except (SyntaxError, ValueError):
        return inferred
    for kernel in analysis.kernels:
        for param, triton_type in use_types(kernel).items():
            inferred.set(kernel.name, param, triton_type, "use")
    for kernel, param, triton_type in _harness_types(analysis, tree):
        inferred.set(kernel, param, triton_type, "harness")
    return inferred


# -- inferred from use inside the kernel ---------------------------------------------------------

def _is_call_of(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == name)
        or (isinstance(node.func, ast.Name) and node.func.id == name))


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def use_types(kernel: Kernel) -> dict[str, str]:
    """Pointer parameters whose loaded values are used as integers: index ``*i64``, mask ``*i1``, bits ``*i32``;
    and parameters multiplied, divided or taken modulo (no pointer can be) are integer scalars ``i32``."""
    fn = kernel.node
    if fn is None:
        return {}
    pointers = {p.name for p in kernel.params if p.kind != "constexpr"}
    # Names that hold a pointer derived from a parameter: ``p = X + offs``, ``X += row * stride``.
    derived: dict[str, str] = {name: name for name in pointers}
    # Names that hold a value loaded through a parameter's pointer: ``t = tl.load(T + row)``.
    loaded: dict[str, str] = {}
    statements = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    for _ in range(3):  # a short fixpoint: aliases of aliases
        for stmt in statements:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            if value is None:
                continue
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            load = next((n for n in ast.walk(value) if _is_call_of(n, "load")), None)
            if load is not None and load.args:
                root = _pointer_root(load.args[0], derived)
                for name in names:
                    if root is not None and name not in pointers:
                        loaded[name] = root
                continue
            root = _pointer_root(value, derived)
            if root is not None and _is_pointer_arithmetic(value, derived):
                for name in names:
                    derived.setdefault(name, root)
    result: dict[str, str] = {}

    def mark(names: set[str], triton_type: str) -> None:
        for name in names:
            root = loaded.get(name)
            if root is not None and root in pointers and root not in result:
                result[root] = triton_type

    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and any(_is_call_of(node, op) for op in ("load", "store", "atomic_add")):
            pointer_expr = node.args[0] if node.args else None
            if pointer_expr is not None and _names(pointer_expr) & set(derived):
                mark(_index_names(pointer_expr, derived, loaded), "*i64")
            for keyword in node.keywords:
                if keyword.arg == "mask" and isinstance(keyword.value, ast.Name):
                    mark({keyword.value.id}, "*i1")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift,
                                                                   ast.RShift)):
            mark(_names(node), "*i32")
    for stmt in statements:  # ``q = X + t`` where q is later loaded from
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if any(isinstance(t, ast.Name) and t.id in derived for t in targets) and stmt.value is not None:
            mark(_index_names(stmt.value, derived, loaded), "*i64")
    # ``row * 2 * half``, ``offs // half``: a parameter read as a pointer that no pointer can be (only
    # for parameters the analysis took for pointers; real scalars keep their own rules).
    read_as_pointer = {p.name for p in kernel.params if p.kind == "pointer" and not p.annotation}
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Mod)):
            for side in (node.left, node.right):
                if (isinstance(side, ast.Name) and side.id in read_as_pointer and side.id not in result
                        and not _loaded_through(fn, side.id)):
                    result[side.id] = "i32"
    return result


def _loaded_through(fn: ast.FunctionDef, name: str) -> bool:
    """Whether ``name`` appears in the pointer argument of a load/store (then it is, or feeds, a pointer)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and node.args and any(_is_call_of(node, op) for op in ("load", "store")):
            pointer = node.args[0]
            if isinstance(pointer, ast.Name) and pointer.id == name:
                return True
            if isinstance(pointer, ast.BinOp) and isinstance(pointer.op, ast.Add):
                # the leftmost operand of ``P + offs`` is the pointer
                left = pointer
                while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add):
                    left = left.left
                if isinstance(left, ast.Name) and left.id == name:
                    return True
    return False


def _pointer_root(node: ast.AST, derived: dict[str, str]) -> str | None:
    """The parameter a pointer expression starts from: the first term of ``X + a * s + b`` that is one
    (offsets multiply strides; the pointer is added, never multiplied)."""
    terms: list[ast.AST] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.BinOp) and isinstance(current.op, ast.Add):
            stack.extend([current.right, current.left])
        elif isinstance(current, ast.BinOp) and isinstance(current.op, ast.Sub):
            stack.append(current.left)
        else:
            terms.append(current)
    for term in terms:
        if isinstance(term, ast.Name) and term.id in derived:
            return derived[term.id]
        if isinstance(term, ast.Subscript) and isinstance(term.value, ast.Name) and term.value.id in derived:
            return derived[term.value.id]
    return None


def _is_pointer_arithmetic(node: ast.AST, derived: dict[str, str]) -> bool:
    """``X + offs`` / ``X + a * b`` / ``X`` itself: an expression whose value is a pointer."""
    if isinstance(node, ast.Name):
        return node.id in derived
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _is_pointer_arithmetic(node.left, derived) or (
            isinstance(node.op, ast.Add) and _is_pointer_arithmetic(node.right, derived))
    return False


def _index_names(node: ast.AST, derived: dict[str, str], loaded: dict[str, str]) -> set[str]:
    """Loaded values that appear as offsets in a pointer expression (``X + row * s + t``)."""
    if not _is_pointer_arithmetic(node, derived):
        return set()
    return {n for n in _names(node) if n in loaded and n not in derived}


# -- from the harness: get_inputs -> entry -> launch --------------------------------------------

def _dtype_of_expr(node: ast.AST | None) -> str | None:
    """``torch.float16`` / ``torch.int64`` -> Triton element type."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return TORCH_DTYPES.get(node.attr)
    return None


def _tensor_type(node: ast.AST, env: dict[str, str]) -> str | None:
    """The element type of a host expression that builds a tensor, when it can be read off the code."""
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.Subscript):
        return _tensor_type(node.value, env)
    if not isinstance(node, ast.Call):
        if isinstance(node, ast.BinOp):
            return _tensor_type(node.left, env) or _tensor_type(node.right, env)
        return None
    func = node.func
    dtype_node = next((k.value for k in node.keywords if k.arg == "dtype"), None)
    dtype_kw = _dtype_of_expr(dtype_node)
    if dtype_node is not None and dtype_kw is None:
        # ``dtype=x.dtype`` follows x; any other expression is unknown (not the fp32 default)
        if isinstance(dtype_node, ast.Attribute) and dtype_node.attr == "dtype":
            return _tensor_type(dtype_node.value, env)
        return None
    if isinstance(func, ast.Attribute):
        attr = func.attr
        is_torch = isinstance(func.value, ast.Name) and func.value.id == "torch"
        if attr == "to":
            target = next((_dtype_of_expr(a) for a in node.args if _dtype_of_expr(a)), None) or dtype_kw
            return target or _tensor_type(func.value, env)
        if not is_torch and attr in CONVERSION_METHODS and not node.args:
            return CONVERSION_METHODS[attr]
        if is_torch and attr in INTEGER_FACTORIES:
            if dtype_kw:
                return dtype_kw
            if attr == "arange":  # integer bounds give int64, any float bound fp32
                floats = any(isinstance(a, ast.Constant) and isinstance(a.value, float) for a in node.args)
                return DEFAULT_FLOAT if floats else "i64"
            return INTEGER_FACTORIES[attr]
        if is_torch and attr in LIKE_FACTORIES:
            return dtype_kw or (_tensor_type(node.args[0], env) if node.args else None)
        if is_torch and attr in FLOAT_FACTORIES:
            return dtype_kw or DEFAULT_FLOAT
        if is_torch and attr in {"matmul", "mm", "bmm", "exp", "relu", "sigmoid", "tanh", "abs", "neg"} and node.args:
            return _tensor_type(node.args[0], env)
        if not is_torch and attr in {"new_empty", "new_zeros", "new_ones", "new_full"}:
            return dtype_kw or _tensor_type(func.value, env)
        if not is_torch and attr in SHAPE_PRESERVING_METHODS:
            return _tensor_type(func.value, env)
    return None


def _function_env(fn: ast.FunctionDef, env: dict[str, str]) -> dict[str, str]:
    """Element types of the tensors a host function's body assigns (straight-line reading)."""
    env = dict(env)
    for stmt in ast.walk(fn):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                found = _tensor_type(stmt.value, env)
                if found:
                    env[target.id] = found
            elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(stmt.value, (ast.Tuple, ast.List)):
                for t, v in zip(target.elts, stmt.value.elts):
                    found = _tensor_type(v, env) if isinstance(t, ast.Name) else None
                    if found:
                        env[t.id] = found
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            found = _tensor_type(stmt.value, env)
            if found:
                env[stmt.target.id] = found
    return env


def _returned_names(fn: ast.FunctionDef) -> list[ast.AST] | None:
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.List, ast.Tuple)):
            return list(node.value.elts)
    return None


def _harness_types(analysis: FileAnalysis, tree: ast.Module) -> list[tuple[str, str, str]]:
    """(kernel, param, type) for launch arguments whose tensors the harness's code builds."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    # KernelBench: ModelNew.forward(self, *get_inputs()) launches the kernels (ModelNew before Model)
    classes = sorted((n for n in tree.body if isinstance(n, ast.ClassDef)), key=lambda c: c.name != "ModelNew")
    for cls in classes:
        for method in cls.body:
            if isinstance(method, ast.FunctionDef) and method.name not in functions:
                functions[method.name] = method
    get_inputs = functions.get("get_inputs")
    param_types: dict[str, dict[str, str]] = {name: {} for name in functions}
    if get_inputs is not None:
        env = _function_env(get_inputs, {})
        returned = _returned_names(get_inputs) or []
        input_types = [_tensor_type(e, env) for e in returned]
        for name, fn in functions.items():  # every host function called with get_inputs()'s list
            if name.startswith("test_") or name in ("get_inputs", "get_init_inputs", "reference"):
                continue
            params = [a.arg for a in fn.args.args if a.arg != "self"]
            if len(params) >= len(input_types) > 0 or (fn.args.vararg is None and len(params) == len(input_types)):
                param_types[name] = {p: t for p, t in zip(params, input_types) if t}
    # Tests and host functions: tensors built in their own bodies; calls pass types on to callees.
    envs = {name: _function_env(fn, param_types.get(name, {})) for name, fn in functions.items()}
    for _ in range(2):  # host wrappers calling other wrappers: pass argument types down
        for name, fn in functions.items():
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
                callee = functions.get(call.func.id)
                if callee is None or callee is fn:
                    continue
                for param, arg in zip([a.arg for a in callee.args.args if a.arg != "self"], call.args):
                    found = _tensor_type(arg, envs[name])
                    if found:
                        param_types.setdefault(callee.name, {}).setdefault(param, found)
        envs = {name: _function_env(fn, param_types.get(name, {})) for name, fn in functions.items()}
    out: list[tuple[str, str, str]] = []
    for launch in analysis.launches:
        kernel = analysis.kernel(launch.kernel)
        env = envs.get(launch.host_function or "", {})
        if kernel is None or not env:
            continue
        for arg in launch.args:
            param = kernel.param(arg.param) if arg.param else None
            if param is None or param.kind == "constexpr":
                continue
            try:
                node = ast.parse(arg.source.strip(), mode="eval").body
            except SyntaxError:
                continue
            found = _tensor_type(node, env)
            if found and (param.kind == "pointer" or isinstance(node, ast.Name)):
                out.append((kernel.name, param.name, "*" + found))
    return out
