"""Load a KernelBench problem (``Model``, ``get_inputs``, ``get_init_inputs``) and trace it with torch.fx.

Shapes and dtypes come from ``ShapeProp`` over fake tensors: ``get_inputs()`` runs under a
``FakeTensorMode``, so a problem with 6 GB inputs traces in milliseconds and allocates nothing.
The model itself is built for real under a fixed seed (its parameters are what the kernels read).
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

INIT_SEED = 42  # KernelBench builds both models after set_seed(42)


@dataclass
class Problem:
    """One problem file: its text, the loaded module and the names KernelBench expects in it."""

    name: str
    path: Path | None
    text: str
    module: ModuleType

    @property
    def model_class(self):
        return self.module.Model

    def init_inputs(self) -> list:
        fn = getattr(self.module, "get_init_inputs", None)
        return list(fn()) if fn is not None else []


@dataclass
class Traced:
    """A traced problem: the model instance, its fx graph with ``tensor_meta`` on every tensor node."""

    problem: Problem
    model: Any
    graph_module: Any
    input_names: list[str]
    specialized: bool = False  # traced with get_inputs()' shapes as constants (shape_trace.py)


def load_problem(path: str | Path | None = None, text: str | None = None, name: str | None = None) -> Problem:
    """Import a problem file as a fresh module (never registered under its own name)."""
    if text is None:
        text = Path(path).read_text(encoding="utf-8")
    label = name or (Path(path).stem if path else "problem")
    safe = re.sub(r"\W", "_", label)
    module_name = f"_kernelbench_problem_{safe}_{uuid.uuid4().hex[:8]}"
    module = ModuleType(module_name)
    module.__file__ = str(path) if path else f"<{label}>"
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        exec(compile(text, module.__file__, "exec"), module.__dict__)
    finally:
        sys.modules.pop(module_name, None)
    for required in ("Model", "get_inputs"):
        if not hasattr(module, required):
            raise ValueError(f"{label}: not a KernelBench problem (no {required})")
    return Problem(label, Path(path) if path else None, text, module)


def build_model(problem: Problem, seed: int = INIT_SEED):
    """``Model(*get_init_inputs())`` under ``seed``, as KernelBench builds it."""
    import torch

    torch.manual_seed(seed)
    return problem.model_class(*problem.init_inputs())


def fake_inputs(problem: Problem, fake_mode) -> list:
    """``get_inputs()`` evaluated under ``fake_mode``: shapes and dtypes without memory."""
    with fake_mode:
        return list(problem.module.get_inputs())


def trace_problem(problem: Problem) -> Traced:
    """Symbolically trace ``Model.forward`` and propagate shapes over fake inputs.

    The graph is shape-generic where torch.fx can trace it; a forward that slices, loops or branches on
    shapes (or has arguments ``get_inputs()`` leaves to their defaults) is traced again with the shapes of
    ``get_inputs()`` as constants (shape_trace.py), which KernelBench fixes anyway."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.shape_prop import ShapeProp

    from .decompose import decompose
    from .shape_trace import generic_trace, shape_specialized_trace

    model = build_model(problem)
    specialized = False
    try:
        graph_module = generic_trace(model)
        decompose(graph_module)
        fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        inputs = fake_inputs(problem, fake_mode)
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints what it raises
            ShapeProp(graph_module, fake_mode=fake_mode).propagate(*inputs)
    except Exception as generic_error:  # shape-dependent code: trace again with get_inputs()' shapes as constants
        fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        inputs = fake_inputs(problem, fake_mode)
        try:
            graph_module = shape_specialized_trace(model, inputs, fake_mode)
            decompose(graph_module)
            with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
                ShapeProp(graph_module, fake_mode=fake_mode).propagate(*inputs)
        except Exception as specialized_error:
            raise specialized_error from generic_error
        specialized = True
    names = [n.name for n in graph_module.graph.nodes if n.op == "placeholder"]
    return Traced(problem, model, graph_module, names, specialized)


def shrink_sizes(text: str, limit: int = 64) -> str:
    """The problem text with every module-level integer constant above ``limit`` halved until it fits.

    For correctness in the Triton interpreter: equal sizes stay equal (in_features of one layer and
    the width of the input), small ones (kernel sizes, dims, strides) are untouched.
    """
    tree = ast.parse(text)
    replacements: list[tuple[int, int, int, int, str]] = []
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        values = node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) else [node.value]
        for v in values:  # `n = 4096`, `N = 2048 * 2` and `input_shape = (32768,)` alike
            value = _constant_int(v)
            if value is not None and value > limit:
                while value > limit:
                    value = (value + 1) // 2
                replacements.append((v.lineno, v.col_offset, v.end_lineno, v.end_col_offset, str(value)))
    lines = text.splitlines(keepends=True)
    for line, col, end_line, end_col, new in sorted(replacements, reverse=True):
        if line != end_line:
            continue
        row = lines[line - 1]
        lines[line - 1] = row[:col] + new + row[end_col:]
    return "".join(lines)


_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b if b else None, ast.Pow: lambda a, b: a ** b if 0 <= b < 64 else None}


def _constant_int(node) -> int | None:
    """The value of an integer literal or of arithmetic over integer literals (``16384 * 4``), else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _constant_int(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _constant_int(node.left), _constant_int(node.right)
        if left is None or right is None:
            return None
        return _ARITHMETIC[type(node.op)](left, right)
    return None


def input_elements(text: str) -> int:
    """How many elements ``get_inputs()`` of a problem text makes (under fake tensors: nothing is allocated)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    problem = load_problem(text=text, name="size_probe")
    inputs = fake_inputs(problem, FakeTensorMode(allow_non_fake_inputs=True))
    return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))


def shrink_for_interpreter(text: str, max_elements: int = 1 << 17) -> str:
    """Sizes small enough for the Triton interpreter: constants halved to <= 64, then lower while the inputs
    still hold more than ``max_elements`` (a 4-D input at 64 per dim would be 16M elements)."""
    return shrink_inputs(text, max_elements, start=64)


def shrink_inputs(text: str, max_elements: int, start: int = 8192) -> str:
    """Constants halved to <= ``start``, then lower (down to 8) while the inputs hold more than ``max_elements``.

    ``start`` 8192 keeps a GPU problem GPU-sized: the training corpus measures KernelBench's kernels at
    a few million elements instead of its billions, so one verification takes a second, not a minute.
    """
    limit = start
    small = shrink_sizes(text, limit) if input_elements(text) > max_elements else text
    while limit > 8 and input_elements(small) > max_elements:
        limit //= 2
        small = shrink_sizes(text, limit)
    return small
