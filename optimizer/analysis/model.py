"""The model of a Triton file that every check, action, verifier and policy reads."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Union

from .positions import Position, Span

Value = Union[int, float, bool, str, None]

MEMORY_OPS = frozenset({"load", "store"})
ATOMIC_OPS = frozenset(
    {"atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg", "atomic_cas"}
)
REDUCTION_OPS = frozenset({"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum", "cumprod", "associative_scan"})
TRANSCENDENTAL_OPS = frozenset({"exp", "exp2", "log", "log2", "sin", "cos", "sqrt", "rsqrt", "sigmoid", "erf", "tanh", "pow"})


@dataclass
class Param:
    """One kernel parameter."""

    name: str
    kind: str  # "pointer" | "scalar" | "constexpr"
    annotation: str | None
    default: str | None  # source text of the default
    default_value: Value  # the default when it is a constant
    span: Span
    index: int


@dataclass
class TlCall:
    """A call into ``triton.language`` inside a kernel, e.g. ``tl.load(ptr + offs, mask=m)``."""

    op: str  # last name: "load", "dot", "program_id", "exp"
    qualname: str  # as written: "tl.load", "tl.math.exp"
    span: Span
    args: list[str]  # positional arguments, source text
    kwargs: dict[str, str]  # keyword arguments, source text
    loop_depth: int
    target: str | None = None  # name assigned from the call: ``acc = tl.dot(a, b)`` -> "acc"

    @property
    def has_mask(self) -> bool:
        """Loads take ``(ptr, mask, other)``, stores ``(ptr, value, mask)``."""
        if "mask" in self.kwargs:
            return self.kwargs["mask"].strip() != "None"
        if self.op == "load":
            return len(self.args) >= 2 and self.args[1].strip() != "None"
        if self.op == "store":
            return len(self.args) >= 3 and self.args[2].strip() != "None"
        return False

    @property
    def pointer(self) -> str | None:
        return self.args[0] if self.args else self.kwargs.get("pointer")


@dataclass
class Loop:
    """A loop in a kernel body."""

    kind: str  # "range" | "tl.range" | "tl.static_range" | "while" | "for"
    span: Span
    header_span: Span  # the ``for ... :`` line
    var: str | None
    iter_args: list[str]
    num_stages: int | None
    depth: int  # 1 for an outermost loop


@dataclass
class AutotuneConfig:
    """One ``triton.Config(...)``."""

    kwargs: dict[str, Value]
    num_warps: int | None
    num_stages: int | None
    span: Span
    hooks: dict[str, str] = field(default_factory=dict)  # pre_hook / ir_override -> the function's source


@dataclass
class Autotune:
    """A ``@triton.autotune(configs=..., key=...)`` decorator."""

    configs: list[AutotuneConfig]
    key: list[str]
    span: Span
    configs_source: str  # source of the configs argument (a list, or a name/call when not literal)
    configs_are_literal: bool  # the argument is a literal list of triton.Config: actions may edit its elements
    # ``configs`` holds every config the autotuner gets: a literal list, or an expression the analysis
    # evaluated statically (analysis/config_eval.py: comprehensions, module-level names, helpers, ``+``).
    configs_known: bool = False
    configs_unknown_reason: str = ""  # why the configs are not known (empty when they are)
    configs_sequence: str = "list"  # what the configs expression builds: "list" or "tuple"


@dataclass
class Decorator:
    name: str  # "jit" | "autotune" | "heuristics" | other dotted name
    source: str
    span: Span
    kwargs: dict[str, str] = field(default_factory=dict)


@dataclass
class Kernel:
    """One ``@triton.jit`` function."""

    name: str
    span: Span  # decorators through the end of the body
    def_span: Span  # ``def`` through the end of the body
    name_span: Span
    body_span: Span
    decorators: list[Decorator]
    jit_kwargs: dict[str, str]
    autotune: Autotune | None
    heuristics: dict[str, str]  # constexpr name -> lambda source
    params: list[Param]
    calls: list[TlCall]
    loops: list[Loop]
    local_constants: dict[str, Value]  # names assigned once from constants inside the body
    docstring: str | None
    enclosing_function: str | None  # set for kernels defined inside another function
    called_functions: list[str]  # plain names called from the body (helper jit functions)
    # The ``def`` node of the parse of ``FileAnalysis.text`` (file line numbers): the checks walk it
    # instead of parsing the kernel again. Not part of the model's value (repr, ==); never mutate it.
    node: ast.FunctionDef | None = field(default=None, repr=False, compare=False)
    # ``f = triton.jit(f)``: the statement that jits this def by a call instead of a decorator (its wrapper
    # calls, ``triton.autotune(...)(triton.jit(f))`` included, are ``decorators``); None for a decorated def.
    jit_call: Span | None = None
    # Other names launches call it by: bound by that statement (``kernel = triton.jit(f)``), or at module
    # level from a factory's result (``relu = make_kernel("relu")``).
    launch_names: list[str] = field(default_factory=list)
    # Module-level functions that return this kernel (``def make(): @triton.jit def k(...) ...; return k``):
    # ``make(...)[grid](...)`` and ``k = make(...)`` then ``k[grid](...)`` launch it.
    factories: list[str] = field(default_factory=list)

    @property
    def constexpr_names(self) -> list[str]:
        return [p.name for p in self.params if p.kind == "constexpr"]

    @property
    def pointer_params(self) -> list[Param]:
        return [p for p in self.params if p.kind == "pointer"]

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def calls_of(self, *ops: str) -> list[TlCall]:
        return [c for c in self.calls if c.op in ops]

    @property
    def is_autotuned(self) -> bool:
        return self.autotune is not None

    @property
    def plain_spelling(self) -> bool:
        """A decorated def launched by its own name: what edits of decorators or of the def's place need."""
        return self.jit_call is None and not self.factories


@dataclass
class LaunchArg:
    """One argument at a launch site, mapped to the kernel parameter it binds when known."""

    param: str | None
    source: str
    value: Value  # the constant value when it can be worked out statically
    span: Span
    keyword: bool


@dataclass
class LaunchSite:
    """``kernel[grid](args..., BLOCK=..., num_warps=...)``."""

    kernel: str
    span: Span
    grid_source: str
    grid_span: Span
    args: list[LaunchArg]
    num_warps: int | None
    num_stages: int | None
    host_function: str | None
    grid_value: tuple[int, ...] | None  # the grid when it can be worked out statically
    # The other module that holds this launch (``from .kernels import k`` there); None: this file.
    # Its spans are positions in that file.
    file: str | None = None

    def arg(self, param: str) -> LaunchArg | None:
        return next((a for a in self.args if a.param == param), None)

    def constexpr_values(self, kernel: Kernel) -> dict[str, Value]:
        """The constexpr values this launch binds, with kernel defaults filling the rest."""
        values: dict[str, Value] = {}
        for p in kernel.params:
            if p.kind != "constexpr":
                continue
            a = self.arg(p.name)
            if a is not None and a.value is not None:
                values[p.name] = a.value
            elif p.default_value is not None:
                values[p.name] = p.default_value
        return values


@dataclass
class HostFunction:
    """A plain Python function that launches kernels (the wrapper a user calls)."""

    name: str
    span: Span
    params: list[str]
    launches: list[str]  # kernel names launched from it


@dataclass
class SyntaxErrorInfo:
    message: str
    span: Span


class TritonNames:
    """How a file spells ``triton`` and ``triton.language``: local name -> canonical dotted name.

    Built from the file's imports (aliases, ``from triton import language``, ``from triton.language
    import load``); ``triton`` and ``tl`` keep their usual meaning when no import binds them, so
    snippets without imports still read as Triton. Equal spellings compare (and hash) equal.
    """

    __slots__ = ("prefix", "key", "_language_roots")

    def __init__(self, prefix: dict[str, str] | None = None):
        self.prefix = dict(prefix or {})
        self.prefix.setdefault("triton", "triton")
        self.prefix.setdefault("tl", "triton.language")
        self.key = frozenset(self.prefix.items())
        # Local names that are triton.language itself or a module under it (``tl``, ``tl.math``).
        self._language_roots = frozenset(
            name for name, dotted in self.prefix.items()
            if dotted == "triton.language" or dotted.startswith("triton.language.")
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TritonNames) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"TritonNames({dict(sorted(self.prefix.items()))!r})"

    def canonical(self, node: ast.AST) -> str | None:
        """``tl.math.exp`` -> ``triton.language.math.exp``; None for non-dotted expressions."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.prefix.get(node.id, node.id)
        return ".".join([head, *reversed(parts)])

    def tl_op(self, node: ast.AST) -> str | None:
        """The op name when ``node`` names something in ``triton.language`` (``tl.math.exp`` -> "exp")."""
        # Runs on every call of every kernel body: settle the common cases without building strings.
        if node.__class__ is ast.Attribute:
            root = node.value
            while root.__class__ is ast.Attribute:
                root = root.value
            if root.__class__ is not ast.Name or root.id not in self.prefix:
                return None
            if root.id in self._language_roots:
                return node.attr
        elif node.__class__ is not ast.Name or node.id not in self.prefix:
            return None
        name = self.canonical(node)  # ``triton.language.load``, or ``load`` from ``from triton.language import load``
        if name and name.startswith("triton.language."):
            return name.rsplit(".", 1)[1]
        return None


@dataclass
class FileAnalysis:
    """Everything known about one Triton file."""

    path: str | None
    text: str
    kernels: list[Kernel]
    launches: list[LaunchSite]
    host_functions: list[HostFunction]
    constants: dict[str, Value]
    imports_triton: bool
    syntax_error: SyntaxErrorInfo | None = None
    # True when the kernels come from an earlier, parsable version of the text (syntax error now).
    stale: bool = False
    # How the file spells triton and triton.language: the one resolution the analysis and the checks share.
    names: TritonNames = field(default_factory=TritonNames)
    # Launches of this file's kernels found in the modules that import them (analysis/workspace.py);
    # actions never edit them, and offer only interface-keeping steps for those kernels.
    foreign_launches: list[LaunchSite] = field(default_factory=list)
    foreign_searched: bool = False  # True once analysis/workspace.py looked (found or not)

    def kernel(self, name: str) -> Kernel | None:
        return next((k for k in self.kernels if k.name == name), None)

    def launches_of(self, name: str) -> list[LaunchSite]:
        return [launch for launch in self.launches if launch.kernel == name]

    def kernel_at(self, pos: Position) -> Kernel | None:
        """The innermost kernel whose span holds ``pos``."""
        hits = [k for k in self.kernels if k.span.contains(pos)]
        return min(hits, key=lambda k: k.span.end_offset - k.span.start_offset) if hits else None

    def host_function(self, name: str) -> HostFunction | None:
        return next((h for h in self.host_functions if h.name == name), None)
