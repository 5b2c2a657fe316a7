"""The compile worker: runs in its own process, imports only the standard library and triton.

Reads one JSON request on stdin: ``{"modules": [path, ...], "jobs": [{"module": index, "kernel",
"signature", "constexprs", "constexpr_exprs", "heuristics", "arch", "options"}]}`` and prints one
JSON line per job as it finishes, so a parent that times out or cancels still gets the results of
the jobs that completed. One process serves a whole file: triton is imported once.

Each module keeps the user's line numbers (see ``module_builder``), so every
line this worker reports is a line of the user's file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import time
import traceback

PTXAS_PATTERNS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
}
RESOURCE_PATTERN = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def _load_module(path: str, index: int):
    name = f"mtmc_compile_unit_{index}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _file_line(exc: BaseException, path: str) -> tuple[int | None, int | None]:
    """The line of the user's file where ``exc`` points: triton's AST node, else the traceback."""
    line = col = None
    seen = set()
    current = exc
    while current is not None and id(current) not in seen:  # innermost CompilationError wins
        seen.add(id(current))
        node = getattr(current, "node", None)
        src = getattr(current, "src", None)
        if node is not None and getattr(node, "lineno", None) is not None and src:
            start = _def_line_of_source(src)
            if start is not None:
                line, col = start + node.lineno - 1, getattr(node, "col_offset", None)
        current = current.__cause__ or current.__context__
    if line is None:
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if os.path.abspath(frame.filename) == os.path.abspath(path):
                return frame.lineno, None
        if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) == os.path.abspath(path):
            return exc.lineno, exc.offset
    return line, col


_JIT_FUNCTIONS: list = []


def _message(exc: BaseException) -> str:
    """The innermost compiler message ("input and other must have equal ranks >= 2"), not the source excerpt."""
    chain, seen, current = [], set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    for error in reversed(chain):
        message = getattr(error, "error_message", None)
        if message:
            return f"{type(error).__name__}: {str(message).strip()}"
    root = chain[-1]
    lines = [l for l in str(root).strip().splitlines() if l.strip() and l.strip() != "^"]
    return f"{type(root).__name__}: {lines[-1].strip() if lines else ''}".rstrip(": ")


def _def_line_of_source(src: str) -> int | None:
    for fn in _JIT_FUNCTIONS:
        if getattr(fn, "src", None) == src or getattr(fn, "_src", None) == src:
            return _def_line(fn)
    return None


def _def_line(fn) -> int | None:
    """The file line of ``def``: triton 3.9's ``def_file_line_number``; 3.6 has only the first decorator's line."""
    line = getattr(fn, "def_file_line_number", None)
    if line is None and getattr(fn, "starting_line_number", None) is not None:
        raw = getattr(fn, "raw_src", None) or []
        line = fn.starting_line_number + next((i for i, text in enumerate(raw) if text.strip().startswith("def ")), 0)
    return line


def _resource_usage(cubin: bytes) -> dict:
    """REG/STACK/SHARED/LOCAL from cuobjdump, shipped in triton's backends/nvidia/bin."""
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as handle:
        handle.write(cubin)
    try:
        out = subprocess.run([tool, "--dump-resource-usage", handle.name], capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(handle.name)
    match = RESOURCE_PATTERN.search(out.stdout)
    if not match:
        return {}
    reg, stack, shared, local = (int(g) for g in match.groups())
    return {"registers": reg, "stack_bytes": stack, "static_shared": shared, "local_bytes": local}


_REACHABLE_PACKAGES = ("triton.language", "math")


def _attribute_chains(tree):
    """(root name, [attr, ...]) for every outermost attribute chain that starts at a name."""
    import ast

    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            attrs, current = [], node
            while isinstance(current, ast.Attribute):
                attrs.append(current.attr)
                current = current.value
            if isinstance(current, ast.Name):
                yield current.id, list(reversed(attrs))


def unsafe_module_reach(module) -> str | None:
    """Why a jit body may not be compiled: it reaches a module outside triton.language and math.

    Triton's code generator resolves ``a.b.c`` in a kernel with getattr and calls what it finds,
    so ``triton.compiler.os.system(...)`` in a kernel body would run at compile time.
    """
    import ast
    import types as pytypes

    from triton.runtime.jit import JITFunction

    for fn in [v for v in vars(module).values() if isinstance(v, JITFunction)]:
        try:
            tree = ast.parse(fn.src if hasattr(fn, "src") else fn._src)
        except (SyntaxError, AttributeError, TypeError):
            return f"the source of {getattr(fn, '__name__', 'a jit function')} cannot be read"
        for root, attrs in _attribute_chains(tree):
            value = vars(module).get(root)
            if not isinstance(value, pytypes.ModuleType):
                continue
            for attr in attrs:
                name = getattr(value, "__name__", "")
                if isinstance(value, pytypes.ModuleType) and not (
                        name.startswith(_REACHABLE_PACKAGES) or (name == "triton" and value is vars(module).get(root))):
                    return f"{root}.{'.'.join(attrs)} reaches the module {name}"
                value = getattr(value, attr, None)
                if value is None:
                    break
            if isinstance(value, pytypes.ModuleType) and not value.__name__.startswith(_REACHABLE_PACKAGES):
                return f"{root}.{'.'.join(attrs)} is the module {value.__name__}"
    return None


def _data_problem(value) -> str | None:
    """Why ``value`` is not data (literals, tuples of them, Triton dtypes, a tl.constexpr of those); None if it is."""
    import triton.language as tl

    while isinstance(value, tl.constexpr):
        value = value.value
    if value is None or isinstance(value, (bool, int, float, str, tl.dtype)):
        return None
    if isinstance(value, (tuple, list)):
        return next((problem for problem in map(_data_problem, value) if problem), None)
    shown = getattr(value, "__qualname__", None) or type(value).__name__
    return f"{'a callable' if callable(value) else 'an object'} ({shown})"


def unsafe_global_value(module) -> str | None:
    """Why a jit body may not be compiled: a global it reads is neither data nor Triton's own.

    Triton's code generator calls whatever a global ``tl.constexpr`` holds, so a constexpr wrapping a
    builtin (``E = tl.constexpr(...exec...)``, then ``E(...)`` in the body) would run at compile time;
    the static rule (``static_safety.check_value``) refuses such values, this refuses them again
    after the import, by what they are.
    """
    import ast
    import types as pytypes

    from triton.runtime.jit import JITFunction

    namespace = vars(module)
    for fn in [v for v in namespace.values() if isinstance(v, JITFunction)]:
        try:
            tree = ast.parse(fn.src if hasattr(fn, "src") else fn._src)
        except (SyntaxError, AttributeError, TypeError):
            return f"the source of {getattr(fn, '__name__', 'a jit function')} cannot be read"
        for name in sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}):
            if name not in namespace:
                continue
            value = namespace[name]
            if isinstance(value, (pytypes.ModuleType, JITFunction)):
                continue  # modules: unsafe_module_reach
            in_triton_language = (getattr(value, "__module__", None) or "").startswith("triton.language")
            if isinstance(value, (type, pytypes.FunctionType)) and in_triton_language:
                continue  # triton.language's own functions and classes (not instances: a tl.constexpr is one)
            problem = _data_problem(value)
            if problem is not None:
                return (f"the global {name} that {fn.__name__} reads is {problem}: compile diagnostics take "
                        "module-level values as data only (literals, tuples, Triton dtypes)")
    return None


class _UnknownArgument(Exception):
    """A heuristics lambda asked for an argument whose value is only known at launch time."""


class _KnownArgs(dict):
    """The ``args`` a heuristics lambda sees: the constexprs we know; anything else is a runtime value."""

    def __getitem__(self, key):
        if key not in self:
            raise _UnknownArgument(key)
        return dict.__getitem__(self, key)


def _compile(module, job: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(module, job["kernel"], None)
    if fn is None:
        return {"status": "error", "error": f"kernel {job['kernel']} is not defined at module level", "line": None}
    from triton.runtime.jit import JITFunction

    # Unwrap leftover @autotune/@heuristics wrappers down to the JITFunction (by type: an
    # attribute test such as def_file_line_number exists only in some triton versions, and
    # unwrapping a JITFunction to its Python function breaks ASTSource).
    while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
        fn = fn.fn
    constexprs = dict(job["constexprs"])
    for name, expression in job.get("constexpr_exprs", {}).items():
        constexprs[name] = eval(expression, vars(module))  # noqa: S307 - data by static_safety, checked below
    for name, source in job.get("heuristics", {}).items():
        try:
            constexprs[name] = eval(source, vars(module))(_KnownArgs(constexprs))  # noqa: S307
        except _UnknownArgument as missing:
            return {"status": "skipped", "error": f"{name} is set by @triton.heuristics from the runtime value of "
                    f"{missing.args[0]}; pass {name} in the constexprs to compile this config"}
    for name, value in constexprs.items():  # Triton calls a callable constexpr that the body calls
        problem = _data_problem(value)
        if problem is not None:
            return {"status": "skipped", "error": f"the constexpr {name} is {problem}: compile diagnostics take "
                    "constexpr values as data only"}
    # What the runtime specializes for every torch tensor: 16-byte aligned pointers ("tt.divisibility").
    names = list(job["signature"])
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in job.get("aligned", []) if name in names}
    source = ASTSource(fn, job["signature"], constexprs, attrs)
    target = GPUTarget("cuda", job["arch"], 32)
    log = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(source, target=target, options=job["options"])
    elapsed = time.perf_counter() - start
    result = {
        "status": "ok",
        "compile_s": round(elapsed, 3),
        "shared_bytes": int(getattr(compiled.metadata, "shared", 0) or 0),
        "ptx_bytes": len(compiled.asm.get("ptx", "") or ""),
        "cubin_bytes": len(compiled.asm.get("cubin", b"") or b""),
        "ptxas_log": log.getvalue()[-4000:],
    }
    text = log.getvalue()
    for key, pattern in PTXAS_PATTERNS.items():
        match = pattern.search(text)
        if match:
            result[key] = int(match.group(1))
    usage = _resource_usage(compiled.asm["cubin"]) if "cubin" in compiled.asm else {}
    for key, value in usage.items():
        result.setdefault(key, value)
    return result


def _load(path: str, index: int, loaded: dict) -> tuple[object | None, dict | None]:
    """The module at ``path`` (loaded once), or the error result every job on it gets."""
    if path not in loaded:
        try:
            module = _load_module(path, index)
        except BaseException as exc:  # noqa: BLE001 - any failure of user module code is a report, not a crash
            line, col = _file_line(exc, path)
            loaded[path] = (None, {"status": "error", "error": f"the kernel's module does not load: "
                                   f"{type(exc).__name__}: {exc}", "line": line, "col": col})
        else:
            reach = unsafe_module_reach(module)
            if reach is not None:
                reach = (f"{reach}, which a kernel compiled by compile diagnostics may not reach "
                         "(only triton.language and math)")
            refusal = reach or unsafe_global_value(module)
            if refusal is not None:
                loaded[path] = (None, {"status": "skipped", "error": refusal})
                return loaded[path]
            try:
                from triton.runtime.jit import JITFunction

                _JIT_FUNCTIONS.extend(v for v in vars(module).values() if isinstance(v, JITFunction))
            except Exception:  # noqa: BLE001
                pass
            loaded[path] = (module, None)
    return loaded[path]


def main() -> int:
    request = json.loads(sys.stdin.read())
    modules = request["modules"]
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ["TRITON_ALLOW_NON_CONSTEXPR_GLOBALS"] = "0"  # a kernel reads only what unsafe_global_value allows
    loaded: dict = {}
    for job in request["jobs"]:
        path = modules[job["module"]]
        module, failure = _load(path, job["module"], loaded)
        if failure is not None:
            result = failure
        else:
            try:
                result = _compile(module, job)
            except BaseException as exc:  # noqa: BLE001
                line, col = _file_line(exc, path)
                result = {"status": "error", "error": _message(exc), "line": line, "col": col,
                          "detail": str(exc)[-3000:]}
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
