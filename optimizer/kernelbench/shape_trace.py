"""torch.fx tracing specialized on the concrete input shapes of a KernelBench problem.

Plain ``symbolic_trace`` makes ``x.size()`` a graph value, so code that slices or branches on a shape
(``self.bias[:, :, :T, :T]``, ``for t in range(seq_len)``, ``assert L == H * W``, einops' ``rearrange``)
cannot be traced. KernelBench fixes the shapes in ``get_inputs()``, so this tracer runs every op it
records on fake tensors as it goes and answers shape questions (``size``, ``shape``, ``dim``, ``numel``,
``dtype``, ``len``) with the concrete values: shape arithmetic and shape-dependent control flow fold to
constants, and the graph holds only tensor ops. Other Python values the graph computes (``x.device``,
``x.device != w.device``) stay graph nodes that can still be tested in an ``if``, by their traced value.
Forward arguments that ``get_inputs()`` does not give take their defaults (``h0=None``) as constants.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
from typing import Any

import torch
import torch.fx
from torch.fx.node import map_aggregate

# Questions about a tensor whose answer is fixed by the input shapes and dtypes: answered at trace time.
_SHAPE_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "is_floating_point"}
_SHAPE_ATTRIBUTES = {"shape", "ndim", "dtype"}
_NO_VALUE = object()
_PYTHON_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


class ShapeProxy(torch.fx.Proxy):
    """A proxy that knows the fake value of its node and answers shape questions with it."""

    @property
    def value(self) -> Any:
        return self.node.meta.get("shape_trace_value", _NO_VALUE)

    def _tensor(self) -> torch.Tensor | None:
        value = self.value
        return value if isinstance(value, torch.Tensor) else None

    def size(self, dim: int | None = None):
        tensor = self._tensor()
        if tensor is None:
            return self.tracer.create_proxy("call_method", "size", (self,) if dim is None else (self, dim), {})
        return tensor.size() if dim is None else tensor.size(dim)

    def dim(self):
        tensor = self._tensor()
        return self.tracer.create_proxy("call_method", "dim", (self,), {}) if tensor is None else tensor.dim()

    def numel(self):
        tensor = self._tensor()
        return self.tracer.create_proxy("call_method", "numel", (self,), {}) if tensor is None else tensor.numel()

    @property
    def shape(self):
        tensor = self._tensor()
        return self.tracer.create_proxy("call_function", builtins.getattr, (self, "shape"), {}) \
            if tensor is None else tensor.shape

    @property
    def ndim(self):
        tensor = self._tensor()
        return self.tracer.create_proxy("call_function", builtins.getattr, (self, "ndim"), {}) \
            if tensor is None else tensor.dim()

    @property
    def dtype(self):
        tensor = self._tensor()
        return self.tracer.create_proxy("call_function", builtins.getattr, (self, "dtype"), {}) \
            if tensor is None else tensor.dtype

    def __len__(self) -> int:
        value = self.value
        if isinstance(value, torch.Tensor):
            return value.shape[0]
        if isinstance(value, (tuple, list, torch.Size)):
            return len(value)
        return super().__len__()

    def __iter__(self):
        value = self.value
        if isinstance(value, (tuple, list)) or (isinstance(value, torch.Tensor) and value.dim() > 0):
            return iter([self[i] for i in range(len(self))])
        return super().__iter__()

    def __bool__(self) -> bool:
        value = self.value
        if value is _NO_VALUE or isinstance(value, torch.Tensor):
            return super().__bool__()  # data-dependent control flow: still a TraceError
        return bool(value)  # a device comparison or another Python value fixed by the traced inputs


class ShapeTracer(torch.fx.Tracer):
    """An fx tracer whose proxies carry fake values (see the module docstring)."""

    def __init__(self, fake_mode, placeholder_values: dict[str, Any]):
        super().__init__()
        # a buffer is a graph value too (``self.bias[:, :, :T, :T]``), not a constant folded into the graph
        self.proxy_buffer_attributes = True
        self.fake_mode = fake_mode
        self.placeholder_values = placeholder_values
        self._computing = False

    def proxy(self, node: torch.fx.Node) -> ShapeProxy:
        return ShapeProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        node = proxy.node
        node.meta["shape_trace_value"] = self._value_of(node)
        if self._answers_shape_question(node):
            value = node.meta["shape_trace_value"]
            if not node.users:
                node.graph.erase_node(node)
            return value
        return proxy

    @staticmethod
    def _answers_shape_question(node) -> bool:
        value = node.meta["shape_trace_value"]
        if value is _NO_VALUE or isinstance(value, torch.Tensor):
            return False
        if node.op == "call_method":
            return node.target in _SHAPE_METHODS
        if node.op == "call_function" and node.target is builtins.getattr:
            return node.args[1] in _SHAPE_ATTRIBUTES
        return node.op == "call_function" and node.target is builtins.len

    def _value_of(self, node) -> Any:
        """The node's value over fake tensors (``_NO_VALUE`` when it cannot be computed)."""
        if node.op == "placeholder":
            return self.placeholder_values.get(node.target, _NO_VALUE)
        if node.op == "output":
            return _NO_VALUE
        if node.op == "get_attr":
            return self._attribute(node.target)
        missing = []

        def value(arg):
            if isinstance(arg, torch.fx.Node):
                found = arg.meta.get("shape_trace_value", _NO_VALUE)
                if found is _NO_VALUE:
                    missing.append(arg)
                return found
            return arg

        args, kwargs = map_aggregate(node.args, value), map_aggregate(node.kwargs, value)
        if missing:
            return _NO_VALUE
        self._computing = True
        try:
            with self.fake_mode, torch.no_grad():
                if node.op == "call_function":
                    return node.target(*args, **kwargs)
                if node.op == "call_method":
                    return getattr(args[0], node.target)(*args[1:], **kwargs)
                if node.op == "call_module":
                    return self.root.get_submodule(node.target)(*args, **kwargs)
        finally:
            self._computing = False
        return _NO_VALUE

    def _attribute(self, target: str) -> Any:
        self._computing = True
        try:
            value = self.root
            for atom in target.split("."):
                value = getattr(value, atom)
        finally:
            self._computing = False
        return value

    def create_arg(self, a):
        # torch.ones(T, T, dtype=bool): the graph stores the torch dtype it means
        if isinstance(a, type) and a in _PYTHON_DTYPES:
            return _PYTHON_DTYPES[a]
        return super().create_arg(a)

    def call_module(self, m, forward, args, kwargs):
        if self._computing:  # computing a leaf module's value: run it, record nothing
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        if self._computing:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)


@contextlib.contextmanager
def state_restored(model):
    """The model's attributes as they were before tracing: a forward that assigns ``self.hidden = ...`` leaves a
    proxy there, which the graph module would copy instead of the tensor. What the tracer adds (fx's
    ``_tensor_constant0``) stays."""
    saved = [(m, dict(m.__dict__), dict(m._buffers), dict(m._parameters)) for m in model.modules()]
    try:
        yield
    finally:
        for module, attributes, buffers, parameters in saved:
            for name in [n for n, v in module.__dict__.items() if n not in attributes and isinstance(v, torch.fx.Proxy)]:
                del module.__dict__[name]
            module.__dict__.update(attributes)
            module._buffers.update(buffers)
            module._parameters.update(parameters)


def generic_trace(model: torch.nn.Module) -> torch.fx.GraphModule:
    """``torch.fx.symbolic_trace``, with the model's attributes kept as they were before tracing."""
    tracer = torch.fx.Tracer()
    with state_restored(model):
        graph = tracer.trace(model)
    return torch.fx.GraphModule(tracer.root, graph, type(model).__name__)


def shape_specialized_trace(model: torch.nn.Module, inputs: list, fake_mode) -> torch.fx.GraphModule:
    """Trace ``model.forward`` on ``inputs`` (fake tensors of ``fake_mode``), shapes folded to constants."""
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    given = dict(zip((p.name for p in params), inputs))
    # fx names the placeholder of a constant argument NAME_1
    defaults = {p.name: p.default for p in params[len(inputs):] if p.default is not inspect.Parameter.empty}
    values = {**given, **{f"{name}_1": default for name, default in defaults.items()}}
    tracer = ShapeTracer(fake_mode, values)
    with _einops_sees_proxies(), state_restored(model):
        graph = tracer.trace(model, concrete_args=defaults or None)
    for node in graph.nodes:
        node.meta.pop("shape_trace_value", None)
    return torch.fx.GraphModule(tracer.root, graph, type(model).__name__)


def _einops_sees_proxies():
    """einops' torch backend for ``ShapeProxy`` too, while tracing: ``rearrange`` then records views and permutes
    (einops needs concrete shapes, which the proxies give). Nothing is needed when einops is not installed."""
    try:
        from einops import _backends
    except ImportError:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def patched():
        _backends._type2backend[ShapeProxy] = _backends.TorchBackend()
        try:
            yield
        finally:
            _backends._type2backend.pop(ShapeProxy, None)

    return patched()

