"""The tolerance follows the precision the accepted version really computes in: an fp32 file whose
``tl.dot`` runs in TF32 (the GPU's default) misses its own fp64 reference at fp32's 1e-4, so its steps
are judged at TF32's (fp16's 10-bit mantissa) tolerance; a candidate never loosens its own check."""

from __future__ import annotations

import pytest
from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file

# An fp32 matmul whose dot inputs keep 10 mantissa bits, truncated: what an fp32 ``tl.dot`` does on an
# NVIDIA GPU by default (input_precision="tf32"). The interpreter's dot is exact fp32, so the rounding
# is written out; on the GPU the same file without the two lines behaves like this one.
TF32_MATMUL = '''import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K: tl.constexpr, BLOCK: tl.constexpr):
    rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < M, other=0.0)
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=rn[None, :] < N, other=0.0)
    a = (a.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)  # TF32
    b = (b.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)  # TF32
    c = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    BLOCK = 16
    mm_kernel[(triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))](a, b, c, M, N, K=K, BLOCK=BLOCK)
    return c


def get_inputs(device="cuda", m=40, n=48, k=64):
    return [torch.randn(m, k, device=device), torch.randn(k, n, device=device)]


def reference(a, b):
    return (a.double() @ b.double()).float()
'''
TF32_LINES = ("    a = (a.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)  # TF32\n"
              "    b = (b.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)  # TF32\n")
IEEE_MATMUL = TF32_MATMUL.replace(TF32_LINES, "")
BIGGER_BLOCKS = TF32_MATMUL.replace("    BLOCK = 16\n", "    BLOCK = 32\n")


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    yield p
    p.close()


def verify(pool, new, old):
    return verify_file(new, old, "mm.py", "h100", VerifyOptions(pool=pool, compile_for_target=False, timing=False))


def test_a_step_on_a_file_whose_dots_run_in_tf32_is_judged_at_tf32s_tolerance(pool):
    report = verify(pool, BIGGER_BLOCKS, TF32_MATMUL)
    assert report.status == "verified", report.summary
    assert report.raw["runtime"]["precision"].startswith("tf32")
    wrong = BIGGER_BLOCKS.replace("    c = tl.dot(a, b)\n", "    c = tl.dot(a, b) + ((rm[:, None] == 3) & (rn[None, :] == 5))\n")
    report = verify(pool, wrong, TF32_MATMUL)
    assert report.status == "incorrect" and report.mismatch.index == [3, 5], report.summary


def test_a_candidate_cannot_loosen_its_own_check_with_tf32(pool):
    report = verify(pool, IEEE_MATMUL.replace("    BLOCK = 16\n", "    BLOCK = 32\n"), IEEE_MATMUL)
    assert report.status == "verified", report.summary
    assert report.raw["runtime"]["precision"] == "float32"
    report = verify(pool, TF32_MATMUL, IEEE_MATMUL)  # the accepted version is exact: TF32 is a precision change
    assert report.status == "incorrect" and report.mismatch.atol == 1e-4, report.summary


# The same file over K = 4096: a TF32 sum that long misses outputs near zero by more than fp16's tolerance (the
# error follows the products, not the output), as a broadcast-product matmul that Triton turns into an fp32 dot
# did on the H200 (session 7: "1008731 of 1048576 elements off" for the unedited file).
FIXED_K = ("    return [torch.randn(m, k,", "    k = 4096  # not a size argument: the interpreter's run shrinks those\n    return [torch.randn(m, k,")
LONG_K = TF32_MATMUL.replace(*FIXED_K)


def test_a_long_tf32_sum_is_judged_by_its_own_error_against_the_reference(pool):
    report = verify(pool, LONG_K.replace("    BLOCK = 16\n", "    BLOCK = 32\n"), LONG_K)
    assert report.status == "verified", report.summary
    assert report.raw["runtime"]["precision"].startswith("tf32 over long sums")
    unchanged = verify(pool, LONG_K, LONG_K)  # the benchmark's final check: the file against its own reference
    assert unchanged.status == "verified", unchanged.summary


@pytest.mark.parametrize("mistake", [
    ("    c = tl.dot(a, b)\n", "    c = tl.dot(a, b) + ((rm[:, None] == 3) & (rn[None, :] == 5))\n"),  # one element off by 1
    ("    c = tl.dot(a, b)\n", "    a = tl.where(rk[None, :] < K - 8, a, 0.0)\n    c = tl.dot(a, b)\n"),  # the last 8 of K skipped
])
def test_mistakes_stay_caught_under_the_long_sum_tolerance(pool, mistake):
    wrong = LONG_K.replace(*mistake)
    assert wrong != LONG_K
    report = verify(pool, wrong, LONG_K)
    assert report.status == "incorrect", report.summary


def test_an_exact_file_gets_no_long_sum_tolerance(pool):
    exact = IEEE_MATMUL.replace(*FIXED_K)
    report = verify(pool, LONG_K, exact)  # TF32 against an exact accepted version is a precision change
    assert report.status == "incorrect", report.summary
