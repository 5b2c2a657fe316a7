"""matmul_epilogue: an elementwise kernel after a matmul runs in the matmul's store; refusals when it would not be the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import (
    ActionError,
    Candidate,
    applicable,
    apply_candidate,
)
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP16, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
CORPUS = Path(__file__).resolve().parent / "corpus" / "kernels"

# Linear + bias in fp16, then a tanh-GELU kernel that upcasts its load; shape arithmetic between the launches.
LINEAR_GELU = (CORPUS / "linear_gelu.py").read_text()  # the corpus kernel, also run by test_actions_semantics


# A plain matmul, then one kernel for bias + GELU: the bias is read per column (offs % N).
BIAS_GELU = LINEAR_GELU.replace('''    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
''', "").replace('''@triton.jit
def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
''', '''@triton.jit
def gelu_kernel(x_ptr, bias_ptr, y_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32) + tl.load(bias_ptr + offs % n_cols, mask=mask).to(tl.float32)
''').replace("gelu_kernel[(triton.cdiv(n, 1024),)](h, out, n, BLOCK_SIZE=1024)",
              "gelu_kernel[(triton.cdiv(n, 1024),)](h, b, out, n, N, BLOCK_SIZE=1024)").replace(
    "h = (x.float() @ w.float() + b.float()).half().float()", "h = (x.float() @ w.float()).half().float() + b.float()")


# The element count spelled as the allocation's shape product, the output type read from the output pointer.
BIAS_GELU_SPELLED = BIAS_GELU.replace("    n = h.numel()\n", "    n = M * N\n").replace(
    "tl.store(y_ptr + offs, y.to(tl.float16), mask=mask)", "tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)")


# A producer that stores inside a row loop (several rows per program), then a 1-D activation over
# ``x.numel()`` elements of a buffer made ``torch.empty_like(x)``: the shape of public multi-kernel code.
ROW_LOOP_RELU = '''import torch
import triton
import triton.language as tl

ENTRY = "bias_relu"
ROWS = 4


@triton.jit
def bias_add_kernel(x_ptr, b_ptr, out_ptr, n_rows, n_cols, BLOCK_COLS: tl.constexpr):
    row0 = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK_COLS)
    cmask = cols < n_cols
    bias = tl.load(b_ptr + cols, mask=cmask)
    for r in range(ROWS):
        row = row0 + r  # the launch covers whole groups of ROWS rows (the host checks)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cmask)
        tl.store(out_ptr + row * n_cols + cols, x + bias, mask=cmask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def bias_relu(x, b):
    n_rows, n_cols = x.shape
    assert n_rows % ROWS == 0
    tmp = torch.empty_like(x)
    out = torch.empty_like(x)
    bias_add_kernel[(triton.cdiv(n_rows, ROWS),)](x, b, tmp, n_rows, n_cols, BLOCK_COLS=triton.next_power_of_2(n_cols))
    relu_kernel[(triton.cdiv(x.numel(), 256),)](tmp, out, x.numel(), BLOCK_SIZE=256)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(36, 50, device=device), torch.randn(50, device=device)]


def reference(x, b):
    return torch.relu(x + b)
'''


# A 2-D gather in FlagGems' manner (offsets named first: ``out_off = rows * N + cols``, the row stride the row
# length of a fresh buffer), then a flat bias kernel over the gathered rows that reads the bias at ``offsets % N``.
GATHER_BIAS = '''import torch
import triton
import triton.language as tl

ENTRY = "gather_bias"


@triton.jit
def gather_kernel(inp, out, N, index, index_len, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_x = tl.program_id(axis=0)
    pid_y = tl.program_id(axis=1)
    rows = pid_x * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = pid_y * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    out_mask = (rows < index_len) & (cols < N)
    indices = tl.load(index + rows, mask=rows < index_len, other=0)
    picked = tl.load(inp + indices * N + cols, mask=out_mask, other=0.0)
    out_off = rows * N + cols
    tl.store(out + out_off, picked, mask=out_mask)


@triton.jit
def bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, N, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + offsets % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, (x + b).to(out_ptr.dtype.element_ty), mask=mask)


def gather_bias(inp, index, bias):
    M, N = inp.shape
    index_len = index.numel()
    picked = torch.empty((index_len, N), device=inp.device, dtype=inp.dtype)
    grid = lambda meta: (triton.cdiv(index_len, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    gather_kernel[grid](inp, picked, N, index, index_len, BLOCK_M=4, BLOCK_N=32)
    out = torch.empty_like(picked)
    n_elements = picked.numel()
    bias_grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    bias_kernel[bias_grid](picked, bias, out, n_elements, picked.shape[-1], BLOCK_SIZE=256)
    return out


def get_inputs(device="cpu"):
    inp = torch.randn(50, 40, device=device, dtype=torch.float16)
    return [inp, torch.randint(0, 50, (30,), device=device), torch.randn(40, device=device, dtype=torch.float16)]


def reference(inp, index, bias):
    return (inp[index].float() + bias.float()).half()
'''


def gather_offered(text: str) -> list[Candidate]:
    return [c for c in applicable(analyze(text), "gather_kernel", H100) if c.action == "matmul_epilogue"]


def offered(text: str) -> list[Candidate]:
    return [c for c in applicable(analyze(text), "linear_kernel", H100) if c.action == "matmul_epilogue"]


def test_gelu_moves_into_the_matmul_store():
    (cand,) = offered(LINEAR_GELU)
    new = apply_candidate(LINEAR_GELU, cand, H100).new_text
    assert "def gelu_kernel" not in new and "gelu_kernel[" not in new
    assert "out = torch.empty_like(h)" not in new and "n = h.numel()" not in new
    assert new.rstrip().endswith("return h") or "    return h\n" in new
    assert "x_val = (acc.to(tl.float16)).to(y_ptr.dtype.element_ty)" in new


def test_bias_read_per_column_moves_into_the_matmul_store():
    assert "offs % n_cols" in BIAS_GELU and "acc += tl.load(b_ptr" not in BIAS_GELU
    (cand,) = offered(BIAS_GELU)
    new = apply_candidate(BIAS_GELU, cand, H100).new_text
    # the matmul already gets b (unused by it here): the bias is read through its b_ptr, no new parameter
    assert "bias = tl.load(b_ptr + rn[None, :], mask=rn[None, :] < N, other=0.0)" in new  # one row per tile
    assert "def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wk, stride_ym,\n" in new
    other = BIAS_GELU.replace("(h, b, out, n, N, BLOCK_SIZE=1024)", "(h, b2, out, n, N, BLOCK_SIZE=1024)")
    fresh = apply_candidate(other.replace("    M, K = x.shape\n", "    M, K = x.shape\n    b2 = b.clone()\n"), cand, H100)
    # A new pointer parameter (the consumer's own name for it) and argument:
    assert "bias_ptr, BLOCK_M: tl.constexpr" in fresh.new_text and "b2, BLOCK_M=32, BLOCK_N=32" in fresh.new_text
    late = other.replace("    out = torch.empty_like(h)\n", "    out = torch.empty_like(h)\n    b2 = b\n")
    assert not offered(late)  # b2 does not exist yet where the matmul is launched


def test_shape_product_count_and_output_pointer_type_are_understood():
    assert BIAS_GELU_SPELLED.count("M * N") == 1 and "y.to(y_ptr.dtype.element_ty)" in BIAS_GELU_SPELLED
    (cand,) = offered(BIAS_GELU_SPELLED)
    new = apply_candidate(BIAS_GELU_SPELLED, cand, H100).new_text
    assert "y.to(y_ptr.dtype.element_ty), mask=(rm[:, None] < M)" in new  # the producer's y_ptr: same element type


def test_store_inside_a_row_loop_takes_the_consumer():
    (cand,) = [c for c in applicable(analyze(ROW_LOOP_RELU), "bias_add_kernel", H100) if c.action == "matmul_epilogue"]
    new = apply_candidate(ROW_LOOP_RELU, cand, H100).new_text
    assert "relu_kernel" not in new and "out = torch.empty_like(x)" not in new and "    return tmp\n" in new
    # the activation runs at the store, inside the loop, on the value cast to the buffer's type
    assert ("        x_val = (x + bias).to(out_ptr.dtype.element_ty)\n"
            "        tl.store(out_ptr + row * n_cols + cols, tl.maximum(x_val, 0.0), mask=cmask)\n") in new


def test_named_offsets_of_a_gather_take_the_bias_per_column():
    (cand,) = gather_offered(GATHER_BIAS)
    new = apply_candidate(GATHER_BIAS, cand, H100).new_text
    assert "bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)" in new  # the named mask's column condition
    assert "bias_kernel" not in new and "n_elements" not in new and "bias_grid" not in new
    assert "gather_kernel[grid](inp, picked, N, index, index_len, bias, BLOCK_M=4, BLOCK_N=32)" in new


@pytest.mark.parametrize("change, why", [
    (("    out_off = rows * N + cols\n", "    out_off = rows * index_len + cols\n"), "the row stride is not the row length"),
    (("    out_off = rows * N + cols\n", "    out_off = rows * N + cols\n    cols = cols + 0\n"), "cols is assigned twice"),
    (("    tl.store(out + out_off,", "    out_off += 1\n    tl.store(out + out_off,"), "out_off is assigned twice"),
])
def test_gather_refused_when_the_columns_are_not_plain(change, why):
    text = GATHER_BIAS.replace(*change)
    assert text != GATHER_BIAS, why
    assert not gather_offered(text), why


@pytest.mark.parametrize("change, why", [
    (("x.numel(), BLOCK_SIZE=256", "x.numel() - 1, BLOCK_SIZE=256"), "covers less than the buffer"),
    (("    tmp = torch.empty_like(x)\n", "    tmp = torch.empty_like(b)\n"), "x.numel() is not the buffer's count"),
    (("        x = tl.load(x_ptr + row * n_cols + cols, mask=cmask)\n",
      "        x = tl.load(x_ptr + row * n_cols + cols, mask=cmask) + tl.load(out_ptr + cols, mask=cmask)\n"),
     "reads back what it stored"),
    (("        tl.store(out_ptr + row * n_cols + cols, x + bias, mask=cmask)\n",
      "        tl.store(out_ptr + row * n_cols + cols, x + bias, mask=cmask)\n        tl.store(out_ptr + cols, x, mask=cmask)\n"),
     "two stores"),
])
def test_row_loop_producer_refused_when_not_the_same(change, why):
    text = ROW_LOOP_RELU.replace(*change)
    assert text != ROW_LOOP_RELU, why
    assert not [c for c in applicable(analyze(text), "bias_add_kernel", H100) if c.action == "matmul_epilogue"], why


@pytest.mark.parametrize("change", [
    ("offs % n_cols", "offs % (n_cols + 1)"),  # not the row length
    ("(h, b, out, n, N, BLOCK_SIZE=1024)", "(h, b, out, n, K, BLOCK_SIZE=1024)"),  # another length
    ("h = torch.empty((M, N), device=x.device, dtype=torch.float16)", "h = torch.empty_like(torch.empty((M, N), device=x.device, dtype=torch.float16).t()).t()"),
])
def test_per_column_input_refused_when_not_one_per_column(change):
    text = BIAS_GELU.replace(*change)
    assert text != BIAS_GELU
    assert not offered(text)


@pytest.mark.parametrize("change, why", [
    (("    t = 0.79", "    t = x_ptr.dtype.element_ty.primitive_bitwidth * 0.0 + 0.79"), "reads a parameter"),
    (("gelu_kernel[(triton.cdiv(n, 1024),)](h, out, n, BLOCK_SIZE=1024)",
      "gelu_kernel[(triton.cdiv(n, 1024),)](h, out, n - 1, BLOCK_SIZE=1024)"), "covers less than the buffer"),
    (("    return out\n", "    return out, h\n"), "the buffer is read afterwards"),
    (("out = torch.empty_like(h)", "out = torch.empty_like(h, dtype=torch.float32)"), "another element type"),
    (("    y = 0.5 * x", "    y = offs * 0.0 + 0.5 * x"), "reads the index"),
    (("    n = h.numel()\n", "    n = h.numel()\n    h.add_(1)\n"), "changes the buffer in between"),
])
def test_refused_when_not_the_same(change, why):
    text = LINEAR_GELU.replace(*change)
    assert text != LINEAR_GELU, why
    assert not offered(text), why


def test_stale_candidate_is_refused():
    (cand,) = offered(LINEAR_GELU)
    with pytest.raises(ActionError):
        apply_candidate(LINEAR_GELU.replace("    return out\n", "    return out, h\n"), cand, H100)


@pytest.mark.slow
def test_fused_epilogue_stays_equivalent(tmp_path):
    (cand,) = offered(LINEAR_GELU)
    new = apply_candidate(LINEAR_GELU, cand, H100).new_text
    tiled = apply_candidate(new, next(c for c in applicable(analyze(new), "linear_kernel", H100) if c.action == "tiling"), H100).new_text
    (bias,) = offered(BIAS_GELU)
    jobs = [job(tmp_path, "bias_gelu:reference", BIAS_GELU, BIAS_GELU, TOL_FP16, reference=True),
            job(tmp_path, "bias_gelu:matmul_epilogue", BIAS_GELU, apply_candidate(BIAS_GELU, bias, H100).new_text, TOL_FP16),
            job(tmp_path, "bias_gelu_spelled:matmul_epilogue", BIAS_GELU_SPELLED,
                apply_candidate(BIAS_GELU_SPELLED, offered(BIAS_GELU_SPELLED)[0], H100).new_text, TOL_FP16),
            job(tmp_path, "linear_gelu:reference", LINEAR_GELU, LINEAR_GELU, TOL_FP16, reference=True),
            job(tmp_path, "linear_gelu:matmul_epilogue", LINEAR_GELU, new, TOL_FP16),
            job(tmp_path, "linear_gelu:matmul_epilogue+tiling", LINEAR_GELU, tiled, TOL_FP16),
            job(tmp_path, "gather_bias:reference", GATHER_BIAS, GATHER_BIAS, TOL_FP16, reference=True),
            job(tmp_path, "gather_bias:matmul_epilogue", GATHER_BIAS,
                apply_candidate(GATHER_BIAS, gather_offered(GATHER_BIAS)[0], H100).new_text, TOL_FP16),
            job(tmp_path, "row_loop_relu:reference", ROW_LOOP_RELU, ROW_LOOP_RELU, TOL_FP16, reference=True),
            job(tmp_path, "row_loop_relu:matmul_epilogue", ROW_LOOP_RELU, apply_candidate(ROW_LOOP_RELU, next(
                c for c in applicable(analyze(ROW_LOOP_RELU), "bias_add_kernel", H100) if c.action == "matmul_epilogue"),
                H100).new_text, TOL_FP16)]
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
