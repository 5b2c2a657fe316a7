"""Op classes: what each fx node of a traced KernelBench model is, for the lowering.

``classify`` maps a node to an ``OpSpec``: ``pointwise`` (elementwise math over broadcast operands),
``reduce`` (sum/mean/max/min/amax/amin over consecutive dims), ``softmax``/``log_softmax`` (one dim),
``layer_norm`` (the last dims), ``matmul`` (mm/bmm/matmul/linear), ``conv`` (1-3-D, transposed, grouped), ``layout``
(views and shape arithmetic, kept as Python: they compute nothing) or ``torch`` (no Triton lowering
yet; ``reason`` says what). Only floating tensors are lowered.
"""

from __future__ import annotations

import builtins
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Ref:
    """A tensor operand: an fx node's value or a parameter expression such as ``self.fc.weight``."""

    expr: str
    shape: tuple
    node: Any = None  # the fx node when the operand is one
    name: str | None = None  # the host function's parameter name (default: from expr)
    scalar: bool = False  # a Python number the forward receives (get_inputs returns ``s = 3.14``)

    def __hash__(self) -> int:
        return hash(self.expr)

    def __eq__(self, other) -> bool:
        return isinstance(other, Ref) and other.expr == self.expr


@dataclass
class OpSpec:
    """What one node computes; ``operands`` are Refs or Python numbers, in the op's order."""

    node: Any
    kind: str
    op: str
    operands: list = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    reason: str = ""

    @property
    def shape(self) -> tuple:
        return node_shape(self.node)


def node_meta(node):
    return node.meta.get("tensor_meta") if hasattr(node, "meta") else None


def node_shape(node) -> tuple:
    meta = node_meta(node)
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else ()


def node_dtype(node):
    meta = node_meta(node)
    return getattr(meta, "dtype", None)


def is_float_tensor(node) -> bool:
    dtype = node_dtype(node)
    return dtype is not None and dtype.is_floating_point and dtype.itemsize <= 4


# Unary elementwise functions by every spelling fx records: torch.*, F.*, Tensor methods, modules.
_UNARY = ["relu", "sigmoid", "tanh", "exp", "log", "abs", "sqrt", "rsqrt", "sin", "cos", "neg",
          "gelu", "silu", "leaky_relu", "hardtanh", "clamp", "elu", "selu", "softplus", "softsign",
          "hardsigmoid", "hardswish", "mish", "square", "reciprocal", "erf", "log1p", "expm1"]
_MODULE_UNARY = {"ReLU": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "GELU": "gelu", "SiLU": "silu",
                 "LeakyReLU": "leaky_relu", "Hardtanh": "hardtanh", "ELU": "elu", "SELU": "selu",
                 "Softplus": "softplus", "Softsign": "softsign", "Hardsigmoid": "hardsigmoid",
                 "Hardswish": "hardswish", "Mish": "mish", "ReLU6": "relu6"}
_BINARY = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
           operator.pow: "pow", operator.neg: "neg"}
_BINARY_NAMES = {"add", "sub", "mul", "div", "true_divide", "multiply", "subtract", "pow", "maximum",
                 "minimum", "rsub"}
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
_REDUCE_NAMES = {"sum", "mean", "amax", "amin", "max", "min", "logsumexp"}  # and norm (p=2), below
_LAYOUT_METHODS = {"view", "reshape", "flatten", "permute", "transpose", "t", "unsqueeze", "squeeze",
                   "contiguous", "expand", "expand_as", "view_as", "reshape_as", "size", "dim", "chunk",
                   "split", "unbind", "narrow", "select", "numel"}
_LAYOUT_FUNCTIONS = {"reshape", "flatten", "permute", "transpose", "t", "unsqueeze", "squeeze", "chunk",
                     "split", "unbind", "narrow", "select", "tensor", "clone", "detach", "zeros_like", "ones_like",
                     "full_like", "empty_like", "flip", "cat", "stack"}
_LAYOUT_METHODS |= {"clone", "detach", "to", "float", "type_as", "flip"}
_POW_EXPONENTS = {2.0, 3.0, 0.5, 1.0, -1.0, -0.5}
# Default arguments of the functional spellings, by position after the input.
_UNARY_DEFAULTS = {"leaky_relu": [("negative_slope", 0.01)], "hardtanh": [("min_val", -1.0), ("max_val", 1.0)],
                   "clamp": [("min", None), ("max", None)], "elu": [("alpha", 1.0)],
                   "softplus": [("beta", 1.0), ("threshold", 20.0)], "gelu": [("approximate", "none")]}


def _name_of(target) -> str:
    name = getattr(target, "__name__", str(target))
    return name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ref(node) -> Ref:
    return Ref(node.name, node_shape(node), node)


def _operand(value):
    """A Ref for a float tensor node, the number for a constant, None for anything else."""
    if _is_number(value):
        return float(value)
    if hasattr(value, "op") and is_float_tensor(value):
        return _ref(value)
    if hasattr(value, "op") and value.op == "placeholder" and node_meta(value) is None:
        return Ref(value.name, (), value, scalar=True)
    return None


def _unary_attrs(op: str, args: tuple, kwargs: dict) -> dict | None:
    attrs: dict = {}
    for i, (key, default) in enumerate(_UNARY_DEFAULTS.get(op, [])):
        value = args[i] if i < len(args) else kwargs.get(key, kwargs.get(key.split("_")[0], default))
        if key in ("min", "max", "min_val", "max_val", "negative_slope", "alpha", "beta", "threshold"):
            if value is not None and not _is_number(value):
                return None
            value = None if value is None else float(value)
        attrs[key] = value
    if op == "gelu" and attrs.get("approximate") not in ("none", "tanh"):
        return None
    return attrs


def classify(node, graph_module) -> OpSpec:
    """The op class of one fx node."""
    if node.op in ("placeholder", "output", "get_attr"):
        return OpSpec(node, node.op, node.op)
    if node.op == "call_module":
        return _classify_module(node, graph_module.get_submodule(node.target))
    name = _name_of(node.target) if node.op == "call_function" else node.target
    args, kwargs = tuple(node.args), dict(node.kwargs)
    if not args and "input" in kwargs:  # F.linear(input=x, weight=w): the input is the first operand either way
        args = (kwargs.pop("input"),)
    if node.op == "call_function" and node.target is builtins.getattr:
        return OpSpec(node, "layout", "getattr")
    if node.op == "call_function" and node.target is operator.getitem:
        return _classify_getitem(node)
    if name in _COMPARISONS and str(node_dtype(node)) == "torch.bool":
        return _comparison(node, name, args, kwargs)
    if not is_float_tensor(node):
        if node_meta(node) is None or not hasattr(node_meta(node), "shape"):
            return OpSpec(node, "layout", "python")  # shape arithmetic, tuples of views
        return OpSpec(node, "torch", name, reason=f"{name} on {node_dtype(node)} (only float tensors are lowered)")
    if (node.op == "call_method" and name in _LAYOUT_METHODS) or (node.op == "call_function" and name in _LAYOUT_FUNCTIONS):
        return OpSpec(node, "layout", name)
    if node.op == "call_function" and node.target in _BINARY:
        return _pointwise(node, _BINARY[node.target], args, {})
    if name in ("dropout",) and _dropout_is_identity(args, kwargs):
        return OpSpec(node, "layout", "identity")
    if name in _UNARY or name == "relu6":
        return _pointwise(node, name, args, kwargs)
    if name in _BINARY_NAMES:
        return _pointwise(node, name, args, kwargs)
    if name in ("max", "min") and len(args) > 1 and hasattr(args[1], "op"):
        return _pointwise(node, "maximum" if name == "max" else "minimum", args, kwargs)
    if name in _REDUCE_NAMES:
        return _reduce(node, name, args, kwargs)
    if name == "masked_fill":
        return _masked_fill(node, args, kwargs)
    if name == "einsum":
        return _einsum(node, args)
    if name in ("cumsum", "cumprod"):
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if kwargs.get("dtype") is not None:
            return OpSpec(node, "torch", name, reason=f"{name} with a dtype")
        spec = _row(node, name, args[0], dim)
        return OpSpec(node, "scan", name, spec.operands, spec.attrs) if spec.kind == name else spec
    if name in ("softmax", "log_softmax"):
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        return _row(node, name, args[0], dim)
    if name == "layer_norm":
        shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
        weight = args[2] if len(args) > 2 else kwargs.get("weight")
        bias = args[3] if len(args) > 3 else kwargs.get("bias")
        eps = args[4] if len(args) > 4 else kwargs.get("eps", 1e-5)
        refs = [None if w is None else _operand(w) for w in (weight, bias)]
        if any(w is not None and r is None for w, r in zip((weight, bias), refs)) or not _is_number(eps):
            return OpSpec(node, "torch", name, reason="layer_norm with non-tensor weight or eps")
        return _layer_norm(node, args[0], shape, refs[0], refs[1], float(eps))
    if name in ("matmul", "mm", "bmm"):
        return _matmul(node, name, args[0], args[1] if len(args) > 1 else kwargs.get("other", kwargs.get("mat2")))
    if node.op == "call_function" and node.target is operator.matmul:
        return _matmul(node, "matmul", args[0], args[1])
    if name == "linear":
        weight = args[1] if len(args) > 1 else kwargs.get("weight")
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        return _linear(node, args[0], _operand(weight), None if bias is None else _operand(bias), bias is not None)
    if name in ("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"):
        size = args[1] if len(args) > 1 else kwargs.get("output_size")
        return _global_average(node, args[0], size, int(name[-2]))
    if name == "norm":
        p = args[1] if len(args) > 1 else kwargs.get("p", "fro")
        dim = args[2] if len(args) > 2 else kwargs.get("dim")
        keep = args[3] if len(args) > 3 else kwargs.get("keepdim", False)
        if p not in ("fro", 2, 2.0) or kwargs.get("dtype") is not None:
            return OpSpec(node, "torch", name, reason=f"norm with p={p!r}")
        return _reduce(node, "norm", (args[0], dim, keep), {})
    conv = re.fullmatch(r"conv(_transpose)?([123])d", name)
    if conv:
        transposed, dims = conv.group(1) is not None, int(conv.group(2))
        names = (["weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"] if transposed
                 else ["weight", "bias", "stride", "padding", "dilation", "groups"])
        values = dict(zip(names, args[1:]))
        values.update({k: v for k, v in kwargs.items() if k in names})
        return _conv(node, args[0], _operand(values.get("weight")), values.get("bias"), dims, transposed,
                     values.get("stride", 1), values.get("padding", 0), values.get("dilation", 1),
                     values.get("groups", 1), "zeros", values.get("output_padding", 0))
    return OpSpec(node, "torch", name, reason=f"no Triton lowering yet for {name}")


def _dropout_is_identity(args, kwargs) -> bool:
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    return _is_number(p) and float(p) == 0.0


def _classify_getitem(node) -> OpSpec:
    source = node.args[0]
    if hasattr(source, "op") and source.op in ("call_function", "call_method") \
            and _name_of(source.target) in ("max", "min") and node.args[1] == 0 and is_float_tensor(node) \
            and (len(source.args) > 1 or "dim" in source.kwargs):
        # torch.max(x, dim)[0]: the values of a reduction (its indices are not lowered)
        dim = source.args[1] if len(source.args) > 1 else source.kwargs["dim"]
        keep = source.args[2] if len(source.args) > 2 else source.kwargs.get("keepdim", False)
        return _reduce(node, _name_of(source.target), (source.args[0], dim, keep), {})
    return OpSpec(node, "layout", "getitem")


def module_expr(qualified: str) -> str:
    """Python for a submodule or parameter that torch.fx names by its path: ``features.2.weight`` ->
    ``self.features[2].weight`` (an ``nn.Sequential`` or ``ModuleList`` member is indexed, not an attribute)."""
    return "self" + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in qualified.split("."))


def _classify_module(node, module) -> OpSpec:
    kind = type(module).__name__
    args = tuple(node.args)
    target = module_expr(node.target)
    if not is_float_tensor(node):
        if node_dtype(node) is None:  # a tuple (nn.LSTM's output and state), not a tensor
            return OpSpec(node, "torch", kind, reason=f"no Triton lowering yet for nn.{kind}")
        return OpSpec(node, "torch", kind, reason=f"{kind} on {node_dtype(node)}")
    if kind in _MODULE_UNARY:
        op = _MODULE_UNARY[kind]
        attrs = {"leaky_relu": lambda m: {"negative_slope": float(m.negative_slope)},
                 "hardtanh": lambda m: {"min_val": float(m.min_val), "max_val": float(m.max_val)},
                 "elu": lambda m: {"alpha": float(m.alpha)},
                 "softplus": lambda m: {"beta": float(m.beta), "threshold": float(m.threshold)},
                 "gelu": lambda m: {"approximate": m.approximate}}.get(op, lambda m: {})(module)
        if op == "relu6":
            op, attrs = "hardtanh", {"min_val": 0.0, "max_val": 6.0}
        operand = _operand(args[0])
        if operand is None:
            return OpSpec(node, "torch", kind, reason=f"{kind} of a non-float input")
        return OpSpec(node, "pointwise", op, [operand], attrs)
    if kind in ("Softmax", "LogSoftmax"):
        return _row(node, "softmax" if kind == "Softmax" else "log_softmax", args[0], module.dim)
    if kind == "Identity" or (kind == "Dropout" and float(module.p) == 0.0) or kind == "Flatten":
        return OpSpec(node, "layout", kind)
    if kind in ("GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "BatchNorm1d", "BatchNorm2d",
                "BatchNorm3d"):
        return _channel_norm(node, module, kind, target, args[0])
    if kind == "LayerNorm":
        weight = Ref(f"{target}.weight", tuple(module.weight.shape)) if module.weight is not None else None
        bias = Ref(f"{target}.bias", tuple(module.bias.shape)) if getattr(module, "bias", None) is not None else None
        return _layer_norm(node, args[0], module.normalized_shape, weight, bias, float(module.eps))
    if kind == "Linear":
        weight = Ref(f"{target}.weight", tuple(module.weight.shape))
        bias = Ref(f"{target}.bias", tuple(module.bias.shape)) if module.bias is not None else None
        return _linear(node, args[0], weight, bias, module.bias is not None)
    pool = re.fullmatch(r"(Max|Avg|AdaptiveAvg)Pool([123])d", kind)
    if pool:
        return _pool_module(node, module, pool.group(1), int(pool.group(2)), args[0])
    conv = re.fullmatch(r"Conv(Transpose)?([123])d", kind)
    if conv:
        bias = Ref(f"{target}.bias", tuple(module.bias.shape)) if module.bias is not None else None
        if len(args) > 1 or node.kwargs:
            return OpSpec(node, "torch", kind, reason=f"nn.{kind} called with an output size")
        return _conv(node, args[0], Ref(f"{target}.weight", tuple(module.weight.shape)), bias, int(conv.group(2)),
                     conv.group(1) is not None, module.stride, module.padding, module.dilation, module.groups,
                     module.padding_mode, getattr(module, "output_padding", 0))
    return OpSpec(node, "torch", kind, reason=f"no Triton lowering yet for nn.{kind}")


def _pointwise(node, op: str, args: tuple, kwargs: dict) -> OpSpec:
    aliases = {"true_divide": "div", "multiply": "mul", "subtract": "sub"}
    op = aliases.get(op, op)
    if op in ("add", "sub") and _is_number(kwargs.get("alpha", 1)) and kwargs.get("alpha", 1) != 1:
        return OpSpec(node, "torch", op, reason=f"{op} with alpha")
    if op == "rsub":
        op, args = "sub", (args[1], args[0])
    if op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum"):
        second = args[1] if len(args) > 1 else kwargs.get("other", kwargs.get("exponent"))
        operands = [_operand(args[0]), _operand(second)]
        if any(o is None for o in operands) or all(isinstance(o, float) or o.scalar for o in operands):
            return OpSpec(node, "torch", op, reason=f"{op} of operands that are not float tensors or numbers")
        if op == "div" and kwargs.get("rounding_mode") is not None:
            return OpSpec(node, "torch", op, reason="division with a rounding mode")
        if op == "pow" and not (isinstance(operands[0], Ref) and isinstance(operands[1], float)
                                and operands[1] in _POW_EXPONENTS):
            return OpSpec(node, "torch", op, reason="pow other than by 2, 3, 0.5, 1, -1, -0.5")
        if op in ("maximum", "minimum") and not all(isinstance(o, Ref) for o in operands):
            return OpSpec(node, "torch", op, reason=f"{op} of a number")
        return OpSpec(node, "pointwise", op, operands)
    operand = _operand(args[0]) if args else None
    if not isinstance(operand, Ref) or operand.scalar:
        return OpSpec(node, "torch", op, reason=f"{op} of a non-float input")
    if op == "relu6":
        return OpSpec(node, "pointwise", "hardtanh", [operand], {"min_val": 0.0, "max_val": 6.0})
    attrs = _unary_attrs(op, args[1:], kwargs)
    if attrs is None:
        return OpSpec(node, "torch", op, reason=f"{op} with arguments that are not numbers")
    if op == "clamp" and attrs["min"] is None and attrs["max"] is None:
        return OpSpec(node, "torch", op, reason="clamp without bounds")
    return OpSpec(node, "pointwise", op, [operand], attrs)


def _comparison(node, op: str, args: tuple, kwargs: dict) -> OpSpec:
    """``a == b``, ``a > 0`` ... of float tensors and numbers: an elementwise op whose output is boolean."""
    second = args[1] if len(args) > 1 else kwargs.get("other")
    operands = [_operand(args[0]) if args else None, _operand(second)]
    if any(o is None for o in operands) or all(isinstance(o, float) or o.scalar for o in operands):
        return OpSpec(node, "torch", op, reason=f"{op} of operands that are not float tensors or numbers")
    return OpSpec(node, "pointwise", op, operands)


def _masked_fill(node, args: tuple, kwargs: dict) -> OpSpec:
    """``x.masked_fill(mask, value)`` with a boolean mask tensor and a number: elementwise, the mask broadcast."""
    source = _operand(args[0]) if args else None
    mask = args[1] if len(args) > 1 else kwargs.get("mask")
    value = args[2] if len(args) > 2 else kwargs.get("value")
    if not isinstance(source, Ref) or source.scalar or not hasattr(mask, "op") \
            or str(node_dtype(mask)) != "torch.bool" or not _is_number(value):
        return OpSpec(node, "torch", "masked_fill", reason="masked_fill without a boolean mask tensor and a number")
    return OpSpec(node, "pointwise", "masked_fill", [source, _ref(mask)], {"value": float(value)})


def _dims(dim, rank: int) -> list[int] | None:
    if dim is None:
        return list(range(rank))
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    if not all(isinstance(d, int) for d in dims):
        return None
    dims = sorted({d % rank if rank else 0 for d in dims})
    if dims and dims != list(range(dims[0], dims[-1] + 1)):
        return None  # not consecutive: would need a permute first
    return dims


def _reduce(node, op: str, args: tuple, kwargs: dict) -> OpSpec:
    source = args[0]
    operand = _operand(source)
    if not isinstance(operand, Ref):
        return OpSpec(node, "torch", op, reason=f"{op} of a non-float input")
    if kwargs.get("dtype") is not None:
        return OpSpec(node, "torch", op, reason=f"{op} with a dtype")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis"))
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    rank = len(operand.shape)
    dims = _dims(dim, rank)
    if not dims or rank == 0:
        return OpSpec(node, "torch", op, reason=f"{op} over dims {dim} (not consecutive)")
    op = {"amax": "max", "amin": "min"}.get(op, op)
    return OpSpec(node, "reduce", op, [operand], {"dims": dims, "keepdim": bool(keepdim), "rank": rank})


def _row(node, op: str, source, dim) -> OpSpec:
    operand = _operand(source)
    if not isinstance(operand, Ref) or not isinstance(dim, int):
        return OpSpec(node, "torch", op, reason=f"{op} without an integer dim")
    rank = len(operand.shape)
    return OpSpec(node, op, op, [operand], {"dims": [dim % rank], "rank": rank})


def _layer_norm(node, source, shape, weight, bias, eps: float) -> OpSpec:
    operand = _operand(source)
    shape = [shape] if isinstance(shape, int) else list(shape)
    if not isinstance(operand, Ref) or not all(isinstance(s, int) for s in shape):
        return OpSpec(node, "torch", "layer_norm", reason="layer_norm of a non-float input")
    rank = len(operand.shape)
    dims = list(range(rank - len(shape), rank))
    operands = [operand] + [w for w in (weight, bias) if w is not None]
    return OpSpec(node, "layer_norm", "layer_norm", operands,
                  {"dims": dims, "rank": rank, "eps": eps, "weight": weight is not None, "bias": bias is not None,
                   "numel": math.prod(shape)})


def _matmul(node, op: str, a, b) -> OpSpec:
    ra, rb = _operand(a), _operand(b)
    if not isinstance(ra, Ref) or not isinstance(rb, Ref):
        return OpSpec(node, "torch", op, reason=f"{op} of non-float operands")
    la, lb = len(ra.shape), len(rb.shape)
    if (la, lb) == (2, 2):
        case = "2d"
    elif la == 3 and lb == 3:
        case = "batched"
    elif la >= 3 and lb == 2:
        case = "flatten"
    elif la >= 3 and lb >= 3:
        case = "batched_nd"  # attention's (B, heads, T, d) @ (B, heads, d, T): the batch dims broadcast, then flatten
    else:
        return OpSpec(node, "torch", op, reason=f"{op} of rank {la} by rank {lb}")
    return OpSpec(node, "matmul", op, [ra, rb], {"case": case, "transpose_b": False})


def _linear(node, x, weight, bias, has_bias: bool) -> OpSpec:
    rx = _operand(x)
    if not isinstance(rx, Ref) or not isinstance(weight, Ref) or (has_bias and not isinstance(bias, Ref)):
        return OpSpec(node, "torch", "linear", reason="linear of non-float operands")
    if len(weight.shape) != 2 or len(rx.shape) < 2:
        return OpSpec(node, "torch", "linear", reason=f"linear of a rank-{len(rx.shape)} input")
    case = "2d" if len(rx.shape) == 2 else "flatten"
    return OpSpec(node, "matmul", "linear", [rx, weight], {"case": case, "transpose_b": True, "bias": bias})


def _tuple(value, dims: int) -> tuple | None:
    if isinstance(value, int):
        return (value,) * dims
    if isinstance(value, (tuple, list)) and len(value) == dims and all(isinstance(v, int) for v in value):
        return tuple(value)
    if value == "valid":
        return (0,) * dims
    return None


def _conv(node, x, weight, bias, dims: int, transposed: bool, stride, padding, dilation, groups, padding_mode,
          output_padding) -> OpSpec:
    """convNd / conv_transposeNd (N = 1, 2, 3), any stride, padding, dilation and groups: an implicit GEMM."""
    op = f"conv_transpose{dims}d" if transposed else f"conv{dims}d"
    rx = _operand(x)
    bias_ref = bias if isinstance(bias, Ref) else (_operand(bias) if bias is not None else None)
    params = [_tuple(v, dims) for v in (stride, padding, dilation, output_padding)]
    if not isinstance(rx, Ref) or rx.scalar or not isinstance(weight, Ref) or len(rx.shape) != dims + 2:
        return OpSpec(node, "torch", op, reason=f"{op} of an unbatched or non-float input")
    if padding_mode != "zeros" or any(p is None for p in params) or not isinstance(groups, int) \
            or (bias is not None and not isinstance(bias_ref, Ref)):
        return OpSpec(node, "torch", op, reason=f"{op} with string padding or a padding mode")
    return OpSpec(node, "conv", op, [rx, weight], {
        "dims": dims, "transposed": transposed, "stride": params[0], "padding": params[1], "dilation": params[2],
        "output_padding": params[3], "groups": groups, "bias": bias_ref})


def _channel_norm(node, module, kind: str, target: str, source) -> OpSpec:
    """GroupNorm / InstanceNorm (statistics per sample and group) and training-mode BatchNorm (per channel)."""
    operand = _operand(source)
    if not isinstance(operand, Ref) or operand.scalar or len(operand.shape) < 2:
        return OpSpec(node, "torch", kind, reason=f"{kind} of a non-float or 1-D input")
    affine = getattr(module, "affine", True)
    weight = Ref(f"{target}.weight", tuple(module.weight.shape)) if affine and module.weight is not None else None
    bias = Ref(f"{target}.bias", tuple(module.bias.shape)) if affine and module.bias is not None else None
    operands = [operand] + [w for w in (weight, bias) if w is not None]
    attrs = {"eps": float(module.eps), "weight": weight is not None, "bias": bias is not None}
    if kind.startswith("BatchNorm"):
        if not module.training and module.track_running_stats:
            return OpSpec(node, "torch", kind, reason=f"{kind} in eval mode (running statistics)")
        return OpSpec(node, "batch_norm", "batch_norm", operands, attrs)
    if kind.startswith("InstanceNorm"):
        if module.track_running_stats:
            return OpSpec(node, "torch", kind, reason=f"{kind} with running statistics")
        groups = operand.shape[1]
    else:
        groups = module.num_groups
    return OpSpec(node, "group_norm", "instance_norm" if kind.startswith("Instance") else "group_norm", operands,
                  {**attrs, "groups": groups})


def _global_average(node, source, size, dims: int) -> OpSpec:
    """adaptive_avg_pool to size 1: the mean over the spatial dims, kept."""
    sizes = (size,) * dims if isinstance(size, int) else tuple(size) if isinstance(size, (tuple, list)) else None
    if sizes is None or any(s != 1 for s in sizes):
        return OpSpec(node, "torch", f"adaptive_avg_pool{dims}d", reason="adaptive average pooling to a size above 1")
    operand = _operand(source)
    if not isinstance(operand, Ref) or operand.scalar:
        return OpSpec(node, "torch", "adaptive_avg_pool", reason="adaptive pooling of a non-float input")
    rank = len(operand.shape)
    return OpSpec(node, "reduce", "mean", [operand], {"dims": list(range(rank - dims, rank)), "keepdim": True,
                                                      "rank": rank})


def _pool_module(node, module, mode: str, dims: int, source) -> OpSpec:
    """MaxPoolNd / AvgPoolNd (floor mode, no indices) as a window loop per output element."""
    name = f"{mode}Pool{dims}d"
    if mode == "AdaptiveAvg":
        return _global_average(node, source, module.output_size, dims)
    operand = _operand(source)
    if not isinstance(operand, Ref) or operand.scalar or len(operand.shape) != dims + 2:
        return OpSpec(node, "torch", name, reason=f"nn.{name} of an unbatched or non-float input")
    if module.ceil_mode or getattr(module, "return_indices", False) or getattr(module, "divisor_override", None):
        return OpSpec(node, "torch", name, reason=f"nn.{name} with ceil_mode, indices or a divisor override")
    kernel = _tuple(module.kernel_size, dims)
    stride = _tuple(module.stride if module.stride is not None else module.kernel_size, dims)
    padding = _tuple(module.padding, dims)
    dilation = _tuple(getattr(module, "dilation", 1), dims)
    if any(v is None for v in (kernel, stride, padding, dilation)):
        return OpSpec(node, "torch", name, reason=f"nn.{name} with unusual sizes")
    return OpSpec(node, "pool", "max_pool" if mode == "Max" else "avg_pool", [operand], {
        "dims": dims, "kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation,
        "count_include_pad": bool(getattr(module, "count_include_pad", True))})


def _einsum(node, args: tuple) -> OpSpec:
    """The einsum spellings of a matmul: ``...l,lk->...k`` (N-D @ 2-D) and ``bik,bkj->bij`` (batched)."""
    equation = args[0] if args and isinstance(args[0], str) else None
    operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
    if equation is None or len(operands) != 2 or "->" not in equation or "." in equation:
        return OpSpec(node, "torch", "einsum", reason="einsum other than a matmul")
    inputs, out = equation.replace(" ", "").split("->")
    a, b = inputs.split(",")
    if len(b) == 2 and a[-1] == b[0] and out == a[:-1] + b[1] and len(set(a + b[1])) == len(a) + 1:
        return _matmul(node, "einsum", operands[0], operands[1])
    if len(a) == len(b) == len(out) == 3 and a[0] == b[0] == out[0] and a[2] == b[1] and out[1:] == a[1] + b[2]:
        return _matmul(node, "einsum", operands[0], operands[1])
    return OpSpec(node, "torch", "einsum", reason=f"einsum {equation!r} (not a matmul)")
