"""Loading one version of a user's file into a fresh module namespace and calling into it."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import random
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from .names import MAIN_TEST, main_block


class UserCodeError(Exception):
    """An exception raised by user code, with the line in the user's file when known."""

    def __init__(self, stage: str, exc: BaseException, version: "Version | None"):
        self.stage = stage
        self.exc = exc
        self.info = describe_exception(exc, version)
        super().__init__(f"{stage}: {self.info['message']}")


def describe_exception(exc: BaseException, version: "Version | None") -> dict:
    """Type, message, 0-based line in the user's file (when known) and a short traceback."""
    line = None
    if version is not None:
        # The deepest frame in the user's file, following the cause chain: Triton's interpreter
        # re-raises a kernel's NameError as InterpreterError from the launch site.
        seen: set[int] = set()
        link: BaseException | None = exc
        while link is not None and id(link) not in seen:
            seen.add(id(link))
            for frame in traceback.extract_tb(link.__traceback__):
                if frame.filename == str(version.file):
                    line = frame.lineno - 1
            link = link.__cause__ or link.__context__
        kernel_line = _triton_compile_error_line(exc, version.text)
        if kernel_line is not None:
            line = kernel_line
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return {
        "type": type(exc).__name__,
        "message": text[-2000:],
        "line": line,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
    }


def _triton_compile_error_line(exc: BaseException, text: str) -> int | None:
    """Triton's CompilationError counts lines from the kernel's ``def``; map that to the file."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        src, node = getattr(exc, "src", None), getattr(exc, "node", None)
        if isinstance(src, str) and src and hasattr(node, "lineno") and src in text:
            return text[: text.index(src)].count("\n") + node.lineno - 1
        exc = exc.__cause__ or exc.__context__
    return None


# ``torch.library`` functions that register an operator by its ``"namespace::name"`` (first argument), and those
# that attach to one by that string. Two versions of a file that register the same name in one process share
# one operator: the last registration wins, and both versions' wrappers then run the same kernel (wild dev
# ew_add_triton_op, session 15: a kernel computing x - y was verified correct against x + y, max error 0).
# ``define`` and ``impl`` are the older spelling (PyTorch 2.1-2.3): a second ``define`` of one name fails the import.
_OP_REGISTRARS = ("custom_op", "triton_op", "define")
_OP_ATTACHERS = ("register_fake", "register_autograd", "register_kernel", "register_torch_dispatch", "register_vmap",
                 "impl", "impl_abstract")
_OP_NAME = re.compile(r"""["']([A-Za-z_]\w*)::([A-Za-z_]\w*)["']""")
# A ``torch.library.Library("ns", "DEF")`` (or "FRAGMENT", as vLLM's direct_register_custom_op makes) whose
# ``lib.define("add(Tensor x) -> Tensor")`` names the operator in the schema; ``lib.impl("add", fn, "CUDA")`` attaches.
_LIBRARY_NAMESPACE = re.compile(r"""Library\(\s*["']([A-Za-z_]\w*)["']\s*,\s*["'](?:DEF|FRAGMENT)["']""")
_LIBRARY_DEFINE = re.compile(r"""\.define\(\s*["']([A-Za-z_]\w*)\s*[(.]""")


def operator_names(text: str) -> frozenset[str]:
    """The ``"ns::name"`` operators a file may register: spelled so, or defined on a library of its own namespace."""
    names = {f"{ns}::{op}" for ns, op in _OP_NAME.findall(text)}
    names |= {f"{ns}::{op}" for ns in _LIBRARY_NAMESPACE.findall(text) for op in _LIBRARY_DEFINE.findall(text)}
    return frozenset(names)


class Version:
    """One version of the file (``new`` or ``old``) imported under a unique module name."""

    def __init__(self, role: str, text: str, folder: Path, job_id: str):
        self.role = role
        self.text = text
        self.module_name = f"mtmc_verify_{role}_{job_id}"
        self.op_suffix = "_" + re.sub(r"\W", "_", self.module_name)
        self.op_names = operator_names(text)  # the operators it may register
        self.file = folder / f"{self.module_name}.py"
        self.file.write_text(_private_op_calls(text, self.op_names, self.op_suffix), encoding="utf-8")
        self.module: Any = None

    def load(self) -> None:
        """Execute the file as a fresh module (its own globals: nothing shared with other versions), its custom
        operators registered under names of its own (``ns::add`` -> ``ns::add_<version>``)."""
        spec = importlib.util.spec_from_file_location(self.module_name, self.file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module_name] = module  # dataclasses and pickling look modules up here
        try:
            with _private_ops(self.op_names, self.op_suffix):
                spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - any failure of user code is a result
            raise UserCodeError("import", exc, self) from None
        self.module = module

    def unload(self) -> None:
        sys.modules.pop(self.module_name, None)
        self.module = None

    def attr(self, name: str | None) -> Any:
        if name == MAIN_TEST and self.module is not None and not hasattr(self.module, name):
            setattr(self.module, name, self._main_block_test())
        return getattr(self.module, name, None) if name else None

    def _main_block_test(self) -> Callable[[], dict] | None:
        """The file's ``if __name__ == "__main__":`` block as a function of the module (its lines keep their numbers in
        tracebacks) that returns the tensors it binds, by name; timing calls and benchmark reports are left out."""
        block = main_block(ast.parse(self.text))
        if block is None:
            return None
        body = [s for s in block.body if not _benchmarks(s)] or [ast.Pass()]
        bound = ast.parse("return {k: v for k, v in sorted(locals().items()) if isinstance(v, __import__('torch').Tensor)}").body
        fn = ast.FunctionDef(name=MAIN_TEST, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                                  defaults=[]),
                             body=body + bound, decorator_list=[], returns=None, type_params=[])
        for node in bound:
            ast.copy_location(node, body[-1])
        module = ast.Module(body=[ast.copy_location(fn, block)], type_ignores=[])
        ast.fix_missing_locations(module)
        exec(compile(module, str(self.file), "exec"), self.module.__dict__)  # noqa: S102 - the user's own block
        return self.module.__dict__.pop(MAIN_TEST)


@contextlib.contextmanager
def _private_ops(names: frozenset[str], suffix: str):
    """While a version's module runs, ``torch.library`` registers and attaches to the operators the file names
    (``names``) under private ones, ``"ns::add"`` -> ``"ns::add<suffix>"``; torch's own registrations, which
    importing parts of torch from the file can run, keep theirs."""
    import torch.library as library

    saved = {}
    for attr in (*_OP_REGISTRARS, *_OP_ATTACHERS):
        original = getattr(library, attr, None)
        if original is None:
            continue
        saved[attr] = original

        def renamed(name, *args, _original=original, **kwargs):
            return _original(f"{name}{suffix}" if isinstance(name, str) and name in names else name, *args, **kwargs)

        setattr(library, attr, renamed)
    library_methods = {attr: getattr(library.Library, attr) for attr in ("define", "impl")}

    def private(lib, op):
        """``op`` (``"add"`` or ``"add.overload"``) of library ``lib`` under its private name when the file names it."""
        base = op.split("(")[0].split(".")[0]
        return base + suffix + op[len(base):] if f"{getattr(lib, 'ns', '')}::{base}" in names else op

    def define(self, schema, *args, **kwargs):
        return library_methods["define"](self, private(self, schema) if isinstance(schema, str) else schema, *args, **kwargs)

    def impl(self, op_name, *args, **kwargs):
        return library_methods["impl"](self, private(self, op_name) if isinstance(op_name, str) else op_name, *args, **kwargs)

    library.Library.define, library.Library.impl = define, impl
    try:
        yield
    finally:
        for attr, original in saved.items():
            setattr(library, attr, original)
        for attr, original in library_methods.items():
            setattr(library.Library, attr, original)


def _private_op_calls(text: str, names: frozenset[str], suffix: str) -> str:
    """The file with ``torch.ops.ns.add`` written ``torch.ops.ns.add<suffix>`` for each ``"ns::add"`` in ``names`` (the
    host may call its operator through ``torch.ops``); lines keep their numbers."""
    for ns, op in sorted(name.split("::") for name in names):
        text = re.sub(rf"\btorch\.ops\.{ns}\.{op}\b", f"torch.ops.{ns}.{op}{suffix}", text)
    return text


def _benchmarks(statement: ast.stmt) -> bool:
    """A statement that times or reports rather than computes: ``do_bench``, a ``perf_report``'s ``.run(...)``,
    ``print``."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("do_bench", "do_bench_cudagraph", "print") or (
                    name == "run" and any(k.arg in ("show_plots", "print_data", "save_path") for k in node.keywords)):
                return True
    return False


def accepts(fn: Callable, name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (or ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def int_defaults(fn: Callable) -> dict[str, int]:
    """Integer keyword defaults of ``get_inputs`` (the size knobs), excluding ``device``/``seed``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {
        name: p.default
        for name, p in params.items()
        if isinstance(p.default, int) and not isinstance(p.default, bool) and name not in ("device", "seed")
    }


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with ``fn`` applied to each tensor, also inside lists/tuples/dicts; everything else as is."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def to_device(value: Any, device: str) -> Any:
    """Move tensors (also inside lists/tuples/dicts) to ``device``; leave everything else."""
    return map_tensors(value, lambda t: t if t.device.type == torch.device(device).type else t.to(device))


def clone(value: Any) -> Any:
    """A deep copy of the tensors in ``value`` (fresh storage), everything else as is."""
    return map_tensors(value, lambda t: t.detach().clone())


def clone_inputs(value: Any) -> Any:
    """Like ``clone``, but a leaf that requires grad still does (an autograd test's inputs)."""

    def copy_leaf(tensor: torch.Tensor) -> torch.Tensor:
        copy = tensor.detach().clone()
        return copy.requires_grad_(True) if tensor.requires_grad and copy.is_floating_point() else copy

    return map_tensors(value, copy_leaf)


def copy_into(held: Any, fresh: Any) -> bool:
    """Write ``fresh``'s values into ``held``'s tensors in place (same storage); False if shapes differ."""
    if isinstance(held, torch.Tensor) and isinstance(fresh, torch.Tensor):
        if held.shape != fresh.shape or held.dtype != fresh.dtype:
            return False
        with torch.no_grad():
            held.copy_(fresh)
        return True
    if isinstance(held, (list, tuple)) and isinstance(fresh, (list, tuple)) and len(held) == len(fresh):
        return all(copy_into(h, f) for h, f in zip(held, fresh))
    if isinstance(held, dict) and isinstance(fresh, dict) and held.keys() == fresh.keys():
        return all(copy_into(held[k], fresh[k]) for k in held)
    return held == fresh


def shapes(value: Any) -> list:
    """A short description of a list of inputs: shapes and dtypes of tensors, values of the rest."""
    out = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, torch.Tensor):
            out.append(f"{tuple(item.shape)} {str(item.dtype).replace('torch.', '')}")
        else:
            out.append(repr(item)[:40])
    return out
