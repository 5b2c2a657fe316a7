"""What a policy needs to know about one kernel, read from the analysis: its shape of work and settings."""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import MEMORY_OPS, REDUCTION_OPS, TRANSCENDENTAL_OPS, Value


@dataclass
class KernelFeatures:
    """A compact, JSON-able description of a kernel: prompts, heuristics and trajectories share it."""

    kernel: str
    uses_dot: bool
    dot_in_loop: bool
    loops: int
    reduction_passes: int  # loops that reduce: 2 for a naive softmax (max, then sum)
    data_passes: int  # outermost loops that load data: 3 for a naive softmax
    elementwise_1d: bool  # no loop, no dot, no reduction: a memory-bound streaming kernel
    loads: int
    stores: int
    transcendentals: list[str]
    autotuned: bool
    constexprs: dict[str, Value] = field(default_factory=dict)  # values the launch binds (or defaults)
    num_warps: int | None = None
    num_stages: int | None = None
    grid_dims: int | None = None
    intermediate_consumers: list[str] = field(default_factory=list)  # kernels reading this one's output

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """One or two lines for a prompt: the work pattern, then the current settings."""
        shape: list[str] = []
        if self.uses_dot:
            shape.append("tl.dot inside a loop" if self.dot_in_loop else "tl.dot")
        if self.reduction_passes and self.data_passes > 1:
            shape.append(f"{self.data_passes} passes over the data ({self.reduction_passes} reducing)")
        elif self.reduction_passes:
            shape.append("one reduction loop")
        if self.elementwise_1d:
            shape.append("1-D elementwise, memory-bound")
        if self.transcendentals:
            shape.append("math: " + ",".join(self.transcendentals))
        if self.intermediate_consumers:
            shape.append("output feeds " + ",".join(self.intermediate_consumers) + " through a buffer")
        shape.append(f"{self.loads} loads, {self.stores} stores")
        settings = [f"{k}={v}" for k, v in sorted(self.constexprs.items())]
        if self.num_warps is not None:
            settings.append(f"num_warps={self.num_warps}")
        if self.num_stages is not None:
            settings.append(f"num_stages={self.num_stages}")
        if self.autotuned:
            settings.append("autotuned")
        return f"{self.kernel}: {'; '.join(shape)}. Settings: {' '.join(settings) or 'none'}."


def kernel_features(analysis: FileAnalysis, kernel: Kernel) -> KernelFeatures:
    """Read the features of ``kernel`` from ``analysis``."""
    dots = kernel.calls_of("dot", "dot_scaled")
    reductions = [c for c in kernel.calls if c.op in REDUCTION_OPS]
    passes = sum(1 for loop in kernel.loops if any(loop.span.contains(c.span.start) for c in reductions))
    passes += _accumulating_loops(kernel)
    memory = [c for c in kernel.calls if c.op in MEMORY_OPS]
    loads = kernel.calls_of("load")
    data_passes = sum(
        1 for loop in kernel.loops if loop.depth == 1 and any(loop.span.contains(c.span.start) for c in loads)
    )
    launches = analysis.launches_of(kernel.name)
    launch = launches[0] if launches else None
    constexprs: dict[str, Value] = launch.constexpr_values(kernel) if launch else {
        p.name: p.default_value for p in kernel.params if p.kind == "constexpr" and p.default_value is not None
    }
    return KernelFeatures(
        kernel=kernel.name,
        uses_dot=bool(dots),
        dot_in_loop=any(c.loop_depth > 0 for c in dots),
        loops=len(kernel.loops),
        reduction_passes=passes,
        data_passes=data_passes,
        elementwise_1d=not dots and not reductions and not kernel.loops and bool(memory),
        loads=sum(1 for c in memory if c.op == "load"),
        stores=sum(1 for c in memory if c.op == "store"),
        transcendentals=sorted({c.op for c in kernel.calls if c.op in TRANSCENDENTAL_OPS}),
        autotuned=kernel.is_autotuned,
        constexprs=constexprs,
        num_warps=launch.num_warps if launch else None,
        num_stages=launch.num_stages if launch else None,
        grid_dims=len(launch.grid_value) if launch and launch.grid_value else None,
        intermediate_consumers=_consumers(analysis, kernel),
    )


def _written_params(kernel: Kernel) -> set[str]:
    """Pointer parameters the kernel stores through (``tl.store(y_ptr + offs, ...)`` -> y_ptr)."""
    names = {p.name for p in kernel.pointer_params}
    written: set[str] = set()
    for call in kernel.calls_of("store"):
        pointer = call.pointer or ""
        head = pointer.replace("(", " ").replace("+", " ").split()
        written.update(n for n in head if n in names)
    return written


def _consumers(analysis: FileAnalysis, kernel: Kernel) -> list[str]:
    """Kernels launched after this one, from the same host function, that take a buffer it writes."""
    written = _written_params(kernel)
    consumers: list[str] = []
    for launch in analysis.launches_of(kernel.name):
        outputs = {a.source for a in launch.args if a.param in written}
        later = [
            other for other in analysis.launches
            if other.host_function == launch.host_function and other.span.start_offset > launch.span.end_offset
        ]
        for other in later:
            if other.kernel != kernel.name and any(a.source in outputs for a in other.args):
                consumers.append(other.kernel)
    return sorted(set(consumers))


def _accumulating_loops(kernel: Kernel) -> int:
    """Outermost loops without a reduction call that accumulate a block (``acc += x``) reduced after the
    loop (``tl.sum(acc)``): the Triton tutorial's layer norm reduces this way, once per statistic."""
    fn = kernel.node
    if fn is None:
        return 0
    count = 0
    for index, statement in enumerate(fn.body):
        if not isinstance(statement, ast.For | ast.While):
            continue
        inside = list(ast.walk(statement))
        if any(_reduction_call(node) for node in inside):
            continue  # counted with the loops that reduce inside
        accumulated = {n.target.id for n in inside if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
        later = [node for after in fn.body[index + 1:] for node in ast.walk(after) if _reduction_call(node)]
        if any(isinstance(name, ast.Name) and name.id in accumulated for call in later for name in ast.walk(call)):
            count += 1
    return count


def _reduction_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in REDUCTION_OPS

