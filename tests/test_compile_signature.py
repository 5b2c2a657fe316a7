"""Argument types for the offline compile: from the harness's inputs, else from use in the kernel."""

from __future__ import annotations

import pytest

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.compile import compile_jobs
from mtmc_lsp.optimizer.compile.compiler import CompileJob
from mtmc_lsp.optimizer.compile.signature import infer_types, use_types
from mtmc_lsp.optimizer.hardware import get_profile

XENT = '''import torch
import triton
import triton.language as tl


@triton.jit
def xent_kernel(logits_ptr, target_ptr, loss_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(logits_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    lse = m + tl.log(tl.sum(tl.exp(x - m), axis=0))
    t = tl.load(target_ptr + row)
    x_t = tl.load(logits_ptr + row * stride + t).to(tl.float32)
    tl.store(loss_ptr + row, lse - x_t)


def xent(logits, target):
    rows, cols = logits.shape
    loss = torch.empty(rows, device=logits.device, dtype=torch.float32)
    xent_kernel[(rows,)](logits, target, loss, cols, logits.stride(0), BLOCK=1024)
    return loss


def get_inputs(device="cuda", rows=64, cols=1000):
    logits = torch.randn(rows, cols, device=device, dtype=torch.float16)
    target = torch.randint(0, cols, (rows,), device=device)
    return [logits, target]


def reference(logits, target):
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction="none")
'''
NO_HARNESS = XENT[: XENT.index("def get_inputs")]
H100 = get_profile("h100")


def test_the_harness_gives_every_launch_argument_its_real_type():
    types = infer_types(analyze(XENT))
    assert types.types["xent_kernel"] == {"logits_ptr": "*fp16", "target_ptr": "*i64", "loss_ptr": "*fp32"}
    assert set(types.sources["xent_kernel"].values()) == {"harness"}


def test_without_a_harness_an_index_loaded_from_memory_reads_as_int64():
    kernel = analyze(NO_HARNESS).kernel("xent_kernel")
    assert use_types(kernel) == {"target_ptr": "*i64"}  # logits and loss stay unknown (assumed fp32)
    types = infer_types(analyze(NO_HARNESS))
    assert types.sources["xent_kernel"]["target_ptr"] == "use"


def test_masks_and_bit_operations_read_as_integers_and_plain_kernels_stay_as_they_were():
    text = '''import triton
import triton.language as tl


@triton.jit
def gather(x_ptr, keep_ptr, bits_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = tl.load(keep_ptr + offs)
    bits = tl.load(bits_ptr + offs)
    x = tl.load(x_ptr + offs, mask=keep)
    tl.store(out_ptr + offs, x * (bits & 1))
'''
    assert use_types(analyze(text).kernel("gather")) == {"keep_ptr": "*i1", "bits_ptr": "*i32"}
    base = (analyze(open("tests/corpus/faults/base.py").read()))
    assert all(not use_types(k) for k in base.kernels)


def test_host_allocations_follow_dtype_expressions():
    text = XENT.replace("dtype=torch.float32)", "dtype=logits.dtype)")
    assert infer_types(analyze(text)).types["xent_kernel"]["loss_ptr"] == "*fp16"
    unknown = XENT.replace("dtype=torch.float32)", "dtype=pick_dtype())")
    assert "loss_ptr" not in infer_types(analyze(unknown)).types["xent_kernel"]  # not the fp32 default


@pytest.mark.slow
def test_a_kernel_indexing_with_an_int64_target_compiles_and_unknown_types_are_not_called_errors():
    (with_harness,) = compile_jobs(XENT, [CompileJob("xent_kernel", {"BLOCK": 1024})], H100, cache_dir=None)
    assert with_harness.status == "ok", with_harness.error
    assert with_harness.signature["target_ptr"] == "*i64"
    (from_use,) = compile_jobs(NO_HARNESS, [CompileJob("xent_kernel", {"BLOCK": 1024})], H100, cache_dir=None)
    assert from_use.status == "ok", from_use.error
    # The index goes through a helper: not inferred, so the compile over the assumed *fp32 fails, and
    # the report says the types are not known instead of calling the kernel broken.
    helper = NO_HARNESS.replace("@triton.jit\ndef xent_kernel", '''@triton.jit
def _pick(p, t):
    return tl.load(p + t)


@triton.jit
def xent_kernel''').replace("x_t = tl.load(logits_ptr + row * stride + t)", "x_t = _pick(logits_ptr + row * stride, t)")
    (unknown,) = compile_jobs(helper, [CompileJob("xent_kernel", {"BLOCK": 1024})], H100, cache_dir=None)
    assert unknown.status == "skipped", unknown.error
    assert "types are not known" in unknown.error and "target_ptr: *fp32" in unknown.error


KERNELBENCH = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def geglu_kernel(x_ptr, out_ptr, n_rows, half, qw_ptr, stride_q, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row = offs // half
    packed = tl.load(qw_ptr + (offs // 2) * stride_q)
    a = tl.load(x_ptr + row * 2 * half + offs % half).to(tl.float32)
    tl.store(out_ptr + offs, (a * ((packed >> 4) & 15)).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x, qw):
        n_rows, width = x.shape
        half = width // 2
        out = torch.empty((n_rows, half), device=x.device, dtype=x.dtype)
        geglu_kernel[(triton.cdiv(n_rows * half, 512),)](x, out, n_rows, half, qw, qw.stride(0), BLOCK=512)
        return out


def get_inputs(batch: int = 64, hidden_dim: int = 128):
    return [torch.randn(batch, 2 * hidden_dim, dtype=torch.float16), torch.randint(0, 255, (64,), dtype=torch.uint8)]
'''


def test_kernelbench_forward_gets_the_inputs_types_and_multiplied_parameters_are_scalars():
    analysis = analyze(KERNELBENCH)
    assert use_types(analysis.kernel("geglu_kernel"))["qw_ptr"] == "*i32"  # bit ops on its values; not the stride
    types = infer_types(analysis)
    assert types.types["geglu_kernel"] == {"qw_ptr": "*u8", "x_ptr": "*fp16", "out_ptr": "*fp16"}
    assert types.sources["geglu_kernel"]["qw_ptr"] == "harness"  # the real uint8 wins over the use guess
    # ``half`` added to a pointer, but also multiplied: a scalar, for the analysis (since session 15) as for the types
    read_as_pointer = KERNELBENCH.replace("tl.load(x_ptr + row * 2 * half + offs % half)",
                                          "tl.load(x_ptr + row * 2 * half + half + offs % half)")
    analysis = analyze(read_as_pointer)
    kernel = analysis.kernel("geglu_kernel")
    assert kernel.param("half").kind == "scalar" and "half" not in use_types(kernel)
    assert "half" not in infer_types(analysis).types["geglu_kernel"]  # no pointer type for it
