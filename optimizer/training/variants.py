"""Synthetic variants of development files: the same kernels at other shapes and precisions.

The policy must learn decisions that depend on the problem (a tile that pays at 8192 rows may not at
2048; bf16 and fp16 differ in what the tensor cores and the tolerance allow), but the development
corpus holds one shape per kernel. A variant copies a file and changes only its harness: the integer
defaults of ``get_inputs`` (and the module-level sizes they name, KernelBench style) scaled by a
factor, or the half-precision input dtype swapped (fp16 <-> bf16) inside ``get_inputs``. The kernels
and launches are untouched, so every variant is code a user could have written. Variants of
held-out files are refused.

    scale_inputs(source, 0.25)   # def get_inputs(device="cuda", n: int = 1 << 20) -> n: int = 262144
    swap_half_dtype(source)      # torch.float16 -> torch.bfloat16 in get_inputs only
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import libcst as cst

from .dataset import refuse_heldout

# Sizes below this are counts (heads, kernel widths, a batch of 2) that kernels often assume; they stay.
MIN_SCALED = 64
HALF_SWAP = {"float16": "bfloat16", "bfloat16": "float16", "half": "bfloat16"}


@dataclass(frozen=True)
class Variant:
    """One synthetic file: where it came from, what changed, and its text."""

    origin: str
    tag: str
    text: str


def _int_value(node: cst.BaseExpression, env: dict[str, int]) -> int | None:
    """The value of an integer literal, ``1 << k``, ``a * b`` or a module-level int name; else None."""
    try:
        if isinstance(node, cst.Integer):
            return int(node.evaluated_value)
        if isinstance(node, cst.Name):
            return env.get(node.value)
        if isinstance(node, cst.BinaryOperation):
            left, right = _int_value(node.left, env), _int_value(node.right, env)
            if left is None or right is None:
                return None
            if isinstance(node.operator, cst.LeftShift) and 0 <= right < 64:
                return left << right
            if isinstance(node.operator, cst.Multiply):
                return left * right
    except (ValueError, TypeError):
        return None
    return None


def _scaled(value: int, factor: float) -> int:
    # A multiple of 16 stays one (tl.dot and vector widths often assume it); at least MIN_SCALED / 4.
    new = max(int(round(value * factor)), MIN_SCALED // 4)
    if value % 16 == 0:
        new = max(16, int(round(new / 16)) * 16)
    return new


class _ScaleInputs(cst.CSTTransformer):
    """Scale ``get_inputs``'s integer defaults and the module-level ints those defaults name."""

    def __init__(self, factor: float, module_ints: dict[str, int]):
        self.factor = factor
        self.module_ints = module_ints
        self.named: set[str] = set()  # module-level names used as get_inputs defaults
        self.changed = 0

    def _new_int(self, value: int) -> cst.Integer:
        self.changed += 1
        return cst.Integer(str(_scaled(value, self.factor)))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if original.name.value != "get_inputs":
            return updated
        params = []
        for param in updated.params.params:
            default = param.default
            if default is not None:
                if isinstance(default, cst.Name) and default.value in self.module_ints:
                    self.named.add(default.value)
                else:
                    value = _int_value(default, {})
                    if value is not None and value >= MIN_SCALED:
                        param = param.with_changes(default=self._new_int(value))
            params.append(param)
        return updated.with_changes(params=updated.params.with_changes(params=params))


class _ScaleModuleInts(cst.CSTTransformer):
    """Second pass: scale the module-level assignments of the names ``get_inputs`` defaults to."""

    def __init__(self, factor: float, names: set[str], module_ints: dict[str, int]):
        self.factor, self.names, self.module_ints = factor, names, module_ints
        self.changed = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # module level only

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if len(updated.targets) != 1 or not isinstance(updated.targets[0].target, cst.Name):
            return updated
        name = updated.targets[0].target.value
        value = self.module_ints.get(name)
        if name not in self.names or value is None or value < MIN_SCALED:
            return updated
        self.changed += 1
        return updated.with_changes(value=cst.Integer(str(_scaled(value, self.factor))))


def _module_ints(module: cst.Module) -> dict[str, int]:
    env: dict[str, int] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                value = _int_value(small.value, env)
                if value is not None:
                    env[small.targets[0].target.value] = value
    return env


def scale_inputs(source: str, factor: float) -> str | None:
    """``source`` with the harness's sizes scaled by ``factor``; None when there is nothing to scale."""
    module = cst.parse_module(source)
    env = _module_ints(module)
    first = _ScaleInputs(factor, env)
    module = module.visit(first)
    second = _ScaleModuleInts(factor, first.named, env)
    module = module.visit(second)
    return module.code if first.changed + second.changed else None


class _SwapHalf(cst.CSTTransformer):
    """Inside ``get_inputs``: ``torch.float16`` <-> ``torch.bfloat16`` (``torch.half`` -> bf16)."""

    def __init__(self):
        self.inside = 0
        self.changed = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node.name.value == "get_inputs":
            self.inside += 1
        return True

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if original.name.value == "get_inputs":
            self.inside -= 1
        return updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if (self.inside and isinstance(updated.value, cst.Name) and updated.value.value == "torch"
                and updated.attr.value in HALF_SWAP):
            self.changed += 1
            return updated.with_changes(attr=cst.Name(HALF_SWAP[updated.attr.value]))
        return updated


def swap_half_dtype(source: str) -> str | None:
    """``source`` with its half-precision inputs in the other half type; None without half inputs."""
    transformer = _SwapHalf()
    code = cst.parse_module(source).visit(transformer).code
    return code if transformer.changed else None


def variants_of(path: str | Path, scales: Iterable[float] = (0.25,), swap_half: bool = True) -> list[Variant]:
    """The synthetic variants of one development file (none for a file without a ``get_inputs``)."""
    refuse_heldout(path)
    source = Path(path).read_text(encoding="utf-8")
    found: list[Variant] = []
    for factor in scales:
        text = scale_inputs(source, factor)
        if text is not None:
            found.append(Variant(str(path), f"shape_x{factor:g}", text))
    if swap_half:
        text = swap_half_dtype(source)
        if text is not None:
            found.append(Variant(str(path), "dtype_swap", text))
    return found


def write_variants(files: Iterable[str | Path], out: str | Path, scales: Iterable[float] = (0.25,),
                   swap_half: bool = True) -> list[Path]:
    """Write every variant of ``files`` into ``out`` as ``<stem>__<tag>.py`` with a provenance line."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for file in files:
        for variant in variants_of(file, tuple(scales), swap_half):
            target = folder / f"{Path(file).stem}__{variant.tag}.py"
            header = f"# Synthetic variant ({variant.tag}) of {variant.origin}: only the harness's inputs differ.\n"
            target.write_text(header + variant.text, encoding="utf-8")
            written.append(target)
    return written
