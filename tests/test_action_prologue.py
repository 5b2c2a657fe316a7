"""prologue: an elementwise kernel is computed inside the load of the kernel that reads its output; refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
CORPUS = Path(__file__).resolve().parent / "corpus" / "kernels"
DEQUANT = (CORPUS / "int8_linear_dequant.py").read_text()  # dequantise, then a matmul reads the weight tile

# A scale kernel (x * alpha, fp16 out) read by a row softmax through a named mask: a non-matmul consumer, and a
# buffer whose element type is the input's (``empty_like``).
SCALE_SOFTMAX = '''"""x * alpha, then a row softmax over the scaled buffer."""

import torch
import triton
import triton.language as tl

ENTRY = "scaled_softmax"


@triton.jit
def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * alpha, mask=mask)


@triton.jit
def softmax_kernel(in_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)


def scaled_softmax(x, alpha=0.37):
    rows, cols = x.shape
    scaled = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 256),)](x, scaled, alpha, x.numel(), BLOCK=256)
    out = torch.empty_like(x)
    softmax_kernel[(rows,)](scaled, out, cols, BLOCK_SIZE=triton.next_power_of_2(cols))
    return out


def get_inputs(device="cpu"):
    return [torch.randn(19, 45, device=device, dtype=torch.float16)]


def reference(x, alpha=0.37):
    return torch.softmax((x * alpha).float(), dim=1).half()
'''


def offered(text: str, kernel: str) -> list[Candidate]:
    return [c for c in applicable(analyze(text), kernel, H100) if c.action == "prologue"]


def fused(text: str, kernel: str = "dequant_kernel") -> str:
    (cand,) = offered(text, kernel)
    return apply_candidate(text, cand, H100).new_text


def test_offered_on_both_kernels_of_the_pair():
    (on_producer,) = offered(DEQUANT, "dequant_kernel")
    (on_consumer,) = offered(DEQUANT, "linear_kernel")
    assert on_producer.params == {"consumer": "linear_kernel"} and on_consumer.params == {"producer": "dequant_kernel"}
    assert on_producer.kind == "Fusion" and "drops w and a launch" in on_producer.title
    assert apply_candidate(DEQUANT, on_producer, H100).new_text == apply_candidate(DEQUANT, on_consumer, H100).new_text


def test_the_weight_is_dequantised_in_the_matmul_load():
    new = fused(DEQUANT)
    assert "def dequant_kernel" not in new and "dequant_kernel[" not in new
    assert "w = torch.empty" not in new and "n = N * K" not in new
    assert "def linear_kernel(x_ptr, y_ptr, M, N, K, stride_xm, stride_ym,\n                  q_ptr, scale_ptr, BLOCK_M" in new
    assert "q_val = tl.load(q_ptr + (rn[None, :] * K + (k + rk)[:, None]), mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0)" in new
    assert "s = tl.load(scale_ptr + (rn[None, :] * K + (k + rk)[:, None]) // K," in new
    assert "w = tl.where((rn[None, :] < N) & ((k + rk)[:, None] < K), (q * s).to(tl.float32), 0.0)" in new
    assert "](x, y, M, N, K, x.stride(0), y.stride(0),\n" in new and "BLOCK_K=16, q_ptr=qweight, scale_ptr=scale)" in new


def test_a_softmax_consumer_gets_the_scaled_row_in_the_inputs_type():
    (cand,) = offered(SCALE_SOFTMAX, "scale_kernel")
    new = apply_candidate(SCALE_SOFTMAX, cand, H100).new_text
    assert "x_p = tl.load(x_ptr + (row * n_cols + cols), mask=mask)" in new  # the consumer's x stays its own
    assert 'x = tl.where(mask, (x_p * alpha).to(x_ptr.dtype.element_ty), -float("inf")).to(tl.float32)' in new
    assert "scale_kernel" not in new and "scaled = torch.empty_like(x)" not in new
    assert "](out, cols, BLOCK_SIZE=triton.next_power_of_2(cols), alpha=alpha, x_ptr=x)" in new


@pytest.mark.parametrize("change, why", [
    (("    return y\n", "    return y, w\n"), "something besides the two launches"),
    (("    y = torch.empty((M, N)", "    K = K + 0\n    y = torch.empty((M, N)"), "rebinds what dequant_kernel reads"),
    (("    y = torch.empty((M, N)", "    torch.cuda.synchronize()\n    y = torch.empty((M, N)"), "shape arithmetic"),
    (("dtype=torch.float32)\n    n = N * K", "dtype=torch.complex64)\n    n = N * K"), "element type"),
    (("    tl.store(w_ptr + offs, q * s, mask=mask)", "    tl.store(w_ptr + offs, q * s + tl.program_id(0), mask=mask)"), "not a plain 1-D elementwise kernel"),
    (("    tl.store(w_ptr + offs, q * s, mask=mask)", "    tl.store(w_ptr + offs, q * s * BLOCK_SIZE, mask=mask)"), "its constexpr BLOCK_SIZE"),
    (("    tl.store(w_ptr + offs, q * s, mask=mask)", "    tl.store(w_ptr + offs, q * s, mask=offs < 64)"), "offsets < n"),
    (("        acc += tl.dot(x, w, input_precision=\"ieee\")\n", "        acc += tl.dot(x, w, input_precision=\"ieee\")\n        acc += tl.load(w_ptr)\n"),
     "more with w_ptr"),
])
def test_refused_with_a_reason(change, why):
    text = DEQUANT.replace(*change)
    assert text != DEQUANT, why
    assert not offered(text, "dequant_kernel")
    assert why in ACTIONS["prologue"].why_not(analyze(text), analyze(text).kernel("dequant_kernel"), H100)


def test_stale_candidate_is_refused():
    (cand,) = offered(DEQUANT, "dequant_kernel")
    with pytest.raises(ActionError):
        apply_candidate(DEQUANT.replace("    return y\n", "    return y, w\n"), cand, H100)


@pytest.mark.slow
def test_prologue_stays_equivalent(tmp_path):
    softmax = apply_candidate(SCALE_SOFTMAX, offered(SCALE_SOFTMAX, "softmax_kernel")[0], H100).new_text
    jobs = [job(tmp_path, "dequant:prologue", DEQUANT, fused(DEQUANT), TOL_FP32),
            job(tmp_path, "scale_softmax:reference", SCALE_SOFTMAX, SCALE_SOFTMAX, (2e-3, 2e-3), reference=True),
            job(tmp_path, "scale_softmax:prologue", SCALE_SOFTMAX, softmax, (0.0, 0.0))]
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), results
