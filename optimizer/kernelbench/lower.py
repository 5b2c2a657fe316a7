"""Lower a traced KernelBench model to Triton source text: one kernel per fused group.

Groups, in graph order: a chain of pointwise ops becomes one kernel (each op joins the group of the
value it consumes when that value has no other user and the shape does not change); a reduction,
softmax / log-softmax or layer norm is a row kernel; a matmul / linear / bmm is a tiled ``tl.dot``
kernel and a convolution (1-3-D, transposed, grouped) an implicit-GEMM ``tl.dot`` kernel, each taking the pointwise ops that follow
as its epilogue. Views stay Python; anything else stays a PyTorch call with a comment saying so. Groups
whose kernel and host function are the same up to names (an unrolled RNN's steps, repeated blocks) call one
kernel: the file writes it once.

The kernels are meant to be good from the start, their block sizes chosen at run time from the shapes
(one generated file runs at the problem's sizes on a GPU and at reduced sizes in the interpreter):
GEMMs take 128x128x32 tiles while that still gives each SM a program (``gemm_tiles``), 8 warps, 3 stages
and a grouped program order for L2; reductions, softmax and norms view their input as (outer, R, inner) and
reduce 2-D tiles whose loads are coalesced along the contiguous axis (``TileSpace``), one pass when a row
fits a tile; a row normalization (RMS / L1 / L2 norm, x - mean) is one kernel. Math is done in fp32; fp32
``tl.dot`` uses ``input_precision="tf32x3"`` (three TF32 tensor-core products: about fp32's error, which
KernelBench's 1e-4 needs and plain TF32 does not meet) or "ieee" (``lower(..., fp32_dot="ieee")``). PyTorch's own
fp32 convolution may be the TF32 one: cuDNN convolutions allow TF32 by default, so on a GPU the runner also checks
against ``Model`` with TF32 off (runner.py).
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field

from .ops import OpSpec, Ref, classify, module_expr, node_dtype, node_shape

ANCHORS = ("reduce", "scan", "softmax", "log_softmax", "layer_norm", "group_norm", "batch_norm", "pool", "matmul",
           "conv")
TAKES_EPILOGUE = ("pointwise", "matmul", "conv", "reduce", "softmax", "log_softmax")
POINTWISE_BLOCK = 1024
ROW_BLOCK = 1024
CONV_WINDOW_OUTER_CHANNELS = 16  # from this many input channels a group, a conv loops kernel offsets outside
GEMM_MIN_PROGRAMS = 128  # about one program per SM of an H100 / H200 (132)
# fp32 tl.dot: "tf32x3" (three TF32 tensor-core products, about fp32's error: KernelBench's 1e-4 holds) or "ieee" (FMA)
_SETTINGS = {"fp32_dot": "tf32x3"}


@dataclass
class Group:
    """One kernel: an optional anchor (row or dot op) and the pointwise chain after it."""

    index: int
    anchor: OpSpec | None
    chain: list[OpSpec] = field(default_factory=list)
    name: str = ""
    kernel_source: str = ""
    host_source: str = ""
    params: list[Ref] = field(default_factory=list)
    # a row normalization (x / f(reduce(g(x)))): g before the reduction, the ops on the full shape after it
    prologue: list[OpSpec] = field(default_factory=list)
    final: list[OpSpec] = field(default_factory=list)
    same_as: "Group | None" = None  # an earlier group with the same kernel: this one calls it, writes none

    @property
    def host_name(self) -> str:
        """The host function that launches the kernel (never a name the forward's values use)."""
        return f"run_{self.name}"

    @property
    def kind(self) -> str:
        if self.final:
            return "normalize"
        return self.anchor.kind if self.anchor is not None else "pointwise"

    @property
    def out_node(self):
        if self.final:
            return self.final[-1].node
        return self.chain[-1].node if self.chain else self.anchor.node

    def specs(self) -> list[OpSpec]:
        return self.prologue + ([self.anchor] if self.anchor else []) + self.chain + self.final

    @property
    def nodes(self) -> list:
        return [s.node for s in self.specs()]

    def ops(self) -> list[str]:
        return [s.op for s in self.specs()]

    def describe(self) -> str:
        """What the kernel computes, in words, for the comment above it."""
        chain = " -> ".join(s.op for s in self.chain)
        if self.anchor is None:
            return f"elementwise {chain} in one pass (operands broadcast to the output)"
        a = self.anchor
        epilogue = f"; epilogue: {chain}" if chain else ""
        if self.final:
            before = " -> ".join(s.op for s in self.prologue)
            return (f"row normalization: {a.op}({before or 'x'}) over dims {tuple(a.attrs['dims'])}"
                    f"{' -> ' + chain if chain else ''}, then {' -> '.join(s.op for s in self.final)} with x, in one "
                    "kernel (the row read once when it fits a tile, else twice)")
        if a.kind == "matmul":
            what = {"linear": "x @ W^T + b (nn.Linear)" if a.attrs.get("bias") is not None else "x @ W^T (nn.Linear)",
                    "bmm": "batched A @ B"}.get(a.op, "A @ B")
            return (f"{what}, tiled with tl.dot (tiles by shape in gemm_tiles, grouped order for L2), fp32 "
                    f"accumulation{epilogue}")
        if a.kind == "conv":
            s, p, d, g = a.attrs["stride"], a.attrs["padding"], a.attrs["dilation"], a.attrs["groups"]
            groups = f", groups {g}" if g > 1 else ""
            return (f"{a.op} (stride {s}, padding {p}, dilation {d}{groups}) as an implicit GEMM: rows are output "
                    f"positions, columns output channels, K runs over input channels x kernel window{epilogue}")
        if a.kind == "pool":
            return (f"{a.op} over a {'x'.join(map(str, a.attrs['kernel']))} window (stride {a.attrs['stride']}, "
                    f"padding {a.attrs['padding']}): one output element per lane")
        if a.kind == "scan":
            return f"{a.op} along dim {a.attrs['dims'][0]}: one program per row, blocks scanned in order with a carry"
        if a.kind == "reduce":
            keep = ", keepdim" if a.attrs["keepdim"] else ""
            return f"{a.op} over dims {tuple(a.attrs['dims'])}{keep}: one program per output element"
        if a.kind == "group_norm":
            what = "instance norm" if a.op == "instance_norm" else f"group norm ({a.attrs['groups']} groups)"
            return f"{what} (eps {a.attrs['eps']}): one program per (sample, group), three passes"
        if a.kind == "batch_norm":
            return (f"batch norm with the batch's statistics, as in training mode (eps {a.attrs['eps']}): one "
                    "program per channel over every sample and position, three passes")
        if a.kind == "layer_norm":
            return f"layer norm over the last {len(a.attrs['dims'])} dims (eps {a.attrs['eps']}): one program per row"
        return f"{a.op} over dim {a.attrs['dims'][0]}: one program per row, three passes (max, sum, write)"


@dataclass
class Lowering:
    """The generated pieces of one model: groups with their sources, the forward body, fallbacks."""

    groups: list[Group]
    forward_params: list[str]
    forward_lines: list[str]
    fallbacks: list[tuple[str, str]]  # (node, reason): ops that stay PyTorch calls
    specs: dict

    @property
    def fully_lowered(self) -> bool:
        return not self.fallbacks

    @property
    def kernels(self) -> list[Group]:
        """The groups that write a kernel (the others call one of these)."""
        return [g for g in self.groups if g.same_as is None]


def _only_from(specs: list[OpSpec], allowed: set) -> bool:
    """Every tensor operand of ``specs`` is one of ``allowed`` nodes or computed by ``specs`` themselves."""
    inside = {s.node for s in specs}
    return all(not isinstance(o, Ref) or (o.node is not None and (o.node in allowed or o.node in inside))
               for s in specs for o in s.operands)


def fuse_row_normalizations(groups: list[Group]) -> list[Group]:
    """x -> [pointwise g] -> reduce (keepdim) [-> pointwise on the statistic] -> pointwise with x (RMS, L1, L2 norm,
    x - mean(x)) as one group: the row is read once when it fits a tile instead of by three or four kernels."""
    by_out = {g.out_node: g for g in groups}
    merged: dict[int, Group] = {}
    dropped: set[int] = set()
    for reduce_group in groups:
        a = reduce_group.anchor
        if a is None or a.kind != "reduce" or a.op == "logsumexp" or not a.attrs["keepdim"] \
                or len(reduce_group.out_node.users) != 1:
            continue
        source = a.operands[0].node
        prologue_group = by_out.get(source) if source is not None else None
        if prologue_group is not None and (prologue_group.anchor is not None or len(source.users) != 1):
            prologue_group = None
        if prologue_group is not None:
            externals = {o.node for s in prologue_group.chain for o in s.operands
                         if isinstance(o, Ref) and o.node not in {t.node for t in prologue_group.chain}}
            if len(externals) != 1:
                continue
            x = externals.pop()
            if x is None or node_shape(x) != node_shape(source):
                continue
        else:
            x = source
        if x is None or not _only_from(reduce_group.chain, {a.node}):
            continue
        user = next(iter(reduce_group.out_node.users))
        final_group = next((g for g in groups if g.anchor is None and g.chain and g.chain[0].node is user), None)
        if final_group is None or not _only_from(final_group.chain, {x, reduce_group.out_node}) \
                or node_shape(final_group.out_node) != node_shape(x) or node_dtype(final_group.out_node) != node_dtype(x):
            continue
        fused = Group(reduce_group.index, a, list(reduce_group.chain),
                      prologue=list(prologue_group.chain) if prologue_group else [], final=list(final_group.chain))
        merged[id(reduce_group)] = fused
        dropped.update({id(final_group)} | ({id(prologue_group)} if prologue_group else set()))
    return [merged.get(id(g), g) for g in groups if id(g) not in dropped]


def group_nodes(graph_module) -> tuple[list[Group], dict]:
    """Classify every node and fuse them into groups (graph order)."""
    specs = {node: classify(node, graph_module) for node in graph_module.graph.nodes}
    groups: list[Group] = []
    group_of: dict = {}
    for node, spec in specs.items():
        if spec.kind == "pointwise":
            target = _joinable_group(spec, group_of)
            if target is not None:
                target.chain.append(spec)
                group_of[node] = target
                continue
            group = Group(len(groups), None, [spec])
        elif spec.kind in ANCHORS:
            group = Group(len(groups), spec)
        else:
            continue
        groups.append(group)
        group_of[node] = group
    return fuse_row_normalizations(groups), specs


def _joinable_group(spec: OpSpec, group_of: dict) -> Group | None:
    for operand in spec.operands:
        if not isinstance(operand, Ref) or operand.node not in group_of:
            continue
        group = group_of[operand.node]
        producer = operand.node
        if group.kind in TAKES_EPILOGUE and group.out_node is producer and len(producer.users) == 1 \
                and node_shape(spec.node) == node_shape(producer) and node_dtype(spec.node) == node_dtype(producer) \
                and (group.kind in ("pointwise", "matmul", "conv") or len(node_shape(producer)) >= 1):
            return group  # (a row op's epilogue indexes its output per dim: not a 0-d one)
    return None


# -- expressions -----------------------------------------------------------------------------------

def _lit(value: float) -> str:
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    return repr(float(value))


def _tanh(a: str) -> str:
    return f"(2.0 * tl.sigmoid(2.0 * {a}) - 1.0)"


def _softplus(a: str, beta: float = 1.0, threshold: float = 20.0) -> str:
    if beta == 1.0:
        return f"tl.where({a} > {_lit(threshold)}, {a}, tl.log(1.0 + tl.exp({a})))"
    b = _lit(beta)
    return f"tl.where({a} * {b} > {_lit(threshold)}, {a}, tl.log(1.0 + tl.exp({a} * {b})) / {b})"


def pointwise_expr(op: str, args: list[str], attrs: dict) -> str:
    """The Triton expression of one elementwise op over already-loaded fp32 values."""
    a = args[0]
    b = args[1] if len(args) > 1 else None
    simple = {"add": f"{a} + {b}", "sub": f"{a} - {b}", "mul": f"{a} * {b}", "div": f"{a} / {b}",
              "maximum": f"tl.maximum({a}, {b})", "minimum": f"tl.minimum({a}, {b})", "neg": f"-{a}",
              "relu": f"tl.maximum({a}, 0.0)", "sigmoid": f"tl.sigmoid({a})", "tanh": _tanh(a),
              "exp": f"tl.exp({a})", "log": f"tl.log({a})", "abs": f"tl.abs({a})", "sqrt": f"tl.sqrt({a})",
              "rsqrt": f"tl.rsqrt({a})", "sin": f"tl.sin({a})", "cos": f"tl.cos({a})", "erf": f"tl.erf({a})",
              "log1p": f"tl.log(1.0 + {a})", "expm1": f"(tl.exp({a}) - 1.0)", "square": f"{a} * {a}",
              "reciprocal": f"1.0 / {a}", "silu": f"{a} * tl.sigmoid({a})",
              "selu": f"1.0507009873554805 * tl.where({a} > 0, {a}, 1.6732632423543772 * (tl.exp({a}) - 1.0))",
              "softsign": f"{a} / (1.0 + tl.abs({a}))",
              "hardsigmoid": f"tl.minimum(tl.maximum({a} / 6.0 + 0.5, 0.0), 1.0)",
              "hardswish": f"{a} * tl.minimum(tl.maximum({a} + 3.0, 0.0), 6.0) / 6.0",
              "mish": f"{a} * {_tanh(_softplus(a))}"}
    if op in simple:
        return simple[op]
    if op == "pow":
        exponent = float(args[1])
        return {2.0: f"{a} * {a}", 3.0: f"{a} * {a} * {a}", 0.5: f"tl.sqrt({a})", 1.0: a,
                -1.0: f"1.0 / {a}", -0.5: f"tl.rsqrt({a})"}[exponent]
    comparisons = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    if op in comparisons:
        return f"{a} {comparisons[op]} {b}"
    if op == "masked_fill":  # the mask was loaded as 0.0 / 1.0
        return f"tl.where({b} != 0, {_lit(attrs['value'])}, {a})"
    if op == "gelu":
        if attrs.get("approximate") == "tanh":
            return f"0.5 * {a} * (1.0 + {_tanh(f'0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})')})"
        return f"0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))"
    if op == "leaky_relu":
        return f"tl.where({a} >= 0, {a}, {a} * {_lit(attrs['negative_slope'])})"
    if op in ("hardtanh", "clamp"):
        lo = attrs.get("min_val", attrs.get("min"))
        hi = attrs.get("max_val", attrs.get("max"))
        expr = a if lo is None else f"tl.maximum({a}, {_lit(lo)})"
        return expr if hi is None else f"tl.minimum({expr}, {_lit(hi)})"
    if op == "elu":
        return f"tl.where({a} > 0, {a}, {_lit(attrs['alpha'])} * (tl.exp({a}) - 1.0))"
    if op == "softplus":
        return _softplus(a, attrs.get("beta", 1.0), attrs.get("threshold", 20.0))
    raise ValueError(f"no Triton expression for {op}")


def param_name(ref: Ref) -> str:
    if ref.name:
        return ref.name
    name = re.sub(r"\W+", "_", ref.expr.replace("self.", "")).strip("_")
    return name if name.isidentifier() else f"t_{name}"


def _chain_lines(chain: list[OpSpec], env: dict, load, prefix: str = "v") -> tuple[list[str], str]:
    """``v0 = ...`` lines for a pointwise chain; ``env`` maps nodes already computed to variables."""
    lines: list[str] = []
    var = next(iter(env.values()), "")
    for i, spec in enumerate(chain):
        args = []
        for operand in spec.operands:
            if isinstance(operand, float):
                args.append(_lit(operand))
            elif operand.node is not None and operand.node in env:
                args.append(env[operand.node])
            else:
                args.append(load(operand))
        var = f"{prefix}{i}"
        lines.append(f"{var} = {pointwise_expr(spec.op, args, spec.attrs)}  # {spec.op}")
        env[spec.node] = var
    return lines, var


def _externals(group: Group) -> list[Ref]:
    """The tensors the group reads from outside itself, first use first (its host function's parameters)."""
    inside = set(group.nodes)
    seen: list[Ref] = []
    every: list[Ref] = []
    for spec in group.specs():
        refs = [o for o in spec.operands if isinstance(o, Ref)]
        if spec.kind in ("matmul", "conv") and spec.attrs.get("bias") is not None:
            refs.append(spec.attrs["bias"])
        for ref in refs:
            if ref.node is None or ref.node not in inside:
                every.append(ref)
                if ref not in seen:
                    seen.append(ref)
    taken: set[str] = set()
    for ref in seen:  # parameter names: unique, and never one of the generated code's own locals
        base = param_name(ref)
        if base in _RESERVED or re.fullmatch(r"[viD]\d+", base):
            base = f"{base}_in"
        name, count = base, 1
        while name in taken:
            name = f"{base}_{count}"
            count += 1
        taken.add(name)
        for same in every:
            if same == ref:
                same.name = name
    return seen


# Locals of the generated kernels and host functions that a parameter name must not shadow.
_RESERVED = set("""out shape n_elements grid a3 b3 c B M N K batch batch_shape out_shape x R outer inner BLOCK BLOCK_R NB C H W
OC OH OW KH KW acc a b offs mask pid rest n oh ow kh kw ih iw c_mask k k0 offs_m offs_n offs_k pid_m pid_n pid_b
base r start row mean rstd d y torch triton tl math result a_base b_base a_mask c_ptrs out_ptrs acc_max acc_sum
row_max row_sum self BLOCK_M BLOCK_N BLOCK_K kb I O CG OCG KP KK g oc n_out carry channel group p p_mask lanes o
tile m_vec s_vec m_new seen e split partial rows R_total R_TOTAL OUTER INNER BLOCK_P FINAL SQUARE ONE_PASS GROUP_M
warps pid_b n_m n_n group_size first_m rows_in_group a_ptrs b_ptrs gemm_tiles offs_c kp row_ok row_base c0 c_ok
wt window_outer WINDOW_OUTER CG OCG v stat x_in shift s1 s2 m S G kr c_local""".split())


# -- kernels ---------------------------------------------------------------------------------------

def _unravel(flat: str, digits: list[tuple[str, str]], leading: str, var: str = "rest") -> list[str]:
    """Lines splitting a row-major offset into indices: ``digits`` are (index, extent) pairs, innermost first;
    what is left over is ``leading``, the outermost index."""
    lines = [f"{var} = {flat}"]
    for index, extent in digits:
        lines += [f"{index} = {var} % {extent}", f"{var} = {var} // {extent}"]
    return lines + [f"{leading} = {var}"]


def _indent(lines: list[str], n: int = 4) -> str:
    return "\n".join((" " * n + line) if line else "" for line in lines)


def _pointwise_group(group: Group, name: str) -> tuple[str, str]:
    params = group.params
    out_shape = node_shape(group.out_node)
    rank = len(out_shape)
    tensors = [p for p in params if not p.scalar]
    flat = [p for p in tensors if tuple(p.shape) == tuple(out_shape)]
    broadcast = [p for p in tensors if p not in flat]
    names = [param_name(p) for p in params]
    sig = [param_name(p) if p.scalar else f"{param_name(p)}_ptr" for p in params] + ["out_ptr", "n_elements"]
    if broadcast:
        sig += [f"D{d}" for d in range(1, rank)]
        for p in broadcast:
            sig += [f"{param_name(p)}_s{d}" for d in range(rank)]
    body = ["pid = tl.program_id(0).to(tl.int64)",
            "offs = pid * BLOCK + tl.arange(0, BLOCK)",
            "mask = offs < n_elements"]
    if broadcast and rank:
        body.append("# the output index in each dim, for operands broadcast along some dims")
        body += _unravel("offs", [(f"i{d}", f"D{d}") for d in range(rank - 1, 0, -1)], "i0")
    loaded: dict[str, str] = {}

    def load(ref: Ref) -> str:
        n = param_name(ref)
        if ref.scalar:
            return n
        if n not in loaded:
            if ref in broadcast and rank:
                offset = " + ".join(f"i{d} * {n}_s{d}" for d in range(rank))
            else:
                offset = "offs"
            body.append(f"{n} = tl.load({n}_ptr + {offset}, mask=mask, other=0.0).to(tl.float32)")
            loaded[n] = n
        return loaded[n]

    lines, result = _chain_lines(group.chain, {}, load)
    body += lines
    body.append(f"tl.store(out_ptr + offs, {result}.to(out_ptr.dtype.element_ty), mask=mask)")
    kernel = (f"@triton.jit\ndef {name}_kernel({', '.join(sig)}, BLOCK: tl.constexpr):\n" + _indent(body) + "\n")

    tensor_names = [param_name(p) for p in tensors]
    first = tensor_names[0]
    out_dtype = "torch.bool" if str(node_dtype(group.out_node)) == "torch.bool" else f"{first}.dtype"  # a comparison
    host = [f"shape = torch.broadcast_shapes({', '.join(n + '.shape' for n in tensor_names)})",
            f"out = torch.empty(shape, device={first}.device, dtype={out_dtype})",
            "n_elements = out.numel()"]
    host += [f"{param_name(p)} = {param_name(p)}.contiguous()" for p in flat]
    args = [*names, "out", "n_elements"]
    if broadcast:
        args += [f"shape[{d}]" for d in range(1, rank)]
        for p in broadcast:
            host.append(f"{param_name(p)}_strides = {param_name(p)}.expand(shape).stride()")
            args.append(f"*{param_name(p)}_strides")
    host += [f"BLOCK = {POINTWISE_BLOCK}", "grid = (triton.cdiv(n_elements, BLOCK),)",
             f"{name}_kernel[grid]({', '.join(args)}, BLOCK=BLOCK)", "return out"]
    host_src = f"def run_{name}({', '.join(names)}):\n" + _indent(host) + "\n"
    return kernel, host_src


ROW_TILE = 4096  # elements of one reduction tile (registers: 16-32 fp32 values a thread at 4-8 warps)
ONE_PASS_TILE = 8192  # a softmax row up to this size is loaded once and kept in registers
SPLIT_BELOW = 1024  # a reduction with fewer outputs than this (and a long row) runs in two stages


def _row_setup(dims: list[int], source: str = "x") -> list[str]:
    d0, d1 = dims[0], dims[-1]
    return [f"x = {source}.contiguous()",
            f"outer = math.prod(x.shape[:{d0}])",
            f"R = math.prod(x.shape[{d0}:{d1 + 1}])",
            f"inner = math.prod(x.shape[{d1 + 1}:])"]


@dataclass
class TileSpace:
    """x seen as (OUTER, R, INNER), reduced over R with 2-D tiles whose loads are coalesced.

    ``strided`` False (INNER = 1): a program takes BLOCK_P whole rows, tile [BLOCK_P, BLOCK_R], reduced over
    axis 1. ``strided`` True: a program takes BLOCK_P neighbouring inner positions of one outer index, tile
    [BLOCK_R, BLOCK_P] (a row of the tile is contiguous in memory), reduced over axis 0."""

    strided: bool

    @property
    def axis(self) -> int:
        return 0 if self.strided else 1

    @property
    def shape(self) -> str:
        return "[BLOCK_R, BLOCK_P]" if self.strided else "[BLOCK_P, BLOCK_R]"

    def per_output(self, vector: str) -> str:
        """A per-output vector broadcast against the tile."""
        return f"{vector}[None, :]" if self.strided else f"{vector}[:, None]"

    def setup(self) -> list[str]:
        if self.strided:
            return ["o = tl.program_id(0).to(tl.int64)  # the outer index",
                    "p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)  # neighbouring inner positions",
                    "p_mask = p < INNER",
                    "base = o * R * INNER + p",
                    "lanes = tl.arange(0, BLOCK_R)"]
        return ["p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)  # this program's rows",
                "p_mask = p < OUTER",
                "base = p.to(tl.int64) * R",
                "lanes = tl.arange(0, BLOCK_R)"]

    def index(self, r: str = "r") -> str:
        return f"base[None, :] + {r}[:, None].to(tl.int64) * INNER" if self.strided else f"base[:, None] + {r}[None, :]"

    def mask(self, r: str = "r") -> str:
        return f"({r}[:, None] < R) & p_mask[None, :]" if self.strided else f"p_mask[:, None] & ({r}[None, :] < R)"

    @property
    def out_offsets(self) -> str:
        return "o * INNER + p" if self.strided else "p"

    def host_blocks(self, one_pass: bool = False) -> list[str]:
        """BLOCK_P and BLOCK_R for the sizes at run time (one_pass: the whole row in one tile when it fits)."""
        tile = ONE_PASS_TILE if one_pass else ROW_TILE
        warps = "warps = 8 if BLOCK_P * BLOCK_R >= 4096 else 4  # 16-32 fp32 values a thread per tile"
        if self.strided:
            return [f"BLOCK_P = min(triton.next_power_of_2(inner), 64, max(16, {tile} // triton.next_power_of_2(R)))",
                    f"BLOCK_R = min(triton.next_power_of_2(R), max(1, {tile} // BLOCK_P))", warps]
        return [f"BLOCK_R = min(triton.next_power_of_2(R), {tile})",
                f"BLOCK_P = max(1, min(triton.next_power_of_2(outer), {tile} // BLOCK_R))", warps]

    @property
    def grid(self) -> str:
        return "(outer, triton.cdiv(inner, BLOCK_P))" if self.strided else "(triton.cdiv(outer, BLOCK_P),)"


def _tile_space(anchor: OpSpec) -> TileSpace:
    """Strided when dims follow the reduced ones (their extent is INNER > 1 at every size: a shape property)."""
    return TileSpace(anchor.attrs["dims"][-1] != anchor.attrs["rank"] - 1)


def _flat_epilogue(group: Group, flat: str, mask: str, out_rank: int, anchor_value: str):
    """The pointwise chain after a row op: (index lines, signature, chain lines, result).

    ``flat`` is the row-major offset of each output element; operands are read through their strides in the
    output's shape (the host expands them to it), from each element's index per dim."""
    if not group.chain:
        return [], [], [], anchor_value
    index_lines = _unravel(flat, [(f"i{d}", f"D{d}") for d in range(out_rank - 1, 0, -1)], "i0")
    terms = [f"i{d}" for d in range(out_rank)]
    sig, lines, result = _epilogue(group, terms, mask, set())
    sig += [f"D{d}" for d in range(1, out_rank)]
    return index_lines, sig, [f"acc = {anchor_value}"] + lines, result


def _epilogue_host(group: Group, epi_sig: list[str], out: str) -> tuple[list[str], list[str], list[str]]:
    """Host lines expanding the epilogue's operands to the output, and the kernel's pointer and trailing args."""
    pointers = [s[:-4] for s in epi_sig if s.endswith("_ptr")]
    lines = [f"{e} = {e}.expand({out}.shape)" for e in pointers]
    dims = [s for s in epi_sig if re.fullmatch(r"D\d+", s)]
    trailing = _epilogue_args([s for s in epi_sig if s not in dims]) + [f"{out}.shape[{s[1:]}]" for s in dims]
    return lines, pointers, trailing


def _kernel_sig(name: str, pointers: list[str], sizes: list[str], epi_sig: list[str], constexprs: list[str]) -> str:
    epi_ptrs = [s for s in epi_sig if s.endswith("_ptr")]
    rest = [s for s in epi_sig if not s.endswith("_ptr")]
    params = pointers + epi_ptrs + sizes + rest + [f"{c}: tl.constexpr" for c in constexprs]
    return f"@triton.jit\ndef {name}_kernel({', '.join(params)}):\n"


_REDUCE_INIT = {"sum": "0.0", "mean": "0.0", "norm": "0.0", "max": 'float("-inf")', "min": 'float("inf")'}


def _reduce_group(group: Group, name: str) -> tuple[str, str]:
    """sum / mean / max / min / norm over consecutive dims as a 2-D tiled reduction; few outputs over long rows
    run in two stages (partial results per chunk, then the same kernel over the partials)."""
    a = group.anchor
    op = a.op
    if op == "logsumexp":
        return _logsumexp_group(group, name)
    space = _tile_space(a)
    init = _REDUCE_INIT[op]
    combine = {"max": "tl.maximum(tile, x)", "min": "tl.minimum(tile, x)"}.get(op, "tile + x")
    reduce = {"max": "tl.max", "min": "tl.min"}.get(op, "tl.sum")
    finish = {"mean": "acc / R_TOTAL", "norm": "tl.sqrt(acc)"}.get(op, "acc")
    out_rank = len(node_shape(a.node))
    index_lines, epi_sig, epi_lines, result = _flat_epilogue(group, space.out_offsets, "p_mask", out_rank, finish)
    body = [*space.setup(),
            f"tile = tl.full({space.shape}, {init}, dtype=tl.float32)",
            "for start in range(0, R, BLOCK_R):",
            "    r = start + lanes",
            f"    x = tl.load(x_ptr + {space.index()}, mask={space.mask()}, other={init}).to(tl.float32)"]
    if op == "norm":
        body.append("    x = x * x if SQUARE else x  # stage 1 squares, stage 2 sums the partial sums")
    body += [f"    tile = {combine}",
             f"acc = {reduce}(tile, axis={space.axis})",
             "if FINAL:",
             *["    " + line for line in index_lines + (epi_lines or [f"acc = {finish}"])],
             f"    tl.store(out_ptr + {space.out_offsets}, {result if group.chain else 'acc'}"
             ".to(out_ptr.dtype.element_ty), mask=p_mask)",
             "else:  # a partial result of stage 1",
             f"    tl.store(out_ptr + {space.out_offsets}, acc, mask=p_mask)"]
    constexprs = ["BLOCK_P", "BLOCK_R", "FINAL"] + (["SQUARE"] if op == "norm" else [])
    kernel = _kernel_sig(name, ["x_ptr", "out_ptr"], ["OUTER", "R", "INNER", "R_TOTAL"], epi_sig, constexprs) \
        + _indent(body) + "\n"
    names = [param_name(p) for p in group.params]
    dims, keep = a.attrs["dims"], a.attrs["keepdim"]
    kept = f"[1] * {len(dims)}" if keep else "[]"
    epi_host, epi_ptrs, trailing = _epilogue_host(group, epi_sig, "out")
    square = ", SQUARE=True" if op == "norm" else ""
    args = ", ".join(["x", "out", *epi_ptrs, "outer", "R", "inner", "R", *trailing])  # strided: one stage
    host = _row_setup(dims, names[0]) + [
        f"out_shape = list(x.shape[:{dims[0]}]) + {kept} + list(x.shape[{dims[-1] + 1}:])",
        "out = torch.empty(out_shape, device=x.device, dtype=x.dtype)", *epi_host]
    if not space.strided:
        stage1 = ", ".join(["x", "partial", *epi_ptrs, "rows", "R", "1", "R_total", *trailing])
        host += ["# few outputs over long rows: stage 1 reduces chunks of each row, stage 2 the chunks",
                 "R_total, split = R, 1",
                 f"while outer * split < {SPLIT_BELOW} and R % (split * 2) == 0 and R // (split * 2) >= 4096:",
                 "    split *= 2",
                 "if split > 1:",
                 "    partial = torch.empty(outer * split, device=x.device, dtype=torch.float32)",
                 "    rows, R = outer * split, R // split",
                 f"    BLOCK_R = min(triton.next_power_of_2(R), {ROW_TILE})",
                 f"    BLOCK_P = max(1, min(triton.next_power_of_2(rows), {ROW_TILE} // BLOCK_R))",
                 "    warps = 8",
                 f"    {name}_kernel[(triton.cdiv(rows, BLOCK_P),)]({stage1}, BLOCK_P=BLOCK_P, BLOCK_R=BLOCK_R, "
                 f"num_warps=warps, FINAL=False{square})",
                 "    x, R = partial, split"]
        args = ", ".join(["x", "out", *epi_ptrs, "outer", "R", "inner", "R_total", *trailing])
        square = ", SQUARE=split == 1" if op == "norm" else ""
    host += [*space.host_blocks(),
             f"{name}_kernel[{space.grid}]({args}, BLOCK_P=BLOCK_P, BLOCK_R=BLOCK_R, num_warps=warps, "
             f"FINAL=True{square})",
             "return out"]
    return kernel, f"def run_{name}({', '.join(names)}):\n" + _indent(host) + "\n"


def _normalize_group(group: Group, name: str) -> tuple[str, str]:
    """A row normalization in one kernel: the statistic over the row's tile(s), then the output from x and it."""
    a = group.anchor
    op = a.op
    space = _tile_space(a)
    init = _REDUCE_INIT[op]
    combine = {"max": "tl.maximum(tile, v)", "min": "tl.minimum(tile, v)"}.get(op, "tile + (v * v if SQUARE else v)")
    reduce = {"max": "tl.max", "min": "tl.min"}.get(op, "tl.sum")
    finish = {"mean": "acc / R", "norm": "tl.sqrt(acc)"}.get(op, "acc")
    x_node = group.params[0].node
    prologue, value = _chain_lines(group.prologue, {x_node: "x"}, None, "pv")
    stat_lines, stat = _chain_lines(group.chain, {a.node: "acc"}, None, "sv")
    final, result = _chain_lines(group.final, {x_node: "x", group.chain[-1].node if group.chain else a.node:
                                                space.per_output("stat")}, None, "fv")
    load = [f"x = tl.load(x_ptr + {space.index()}, mask={space.mask()}, other=0.0).to(tl.float32)", *prologue,
            f"v = tl.where({space.mask()}, {value if group.prologue else 'x'}, {init})"]
    statistic = [f"acc = {reduce}(tile, axis={space.axis})", f"acc = {finish}", *stat_lines,
                 f"stat = {stat if group.chain else 'acc'}"]
    write = [*final, f"tl.store(out_ptr + {space.index()}, {result}.to(out_ptr.dtype.element_ty), mask={space.mask()})"]
    body = [*space.setup(),
            "if ONE_PASS:  # the row fits one tile: read once",
            "    r = lanes", *["    " + line for line in load], f"    tile = {combine.replace('tile + ', '') if op not in ('max', 'min') else 'v'}",
            *["    " + line for line in statistic + write],
            "else:  # pass 1: the statistic; pass 2: the output",
            f"    tile = tl.full({space.shape}, {init}, dtype=tl.float32)",
            "    for start in range(0, R, BLOCK_R):",
            "        r = start + lanes", *["        " + line for line in load], f"        tile = {combine}",
            *["    " + line for line in statistic],
            "    for start in range(0, R, BLOCK_R):",
            "        r = start + lanes",
            f"        x = tl.load(x_ptr + {space.index()}, mask={space.mask()}, other=0.0).to(tl.float32)",
            *["        " + line for line in write]]
    kernel = _kernel_sig(name, ["x_ptr", "out_ptr"], ["OUTER", "R", "INNER"], [],
                         ["BLOCK_P", "BLOCK_R", "ONE_PASS", "SQUARE"]) + _indent(body) + "\n"
    host = _row_setup(a.attrs["dims"], param_name(group.params[0])) + [
        "out = torch.empty_like(x)", *space.host_blocks(one_pass=True),
        f"{name}_kernel[{space.grid}](x, out, outer, R, inner, BLOCK_P=BLOCK_P, BLOCK_R=BLOCK_R, num_warps=warps, "
        f"ONE_PASS=BLOCK_R >= R, SQUARE={op == 'norm'})",
        "return out"]
    return kernel, f"def run_{name}({param_name(group.params[0])}):\n" + _indent(host) + "\n"


def _online_max_sum(space: TileSpace) -> list[str]:
    """One pass over the row keeping a running maximum and the sum of exp(x - maximum) per tile lane."""
    return [f'm_vec = tl.full({space.shape}, float("-inf"), dtype=tl.float32)',
            f"s_vec = tl.zeros({space.shape}, dtype=tl.float32)",
            "for start in range(0, R, BLOCK_R):",
            "    r = start + lanes",
            f'    x = tl.load(x_ptr + {space.index()}, mask={space.mask()}, other=float("-inf")).to(tl.float32)',
            "    m_new = tl.maximum(m_vec, x)",
            "    # lanes that have seen only -inf keep a zero sum (exp(-inf - -inf) would be nan)",
            '    seen = m_new > float("-inf")',
            "    s_vec = tl.where(seen, s_vec * tl.exp(m_vec - m_new) + tl.exp(x - m_new), 0.0)",
            "    m_vec = m_new",
            f"row_max = tl.max(m_vec, axis={space.axis})",
            f"row_sum = tl.sum(tl.where(m_vec > float(\"-inf\"), s_vec * tl.exp(m_vec - {space.per_output('row_max')}), 0.0), "
            f"axis={space.axis})"]


def _logsumexp_group(group: Group, name: str) -> tuple[str, str]:
    a = group.anchor
    space = _tile_space(a)
    out_rank = len(node_shape(a.node))
    index_lines, epi_sig, epi_lines, result = _flat_epilogue(group, space.out_offsets, "p_mask", out_rank,
                                                             "row_max + tl.log(row_sum)")
    body = [*space.setup(), *_online_max_sum(space), *index_lines, *(epi_lines or ["acc = row_max + tl.log(row_sum)"]),
            f"tl.store(out_ptr + {space.out_offsets}, {result if group.chain else 'acc'}.to(out_ptr.dtype.element_ty), "
            "mask=p_mask)"]
    kernel = _kernel_sig(name, ["x_ptr", "out_ptr"], ["OUTER", "R", "INNER"], epi_sig, ["BLOCK_P", "BLOCK_R"]) \
        + _indent(body) + "\n"
    names = [param_name(p) for p in group.params]
    dims, keep = a.attrs["dims"], a.attrs["keepdim"]
    kept = f"[1] * {len(dims)}" if keep else "[]"
    epi_host, epi_ptrs, trailing = _epilogue_host(group, epi_sig, "out")
    host = _row_setup(dims, names[0]) + [
        f"out_shape = list(x.shape[:{dims[0]}]) + {kept} + list(x.shape[{dims[-1] + 1}:])",
        "out = torch.empty(out_shape, device=x.device, dtype=x.dtype)", *epi_host, *space.host_blocks(),
        f"{name}_kernel[{space.grid}]({', '.join(['x', 'out', *epi_ptrs, 'outer', 'R', 'inner', *trailing])}, "
        "BLOCK_P=BLOCK_P, BLOCK_R=BLOCK_R, num_warps=warps)",
        "return out"]
    return kernel, f"def run_{name}({', '.join(names)}):\n" + _indent(host) + "\n"




def _three_pass_norm(index: str, channel: str | None, w_name: str | None, b_name: str | None, eps: float) -> list[str]:
    """The mean / variance / write passes over ``R`` elements at ``x_ptr + index(r)``; ``channel(r)`` picks w and b."""
    affine, once = [], []
    for ptr, op in ((w_name, "*"), (b_name, "+")):
        if ptr and channel == "channel":  # one channel per program: its weight and bias are scalars
            once.append(f"{ptr} = tl.load({ptr}_ptr + channel).to(tl.float32)")
            affine.append(f"    y = y {op} {ptr}")
        elif ptr:
            affine.append(f"    y = y {op} tl.load({ptr}_ptr + {channel}, mask=mask, other=0.0).to(tl.float32)")
    return ["# pass 1: mean",
            "acc = tl.zeros([BLOCK_R], dtype=tl.float32)",
            "for start in range(0, R, BLOCK_R):",
            "    r = start + offs",
            f"    acc += tl.load(x_ptr + {index}, mask=r < R, other=0.0).to(tl.float32)",
            "mean = tl.sum(acc, axis=0) / R",
            "# pass 2: variance (biased, as the normalization uses it)",
            "acc = tl.zeros([BLOCK_R], dtype=tl.float32)",
            "for start in range(0, R, BLOCK_R):",
            "    r = start + offs",
            "    mask = r < R",
            f"    x = tl.load(x_ptr + {index}, mask=mask, other=0.0).to(tl.float32)",
            "    d = tl.where(mask, x - mean, 0.0)",
            "    acc += d * d",
            f"rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / R + {_lit(eps)})",
            "# pass 3: normalize, scale and shift",
            *once,
            "for start in range(0, R, BLOCK_R):",
            "    r = start + offs",
            "    mask = r < R",
            f"    x = tl.load(x_ptr + {index}, mask=mask, other=0.0).to(tl.float32)",
            "    y = (x - mean) * rstd",
            *affine,
            f"    tl.store(out_ptr + {index}, y.to(out_ptr.dtype.element_ty), mask=mask)"]


def _affine_names(a: OpSpec) -> tuple[str | None, str | None]:
    w_name = param_name(a.operands[1]) if a.attrs["weight"] else None
    b_name = param_name(a.operands[2 if a.attrs["weight"] else 1]) if a.attrs["bias"] else None
    return w_name, b_name


def _norm_kernel(name: str, a: OpSpec, prologue: list[str], index: str, channel: str, extent: str,
                 shape: list[str], grid: str) -> tuple[str, str]:
    """A three-pass norm kernel over rows of R elements and its host function (group and batch norm).

    ``extent`` names the kernel's third size (G groups or C channels), ``shape`` are the host lines
    that compute R, S and it from ``x``, ``grid`` the programs launched."""
    w_name, b_name = _affine_names(a)
    body = [*prologue, "offs = tl.arange(0, BLOCK_R).to(tl.int64)",
            *_three_pass_norm(index, channel, w_name, b_name, a.attrs["eps"])]
    ptrs = ["x_ptr"] + [f"{n}_ptr" for n in (w_name, b_name) if n]
    kernel = (f"@triton.jit\ndef {name}_kernel({', '.join(ptrs)}, out_ptr, R, S, {extent}, BLOCK_R: tl.constexpr):\n"
              + _indent(body) + "\n")
    params = ["x"] + [n for n in (w_name, b_name) if n]
    host = ["x = x.contiguous()", *shape, "out = torch.empty_like(x)",
            f"BLOCK_R = min(triton.next_power_of_2(R), {ROW_BLOCK})",
            f"{name}_kernel[{grid}]({', '.join(params)}, out, R, S, {extent}, BLOCK_R=BLOCK_R)",
            "return out"]
    return kernel, f"def run_{name}({', '.join(params)}):\n" + _indent(host) + "\n"


def _tiled_norm(name: str, a: OpSpec, space: TileSpace, channel: str, host_shape: list[str]) -> tuple[str, str]:
    """Mean / variance normalization of each row of a TileSpace with an optional per-channel affine.

    One pass when the row fits a tile (kept in registers: exact two-step variance); else a statistics pass of
    sums shifted by the row's first element (no cancellation when the mean is large against the spread) and a
    write pass. ``channel`` indexes weight and bias for each tile element; ``host_shape`` computes outer, R, inner."""
    w_name, b_name = _affine_names(a)
    mean, rstd = space.per_output("mean"), space.per_output("rstd")
    affine = [f"y = y * tl.load({w_name}_ptr + {channel}, mask={space.mask()}, other=0.0).to(tl.float32)"] if w_name else []
    affine += [f"y = y + tl.load({b_name}_ptr + {channel}, mask={space.mask()}, other=0.0).to(tl.float32)"] if b_name else []
    write = [f"y = (x - {mean}) * {rstd}", *affine,
             f"tl.store(out_ptr + {space.index()}, y.to(out_ptr.dtype.element_ty), mask={space.mask()})"]
    load = f"x = tl.load(x_ptr + {space.index()}, mask={space.mask()}, other=0.0).to(tl.float32)"
    eps = _lit(a.attrs["eps"])
    body = [*space.setup(),
            "if ONE_PASS:  # the row fits one tile: read once",
            "    r = lanes", f"    {load}",
            f"    mean = tl.sum(x, axis={space.axis}) / R",
            f"    d = tl.where({space.mask()}, x - {mean}, 0.0)",
            f"    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis={space.axis}) / R + {eps})",
            *["    " + line for line in write],
            "else:  # pass 1: shifted sums; pass 2: normalize, scale and shift",
            "    shift = tl.load(x_ptr + base, mask=p_mask, other=0.0).to(tl.float32)  # each row's first element",
            f"    s1 = tl.zeros({space.shape}, dtype=tl.float32)",
            f"    s2 = tl.zeros({space.shape}, dtype=tl.float32)",
            "    for start in range(0, R, BLOCK_R):",
            "        r = start + lanes", f"        {load}",
            f"        d = tl.where({space.mask()}, x - {space.per_output('shift')}, 0.0)",
            "        s1 += d", "        s2 += d * d",
            f"    m = tl.sum(s1, axis={space.axis}) / R",
            "    mean = shift + m",
            f"    rstd = 1.0 / tl.sqrt(tl.maximum(tl.sum(s2, axis={space.axis}) / R - m * m, 0.0) + {eps})",
            "    for start in range(0, R, BLOCK_R):",
            "        r = start + lanes", f"        {load}",
            *["        " + line for line in write]]
    ptrs = ["x_ptr"] + [f"{n}_ptr" for n in (w_name, b_name) if n] + ["out_ptr"]
    kernel = _kernel_sig(name, ptrs, ["OUTER", "R", "INNER", "S", "G"], [], ["BLOCK_P", "BLOCK_R", "ONE_PASS"]) \
        + _indent(body) + "\n"
    params = ["x_in"] + [n for n in (w_name, b_name) if n]
    args = ["x"] + [n for n in (w_name, b_name) if n] + ["out", "outer", "R", "inner", "S", "G"]
    host = ["x = x_in.contiguous()", *host_shape, "out = torch.empty_like(x)", *space.host_blocks(one_pass=True),
            f"{name}_kernel[{space.grid}]({', '.join(args)}, BLOCK_P=BLOCK_P, BLOCK_R=BLOCK_R, num_warps=warps, "
            "ONE_PASS=BLOCK_R >= R)",
            "return out"]
    return kernel, f"def run_{name}({', '.join(params)}):\n" + _indent(host) + "\n"


def _group_norm_group(group: Group, name: str) -> tuple[str, str]:
    """Group / instance norm: a row is one (sample, group), C / G channels x S positions, contiguous."""
    a = group.anchor
    return _tiled_norm(name, a, TileSpace(False), "(p % G)[:, None] * (R // S) + r[None, :] // S",
                       [f"G = {a.attrs['groups']}", "S = math.prod(x.shape[2:])  # positions per channel",
                        "outer, R, inner = x.shape[0] * G, x.shape[1] // G * S, 1"])


def _batch_norm_group(group: Group, name: str) -> tuple[str, str]:
    if len(node_shape(group.anchor.node)) == 2:  # (N, C): per channel over the batch, tiles coalesced along C
        return _tiled_norm(name, group.anchor, TileSpace(True), "p[None, :]",
                           ["outer, R, inner = 1, x.shape[0], x.shape[1]", "S, G = 1, 1"])
    return _norm_kernel(
        name, group.anchor, ["channel = tl.program_id(0).to(tl.int64)  # R = samples x positions of this channel"],
        "((r // S) * C + channel) * S + r % S", "channel", "C",
        ["C = x.shape[1]", "S = math.prod(x.shape[2:])", "R = x.shape[0] * S"], "(C,)")



def _pool_group(group: Group, name: str) -> tuple[str, str]:
    a = group.anchor
    d = a.attrs["dims"]
    kernel, st, pd, dl = a.attrs["kernel"], a.attrs["stride"], a.attrs["padding"], a.attrs["dilation"]
    is_max = a.op == "max_pool"
    other = 'float("-inf")' if is_max else "0.0"
    sp = range(d)
    body = ["pid = tl.program_id(0).to(tl.int64)",
            "offs = pid * BLOCK + tl.arange(0, BLOCK)",
            "mask = offs < n_out",
            "# this lane's output element (n, c, o0, ...)",
            *_unravel("offs", [(f"o{j}", f"O{j}") for j in reversed(sp)] + [("c", "C")], "n"),
            f"acc = tl.full([BLOCK], {other}, dtype=tl.float32)"]
    valid = ["mask"]
    for j in sp:
        indent = "    " * j
        body += [f"{indent}for k{j} in range({kernel[j]}):",
                 f"{indent}    i{j} = {_affine(f'o{j}', st[j], -pd[j], f'k{j}', dl[j])}"]
        valid.append(f"(i{j} >= 0) & (i{j} < I{j})")
    inner = "    " * d
    offset = " + ".join(["n * sxn", "c * sxc"] + [f"i{j} * sx{j}" for j in sp])
    body += [f"{inner}m = {' & '.join(valid)}",
             f"{inner}x = tl.load(x_ptr + {offset}, mask=m, other={other}).to(tl.float32)",
             f"{inner}acc = {'tl.maximum(acc, x)' if is_max else 'acc + x'}"]
    if not is_max:
        body.append(f"acc = acc / {math.prod(kernel)}.0" if a.attrs["count_include_pad"] or not any(pd)
                    else "acc = acc / 1.0  # padding not counted: see the count below")
    if not is_max and not a.attrs["count_include_pad"] and any(pd):
        # the divisor is the number of window positions inside the input
        count = " * ".join(f"(tl.minimum(o{j} * {st[j]} - {pd[j]} + {kernel[j]}, I{j}) - tl.maximum(o{j} * {st[j]} - {pd[j]}, 0))"
                           for j in sp)
        body[-1] = f"acc = acc / ({count}).to(tl.float32)"
    body.append("tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)")
    sizes = ["C"] + [f"I{j}" for j in sp] + [f"O{j}" for j in sp]
    strides = ["sxn", "sxc"] + [f"sx{j}" for j in sp]
    kernel_src = (f"@triton.jit\ndef {name}_kernel(x_ptr, out_ptr, n_out, {', '.join(sizes + strides)}, "
                  "BLOCK: tl.constexpr):\n" + _indent(body) + "\n")
    host = ["NB, C = x.shape[:2]", "I = x.shape[2:]",
            f"O = [(I[j] + 2 * p - d * (k - 1) - 1) // s + 1 for j, (k, s, p, d) in "
            f"enumerate(zip({kernel}, {st}, {pd}, {dl}))]",
            "out = torch.empty((NB, C, *O), device=x.device, dtype=x.dtype)",
            "n_out = out.numel()",
            f"BLOCK = {POINTWISE_BLOCK}",
            "grid = (triton.cdiv(n_out, BLOCK),)",
            f"{name}_kernel[grid](x, out, n_out, C, *I, *O, *x.stride(), BLOCK=BLOCK)",
            "return out"]
    return kernel_src, f"def run_{name}(x):\n" + _indent(host) + "\n"


def _scan_group(group: Group, name: str) -> tuple[str, str]:
    product = group.anchor.op == "cumprod"
    combine = "_multiply" if product else "_add"
    body = ["pid = tl.program_id(0).to(tl.int64)",
            "base = (pid // INNER) * R * INNER + pid % INNER",
            "offs = tl.arange(0, BLOCK_R).to(tl.int64)",
            f"carry = {'1.0' if product else '0.0'}  # the {'product' if product else 'sum'} of the blocks before",
            "for start in range(0, R, BLOCK_R):",
            "    r = start + offs",
            "    mask = r < R",
            f"    x = tl.load(x_ptr + base + r * INNER, mask=mask, other={'1.0' if product else '0.0'}).to(tl.float32)",
            f"    y = tl.associative_scan(x, 0, {combine}) {'*' if product else '+'} carry",
            "    tl.store(out_ptr + base + r * INNER, y.to(out_ptr.dtype.element_ty), mask=mask)",
            f"    carry = carry {'*' if product else '+'} tl.reduce(x, 0, {combine})"]
    helper = (f"@triton.jit\ndef {combine}(a, b):\n    return a {'*' if product else '+'} b\n\n\n"
              if combine not in _EMITTED_HELPERS else "")
    _EMITTED_HELPERS.add(combine)
    kernel = helper + f"@triton.jit\ndef {name}_kernel(x_ptr, out_ptr, R, INNER, BLOCK_R: tl.constexpr):\n" + _indent(body) + "\n"
    host = _row_setup(group.anchor.attrs["dims"]) + [
        "out = torch.empty_like(x)",
        f"BLOCK_R = min(triton.next_power_of_2(R), {ROW_BLOCK})",
        f"{name}_kernel[(outer * inner,)](x, out, R, inner, BLOCK_R=BLOCK_R)",
        "return out"]
    return kernel, f"def run_{name}(x):\n" + _indent(host) + "\n"


_EMITTED_HELPERS: set[str] = set()


def _softmax_group(group: Group, name: str) -> tuple[str, str]:
    """softmax / log_softmax over one dim: one pass when the row fits a tile (kept in registers), else an online
    max-and-sum pass and a write pass; the pointwise chain after it is applied before the store."""
    a = group.anchor
    log = a.op == "log_softmax"
    space = _tile_space(a)
    row_max, row_sum = space.per_output("row_max"), space.per_output("row_sum")
    index_lines, epi_sig, epi_lines, result = _flat_epilogue(group, space.index(), space.mask(), a.attrs["rank"], "y")
    write = f"y = x - {row_max} - tl.log({row_sum})" if log else f"y = tl.exp(x - {row_max}) / {row_sum}"
    store = [*index_lines, *epi_lines,
             f"tl.store(out_ptr + {space.index()}, {result}.to(out_ptr.dtype.element_ty), mask={space.mask()})"]
    body = [*space.setup(),
            "if ONE_PASS:  # the whole row is one tile: read once",
            "    r = lanes",
            f'    x = tl.load(x_ptr + {space.index()}, mask={space.mask()}, other=float("-inf")).to(tl.float32)',
            f"    row_max = tl.max(x, axis={space.axis})",
            f"    e = tl.exp(x - {row_max})",
            f"    row_sum = tl.sum(e, axis={space.axis})",
            f"    {write if log else f'y = e / {row_sum}'}",
            *["    " + line for line in store],
            "else:  # pass 1: running max and sum; pass 2: write",
            *["    " + line for line in _online_max_sum(space)],
            "    for start in range(0, R, BLOCK_R):",
            "        r = start + lanes",
            f"        x = tl.load(x_ptr + {space.index()}, mask={space.mask()}, other=0.0).to(tl.float32)",
            f"        {write}",
            *["        " + line for line in store]]
    kernel = _kernel_sig(name, ["x_ptr", "out_ptr"], ["OUTER", "R", "INNER"], epi_sig,
                         ["BLOCK_P", "BLOCK_R", "ONE_PASS"]) + _indent(body) + "\n"
    names = [param_name(p) for p in group.params]
    epi_host, epi_ptrs, trailing = _epilogue_host(group, epi_sig, "out")
    host = _row_setup(a.attrs["dims"], names[0]) + [
        "out = torch.empty_like(x)", *epi_host, *space.host_blocks(one_pass=True),
        f"{name}_kernel[{space.grid}]({', '.join(['x', 'out', *epi_ptrs, 'outer', 'R', 'inner', *trailing])}, "
        "BLOCK_P=BLOCK_P, BLOCK_R=BLOCK_R, num_warps=warps, ONE_PASS=BLOCK_R >= R)",
        "return out"]
    return kernel, f"def run_{name}({', '.join(names)}):\n" + _indent(host) + "\n"


def _layer_norm_group(group: Group, name: str) -> tuple[str, str]:
    """Layer norm over the last dims: a row per leading index; weight and bias follow the position in the row."""
    d0 = group.anchor.attrs["dims"][0]
    return _tiled_norm(name, group.anchor, TileSpace(False), "r[None, :]",
                       [f"R = math.prod(x.shape[{d0}:])", "outer, inner, S, G = x.numel() // R, 1, 1, 1"])


def _epilogue(group: Group, index_terms: list[str], mask: str, skip: set[str]) -> tuple[list[str], list[str], str]:
    """Lines applying bias and the pointwise chain to ``acc``; loads use each operand's strides."""
    lines: list[str] = []
    sig: list[str] = []
    a = group.anchor
    env = {a.node: "acc"}

    def load(ref: Ref) -> str:
        n = param_name(ref)
        if ref.scalar:
            if n not in sig:
                sig.append(n)
            return n
        if f"{n}_ptr" not in sig:
            sig.append(f"{n}_ptr")
            sig.extend(f"{n}_s{d}" for d in range(len(index_terms)))
            offset = " + ".join(f"{t} * {n}_s{d}" for d, t in enumerate(index_terms))
            lines.append(f"{n} = tl.load({n}_ptr + {offset}, mask={mask}, other=0.0).to(tl.float32)")
        return n

    bias = a.attrs.get("bias")
    if bias is not None:
        lines.append(f"acc = acc + {load(bias)}  # bias")
    chain_lines, result = _chain_lines(group.chain, env, load)
    return sig, lines + chain_lines, result if group.chain else "acc"


def _epilogue_args(epi_sig: list[str]) -> list[str]:
    """Host arguments for the epilogue's non-pointer parameters, in the kernel's order."""
    pointers = {s[:-4] for s in epi_sig if s.endswith("_ptr")}
    args = []
    for entry in epi_sig:
        if entry.endswith("_ptr"):
            continue
        stem, _, dim = entry.rpartition("_s")
        if stem in pointers and dim.isdigit():
            if dim == "0":
                args.append(f"*{stem}.stride()")
        else:
            args.append(entry)  # a scalar the forward received
    return args


def _dot(a: str, b: str, fp32: bool) -> str:
    return f"tl.dot({a}, {b}, input_precision=\"{_SETTINGS['fp32_dot']}\")" if fp32 else f"tl.dot({a}, {b})"


def _grouped_order() -> list[str]:
    """pid -> (pid_m, pid_n) in groups of GROUP_M row tiles: consecutive programs share B's columns in L2."""
    return ["n_m = tl.cdiv(M, BLOCK_M)", "n_n = tl.cdiv(N, BLOCK_N)",
            "# grouped order: GROUP_M row tiles walk the same column tiles while those sit in L2",
            "group_size = GROUP_M * n_n", "first_m = (pid // group_size) * GROUP_M",
            "rows_in_group = tl.minimum(n_m - first_m, GROUP_M)",
            "pid_m = first_m + (pid % group_size) % rows_in_group", "pid_n = (pid % group_size) // rows_in_group"]


def _gemm_tiles_helper() -> str:
    """The host helper choosing GEMM tiles at run time (once per file: matmuls and convolutions share it)."""
    if "gemm_tiles" in _EMITTED_HELPERS:
        return ""
    _EMITTED_HELPERS.add("gemm_tiles")
    return f'''def gemm_tiles(M, N, batch=1, largest=128 * 128):
    """BLOCK_M, BLOCK_N, BLOCK_K, num_warps for an M x N output (times batch): the largest tile up to 128x128
    (convolutions: 128x64, their index math needs the registers) while that gives a large GPU's SMs a program
    each, halved (the longer side first) while it would not."""
    block_m = min(128, max(16, triton.next_power_of_2(M)))
    block_n = min(128, max(16, triton.next_power_of_2(N)))
    while block_m * block_n > largest:
        if block_n >= block_m:
            block_n //= 2
        else:
            block_m //= 2
    while block_m * block_n > 32 * 32 and triton.cdiv(M, block_m) * triton.cdiv(N, block_n) * batch < {GEMM_MIN_PROGRAMS}:
        if block_m >= block_n:
            block_m //= 2
        else:
            block_n //= 2
    return block_m, block_n, 32, 8 if block_m * block_n >= 128 * 64 else 4


'''


def _matmul_group(group: Group, name: str) -> tuple[str, str]:
    a = group.anchor
    fp32 = str(node_dtype(a.node)) == "torch.float32"
    terms = ["pid_b", "offs_m[:, None]", "offs_n[None, :]"]
    epi_sig, epi_lines, result = _epilogue(group, terms, "c_mask", set())
    body = ["pid = tl.program_id(0)", "pid_b = tl.program_id(1).to(tl.int64)",
            *_grouped_order(),
            "# 64-bit offsets: a row times its stride passes 2**31 on the large problems",
            "offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)",
            "offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)",
            "offs_k = tl.arange(0, BLOCK_K)",
            "a_ptrs = a_ptr + pid_b * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak",
            "b_ptrs = b_ptr + pid_b * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "for k in range(0, K, BLOCK_K):",
            "    a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)",
            "    b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)",
            f"    acc += {_dot('a', 'b', fp32)}",
            "    a_ptrs += BLOCK_K * stride_ak",
            "    b_ptrs += BLOCK_K * stride_bk",
            "c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
            *epi_lines,
            "c_ptrs = c_ptr + pid_b * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn",
            f"tl.store(c_ptrs, {result}.to(c_ptr.dtype.element_ty), mask=c_mask)"]
    sizes = ["M", "N", "K", "stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk", "stride_bn",
             "stride_cb", "stride_cm", "stride_cn"]
    kernel = _gemm_tiles_helper() + _kernel_sig(name, ["a_ptr", "b_ptr", "c_ptr"], sizes, epi_sig,
                                                ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"]) + _indent(body) + "\n"

    names = [param_name(p) for p in group.params]
    x, w = names[0], names[1]
    epi_names = [s[:-4] for s in epi_sig if s.endswith("_ptr")]
    case = a.attrs["case"]
    host = []
    if a.attrs["transpose_b"]:
        host.append(f"{w} = {w}.t()  # nn.Linear stores W as (out, in): read it transposed, no copy")
    if case == "2d":
        host += [f"out_shape = ({x}.shape[0], {w}.shape[1])", f"a3, b3 = {x}.unsqueeze(0), {w}.unsqueeze(0)"]
    elif case == "flatten":
        host += [f"out_shape = (*{x}.shape[:-1], {w}.shape[-1])",
                 f"a3, b3 = {x}.reshape(1, -1, {x}.shape[-1]), {w}.unsqueeze(0)"]
    elif case == "batched_nd":  # a batch view that cannot merge its dims (a transposed head split) is copied
        host += [f"batch_shape = torch.broadcast_shapes({x}.shape[:-2], {w}.shape[:-2])",
                 f"a3 = {x}.expand(*batch_shape, *{x}.shape[-2:]).reshape(-1, *{x}.shape[-2:])",
                 f"b3 = {w}.expand(*batch_shape, *{w}.shape[-2:]).reshape(-1, *{w}.shape[-2:])",
                 f"out_shape = (*batch_shape, {x}.shape[-2], {w}.shape[-1])"]
    else:
        host += [f"batch = max({x}.shape[0], {w}.shape[0])",
                 f"a3, b3 = {x}.expand(batch, -1, -1), {w}.expand(batch, -1, -1)",
                 f"out_shape = (batch, {x}.shape[1], {w}.shape[2])"]
    host += ["B, M, K = a3.shape", "N = b3.shape[2]",
             f"c = torch.empty((B, M, N), device={x}.device, dtype={x}.dtype)"]
    for e in epi_names:
        host.append(f"{e} = {e}.expand(out_shape).reshape(B, M, N)")
    args = ["a3", "b3", "c", *epi_names, "M", "N", "K", "*a3.stride()", "*b3.stride()", "*c.stride()",
            *_epilogue_args(epi_sig)]
    host += ["BLOCK_M, BLOCK_N, BLOCK_K, warps = gemm_tiles(M, N, B)",
             "grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N), B)",
             f"{name}_kernel[grid]({', '.join(args)},",
             f"{' ' * (len(name) + 14)}BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, "
             "num_warps=warps, num_stages=3)",
             "return c.view(out_shape)"]
    return kernel, f"def run_{name}({', '.join(names)}):\n" + _indent(host) + "\n"


def _affine(o: str, stride: int, offset: int, k: str, dilation: int) -> str:
    """``o * stride + offset + k * dilation`` without the factors of 1 and the zero offset."""
    text = o if stride == 1 else f"{o} * {stride}"
    if offset:
        text += f" + {offset}" if offset > 0 else f" - {-offset}"
    term = k if abs(dilation) == 1 else f"{k} * {abs(dilation)}"
    return f"{text} + {term}" if dilation > 0 else f"{text} - {term}"


def _conv_input_index(j: int, transposed: bool, stride: int, pad: int, dil: int, o: str, k: str, mask: str) -> list[str]:
    """Lines computing ``i{j}``, the input index that output index ``o`` reads at kernel offset ``k``, and
    narrowing ``mask`` to the positions inside the input (a transposed conv: only where the stride divides)."""
    if not transposed:
        return [f"i{j} = {_affine(o, stride, -pad, k, dil)}", f"{mask} = {mask} & (i{j} >= 0) & (i{j} < I{j})"]
    if stride == 1:  # out[o] gathers x[i] where o = i * stride - pad + k * dil
        return [f"i{j} = {_affine(o, 1, pad, k, -dil)}", f"{mask} = {mask} & (i{j} >= 0) & (i{j} < I{j})"]
    return [f"t{j} = {_affine(o, 1, pad, k, -dil)}", f"i{j} = t{j} // {stride}",
            f"{mask} = {mask} & (t{j} >= 0) & (t{j} % {stride} == 0) & (i{j} < I{j})"]


def _conv_group(group: Group, name: str) -> tuple[str, str]:
    """convNd / conv_transposeNd as an implicit GEMM: rows = output positions, columns = output channels of
    one group (grid axis 2), K = the group's input channels x the kernel window."""
    a = group.anchor
    fp32 = str(node_dtype(a.node)) == "torch.float32"
    d = a.attrs["dims"]
    G = a.attrs["groups"]
    transposed = a.attrs["transposed"]
    st, pd, dl = a.attrs["stride"], a.attrs["padding"], a.attrs["dilation"]
    sp = range(d)
    terms = ["n[:, None]", "oc[None, :]"] + [f"o{j}[:, None]" for j in sp]
    epi_sig, epi_lines, result = _epilogue(group, terms, "c_mask", set())
    out_size = " * ".join(f"O{j}" for j in sp)
    window = " * ".join(f"K{j}" for j in sp)
    per_group = ([f"CG = C // {G}  # input channels per group", f"OCG = OC // {G}  # output channels per group"]
                 if G > 1 else ["CG = C", "OCG = OC"])
    body = ["pid_m = tl.program_id(0)", "pid_n = tl.program_id(1)", "g = tl.program_id(2)  # channel group",
            *per_group,
            f"M = NB * {out_size}", f"KP = {window}  # kernel window", "KK = CG * KP",
            "offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)",
            "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            "oc = (g * OCG + offs_n).to(tl.int64)",
            "# each GEMM row is one output position (n, o0, ...)",
            *_unravel("offs_m", [(f"o{j}", f"O{j}") for j in reversed(sp)], "n")]
    # the kernel offsets get a name of their own (kr): a loop may not retype rest, the rows' decomposition
    window = [(f"k{j}", f"K{j}") for j in reversed(sp)]
    body += ["acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
             "if WINDOW_OUTER:  # many channels: per kernel offset, the group's channels in blocks of BLOCK_K",
             "    offs_c = tl.arange(0, BLOCK_K)",
             "    for kp in range(0, KP):",
             *["        " + line for line in _unravel("kp", window, "_", "kr")[:-1]]]
    body.append("        row_ok = offs_m < M  # the input position each output row reads at this offset")
    for j in sp:
        body += [f"        {line}" for line in _conv_input_index(j, transposed, st[j], pd[j], dl[j], f"o{j}", f"k{j}", "row_ok")]
    row_base = " + ".join(["n * sxn"] + [f"i{j} * sx{j}" for j in sp])
    body += [f"        row_base = {row_base}",
             "        for c0 in range(0, CG, BLOCK_K):",
             "            c_ok = c0 + offs_c < CG",
             "            a = tl.load(x_ptr + row_base[:, None] + (g * CG + c0 + offs_c)[None, :] * sxc,",
             "                        mask=row_ok[:, None] & c_ok[None, :], other=0.0)",
             "            # weights permuted on the host to (group, offset, channel, out channel): rows contiguous",
             "            b = tl.load(wt_ptr + ((g * KP + kp) * CG + c0 + offs_c)[:, None] * OCG + offs_n[None, :],",
             "                        mask=c_ok[:, None] & (offs_n[None, :] < OCG), other=0.0)",
             f"            acc += {_dot('a', 'b', fp32)}",
             "else:  # few channels: K runs over (channel, kernel offset) pairs together",
             "    for kb in range(0, KK, BLOCK_K):",
             "        offs_k = kb + tl.arange(0, BLOCK_K)",
             *["        " + line for line in _unravel("offs_k", window, "c_local", "kr")]]
    body += ["        c = g * CG + c_local", "        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < KK)"]
    for j in sp:
        body += [f"        {line}" for line in _conv_input_index(j, transposed, st[j], pd[j], dl[j], f"o{j}[:, None]",
                                                             f"k{j}[None, :]", "a_mask")]
    x_offset = " + ".join(["n[:, None] * sxn", "c[None, :] * sxc"] + [f"i{j} * sx{j}" for j in sp])
    body.append(f"        a = tl.load(x_ptr + {x_offset}, mask=a_mask, other=0.0)")
    b_mask = "(offs_k[:, None] < KK) & (offs_n[None, :] < OCG)"
    if transposed:  # weight (C, OC / G, *K)
        body += ["        kp = offs_k % KP",
                 f"        b = tl.load(w_ptr + c[:, None] * (OCG * KP) + offs_n[None, :] * KP + kp[:, None], "
                 f"mask={b_mask}, other=0.0)"]
    else:  # weight (OC, C / G, *K): row oc holds that channel's K = CG x window values
        body.append(f"        b = tl.load(w_ptr + oc[None, :] * KK + offs_k[:, None], mask={b_mask}, other=0.0)")
    body += [f"        acc += {_dot('a', 'b', fp32)}",
             "c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < OCG)", *epi_lines]
    out_offset = " + ".join(["n[:, None] * son", "oc[None, :] * soc"] + [f"o{j}[:, None] * so{j}" for j in sp])
    body += [f"out_ptrs = out_ptr + {out_offset}",
             f"tl.store(out_ptrs, {result}.to(out_ptr.dtype.element_ty), mask=c_mask)"]
    sizes = ["NB", "C", "OC"] + [f"I{j}" for j in sp] + [f"O{j}" for j in sp] + [f"K{j}" for j in sp]
    strides = ["sxn", "sxc"] + [f"sx{j}" for j in sp] + ["son", "soc"] + [f"so{j}" for j in sp]
    kernel = _gemm_tiles_helper() + _kernel_sig(name, ["x_ptr", "w_ptr", "wt_ptr", "out_ptr"], sizes + strides, epi_sig,
                                                ["BLOCK_M", "BLOCK_N", "BLOCK_K", "WINDOW_OUTER"]) + _indent(body) + "\n"
    names = [param_name(p) for p in group.params]
    x, w = names[0], names[1]
    epi_names = [s[:-4] for s in epi_sig if s.endswith("_ptr")]
    bias = a.attrs.get("bias")
    host = [f"NB, C = {x}.shape[:2]", f"I = {x}.shape[2:]", f"K = {w}.shape[2:]"]
    if transposed:
        op_ = a.attrs["output_padding"]
        host += [f"OC = {w}.shape[1] * {G}",
                 f"O = [(I[j] - 1) * s - 2 * p + d * (K[j] - 1) + op + 1 for j, (s, p, d, op) in "
                 f"enumerate(zip({st}, {pd}, {dl}, {op_}))]"]
    else:
        host += [f"OC = {w}.shape[0]",
                 f"O = [(I[j] + 2 * p - d * (K[j] - 1) - 1) // s + 1 for j, (s, p, d) in enumerate(zip({st}, {pd}, {dl}))]"]
    host += [f"{w} = {w}.contiguous()  # read as the GEMM's B operand",
             f"out = torch.empty((NB, OC, *O), device={x}.device, dtype={x}.dtype)",
             f"CG, OCG = C // {G}, OC // {G}",
             f"window_outer = CG >= {CONV_WINDOW_OUTER_CHANNELS}",
             "# the window-outer path reads the weights as (group, kernel offset, channel, out channel)",
             (f"wt = {w}.reshape({G}, CG, OCG, -1).permute(0, 3, 1, 2).contiguous() if window_outer else {w}"
              if transposed else
              f"wt = {w}.reshape({G}, OCG, CG, -1).permute(0, 3, 2, 1).contiguous() if window_outer else {w}")]
    for e in epi_names:
        view = f".view(1, -1{', 1' * d})" if bias is not None and e == param_name(bias) else ""
        host.append(f"{e} = {e}{view}.expand(out.shape)")
    args = [x, w, "wt", "out", *epi_names, "NB", "C", "OC", "*I", "*O", "*K", f"*{x}.stride()", "*out.stride()",
            *_epilogue_args(epi_sig)]
    host += [f"BLOCK_M, BLOCK_N, BLOCK_K, warps = gemm_tiles(NB * math.prod(O), OC // {G}, {G}, largest=128 * 64)",
             "BLOCK_K = min(BLOCK_K, max(16, triton.next_power_of_2(CG))) if window_outer else BLOCK_K",
             f"grid = (triton.cdiv(NB * math.prod(O), BLOCK_M), triton.cdiv(OC // {G}, BLOCK_N), {G})",
             f"{name}_kernel[grid]({', '.join(args)},",
             f"{' ' * (len(name) + 14)}BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, WINDOW_OUTER=window_outer, "
             "num_warps=warps, num_stages=3)",
             "return out"]
    return kernel, f"def run_{name}({', '.join(names)}):\n" + _indent(host) + "\n"


_GENERATORS = {"pointwise": _pointwise_group, "reduce": _reduce_group, "normalize": _normalize_group,
               "softmax": _softmax_group,
               "log_softmax": _softmax_group, "layer_norm": _layer_norm_group, "group_norm": _group_norm_group,
               "batch_norm": _batch_norm_group, "pool": _pool_group, "scan": _scan_group, "matmul": _matmul_group,
               "conv": _conv_group}


def _canonical_source(group: Group) -> str:
    """The group's kernel and host source with its own names (kernel, host function, parameters) made positional:
    two groups with the same canonical source compute the same function of their parameters."""
    kernel = group.kernel_source
    start = kernel.find(f"@triton.jit\ndef {group.name}_kernel(")
    # helpers the file's first user carries (gemm_tiles, scan combines) and continuation indents are not the kernel
    source = re.sub(r",\n\s+", ",\n ", kernel[max(start, 0):] + "\n" + group.host_source)
    source = re.sub(rf"\b{re.escape(group.name)}_kernel\b", "KERNEL", source)
    source = re.sub(rf"\b{re.escape(group.host_name)}\b", "HOST", source)
    names = sorted({param_name(p) for p in group.params}, key=len, reverse=True)
    if names:
        position = {name: i for i, name in enumerate(param_name(p) for p in group.params)}
        # a parameter's derived names too (x_ptr, x_s0, x_strides)
        pattern = re.compile(rf"\b({'|'.join(map(re.escape, names))})(?=_|\b)")
        source = pattern.sub(lambda m: f"PARAM{position[m.group(1)]}", source)
    return source


def _group_name(group: Group, used: set[str]) -> str:
    ops = group.ops()
    words = ops if len(ops) <= 4 else ops[:3] + ["chain"]
    base = "_".join(dict.fromkeys(words))
    name = base
    i = 2
    while name in used:
        name = f"{base}_{i}"
        i += 1
    used.add(name)
    return name


# -- forward ---------------------------------------------------------------------------------------

_INFIX = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
          operator.pow: "**", operator.matmul: "@", operator.mod: "%", operator.eq: "==", operator.ne: "!=",
          operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=", operator.and_: "&",
          operator.or_: "|", operator.xor: "^"}


def py(value) -> str:
    """Python source for an fx argument."""
    if hasattr(value, "op") and hasattr(value, "name"):
        return value.name
    if isinstance(value, (list, tuple)):
        items = ", ".join(py(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        return f"slice({py(value.start)}, {py(value.stop)}, {py(value.step)})"
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return f'float("{value}")'
    if type(value).__module__.startswith("torch") and not isinstance(value, (int, float)):
        text = repr(value)
        if text.startswith("torch.") or text.startswith("device("):
            return text if text.startswith("torch.") else f"torch.{text}"
    return repr(value)


def _call(node) -> str:
    import builtins

    from torch.fx.node import _get_qualified_name

    args = [py(a) for a in node.args] + [f"{k}={py(v)}" for k, v in node.kwargs.items()]
    if node.op == "call_module":
        return f"{module_expr(node.target)}({', '.join(args)})"
    if node.op == "call_method":
        return f"{py(node.args[0])}.{node.target}({', '.join(args[1:])})"
    target = node.target
    if target in _INFIX and len(node.args) == 2:
        return f"{py(node.args[0])} {_INFIX[target]} {py(node.args[1])}"
    if target is operator.neg:
        return f"-{py(node.args[0])}"
    if target is operator.invert:
        return f"~{py(node.args[0])}"
    if target is operator.getitem:
        return f"{py(node.args[0])}[{py(node.args[1])}]"
    if target is builtins.getattr:
        return f"{py(node.args[0])}.{node.args[1]}"
    qualified = _get_qualified_name(target)
    if qualified.startswith("_operator."):
        qualified = "operator." + qualified.split(".", 1)[1]
    return f"{qualified}({', '.join(args)})"


def _mutates(node) -> bool:
    """An in-place method (``self.hidden.copy_(h0)``): kept for its effect even when nothing reads its result."""
    return node.op == "call_method" and node.target.endswith("_") and not node.target.startswith("_")


def _constant_tensor(graph_module, target: str, forward_params: list[str]) -> str:
    """Source for a small constant tensor fx folded into the traced module, on the first input's device."""
    value = getattr(graph_module, target)
    data = value.item() if value.numel() == 1 and value.dim() == 0 else value.tolist()
    device = f", device={forward_params[0].split('=')[0]}.device" if forward_params else ""
    return f"torch.tensor({data!r}, dtype={value.dtype}{device})"


def lower(graph_module, fp32_dot: str = "tf32x3") -> Lowering:
    """Group, generate kernels and host functions, and write the forward body that calls them.

    ``fp32_dot``: the input precision of fp32 ``tl.dot`` ("tf32x3" or "ieee")."""
    if fp32_dot not in ("tf32x3", "ieee"):
        raise ValueError(f"fp32_dot must be tf32x3 or ieee, not {fp32_dot!r}")
    _SETTINGS["fp32_dot"] = fp32_dot
    groups, specs = group_nodes(graph_module)
    _EMITTED_HELPERS.clear()  # combine functions shared by this file's scan kernels
    used: set[str] = set()
    first_with: dict[str, Group] = {}
    for group in groups:
        group.params = _externals(group)
        group.name = _group_name(group, used)
        group.kernel_source, group.host_source = _GENERATORS[group.kind](group, group.name)
        first = first_with.setdefault(_canonical_source(group), group)
        if first is not group:  # an unrolled loop or a repeated layer: call the kernel already written
            used.discard(group.name)
            group.name, group.same_as = first.name, first
    group_by_out = {g.out_node: g for g in groups}
    inner = {n for g in groups for n in g.nodes if n is not g.out_node}

    # Which statements the forward needs: walk back from the output (a node consumed only by a
    # lowered group's interior, like torch.max's tuple behind [0], is not computed at all).
    needed: set = set()
    nodes = list(graph_module.graph.nodes)
    for node in reversed(nodes):
        if _mutates(node):
            needed.add(node)
        if node.op != "output" and node not in needed:
            continue
        if node in group_by_out:
            deps = [p.node for p in group_by_out[node].params if p.node is not None]
        else:
            deps = list(node.all_input_nodes)
        needed.update(deps)

    forward_params: list[str] = []
    lines: list[str] = []
    fallbacks: list[tuple[str, str]] = []
    for node in nodes:
        spec = specs[node]
        if node.op == "placeholder":
            default = f"={py(node.args[0])}" if node.args else ""
            forward_params.append(f"{node.name}{default}")
            continue
        if node.op == "output":
            lines.append(f"return {py(node.args[0])}")
            continue
        if node not in needed or node in inner:
            continue
        if node in group_by_out:
            group = group_by_out[node]
            lines.append(f"{node.name} = {group.host_name}({', '.join(p.expr for p in group.params)})")
        elif node.op == "get_attr" and re.fullmatch(r"_tensor_constant\d+", str(node.target)):
            # torch.tensor(3.0) in forward: fx keeps the value on the traced module, not on the model
            lines.append(f"{node.name} = {_constant_tensor(graph_module, node.target, forward_params)}")
        elif node.op == "get_attr":
            lines.append(f"{node.name} = {module_expr(node.target)}")
        elif spec.kind == "torch":
            fallbacks.append((node.name, spec.reason))
            lines.append(f"# PyTorch: {spec.reason}")
            lines.append(f"{node.name} = {_call(node)}")
        else:
            lines.append(f"{node.name} = {_call(node)}")
    return Lowering(groups, forward_params, lines, fallbacks, specs)
