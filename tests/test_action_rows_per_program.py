"""rows_per_program: one-row-per-program reductions take BLOCK_M rows as 2-D tiles, and nothing unprovable does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import (
    ActionError,
    Candidate,
    applicable,
    apply_candidate,
)
from mtmc_lsp.optimizer.actions.rows_per_program import ACTION
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy import HeuristicPolicy, PolicyState

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "benchmarks" / "wild" / "dev"
CORPUS = ROOT / "tests" / "corpus" / "kernels"
H100 = get_profile("h100")

# Whole row in one block, a per-row scalar out (argmax) and a row out (the row minus its max);
# the program id is used inline, never bound to a name.
ARGMAX = '''import torch
import triton
import triton.language as tl


@triton.jit
def argmax_shift_kernel(x_ptr, idx_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * stride + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(idx_ptr + tl.program_id(0), tl.argmax(x, axis=0))
    m = tl.max(x, axis=0)
    tl.store(y_ptr + tl.program_id(0) * stride + cols, tl.where(cols < n_cols, x - m, 0.0), mask=cols < n_cols)


def argmax_shift(x):
    idx = torch.empty(x.shape[0], device=x.device, dtype=torch.int32)
    y = torch.empty_like(x)
    argmax_shift_kernel[(x.shape[0],)](x, idx, y, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return idx, y
'''

# L2 norm with a loop over the row in 32-wide blocks: scalar accumulator carried around the loop.
L2_LOOP = '''import torch
import triton
import triton.language as tl


@triton.jit
def l2_norm_kernel(x_ptr, y_ptr, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    ss = 0.0
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        ss += tl.sum(x * x, axis=0)
    inv = 1.0 / tl.sqrt(ss + 1e-12)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * n_cols + cols, x * inv, mask=cols < n_cols)


def l2_norm(x):
    M, N = x.shape
    y = torch.empty_like(x)
    l2_norm_kernel[(M,)](x, y, N, BLOCK_N=32)
    return y
'''

L2_POSITIONAL = L2_LOOP.replace("(x, y, N, BLOCK_N=32)", "(x, y, N, 32)")

# Masked softmax over the last axis of a 3-D tensor viewed as rows.
MASKED_SOFTMAX = '''import torch
import triton
import triton.language as tl


@triton.jit
def masked_softmax_kernel(x_ptr, m_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = tl.load(m_ptr + row * n_cols + cols, mask=cols < n_cols, other=0)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    x = tl.where(keep != 0, x, -float("inf"))
    z = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, z / tl.sum(z, axis=0), mask=cols < n_cols)


def masked_softmax(x, keep):
    B, H, N = x.shape
    y = torch.empty_like(x)
    masked_softmax_kernel[(B * H,)](x, keep, y, N, BLOCK=triton.next_power_of_2(N))
    return y
'''

# Unsloth-style RMS norm: row pointers moved with ``+=``, tl.math.rsqrt, the inverse rms stored per row.
RMS_UNSLOTH = '''import torch
import triton
import triton.language as tl


@triton.jit
def _rms_layernorm_forward(Y, Y_row_stride, X, X_row_stride, W, r, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    Y += row_idx * Y_row_stride
    X += row_idx * X_row_stride
    r += row_idx
    X_row = tl.load(X + col_offsets, mask = mask, other = 0).to(tl.float32)
    W_row = tl.load(W + col_offsets, mask = mask, other = 0)
    row_var = tl.sum(X_row * X_row, axis = 0) / n_cols
    inv_var = tl.math.rsqrt(row_var + eps)
    tl.store(r, inv_var)
    normed = (X_row * inv_var).to(W_row.dtype)
    tl.store(Y + col_offsets, normed * W_row, mask = mask)


def rms_layernorm(X, W, eps=1e-6):
    n_rows, n_cols = X.shape
    Y = torch.empty_like(X)
    r = torch.empty(n_rows, dtype=torch.float32, device=X.device)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    _rms_layernorm_forward[(n_rows,)](Y, Y.stride(0), X, X.stride(0), W, r, n_cols, eps, BLOCK_SIZE = BLOCK_SIZE, num_warps = 4)
    return Y, r
'''

# FLA-style L2 norm: autotuned over warps only, the row block from the width, a grid (T,).
L2_FLA = '''import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=1), triton.Config({}, num_warps=4)], key=["D"])
@triton.jit
def l2norm_fwd_kernel(x, y, eps, D, BD: tl.constexpr):
    i_t = tl.program_id(0)
    x += i_t * D
    y += i_t * D
    cols = tl.arange(0, BD)
    mask = cols < D
    b_x = tl.load(x + cols, mask=mask, other=0.0).to(tl.float32)
    b_rstd = 1 / tl.sqrt(tl.sum(b_x * b_x, axis=0) + eps)
    tl.store(y + cols, b_x * b_rstd, mask=mask)


def l2norm(x, eps=1e-6):
    T, D = x.shape
    y = torch.empty_like(x)
    l2norm_fwd_kernel[(T,)](x, y, eps, D, BD=triton.next_power_of_2(D))
    return y
'''

# An int64 row index bound with ``.to``, positional and missing reduction axes.
LSE_I64 = '''import torch
import triton
import triton.language as tl


@triton.jit
def lse_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + pid * stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, 0)
    tl.store(out_ptr + pid, m + tl.log(tl.sum(tl.exp(x - m))))


def lse(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    lse_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=2)
    return out
'''

# An elementwise row kernel (no reduction): the program id used inline as an int64, row pointers moved
# with ``+=``, a per-row scale, and device functions of the file (one calling another) on the row.
GEGLU_ROWS = '''import torch
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def gelu_tanh(x, scale):
    """tanh-approximated GELU, scaled."""
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1 + _tanh(inner)) * scale


@triton.jit
def geglu_rows_kernel(a_ptr, b_ptr, c_ptr, s_ptr, w_ptr, stride_a, stride_c, n_cols, BLOCK: tl.constexpr):
    a_ptr += tl.program_id(0).to(tl.int64) * stride_a
    b_ptr += tl.program_id(0).to(tl.int64) * stride_a
    c_ptr += tl.program_id(0).to(tl.int64) * stride_c
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    s = tl.load(s_ptr + tl.program_id(0))
    w = tl.load(w_ptr + cols, mask=mask, other=1.0)
    a = tl.load(a_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(c_ptr + cols, gelu_tanh(a, s) * w * b, mask=mask)


def geglu_rows(a, b, s, w):
    n_rows, n_cols = a.shape
    c = torch.empty_like(a)
    geglu_rows_kernel[(n_rows,)](a, b, c, s, w, a.stride(0), c.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return c
'''

# Liger's SwiGLU backward: the gradients overwrite the rows of a and b they were computed from (in place).
SWIGLU_BACKWARD = '''import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu_backward_kernel(dc_ptr, a_ptr, b_ptr, stride, n_cols: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    program_id = tl.program_id(0).to(tl.int64)
    dc_ptr += program_id * stride
    a_ptr += program_id * stride
    b_ptr += program_id * stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    dc_row = tl.load(dc_ptr + col_offsets, mask=mask, other=0)
    a_row = tl.load(a_ptr + col_offsets, mask=mask, other=0).to(tl.float32)
    b_row = tl.load(b_ptr + col_offsets, mask=mask, other=0)
    sig_a = tl.sigmoid(a_row)
    silu_a = a_row * sig_a
    db_row = dc_row * silu_a
    da_row = dc_row * (silu_a * (1 - sig_a) + sig_a) * b_row
    tl.store(a_ptr + col_offsets, da_row, mask=mask)
    tl.store(b_ptr + col_offsets, db_row, mask=mask)


def swiglu_backward(a, b, dc):
    ori_shape = dc.shape
    n_cols = ori_shape[-1]
    dc = dc.view(-1, n_cols)
    n_rows = dc.shape[0]
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    _swiglu_backward_kernel[(n_rows,)](dc, a, b, dc.stride(-2), n_cols=n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return a.view(*ori_shape), b.view(*ori_shape)
'''

ROPE = (DEV / "ew_rope_lightllm.py").read_text()
# The head axis made unusable as a row index (``% H`` without ``// H``: as far as the store shows, heads could share
# addresses; the values are the same, the grid has H heads): tokens become the rows. (The kernel model reads ``// 1`` as
# the id itself, so that spelling no longer hides the head axis.)
ROPE_TOKENS = ROPE.replace("cur_head = tl.program_id(1)", "cur_head = tl.program_id(1) % H")

# Interpreter runner: each job's host function on the same inputs, before and after, every output compared.
RUNNER = r'''
import importlib.util, json, sys, torch
from triton.runtime import autotuner
# No GPU timer in the interpreter: every autotune config "takes" the same time (as tests/corpus/kernels/_equivalence.py).
autotuner.Autotuner.do_bench = property(lambda self: (lambda fn, quantiles: (fn(), [1.0] * len(quantiles))[1]))
jobs, results = json.load(open(sys.argv[1])), []
def load(path, tag):
    spec = importlib.util.spec_from_file_location(tag, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
def call(module, job, inputs):
    fn = eval(job["entry"], {"m": module})
    out = fn(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    return list(out) if isinstance(out, (tuple, list)) else [out]
for i, job in enumerate(jobs):
    before, after = load(job["before"], "b%d" % i), load(job["after"], "a%d" % i)
    worst, error = 0.0, None
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = eval(job["inputs"], {"m": before, "torch": torch})
        want, got = call(before, job, inputs), call(after, job, inputs)
        for w, g in zip(want, got):
            if w.shape != g.shape or w.dtype != g.dtype:
                error = "shape/dtype %s %s != %s %s" % (tuple(g.shape), g.dtype, tuple(w.shape), w.dtype)
                break
            d = (w.double() - g.double()).abs()
            worst = max(worst, float(d.nan_to_num(float("inf")).max()) if d.numel() else 0.0)
    results.append({"name": job["name"], "worst": worst, "error": error})
json.dump(results, open(sys.argv[2], "w"))
'''


def offered(text: str, kernel: str, target=H100) -> list[Candidate]:
    return [c for c in applicable(analyze(text), kernel, target) if c.action == "rows_per_program"]


def why_not(text: str, kernel: str) -> str | None:
    analysis = analyze(text)
    return ACTION.why_not(analysis, analysis.kernel(kernel))


def applied(text: str, kernel: str, tile: int = 8192, sm_cap: int | None = None) -> str:
    """The rewritten text; ``sm_cap`` replaces the programs-per-SM floor so small test inputs get many rows a program."""
    new = apply_candidate(text, Candidate("rows_per_program", "Tiling", kernel, {"TILE": tile}, "t", 0), H100).new_text
    if sm_cap is not None:
        cap = f", {4 * H100.sm_count}))))"
        assert cap in new
        new = new.replace(cap, f", {sm_cap}))))")
    return new


def run_interpreted(tmp_path: Path, jobs: list[dict]) -> dict[str, dict]:
    for i, job in enumerate(jobs):
        for side in ("before", "after"):
            path = tmp_path / f"{i}_{side}.py"
            path.write_text(job[side])
            job[side] = str(path)
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "runner.py").write_text(RUNNER)
    proc = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "jobs.json"), str(tmp_path / "out.json")],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["name"]: r for r in json.loads((tmp_path / "out.json").read_text())}


# ---- what is offered ------------------------------------------------------------------------------
@pytest.mark.parametrize("name,kernel", [
    ("norm_rmsnorm_liger.py", "_rms_norm_forward_kernel"), ("sm_softmax_tutorial.py", "softmax_kernel"),
    ("norm_layernorm_residual.py", "_add_layernorm_fwd"), ("quant_per_token_int8_vllm.py", "_per_token_quant_int8"),
    ("norm_layernorm_tutorial.py", "_layer_norm_fwd_fused"), ("red_row_sum_literal.py", "row_sum_kernel"),
    ("sm_log_softmax_kernelbench.py", "log_softmax_kernel"), ("sm_online_loop.py", "online_softmax_kernel"),
    ("red_col_max.py", "col_max_kernel"),
    # Elementwise row kernels, 2-D grids with one row axis, device functions:
    ("ew_swiglu_liger.py", "_swiglu_forward_kernel"), ("ew_rope_lightllm.py", "_rotary_kernel"),
    ("ew_bias_add_2d.py", "bias_add_kernel"), ("misc_embedding_gather.py", "embedding_kernel"),
    ("norm_rmsnorm_kernelbench.py", "rms_norm_channels_kernel"),
    # A scan along the row (``tl.cumsum(x, axis=0)`` becomes ``axis=1`` of the rows' tile):
    ("red_cumsum_test.py", "cumsum_kernel"),
    # One grid axis split into two indices (``b = pid // C``, ``c = pid % C``): each (b, c) pair is a row.
    ("norm_groupnorm_test.py", "group_norm_kernel"), ("red_mean_kernelbench.py", "mean_dim1_kernel"),
    ("misc_conv1d_depthwise.py", "causal_conv1d_kernel"),
    # Autotuned over the column block, a ``lambda META: (M,)`` grid: the row block comes from a heuristic.
    ("red_var_autotune.py", "var_kernel"), ("norm_rmsnorm_autotune_rows.py", "rms_norm_kernel"),
])
def test_offered_for_row_reductions_of_the_dev_corpus(name, kernel):
    cands = offered((DEV / name).read_text(), kernel)
    assert [c.params for c in cands] == [{"TILE": 4096}, {"TILE": 8192}]
    assert all(c.kind == "Tiling" for c in cands)


@pytest.mark.parametrize("text,kernel", [(ARGMAX, "argmax_shift_kernel"), (L2_LOOP, "l2_norm_kernel"),
                                         (MASKED_SOFTMAX, "masked_softmax_kernel"), (RMS_UNSLOTH, "_rms_layernorm_forward"),
                                         (L2_FLA, "l2norm_fwd_kernel"), (LSE_I64, "lse_kernel"),
                                         (GEGLU_ROWS, "geglu_rows_kernel"), (ROPE_TOKENS, "_rotary_kernel"),
                                         (SWIGLU_BACKWARD, "_swiglu_backward_kernel")])
def test_offered_for_argmax_l2_norm_and_masked_softmax(text, kernel):
    assert offered(text, kernel)


@pytest.mark.parametrize("name,kernel,reason", [
    ("sm_cross_entropy_liger.py", "liger_cross_entropy_kernel", "branches on a per-row value"),
    ("sm_logsumexp_heuristics.py", "logsumexp_kernel", "heuristics"),
    ("ew_add_relu_chain.py", "add_kernel", "no reduction over the row"),
    # ``pid * BLOCK + tl.arange(0, BLOCK)``: flat 1-D, where tiling makes the block bigger.
    ("ew_gelu_unsloth.py", "_exact_forward_kernel", "flat elementwise kernel"),
    ("mm_bmm_3d.py", "bmm_kernel", "no grid axis is only a row index: axis 0: subscript"),
    ("ew_swiglu_liger.py", "silu", "exactly one launch"),
])
def test_refused_with_a_reason(name, kernel, reason):
    text = (DEV / name).read_text()
    assert not offered(text, kernel)
    assert reason in why_not(text, kernel)


SOFTMAX = (DEV / "sm_softmax_tutorial.py").read_text()


@pytest.mark.parametrize("old,new,reason", [
    # Two programs per row: rows would share their store addresses.
    ("row_idx = tl.program_id(0)", "row_idx = tl.program_id(0) // 2", "reaches the row index only through `//` or `%`"),
    ("row_idx = tl.program_id(0)", "row_idx = tl.program_id(0) << 1", "more than + - * / // %"),
    ("tl.max(row, axis=0)", "tl.max(row, axis=0) + tl.load(input_ptr)", None),  # a row-independent load: still fine
    ("denominator = tl.sum(numerator, axis=0)", "denominator = tl.sum(numerator, axis=0)\n    tl.atomic_add(output_ptr, 1.0)",
     "tl.atomic_add"),
    ("tl.store(output_row_start_ptr + col_offsets", "tl.store(output_ptr + col_offsets", "same for every row"),
    ("row_minus_max = row - tl.max(row, axis=0)", ("row_minus_max = row - tl.max(row, axis=0)\n    if row_idx > 3:\n"
                                                   "        row_minus_max = row_minus_max * 2"), "branches on a per-row value"),
    ("softmax_kernel[(n_rows,)]", "softmax_kernel[lambda meta: [n_rows]]", "not a literal"),
    ("softmax_kernel[(n_rows,)]", "softmax_kernel[lambda meta: (n_rows // meta['num_warps'],)]", "reads the grid lambda's meta"),
    ("softmax_kernel[(n_rows,)]", "softmax_kernel[lambda meta: (n_rows,)]", None),  # a lambda returning a tuple is a literal grid
    ("softmax_kernel[(n_rows,)]", "softmax_kernel[(n_rows, 1)]", None),  # a second axis of one program: still rows
    ("numerator = tl.exp(row_minus_max)", "numerator = tl.exp(row_minus_max)\n    numerator = numerator[None, :]",
     "subscript"),
    ("row_idx = tl.program_id(0)", ("row_idx = tl.program_id(0)\n    other_row = tl.load(input_ptr + row_idx * 0 + 5 + col_offsets)\n"
                                    "    tl.store(output_ptr + col_offsets, other_row)"), "same for every row"),
    ("denominator = tl.sum(numerator, axis=0)", "denominator = tl.sum(numerator, axis=0, keep_dims=True)", "plain reduction"),
    ("denominator = tl.sum(numerator, axis=0)", ("denominator = tl.sum(numerator, axis=0)\n    for i in range(row_idx):\n"
                                                 "        denominator += 1.0"), "has bounds from the row index"),
    ("n_rows, n_cols = x.shape", "n_rows, n_cols = x.shape\n    softmax_kernel[(n_rows,)](x, x, 1, 1, n_rows, n_cols, BLOCK_SIZE=8)",
     "exactly one launch"),
    # Writes through the pointer it reads: a row could read another row's result.
    ("output_row_start_ptr = output_ptr + row_idx", "output_row_start_ptr = input_ptr + 1 + row_idx", "which it also loads"),
])
def test_refused_when_a_precondition_breaks(old, new, reason):
    assert old in SOFTMAX
    text = SOFTMAX.replace(old, new, 1)
    if reason is None:
        assert offered(text, "softmax_kernel")
    else:
        assert not offered(text, "softmax_kernel")
        assert reason in why_not(text, "softmax_kernel")


@pytest.mark.parametrize("old,new,reason", [
    # A device function that is not elementwise in its arguments.
    ("return 2 * tl.sigmoid(2 * x) - 1", "return 2 * tl.sigmoid(2 * x) - tl.sum(x, axis=0)", "uses tl.sum: it is not elementwise"),
    ("return 2 * tl.sigmoid(2 * x) - 1", "return 2 * tl.sigmoid(2 * x) - tl.load(x)", "uses tl.load"),
    ("return 2 * tl.sigmoid(2 * x) - 1", "return 2 * tl.sigmoid(2 * x) - tl.program_id(0)", "uses tl.program_id"),
    ("return 2 * tl.sigmoid(2 * x) - 1", "y = x[None, :]\n    return y", "subscript"),
    ("return 2 * tl.sigmoid(2 * x) - 1", "return _tanh(x)", "calls device functions too deeply"),  # recursion
    ("    return 0.5 * x * (1 + _tanh(inner)) * scale", "    if scale > 0:\n        x = -x\n    return x",
     "branches on a per-row value"),
    # The program id stepping the stores by the block itself: flat, not rows (the kernel model reads the store's
    # index; an input whose rows happen to be BLOCK apart, like a rotary cos table, does not make it flat).
    ("tl.program_id(0).to(tl.int64) * stride_c\n", "tl.program_id(0).to(tl.int64) * BLOCK\n", "flat elementwise"),
])
def test_device_functions_and_elementwise_rows_are_checked(old, new, reason):
    assert old in GEGLU_ROWS
    text = GEGLU_ROWS.replace(old, new, 1)
    assert not offered(text, "geglu_rows_kernel")
    assert reason in why_not(text, "geglu_rows_kernel")


@pytest.mark.parametrize("old,new,reason", [
    ("    cur_seq = tl.program_id(0)\n    cur_head = tl.program_id(1)\n",
     "    cur_seq = tl.program_id(0) // 2\n    cur_head = tl.program_id(1) // 2\n",
     "no grid axis is only a row index: axis 0: `tl.store(Out + off_o0"),
    ("    cur_head = tl.program_id(1)\n", "    cur_head = tl.program_id(1) + 0 * tl.num_programs(1)\n", None),
    ("    grid = (total_len, head_num)\n", "    grid = (total_len, head_num)\n    total_len = total_len + 0\n",
     "binds more than once"),
    ("_rotary_kernel[grid]", "_rotary_kernel[lambda meta: grid]", "not a literal tuple"),
])
def test_a_two_axis_grid_needs_one_row_axis(old, new, reason):
    assert old in ROPE
    text = ROPE.replace(old, new, 1)
    if reason is None:  # tl.num_programs(1) refuses the head axis (heads are preferred otherwise): tokens are the rows
        assert "cur_seq = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)" in applied(text, "_rotary_kernel")
        return
    assert not offered(text, "_rotary_kernel")
    assert reason in why_not(text, "_rotary_kernel")


@pytest.mark.parametrize("old,new", [
    ("tl.store(a_ptr + col_offsets, da_row", "tl.store(a_ptr + col_offsets + 1, da_row"),  # a neighbour's element
    ("    sig_a = tl.sigmoid(a_row)\n", "    a_ptr += stride\n    sig_a = tl.sigmoid(a_row)\n"),  # the next row
    ("    col_offsets = tl.arange(0, BLOCK_SIZE)\n",
     "    col_offsets = tl.arange(0, BLOCK_SIZE)\n    if n_cols > 4:\n        a_ptr += 0\n"),  # rebound inside a branch
])
def test_in_place_rows_need_the_same_address_throughout(old, new):
    assert old in SWIGLU_BACKWARD
    text = SWIGLU_BACKWARD.replace(old, new, 1)
    assert not offered(text, "_swiglu_backward_kernel")
    reason = why_not(text, "_swiglu_backward_kernel")
    assert reason.startswith("stores through a_ptr") and "which it also loads" in reason


def test_a_loop_accumulator_that_cannot_widen_is_refused():
    text = L2_LOOP.replace("    ss = 0.0\n", "    ss = tl.load(x_ptr) * 0.0\n")
    assert "cannot be widened" in why_not(text, "l2_norm_kernel")


# ---- what the edit looks like ---------------------------------------------------------------------
def test_the_softmax_edit_reuses_n_rows_and_keeps_the_launch_warps_for_one_row():
    new = applied(SOFTMAX, "softmax_kernel")
    assert "def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, " \
           "BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):" in new
    assert "row_mask = row_idx < n_rows" in new
    assert "row_minus_max = row - tl.max(row, axis=1)[:, None]" in new
    assert "softmax_output = numerator / denominator[:, None]" in new
    assert "BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))" in new
    assert "softmax_kernel[(triton.cdiv(n_rows, BLOCK_M),)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, " \
           "BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else num_warps, BLOCK_SIZE=BLOCK_SIZE)" in new
    # Applied once, the row index is a vector: not offered again, and the stale candidate is refused.
    assert not offered(new, "softmax_kernel")
    with pytest.raises(ActionError):
        applied(new, "softmax_kernel")


def test_an_inline_program_id_becomes_one_named_row_vector():
    new = applied(ARGMAX, "argmax_shift_kernel")
    assert "    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n    row_mask = rows < n_rows\n" in new
    assert "tl.program_id(0)" not in new.split("row_mask = ")[1]
    assert "tl.store(idx_ptr + rows, tl.argmax(x, axis=1), mask=row_mask)" in new
    assert "argmax_shift_kernel[(triton.cdiv(x.shape[0], BLOCK_M),)](x, idx, y, x.stride(0), x.shape[1], x.shape[0], " in new


def test_an_int64_row_index_and_warps_only_autotune():
    new = applied(LSE_I64, "lse_kernel")
    assert "pid = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)" in new
    assert "m = tl.max(x, 1)" in new and "tl.sum(tl.exp(x - m[:, None]), axis=1)" in new
    assert "num_warps=8 if BLOCK_M > 1 else 2" in new
    fla = applied(L2_FLA, "l2norm_fwd_kernel")
    assert "num_warps" not in fla.split("def l2norm(")[1]  # the configs keep choosing the warps
    assert "l2norm_fwd_kernel[(triton.cdiv(T, BLOCK_M),)](x, y, eps, D, T, BD=triton.next_power_of_2(D), BLOCK_M=BLOCK_M)" in fla
    # A config that sets the block (the other passes it at the launch): the row block comes from a heuristic instead.
    blocks = L2_FLA.replace("triton.Config({}, num_warps=1)", "triton.Config({\"BD\": 64}, num_warps=1)")
    assert '@triton.heuristics({"BLOCK_M": ' in applied(blocks, "l2norm_fwd_kernel")


def test_loop_accumulators_start_as_row_vectors():
    new = applied((DEV / "norm_layernorm_tutorial.py").read_text(), "_layer_norm_fwd_fused", tile=4096)
    assert "_mean = tl.zeros([BLOCK_M, BLOCK_SIZE], dtype=tl.float32)" in new
    assert "mean = tl.sum(_mean, axis=1) / N" in new
    assert "x = tl.where(cols < N, x - mean[:, None], 0.)" in new
    assert "tl.store(Mean + row, mean, mask=row_mask)" in new
    assert "BLOCK_M = max(1, min(4096 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(M, 528))))" in new
    assert "num_warps=4, num_ctas=1" in new  # 4096 elements keep the launch's 4 warps
    l2 = applied(L2_LOOP, "l2_norm_kernel")
    assert "ss = tl.zeros([BLOCK_M], dtype=tl.float32)" in l2
    # A literal column block is named, so retiling it later keeps BLOCK_M * BLOCK_N at the tile.
    assert "    BLOCK_N = 32\n    BLOCK_M = max(1, min(8192 // BLOCK_N, " in l2
    assert "l2_norm_kernel[(triton.cdiv(M, BLOCK_M),)](x, y, N, M, BLOCK_N=BLOCK_N, BLOCK_M=BLOCK_M, " in l2
    positional = applied(L2_POSITIONAL, "l2_norm_kernel")
    assert "l2_norm_kernel[(triton.cdiv(M, BLOCK_M),)](x, y, N, M, BLOCK_N, BLOCK_M=BLOCK_M, " in positional


def test_a_column_program_id_gets_column_names():
    new = applied((DEV / "red_col_max.py").read_text(), "col_max_kernel")
    assert "col = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)" in new
    assert "acc = tl.full([BLOCK_COLS, BLOCK_M], float(\"-inf\"), dtype=tl.float32)" in new
    assert "tl.store(out_ptr + col, tl.max(acc, axis=1), mask=col_mask)" in new


def test_an_elementwise_row_kernel_with_device_functions():
    new = applied(GEGLU_ROWS, "geglu_rows_kernel")
    assert "    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n    row_mask = rows < n_rows\n" in new
    assert "    a_ptr += rows.to(tl.int64) * stride_a\n" in new
    assert "s = tl.load(s_ptr + rows, mask=row_mask)" in new
    assert "w = tl.load(w_ptr + cols, mask=mask, other=1.0)" in new  # one load of the weights serves the row block
    # The per-row scale meets the row block at the call: the device function itself is unchanged.
    assert "tl.store(c_ptr[:, None] + cols[None, :], gelu_tanh(a, s[:, None]) * w * b, mask=row_mask[:, None] & mask)" in new
    assert "    return 0.5 * x * (1 + _tanh(inner)) * scale\n" in new
    assert "reductions over axis" not in apply_candidate(
        GEGLU_ROWS, Candidate("rows_per_program", "Tiling", "geglu_rows_kernel", {"TILE": 4096}, "t", 0), H100).summary
    cast = GEGLU_ROWS.replace("a_ptr += tl.program_id(0).to(tl.int64)", "a_ptr += tl.cast(tl.program_id(0), tl.int64)")
    assert "    a_ptr += tl.cast(rows, tl.int64) * stride_a\n" in applied(cast, "geglu_rows_kernel")
    swiglu = applied(_dev("ew_swiglu_liger.py"), "_swiglu_forward_kernel")
    assert "program_id = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)" in swiglu
    assert "c_row = silu(a_row).cast(b_row.dtype) * b_row" in swiglu
    assert "a, b, c, c.stride(-2), n_rows, n_cols=n_cols, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, " \
           "num_warps=8 if BLOCK_M > 1 else num_warps," in swiglu


def test_rotary_heads_become_the_rows_of_a_two_axis_grid():
    new = applied(ROPE, "_rotary_kernel")
    # Heads, not tokens: a token's heads share its cos/sin rows, loaded once per program.
    assert "    cur_seq = tl.program_id(0)\n    cur_head = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)\n" \
           "    row_mask = cur_head < H\n" in new
    assert "off_q1 = cur_seq * stride_qbs + cur_head[:, None] * stride_qh + dim_range1 * stride_qd" in new
    assert "dim_range1 = tl.arange(BLOCK_DMODEL // 2, BLOCK_DMODEL)" in new
    assert "cos = tl.load(Cos + off_dimcos_sin)\n" in new
    assert "tl.store(Out + off_o1, out1.to(Out.dtype.element_ty), mask=row_mask[:, None])" in new
    # The grid name was read by this launch only: the new grid is written there, the other axis kept.
    assert "grid = (" not in new
    assert "    BLOCK_M = max(1, min(8192 // head_dim, triton.next_power_of_2(head_num), " \
           "triton.next_power_of_2(triton.cdiv(head_num * total_len, 528))))\n" \
           "    _rotary_kernel[(total_len, triton.cdiv(head_num, BLOCK_M))](" in new
    tokens = applied(ROPE_TOKENS, "_rotary_kernel")
    assert "cur_seq = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)" in tokens
    assert "cos = tl.load(Cos + off_dimcos_sin, mask=row_mask[:, None])" in tokens
    assert "_rotary_kernel[(triton.cdiv(total_len, BLOCK_M), head_num)](" in tokens
    # A grid name other code reads too stays; the launch gets its own copy.
    shared = ROPE.replace("    return out\n", "    assert len(grid) == 2\n    return out\n", 1)
    kept = applied(shared, "_rotary_kernel")
    assert "    grid = (total_len, head_num)\n" in kept and "_rotary_kernel[(total_len, triton.cdiv(head_num, BLOCK_M))](" in kept


def test_row_facts_are_cached_per_analysis_object_and_dropped_with_it():
    import gc
    import weakref

    from mtmc_lsp.optimizer.actions import rows_per_program as rpp

    analysis = analyze(L2_LOOP)
    facts = rpp.row_facts(analysis, analysis.kernel("l2_norm_kernel"))
    assert facts == rpp.RowFacts("row", 32, True)
    assert rpp.row_facts(analysis, analysis.kernel("l2_norm_kernel")) is facts  # cached
    other = analyze(SOFTMAX)
    assert rpp.row_facts(other, other.kernel("softmax_kernel")).block is None  # its own facts, not the other file's
    key, alive = id(analysis), weakref.ref(analysis)
    del analysis
    gc.collect()
    assert alive() is None and key not in rpp._FACTS  # the cache neither keeps it alive nor outlives it


def test_foreign_params_are_refused():
    with pytest.raises(ActionError):
        apply_candidate(SOFTMAX, Candidate("rows_per_program", "Tiling", "softmax_kernel", {"TILE": 1000}, "t", 0), H100)


def ranked(text: str, kernel: str, target=H100) -> list:
    analysis = analyze(text)
    return HeuristicPolicy().rank(PolicyState(analysis, analysis.kernel(kernel), target, []),
                                  applicable(analysis, kernel, target))


def rpp_score(text: str, kernel: str) -> float:
    return max(r.score for r in ranked(text, kernel) if r.candidate.action == "rows_per_program")


def test_heuristic_prior_follows_the_row_width_measured_on_the_h200():
    # One run-time-wide block per row (the softmax tutorial): 1.8x at 128 columns, about 1.0x at 512+;
    # whole rows did as well or better with 4096-element tiles.
    whole_row = ranked(SOFTMAX, "softmax_kernel")
    assert whole_row[0].candidate.action == "rows_per_program" and whole_row[0].candidate.params == {"TILE": 4096}
    assert whole_row[0].score == 0.6
    narrow = SOFTMAX.replace("BLOCK_SIZE=BLOCK_SIZE", "BLOCK_SIZE=128")
    wide = SOFTMAX.replace("BLOCK_SIZE=BLOCK_SIZE", "BLOCK_SIZE=2048")
    assert narrow != SOFTMAX and rpp_score(narrow, "softmax_kernel") == 0.9
    assert rpp_score(wide, "softmax_kernel") == 0.3  # a row as wide as the tile gains nothing
    # Columns per program (3.1-6.7x; column_block, where offered, ranks above) and rows walked in 64-wide blocks
    # (5-6.6x): first, 8192-element tiles.
    for name, kernel in (("red_col_max.py", "col_max_kernel"), ("red_row_sum_literal.py", "row_sum_kernel")):
        top = ranked(_dev(name), kernel)[0]
        assert top.candidate.action == "rows_per_program" and top.candidate.params == {"TILE": 8192} and top.score >= 0.88


def test_heuristic_puts_one_pass_first_on_a_multi_pass_kernel():
    # Alone on a multi-pass kernel: 0.80x (layernorm tutorial), a compile failure (log_softmax).
    actions = [r.candidate.action for r in ranked(L2_LOOP, "l2_norm_kernel")]
    assert "rows_per_program" in actions and rpp_score(L2_LOOP, "l2_norm_kernel") == 0.45
    online = [r.candidate.action for r in ranked(_dev("sm_online_loop.py"), "online_softmax_kernel")]
    assert online.index("single_pass") < online.index("rows_per_program")


# ---- semantics under the interpreter --------------------------------------------------------------
def _dev(name: str) -> str:
    return (DEV / name).read_text()


INTERPRETED = [
    # name, text, kernel, entry, inputs (small shapes: row counts that leave a partial last block)
    ("rmsnorm_liger", _dev("norm_rmsnorm_liger.py"), "_rms_norm_forward_kernel", "m.rms_norm_forward",
     "m.get_inputs(device='cpu', batch=3, seq_len=13, hidden=100)"),
    ("softmax_tutorial", SOFTMAX, "softmax_kernel", "m.softmax", "m.get_inputs(device='cpu', rows=37, cols=100)"),
    ("layernorm_residual", _dev("norm_layernorm_residual.py"), "_add_layernorm_fwd", "m.add_layernorm",
     "m.get_inputs(device='cpu', tokens=37, hidden=72)"),
    ("quant_int8", _dev("quant_per_token_int8_vllm.py"), "_per_token_quant_int8", "m.per_token_quant_int8",
     "m.get_inputs(device='cpu', tokens=37, hidden=72)"),
    ("layernorm_tutorial", _dev("norm_layernorm_tutorial.py"), "_layer_norm_fwd_fused", "m.layer_norm",
     "m.get_inputs(device='cpu', M=21, N=300)"),
    ("row_sum", _dev("red_row_sum_literal.py"), "row_sum_kernel", "m.row_sum", "m.get_inputs(device='cpu', M=37, N=150)"),
    ("log_softmax", _dev("sm_log_softmax_kernelbench.py"), "log_softmax_kernel", "lambda x: m.ModelNew()(x)",
     "m.get_inputs(batch=21, features=300)"),
    ("online_softmax", _dev("sm_online_loop.py"), "online_softmax_kernel", "m.softmax", "m.get_inputs(device='cpu', rows=21, cols=300)"),
    ("col_max", _dev("red_col_max.py"), "col_max_kernel", "m.col_max", "m.get_inputs(device='cpu', M=300, N=37)"),
    ("argmax", ARGMAX, "argmax_shift_kernel", "m.argmax_shift", "[torch.randn(37, 100)]"),
    ("l2_loop", L2_LOOP, "l2_norm_kernel", "m.l2_norm", "[torch.randn(37, 100)]"),
    ("masked_softmax", MASKED_SOFTMAX, "masked_softmax_kernel", "m.masked_softmax",
     "[torch.randn(3, 7, 100), (torch.rand(3, 7, 100) > 0.3).to(torch.int32)]"),
    ("rms_unsloth", RMS_UNSLOTH, "_rms_layernorm_forward", "m.rms_layernorm", "[torch.randn(37, 100), torch.randn(100)]"),
    ("l2_fla", L2_FLA, "l2norm_fwd_kernel", "m.l2norm", "[torch.randn(37, 100)]"),
    ("lse_i64", LSE_I64, "lse_kernel", "m.lse", "[torch.randn(37, 100)]"),
    ("l2_positional", L2_POSITIONAL, "l2_norm_kernel", "m.l2_norm", "[torch.randn(37, 100)]"),
    ("geglu_rows", GEGLU_ROWS, "geglu_rows_kernel", "m.geglu_rows",
     "[torch.randn(37, 100), torch.randn(37, 100), torch.rand(37) + 0.5, torch.randn(100)]"),
    ("swiglu_liger", _dev("ew_swiglu_liger.py"), "_swiglu_forward_kernel", "m.swiglu_forward",
     "[x.float() for x in m.get_inputs(device='cpu', batch=3, seq_len=13, intermediate=100)]"),
    ("swiglu_backward", SWIGLU_BACKWARD, "_swiglu_backward_kernel", "m.swiglu_backward",
     "[torch.randn(3, 13, 100), torch.randn(3, 13, 100), torch.randn(3, 13, 100)]"),
    ("rope_heads", ROPE, "_rotary_kernel", "m.rotary_emb_fwd", "m.get_inputs(device='cpu', tokens=7, heads=5, head_dim=16)"),
    ("rope_tokens", ROPE_TOKENS, "_rotary_kernel", "m.rotary_emb_fwd", "m.get_inputs(device='cpu', tokens=37, heads=3, head_dim=16)"),
    ("bias_add_2d", _dev("ew_bias_add_2d.py"), "bias_add_kernel", "m.bias_add", "m.get_inputs(device='cpu', M=37, N=100)"),
    ("embedding", _dev("misc_embedding_gather.py"), "embedding_kernel", "m.embedding",
     "m.get_inputs(device='cpu', batch=3, seq_len=13, vocab=50, dim=100)"),
    ("rms_channels", _dev("norm_rmsnorm_kernelbench.py"), "rms_norm_channels_kernel",
     "lambda x: m.ModelNew(m.get_init_inputs()[0])(x)", "[torch.randn(5, 6, 7, 9)]"),
]


@pytest.mark.slow
def test_rewritten_kernels_match_the_originals_under_the_interpreter(tmp_path):
    jobs = []
    for name, text, kernel, entry, inputs in INTERPRETED:
        # sm_cap 4: a handful of rows gives up to 16 rows a program (the target's own floor would give 1).
        jobs.append({"name": name, "before": text, "after": applied(text, kernel, sm_cap=4), "entry": entry, "inputs": inputs})
    jobs.append({"name": "softmax_tutorial_as_offered", "before": SOFTMAX, "after": applied(SOFTMAX, "softmax_kernel"),
                 "entry": "m.softmax", "inputs": "m.get_inputs(device='cpu', rows=37, cols=100)"})
    # After single_pass (one block of next_power_of_2(n_cols) per row), the rows of that block.
    log_softmax = _dev("sm_log_softmax_kernelbench.py")
    single = next(c for c in applicable(analyze(log_softmax), "log_softmax_kernel", H100) if c.action == "single_pass")
    one_pass = apply_candidate(log_softmax, single, H100).new_text
    jobs.append({"name": "single_pass_then_rows", "before": log_softmax, "after": applied(one_pass, "log_softmax_kernel", sm_cap=4),
                 "entry": "lambda x: m.ModelNew()(x)", "inputs": "m.get_inputs(batch=21, features=300)"})
    # A planted mistake the comparison must catch: the grid drops the last, partial row block.
    planted = applied(SOFTMAX, "softmax_kernel", sm_cap=4).replace("triton.cdiv(n_rows, BLOCK_M),)", "n_rows // BLOCK_M,)")
    jobs.append({"name": "planted", "before": SOFTMAX, "after": planted, "entry": "m.softmax",
                 "inputs": "m.get_inputs(device='cpu', rows=37, cols=100)"})
    results = run_interpreted(tmp_path, jobs)
    assert results.pop("planted")["worst"] > 1e-3
    for name, r in results.items():
        assert r["error"] is None, (name, r)
        # int8 quantisation may round a .5 the other way when the scale differs in the last ulp.
        assert r["worst"] <= (1.0 if name == "quant_int8" else 2e-3 if "layernorm" in name else 1e-5), (name, r)


def test_a_scan_along_the_row_scans_axis_1_of_the_tile():
    after = applied((DEV / "red_cumsum_test.py").read_text(), "cumsum_kernel", tile=4096)
    assert "y = tl.cumsum(x, axis=1)" in after
    scans_rows = (DEV / "red_cumsum_test.py").read_text().replace("tl.cumsum(x, axis=0)", "tl.cumsum(x, axis=0, reverse=x)")
    assert "takes a tensor option" in why_not(scans_rows, "cumsum_kernel")


# ---- program-id decompositions: ``b = pid // C``, ``c = pid % C`` -----------------------------------
GROUPNORM = _dev("norm_groupnorm_test.py")
MEAN_DIM1 = _dev("red_mean_kernelbench.py")
# A (batch, head, position) index split in three: position, then head and batch from the quotient.
THREE_WAY = '''import torch
import triton
import triton.language as tl


@triton.jit
def bhs_scale_kernel(x_ptr, s_ptr, y_ptr, H, S, D, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    s = pid % S
    bh = pid // S
    h = bh % H
    b = bh // H
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    base = ((b * H + h) * S + s) * D
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
    scale = tl.load(s_ptr + h)
    y = x * scale / tl.sqrt(tl.sum(x * x, axis=0) / D + 1e-6)
    tl.store(y_ptr + base + cols, y, mask=mask)


def bhs_scale(x, s):
    B, H, S, D = x.shape
    y = torch.empty_like(x)
    bhs_scale_kernel[(B * H * S,)](x, s, y, H, S, D, BLOCK_D=triton.next_power_of_2(D))
    return y
'''
# Batches of flat blocks: a split index whose block index steps by the block itself is flat work, not rows.
FLAT_BATCHES = '''import torch
import triton
import triton.language as tl


@triton.jit
def batched_scale_kernel(x_ptr, y_ptr, n, nblk, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // nblk
    blk = pid % nblk
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + b * n + offs, mask=offs < n)
    tl.store(y_ptr + b * n + offs, x * 2, mask=offs < n)


def batched_scale(x):
    B, n = x.shape
    y = torch.empty_like(x)
    nblk = triton.cdiv(n, 256)
    batched_scale_kernel[(B * nblk,)](x, y, n, nblk, BLOCK=256)
    return y
'''


def test_a_split_program_id_becomes_row_vectors_of_both_indices():
    group = applied(GROUPNORM, "group_norm_kernel", tile=4096)
    assert "    pid = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n    row_mask = pid < n_rows\n" \
           "    n = pid // num_groups\n    g = pid % num_groups\n" in group
    assert "c = g[:, None] * (C // num_groups) + idx // HW" in group  # a column index from both: [BLOCK_M, BLOCK_SIZE]
    assert "mean = tl.sum(_sum, axis=1) / group_size" in group
    assert "group_norm_kernel[(triton.cdiv(N * num_groups, BLOCK_M),)](x, y, weight, bias, C, HW, num_groups, eps, " \
           "N * num_groups, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=4)" in group
    mean = applied(MEAN_DIM1, "mean_dim1_kernel")
    assert "acc += tl.load(x_ptr + b[:, None] * D1 * D2 + i * D2 + j[:, None], mask=row_mask[:, None] & (i < D1), other=0.0)" in mean
    assert "tl.store(out_ptr + pid, tl.sum(acc, axis=1) / D1, mask=row_mask)" in mean


@pytest.mark.parametrize("old,new,reason", [
    # The store reaches pid // num_groups and pid % C: two rows can give the same (n, g) address.
    ("    g = pid % num_groups\n", "    g = pid % C\n", "reaches the row index only through `//` or `%` without the other half"),
    # The divisor changes between the halves: they no longer split one index.
    ("    g = pid % num_groups\n", "    num_groups = num_groups + 1\n    g = pid % num_groups\n", "without the other half"),
    # The address is rebound in a branch: which parts it reaches is unknown.
    ("    # mean\n", "    if HW > 1:\n        base = n * C * HW\n", "without the other half"),
    # Halves of two different indices: ``(pid + 1) // num_groups`` is not the quotient of ``pid``.
    ("    n = pid // num_groups\n", "    n = (pid + 1) // num_groups\n", "without the other half"),
    ("    n = pid // num_groups\n", "    n = num_groups // pid\n", "divides by a per-row value"),
    ("    n = pid // num_groups\n", "    n = pid // tl.arange(0, BLOCK_SIZE)\n", "not a column block"),
    ("    n = pid // num_groups\n", "    n = pid >> num_groups\n", "more than + - * / // %"),
])
def test_a_split_program_id_must_still_pin_down_each_row(old, new, reason):
    assert old in GROUPNORM
    text = GROUPNORM.replace(old, new, 1)
    assert not offered(text, "group_norm_kernel")
    assert reason in why_not(text, "group_norm_kernel")


def test_an_index_split_in_three_is_rows_and_flat_batches_are_not():
    new = applied(THREE_WAY, "bhs_scale_kernel")
    assert "    s = pid % S\n    bh = pid // S\n    h = bh % H\n    b = bh // H\n" in new
    assert "scale = tl.load(s_ptr + h, mask=row_mask)" in new  # a head's scale, one per row
    assert "tl.store(y_ptr + base[:, None] + cols[None, :], y, mask=row_mask[:, None] & mask)" in new
    # The head from the whole index, not from the quotient: (b, h, s) no longer pins the row down.
    assert "without the other half" in why_not(THREE_WAY.replace("h = bh % H", "h = pid % H"), "bhs_scale_kernel")
    assert "flat elementwise kernel" in why_not(FLAT_BATCHES, "batched_scale_kernel")


def test_a_split_inside_a_device_function_is_checked_at_the_stores():
    halved = GEGLU_ROWS.replace("@triton.jit\ndef _tanh(x):", "@triton.jit\ndef _half(x):\n    return x // 2\n\n\n@triton.jit\ndef _tanh(x):")
    halved = halved.replace("c_ptr += tl.program_id(0)", "c_ptr += _half(tl.program_id(0))")  # the stored row
    assert "_half(tl.program_id(0))" in halved
    assert "without the other half" in why_not(halved, "geglu_rows_kernel")


def test_a_division_without_its_remainder_is_fine_where_stores_use_the_index_itself():
    # ``pid % 7`` reads another column, but the store is at ``out_ptr + pid``: each row keeps its own address.
    assert offered(MEAN_DIM1.replace("    j = pid % D2\n", "    j = pid % 7\n"), "mean_dim1_kernel")


@pytest.mark.slow
def test_split_program_ids_match_the_originals_under_the_interpreter(tmp_path):
    cases = [
        ("groupnorm", GROUPNORM, "group_norm_kernel", "m.group_norm", "[torch.randn(3, 12, 5, 7), 6, torch.randn(12), torch.randn(12)]"),
        ("mean_dim1", MEAN_DIM1, "mean_dim1_kernel", "lambda x: m.ModelNew(1)(x)", "m.get_inputs(batch=3, d1=70, d2=13)"),
        ("conv1d", _dev("misc_conv1d_depthwise.py"), "causal_conv1d_kernel", "m.causal_conv1d",
         "m.get_inputs(device='cpu', batch=2, dim=7, seqlen=100, width=4)"),
        ("three_way", THREE_WAY, "bhs_scale_kernel", "m.bhs_scale", "[torch.randn(2, 3, 5, 20), torch.rand(3) + 0.5]"),
    ]
    jobs = [{"name": name, "before": text, "after": applied(text, kernel, sm_cap=4), "entry": entry, "inputs": inputs}
            for name, text, kernel, entry, inputs in cases]
    assert all("BLOCK_M = max(1" in job["after"] for job in jobs)
    # A planted mistake: each row's statistics mix in the next row's sample (its mean is taken over the group one
    # sample later), while it still writes its own group. It stays in bounds on purpose (the last sample wraps to
    # the first): the interpreter does not check addresses, and an out-of-bounds plant corrupted its heap (CI:
    # munmap_chunk).
    planted = applied(GROUPNORM, "group_norm_kernel", sm_cap=4).replace(
        "_sum += tl.load(X + base[:, None]", "_sum += tl.load(X + ((base + C * HW) % (n_rows // num_groups * C * HW))[:, None]")
    assert planted != applied(GROUPNORM, "group_norm_kernel", sm_cap=4)
    jobs.append({"name": "planted", "before": GROUPNORM, "after": planted, "entry": "m.group_norm", "inputs": cases[0][4]})
    results = run_interpreted(tmp_path, jobs)
    assert results.pop("planted")["worst"] > 1e-3
    for name, r in results.items():
        assert r["error"] is None and r["worst"] <= 1e-4, (name, r)


@pytest.mark.parametrize("name,kernel,facts", [
    ("ew_swiglu_liger.py", "_swiglu_forward_kernel", ("row", None, False, False, 1)),  # elementwise, run-time width
    ("ew_rope_lightllm.py", "_rotary_kernel", ("row", None, False, False, 2)),  # a token's heads on a 2-axis grid
    ("red_cumsum_test.py", "cumsum_kernel", ("row", None, False, True, 1)),  # a scan shares work along the row
    ("red_mean_kernelbench.py", "mean_dim1_kernel", ("row", 64, True, True, 1)),  # a split program id
    ("misc_conv1d_depthwise.py", "causal_conv1d_kernel", ("row", 64, True, False, 2)),
])
def test_row_facts_tell_elementwise_rows_and_grid_axes(name, kernel, facts):
    from mtmc_lsp.optimizer.actions import rows_per_program as rpp

    analysis = analyze(_dev(name))
    assert rpp.row_facts(analysis, analysis.kernel(kernel)) == rpp.RowFacts(*facts)


def test_heuristic_ranks_wide_elementwise_rows_below_wide_reductions():
    swiglu = _dev("ew_swiglu_liger.py")
    assert rpp_score(swiglu, "_swiglu_forward_kernel") == 0.5  # a whole elementwise row of run-time width
    assert rpp_score(swiglu.replace("BLOCK_SIZE=BLOCK_SIZE", "BLOCK_SIZE=2048"), "_swiglu_forward_kernel") == 0.2
    assert rpp_score(SOFTMAX.replace("BLOCK_SIZE=BLOCK_SIZE", "BLOCK_SIZE=2048"), "softmax_kernel") == 0.3
    assert rpp_score(swiglu.replace("BLOCK_SIZE=BLOCK_SIZE", "BLOCK_SIZE=128"), "_swiglu_forward_kernel") == 0.9
    assert rpp_score(ROPE, "_rotary_kernel") == 0.6  # a head of a token: a slice the other axis splits off
