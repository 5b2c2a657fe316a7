"""epilogue: the PyTorch elementwise op after a launch moves into the kernel's store, in the spellings people use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")

# A KernelBench linear: a 2-D tile stored through `y_ptr + row term + column term`, the op after the launch.
LINEAR = '''import torch
import triton
import triton.language as tl

ENTRY = "linear_op"


@triton.jit
def linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * K + (k + offs_k)[None, :], mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * K + (k + offs_k)[:, None], mask=(offs_n[None, :] < N) & ((k + offs_k)[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear_op(x, w):
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    linear_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](x, w, y, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    return OP


def get_inputs(device="cpu"):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(24, 40, generator=g).to(device), torch.randn(20, 40, generator=g).to(device)]


def reference(x, w):
    y = x.double() @ w.double().T
    return (OP).float()
'''

SPELLINGS = {
    "torch.relu(y)": "relu",
    "F.relu(y, inplace=True)": "relu",
    "y.relu()": "relu",
    "torch.nn.functional.silu(y)": "silu",
    "F.leaky_relu(y, 0.2)": "leaky_relu 0.2",
    "F.leaky_relu(y, negative_slope=0.1)": "leaky_relu 0.1",
    "torch.nn.functional.leaky_relu(y)": "leaky_relu 0.01",
    "torch.clamp(y, min=-1.0, max=1.5)": "clamp -1.0 1.5",
    "y.clamp(0.0)": "clamp 0.0 None",
    "y * 0.5": "mul 0.5",
    "2.0 - y": "sub 2.0 (left)",
    "y / 4": "div 4",
}


def with_op(op: str) -> str:
    text = LINEAR.replace("OP", op)
    return text.replace("import torch\n", "import torch\nimport torch.nn.functional as F\n", 1)


def epilogues(text: str):
    return [c for c in applicable(analyze(text), "linear_kernel", H100) if c.action == "epilogue"]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_spelling_is_offered_and_leaves_the_buffer_returned(spelling):
    (cand,) = epilogues(with_op(spelling))
    assert cand.params == {"op": SPELLINGS[spelling]}
    new = apply_candidate(with_op(spelling), cand, H100).new_text
    assert "    return y\n" in new and spelling not in new.split("def linear_op")[1].split("def get_inputs")[0]


@pytest.mark.parametrize("spelling", ["torch.clamp(y, min=lo)", "F.leaky_relu(y, slope)", "y * y", "torch.softmax(y, 1)",
                                      "y.clamp(min=0.0, out=y)"])
def test_refused_for_ops_it_cannot_write_from_the_text(spelling):
    assert not epilogues(with_op(spelling))


@pytest.mark.slow
def test_fused_spellings_stay_equivalent(tmp_path):
    jobs = []
    for spelling in SPELLINGS:
        before = with_op(spelling)
        after = apply_candidate(before, epilogues(before)[0], H100).new_text
        jobs.append(job(tmp_path, f"epilogue:{spelling}", before, after, TOL_FP32))
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
