"""The launch model: block sizes and launch options found however a launch spells them, edited everywhere at once."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP16, TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
HEAD = "import torch\nimport triton\nimport triton.language as tl\n\n\n"

SCALE_KERNEL = '''@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
'''
SCALE_TAIL = '''

def get_inputs(device="cpu"):
    return [torch.randn(1000, device=device)]


def reference(x):
    return 2.0 * x + 1.0
'''

# One file per spelling of the launch; each must be tunable and stay equivalent.
LITERAL_GRID = HEAD + SCALE_KERNEL + '''

ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out
''' + SCALE_TAIL

POSITIONAL_ROUNDUP = HEAD + SCALE_KERNEL + '''

ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    grid = ((n + 63) // 64,)
    scale_kernel[grid](x, out, n, 64)
    return out
''' + SCALE_TAIL

MODULE_CONSTANT = HEAD + '''BLOCK_SIZE = 128
NUM_WARPS = 4


''' + SCALE_KERNEL + '''

ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, out, x.numel(), BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    return out
''' + SCALE_TAIL

METHOD_IN_LOOP = HEAD + SCALE_KERNEL + '''

class Scaler:
    """Applies the kernel to each chunk of a list (a method and a loop around the launch)."""

    def __init__(self, chunks=2):
        self.chunks = chunks

    def run(self, x):
        outs = []
        for part in x.chunk(self.chunks):
            part = part.contiguous()
            out = torch.empty_like(part)
            n = part.numel()
            scale_kernel[(triton.cdiv(n, 32),)](part, out, n, BLOCK=32)
            outs.append(out)
        return torch.cat(outs)


ENTRY = "scale"


def scale(x):
    return Scaler().run(x)
''' + SCALE_TAIL

HELPER_META = HEAD + SCALE_KERNEL + '''

def _launch(x, out):
    n = x.numel()
    scale_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n, 256, num_warps=2)


ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    _launch(x, out)
    return out
''' + SCALE_TAIL

MATMUL_2D_LITERALS = HEAD + '''@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


ENTRY = "mm"


def mm(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32)
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c


def get_inputs(device="cpu"):
    return [torch.randn(70, 40, device=device, dtype=torch.float16), torch.randn(40, 90, device=device, dtype=torch.float16)]


def reference(a, b):
    return a.float() @ b.float()
'''

# The matmul tutorial's K loop counts blocks (``range(0, tl.cdiv(K, BLOCK_K))``), and a META grid.
MATMUL_CDIV_LOOP = HEAD + '''@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptr + offs_m[:, None] * K + offs_k[None, :] + k * BLOCK_SIZE_K,
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        b = tl.load(b_ptr + (offs_k[:, None] + k * BLOCK_SIZE_K) * N + offs_n[None, :],
                    mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


ENTRY = "mm"


def mm(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    mm_kernel[grid](a, b, c, M, N, K, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32)
    return c


def get_inputs(device="cpu"):
    return [torch.randn(50, 70, device=device, dtype=torch.float16), torch.randn(70, 40, device=device, dtype=torch.float16)]


def reference(a, b):
    return a.float() @ b.float()
'''

# A 2-D tiled transpose without tl.dot: two blocks, a 2-D literal grid.
TRANSPOSE = HEAD + '''@triton.jit
def transpose_kernel(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)
    tl.store(y_ptr + rn[None, :] * M + rm[:, None], tile, mask=mask)


ENTRY = "transpose"


def transpose(x):
    M, N = x.shape
    y = torch.empty((N, M), dtype=x.dtype)
    transpose_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](x, y, M, N, BLOCK_M=16, BLOCK_N=16)
    return y


def get_inputs(device="cpu"):
    return [torch.randn(70, 45, device=device)]


def reference(x):
    return x.t().contiguous()
'''

# The kernel jitted by a call instead of a decorator, launched by its own name or by the name bound.
JIT_CALL = LITERAL_GRID.replace("@triton.jit\n", "").replace(
    "\n\nENTRY", "\n\nscale_kernel = triton.jit(scale_kernel)\n\n\nENTRY")
JIT_CALL_ALIAS = JIT_CALL.replace("def scale_kernel(", "def _scale(").replace(
    "scale_kernel = triton.jit(scale_kernel)", 'scale_kernel = triton.jit(do_not_specialize=["n"])(_scale)')

# A factory returns the kernel it defines; the host launches the factory's result.
FACTORY_RESULT = HEAD + """def make_scale():
""" + "".join("    " + line if line.strip() else line for line in SCALE_KERNEL.splitlines(keepends=True)) + """
    return scale_kernel


ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    kernel = make_scale()
    kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64, num_warps=4)
    return out
""" + SCALE_TAIL

# PyTorch's tutorial on user-defined kernels under torch.compile: a triton_op launching wrap_triton(kernel).
# The equivalence runner loads every version of the file in one process: a fresh op name per load, since redefining
# one name again and again ended in std::bad_alloc now and then (the CPU suite, session 14).
TRITON_OP = HEAD.replace("import triton\n", "import uuid\n\nimport triton\nfrom torch.library import triton_op, wrap_triton\n", 1) \
    + SCALE_KERNEL + '''

ENTRY = "scale"


@triton_op("mtmc_test::scale_" + uuid.uuid4().hex, mutates_args={})
def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()

    def grid_fn(meta):
        return (triton.cdiv(n, meta["BLOCK"]),)

    wrap_triton(scale_kernel)[grid_fn](x, out, n, 64)
    return out
''' + SCALE_TAIL

# Sizes and the block unpacked from one tuple (flash-linear-attention's ``BT, BK, BV = 64, 32, 32``).
TUPLE_CONSTANTS = HEAD + SCALE_KERNEL + '''

ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    n, BLOCK = x.numel(), 64
    scale_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
''' + SCALE_TAIL

SPELLINGS = {
    "triton_op": ("scale_kernel", TRITON_OP),
    "tuple_constants": ("scale_kernel", TUPLE_CONSTANTS),
    "jit_call": ("scale_kernel", JIT_CALL),
    "jit_call_alias": ("_scale", JIT_CALL_ALIAS),
    "literal_grid": ("scale_kernel", LITERAL_GRID),
    "positional_roundup": ("scale_kernel", POSITIONAL_ROUNDUP),
    "module_constant": ("scale_kernel", MODULE_CONSTANT),
    "method_in_loop": ("scale_kernel", METHOD_IN_LOOP),
    "helper_meta": ("scale_kernel", HELPER_META),
    "matmul_2d_literals": ("mm_kernel", MATMUL_2D_LITERALS),
    "matmul_cdiv_loop": ("mm_kernel", MATMUL_CDIV_LOOP),
    "transpose_2d": ("transpose_kernel", TRANSPOSE),
}


def offered(text: str, kernel: str) -> dict[str, Candidate]:
    out: dict[str, Candidate] = {}
    for cand in applicable(analyze(text), kernel, H100):
        out.setdefault(cand.action, cand)
    return out


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_tiling_and_autotune_are_offered_for_every_spelling(name):
    kernel, text = SPELLINGS[name]
    actions = offered(text, kernel)
    assert {"tiling", "autotune"} <= set(actions), sorted(actions)


def test_a_wrap_triton_launch_and_a_tuple_constant_are_edited_where_they_are():
    cand = next(c for c in applicable(analyze(TRITON_OP), "scale_kernel", H100) if c.params == {"BLOCK": 1024})
    assert "wrap_triton(scale_kernel)[grid_fn](x, out, n, 1024)" in apply_candidate(TRITON_OP, cand, H100).new_text
    cand = next(c for c in applicable(analyze(TUPLE_CONSTANTS), "scale_kernel", H100) if c.params == {"BLOCK": 1024})
    assert "    n, BLOCK = x.numel(), 1024\n" in apply_candidate(TUPLE_CONSTANTS, cand, H100).new_text


def test_warps_from_a_module_tuple_are_set_in_it():
    text = TUPLE_CONSTANTS.replace("ENTRY = \"scale\"\n", "ENTRY = \"scale\"\nWARPS, UNUSED = 4, 0\n").replace(
        "BLOCK=BLOCK)", "BLOCK=BLOCK, num_warps=WARPS)")
    new = apply_candidate(text, offered(text, "scale_kernel")["warps"], H100).new_text
    assert "WARPS, UNUSED = 4, 0" not in new and re.search(r"WARPS, UNUSED = \d+, 0", new)


def test_literal_grid_and_launch_change_together():
    cand = next(c for c in applicable(analyze(LITERAL_GRID), "scale_kernel", H100) if c.params == {"BLOCK": 1024})
    new = apply_candidate(LITERAL_GRID, cand, H100).new_text
    assert "scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)" in new


def test_round_up_grid_and_positional_block_change_together():
    cand = next(c for c in applicable(analyze(POSITIONAL_ROUNDUP), "scale_kernel", H100) if c.params == {"BLOCK": 2048})
    new = apply_candidate(POSITIONAL_ROUNDUP, cand, H100).new_text
    assert "grid = ((n + 2047) // 2048,)" in new and "scale_kernel[grid](x, out, n, 2048)" in new


def test_autotune_takes_a_positional_block_and_a_literal_grid():
    new = apply_candidate(POSITIONAL_ROUNDUP, offered(POSITIONAL_ROUNDUP, "scale_kernel")["autotune"], H100).new_text
    assert 'grid = lambda META: ((n + META["BLOCK"] - 1) // META["BLOCK"],)' in new
    assert "scale_kernel[grid](x, out, n)" in new


def test_two_equal_literals_in_a_2d_grid_are_told_apart():
    cand = next(c for c in applicable(analyze(MATMUL_2D_LITERALS), "mm_kernel", H100)
                if c.action == "tiling" and c.params["BLOCK_M"] != c.params["BLOCK_N"])  # sides that differ
    m, n = cand.params["BLOCK_M"], cand.params["BLOCK_N"]
    new = apply_candidate(MATMUL_2D_LITERALS, cand, H100).new_text
    assert f"mm_kernel[(triton.cdiv(M, {m}), triton.cdiv(N, {n}))]" in new


def test_module_constants_set_blocks_and_warps():
    actions = offered(MODULE_CONSTANT, "scale_kernel")
    new = apply_candidate(MODULE_CONSTANT, actions["warps"], H100).new_text
    assert f"NUM_WARPS = {actions['warps'].params['num_warps']}" in new
    tiled = apply_candidate(MODULE_CONSTANT, actions["tiling"], H100).new_text
    assert f"BLOCK_SIZE = {actions['tiling'].params['BLOCK']}" in tiled


def test_module_constant_used_for_something_else_is_not_tuned():
    text = MODULE_CONSTANT.replace("    out = torch.empty_like(x)\n    scale_kernel", "    out = torch.empty_like(x)\n    pad = torch.zeros(BLOCK_SIZE)\n    scale_kernel")
    assert "tiling" not in offered(text, "scale_kernel")


SHARED_GRID = HEAD + SCALE_KERNEL + '''

@triton.jit
def relu_kernel(y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.maximum(tl.load(y_ptr + offs, mask=offs < n), 0.0), mask=offs < n)


def f(x):
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 256),)
    scale_kernel[grid](x, y, x.numel(), BLOCK=256)
    relu_kernel[grid](y, out, x.numel(), BLOCK=256)
    return out


ENTRY = "f"


def get_inputs(device="cpu"):
    return [torch.randn(1000, device=device)]


def reference(x):
    return torch.relu(2.0 * x + 1.0)
'''


SPELLINGS["shared_grid"] = ("scale_kernel", SHARED_GRID)

# The block is a helper's parameter with a default no caller overrides.
HELPER_DEFAULT = HEAD + SCALE_KERNEL + '''

def _launch(x, out, BLOCK=128, warps=4):
    n = x.numel()
    scale_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=warps)


ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    _launch(x, out)
    return out
''' + SCALE_TAIL
SPELLINGS["helper_default"] = ("scale_kernel", HELPER_DEFAULT)


def test_a_helper_parameter_default_is_the_block():
    cand = next(c for c in applicable(analyze(HELPER_DEFAULT), "scale_kernel", H100) if c.action == "tiling")
    new = apply_candidate(HELPER_DEFAULT, cand, H100).new_text
    assert f"def _launch(x, out, BLOCK={cand.params['BLOCK']}, warps=4):" in new
    # Every caller passing its own literal: that literal is the block, rewritten where it is passed.
    overridden = HELPER_DEFAULT.replace("    _launch(x, out)\n", "    _launch(x, out, 64)\n")
    cand = next(c for c in applicable(analyze(overridden), "scale_kernel", H100) if c.action == "tiling")
    new = apply_candidate(overridden, cand, H100).new_text
    assert f"_launch(x, out, {cand.params['BLOCK']})" in new and "def _launch(x, out, BLOCK=128, warps=4):" in new
    # One caller keeping the default and another passing 64: no single value to change.
    mixed = HELPER_DEFAULT.replace("    _launch(x, out)\n", "    _launch(x, out)\n    _launch(out, out, 64)\n")
    assert "tiling" not in offered(mixed, "scale_kernel")

# Each program covers its block UNROLL times: the grid divides by ``256 * UNROLL``.
UNROLLED = HEAD + '''UNROLL = 4


@triton.jit
def unrolled_kernel(x_ptr, y_ptr, n, UNROLL_FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0) * BLOCK * UNROLL_FACTOR
    for i in tl.static_range(UNROLL_FACTOR):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, 3.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


ENTRY = "triple"


def triple(x):
    y = torch.empty_like(x)
    n = x.numel()
    unrolled_kernel[(triton.cdiv(n, 256 * UNROLL),)](x, y, n, UNROLL_FACTOR=UNROLL, BLOCK=256)
    return y


def get_inputs(device="cpu"):
    return [torch.randn(3000, device=device)]


def reference(x):
    return 3.0 * x
'''
SPELLINGS["unrolled"] = ("unrolled_kernel", UNROLLED)


def test_a_block_factor_of_the_grid_divisor_changes_with_the_block():
    cand = next(c for c in applicable(analyze(UNROLLED), "unrolled_kernel", H100) if c.action == "tiling")
    new = apply_candidate(UNROLLED, cand, H100).new_text
    assert f"unrolled_kernel[(triton.cdiv(n, {cand.params['BLOCK']} * UNROLL),)]" in new


def test_grid_shared_with_another_kernel_gets_a_private_copy():
    text = SHARED_GRID
    cand = offered(text, "scale_kernel")["tiling"]
    new = apply_candidate(text, cand, H100).new_text
    block = cand.params["BLOCK"]
    assert "    grid = (triton.cdiv(x.numel(), 256),)\n" in new  # relu's grid stays
    assert f"scale_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, x.numel(), BLOCK={block})" in new
    assert "relu_kernel[grid](y, out, x.numel(), BLOCK=256)" in new
    assert "name_block" not in offered(text, "scale_kernel")  # a name in the shared grid would tie the two


def test_host_constant_sizing_another_kernels_grid_is_not_tuned():
    # BLOCK sizes both grids, but relu passes its block as the literal 256: changing BLOCK would break relu.
    text = HEAD + SCALE_KERNEL + '''

@triton.jit
def relu_kernel(y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.maximum(tl.load(y_ptr + offs, mask=offs < n), 0.0), mask=offs < n)


def f(x):
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    BLOCK = 256
    grid = (triton.cdiv(x.numel(), BLOCK),)
    scale_kernel[grid](x, y, x.numel(), BLOCK=BLOCK)
    relu_kernel[grid](y, out, x.numel(), BLOCK=256)
    return out
'''
    assert "tiling" not in offered(text, "scale_kernel")


def test_ambiguous_2d_literal_grid_is_refused_with_a_reason():
    # Both blocks are 32 and the grid divides host names the kernel never sees: nothing says which is which.
    text = MATMUL_2D_LITERALS.replace("mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))]",
                                      "rows, cols = c.shape\n    mm_kernel[(triton.cdiv(rows * cols, 32 * 32),)]")
    assert "tiling" not in offered(text, "mm_kernel")


def test_name_block_names_the_literal_and_refuses_stale_params():
    actions = offered(LITERAL_GRID, "scale_kernel")
    new = apply_candidate(LITERAL_GRID, actions["name_block"], H100).new_text
    assert "    BLOCK = 64\n    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)" in new
    assert "name_block" not in offered(new, "scale_kernel")  # nothing left to name
    assert "tiling" in offered(new, "scale_kernel")
    with pytest.raises(ActionError):
        apply_candidate(new, actions["name_block"], H100)


def test_name_block_in_a_loop_of_a_method():
    new = apply_candidate(METHOD_IN_LOOP, offered(METHOD_IN_LOOP, "scale_kernel")["name_block"], H100).new_text
    assert "            BLOCK = 32\n            scale_kernel[(triton.cdiv(n, BLOCK),)](part, out, n, BLOCK=BLOCK)" in new


@pytest.mark.slow
def test_every_spelling_stays_equivalent_under_the_interpreter(tmp_path):
    jobs = []
    for name, (kernel, text) in sorted({**SPELLINGS, "factory_result": ("scale_kernel", FACTORY_RESULT)}.items()):
        tol = TOL_FP16 if "float16" in text else TOL_FP32
        jobs.append(job(tmp_path, f"{name}:reference", text, text, tol, reference=True))
        for action, cand in offered(text, kernel).items():
            new = apply_candidate(text, cand, H100).new_text
            jobs.append(job(tmp_path, f"{name}:{cand.key()}", text, new, tol))
            if action == "name_block":  # the named form must be tunable and stay equivalent too
                tiled = apply_candidate(new, offered(new, kernel)["tiling"], H100).new_text
                jobs.append(job(tmp_path, f"{name}:name_block+tiling", text, tiled, tol))
    results = run_jobs(jobs, tmp_path)
    failures = [f"{r['name']}: diff={r['max_abs_diff']} {r['error'] or ''}" for r in results if not r["ok"]]
    assert not failures, "\n".join(failures)
    assert len(results) >= 3 * len(SPELLINGS)


def test_module_constant_shared_by_a_meta_lambda_launch():
    # relu's grid names the constant, sum's grid reads meta["BLOCK_SIZE"]: both follow the block, so both tune together.
    text = HEAD + '''BLOCK = 1024


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n_elements), 0.0), mask=offs < n_elements)


@triton.jit
def sum_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0), axis=0))


def pipeline(x):
    out = torch.empty_like(x)
    total = torch.zeros(1)
    relu_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK_SIZE=BLOCK)
    sum_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](out, total, x.numel(), BLOCK_SIZE=BLOCK)
    return out, total
'''
    assert {"tiling", "autotune"} <= set(offered(text, "sum_kernel"))
    assert "tiling" in offered(text, "relu_kernel")
    tuned = apply_candidate(text, offered(text, "sum_kernel")["autotune"], H100).new_text
    assert 'sum_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](out, total, x.numel())' in tuned


def test_a_kernel_jitted_by_a_call_is_tuned_at_the_launch_of_the_name_bound():
    new = apply_candidate(JIT_CALL_ALIAS, offered(JIT_CALL_ALIAS, "_scale")["tiling"], H100).new_text
    assert "scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)" in new


def test_autotune_wraps_the_jitting_call():
    new = apply_candidate(JIT_CALL_ALIAS, offered(JIT_CALL_ALIAS, "_scale")["autotune"], H100).new_text
    assert '    key=["n"],\n)(triton.jit(do_not_specialize=["n"])(_scale))\n' in new
    assert "scale_kernel[lambda META: (triton.cdiv(x.numel(), META[\"BLOCK\"]),)](x, out, x.numel())" in new
    kernel = analyze(new).kernel("_scale")
    assert [d.name for d in kernel.decorators] == ["autotune", "jit"] and kernel.autotune.configs
    # Tuned now: no second autotune; the configs already hold every row block tiling would add.
    assert not {"autotune", "tiling"} & set(offered(new, "_scale"))


def test_tiling_adds_a_config_to_an_autotune_call_around_the_jit_call():
    text = (Path(__file__).parent / "corpus" / "realworld" / "jit_by_call.py").read_text()
    cand = next(c for c in applicable(analyze(text), "_square", H100) if c.action == "tiling")
    new = apply_candidate(text, cand, H100).new_text
    block = cand.params["BLOCK"]
    assert f'triton.Config({{"BLOCK": 1024}}, num_warps=4), triton.Config({{"BLOCK": {block}}}, num_warps=' in new
    assert [cfg.kwargs["BLOCK"] for cfg in analyze(new).kernel("_square").autotune.configs] == [256, 1024, block]


def test_a_factorys_kernel_is_tuned_at_the_launch_of_its_result_but_not_autotuned():
    actions = offered(FACTORY_RESULT, "scale_kernel")
    assert {"tiling", "warps"} <= set(actions) and "autotune" not in set(actions)
    new = apply_candidate(FACTORY_RESULT, actions["tiling"], H100).new_text
    assert "kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, num_warps=4)" in new
    autotune = Candidate("autotune", "Autotune", "scale_kernel", {"configs": 4}, "autotune", 0)
    with pytest.raises(ActionError, match="made by make_scale"):
        apply_candidate(FACTORY_RESULT, autotune, H100)


def test_definition_edits_refuse_a_kernel_jitted_by_a_call():
    fusion = Candidate("fusion", "Fusion", "_scale", {"consumer": "_scale"}, "fuse", 0)
    with pytest.raises(ActionError, match="jitted by a call"):
        apply_candidate(JIT_CALL_ALIAS, fusion, H100)


REALWORLD = Path(__file__).parent / "corpus" / "realworld"


@pytest.mark.parametrize("name", ["jit_by_call.py", "kernel_factory.py", "jit_spellings.py"])
def test_every_candidate_offered_for_other_spellings_applies(name):
    text = (REALWORLD / name).read_text()
    analysis = analyze(text)
    offered_keys = []
    for kernel in analysis.kernels:
        for cand in applicable(analysis, kernel, H100):
            new = analyze(apply_candidate(text, cand, H100).new_text)
            assert new.kernel(kernel.name) is not None and len(new.launches) == len(analysis.launches), cand.key()
            offered_keys.append(cand.key())
    assert offered_keys


def test_contiguity_hints_keep_the_files_spelling_of_triton_language():
    text = (REALWORLD / "jit_spellings.py").read_text()
    hints = {}
    for kernel in ("plain_jit", "tuned_jit"):
        cand = next(c for c in applicable(analyze(text), kernel, H100) if c.action == "contiguity")
        new = apply_candidate(text, cand, H100).new_text
        hints[kernel] = next(line.strip() for line in new.splitlines() if "max_contiguous" in line)
    assert hints == {"plain_jit": "offs = language.max_contiguous(language.multiple_of(offs, BLOCK), BLOCK)",
                     "tuned_jit": "offs = tl2.max_contiguous(tl2.multiple_of(offs, BLOCK), BLOCK)"}


def _language_spelled(text: str, spelling: str) -> str:
    """``text`` with triton.language written as ``tlang.`` (an alias) or ``triton.language.`` (no alias)."""
    header = "import triton.language as tlang\n" if spelling == "tlang" else ""
    return re.sub(r"\btl\.", f"{spelling}.", text).replace("import triton.language as tl\n", header)


@pytest.mark.parametrize("spelling", ["tlang", "triton.language"])
@pytest.mark.parametrize("name", ["matmul_2d_literals", "matmul_cdiv_loop"])
def test_matmul_steps_write_the_files_spelling_of_triton_language(name, spelling):
    kernel, text = SPELLINGS[name]
    spelled = _language_spelled(text, spelling)
    keys = set()
    for cand in applicable(analyze(spelled), kernel, H100):
        keys.add(cand.key())
        new = apply_candidate(spelled, cand, H100).new_text
        assert not re.search(r"(?<![\w.])tl\.", new), cand.key()  # no `tl` in a file that does not bind it
    expected = {c.key() for c in applicable(analyze(text), kernel, H100)}
    if spelling == "tlang":  # split-K reads only `tl.` and `triton.language.`: it is not offered, never wrong
        expected = {k for k in expected if not k.startswith("split_k")}
    assert keys == expected


def test_pipelining_a_loop_writes_tl_range_as_the_kernel_writes_tl_dot():
    kernel, text = SPELLINGS["matmul_2d_literals"]
    spelled = _language_spelled(text, "tlang")
    unlaunched = spelled[:spelled.index("\n\nENTRY")] + "\n"  # no launch: the stages go on the loop
    cand = next(c for c in applicable(analyze(unlaunched), kernel, H100) if c.action == "pipelining")
    new = apply_candidate(unlaunched, cand, H100).new_text
    assert f"for k in tlang.range(0, K, BLOCK_K, num_stages={cand.params['num_stages']}):" in new


def test_tiling_adds_a_config_to_a_kernel_tuned_again_under_its_own_name():
    text = JIT_CALL.replace("scale_kernel = triton.jit(scale_kernel)\n", "scale_kernel = triton.jit(scale_kernel)\n"
                            'scale_kernel = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])(scale_kernel)\n')
    text = text.replace("[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)",
                        '[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())')
    cand = next(c for c in applicable(analyze(text), "scale_kernel", H100) if c.action == "tiling")
    new = apply_candidate(text, cand, H100).new_text
    assert f'configs=[triton.Config({{"BLOCK": 64}}), triton.Config({{"BLOCK": {cand.params["BLOCK"]}}}' in new
