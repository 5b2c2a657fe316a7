"""batch_launches: a host loop of launches over slices becomes one launch with a grid axis; refused where the
iterations could depend on each other or the slices are not plain; equivalent in the interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
BATCH = ACTIONS["batch_launches"]

# A per-(batch, head) scale-and-add written with two nested host loops, the grid a name assigned before them.
PER_HEAD = '''import torch
import triton
import triton.language as tl

ENTRY = "scale_add"


@triton.jit
def scale_add_kernel(q_ptr, k_ptr, out_ptr, scale, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    q = tl.load(q_ptr + offs, mask=mask)
    k = tl.load(k_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, q * scale + k, mask=mask)


def scale_add(q, k):
    B, H, S, D = q.shape
    out = torch.empty_like(q)
    grid = (triton.cdiv(S * D, 64),)
    for b in range(B):
        for h in range(H):
            scale_add_kernel[grid](q[b, h], k[b, h, :, :], out[b, h], 0.5, S * D, BLOCK=64)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(2, 3, 5, 8, device=device), torch.randn(2, 3, 5, 8, device=device)]


def reference(q, k):
    return q * 0.5 + k
'''


def offered(text: str, kernel: str = "scale_add_kernel") -> list:
    return [cand for cand in applicable(analyze(text), kernel, H100) if cand.action == "batch_launches"]


def why_refused(text: str, kernel: str = "scale_add_kernel") -> str:
    analysis = analyze(text)
    with pytest.raises(ActionError) as caught:
        BATCH._plan(c.parse(text), analysis, analysis.kernel(kernel))
    return str(caught.value)


def test_names_for_the_slices_go_with_the_loop():
    text = PER_HEAD.replace("            scale_add_kernel[grid](q[b, h], k[b, h, :, :], out[b, h],",
                            "            qh = q[b, h]\n            oh = out[b, h]\n            scale_add_kernel[grid](qh, k[b, h, :, :], oh,")
    new = apply_candidate(text, offered(text)[0], H100).new_text
    assert "qh" not in new and "oh" not in new and "scale_add_kernel[grid](q[b], k[b], out[b], 0.5" in new


def test_nested_loops_fold_one_at_a_time():
    (inner,) = offered(PER_HEAD)
    assert inner.params == {"loop": "h"}
    once = apply_candidate(PER_HEAD, inner, H100).new_text
    assert "grid = (triton.cdiv(S * D, 64), H)" in once and "for h in range" not in once
    assert "scale_add_kernel[grid](q[b], k[b], out[b], 0.5, S * D, BLOCK=64, q_ptr_stride_h=q.stride(1), " \
           "k_ptr_stride_h=k.stride(1), out_ptr_stride_h=out.stride(1))" in once
    (outer,) = offered(once)
    assert outer.params == {"loop": "b"}
    twice = apply_candidate(once, outer, H100).new_text
    assert "grid = (triton.cdiv(S * D, 64), H, B)" in twice and "for " not in twice.split("def scale_add(")[1]
    assert "    pid_b = tl.program_id(2)\n    q_ptr += pid_b.to(tl.int64) * q_ptr_stride_b\n" in twice
    assert not offered(twice)  # three axes: no room for another


@pytest.mark.parametrize("change, why", [
    (("out[b, h], 0.5", "out[b, h + 1], 0.5"), "other than as a slice"),
    (("out[b, h], 0.5", "out, 0.5"), "which every iteration shares"),
    (("0.5, S * D", "0.5 * h, S * D"), "other than as a slice"),
    (("q[b, h], k[b, h, :, :]", "q[b, h], q[0, h]"), None),  # read-only slices of one tensor: fine
    (("q[b, h], k[b, h, :, :]", "q[b, h], out[0, h]"), "writes another way"),
    (("q[b, h], k[b, h, :, :]", "q[b, h], out"), "writes another way"),
    (("            scale_add_kernel[grid]", "            print(h)\n            scale_add_kernel[grid]"), "more than the launch"),
    (("            scale_add_kernel[grid](q[b, h],", "            qh = q[b, h]\n            scale_add_kernel[grid](qh + 0,"),
     "read other than once"),
    (("            scale_add_kernel[grid](q[b, h],", "            qh = q[b, h]\n            scale_add_kernel[grid](qh,"),
     None),  # a name for the slice, read once as an argument
    (("    offs = tl.program_id(0)", "    offs = tl.program_id(1) * 0 + tl.program_id(0)"), "already reads program id 1"),
    (("scale_add_kernel[grid]", "scale_add_kernel[(triton.cdiv(S * D, 64) + 0 * h,)]"), "reads the loop variable"),
])
def test_refused_where_iterations_may_depend_or_slices_are_not_plain(change, why):
    text = PER_HEAD.replace(*change)
    assert text != PER_HEAD
    if why is None:
        assert offered(text)
    else:
        assert why in why_refused(text)
        assert not offered(text)


@pytest.mark.slow
def test_batched_launches_stay_equivalent(tmp_path):
    once = apply_candidate(PER_HEAD, offered(PER_HEAD)[0], H100).new_text
    twice = apply_candidate(once, offered(once)[0], H100).new_text
    jobs = [job(tmp_path, "per_head:reference", PER_HEAD, PER_HEAD, TOL_FP32, reference=True),
            job(tmp_path, "per_head:batch_h", PER_HEAD, once, TOL_FP32),
            job(tmp_path, "per_head:batch_h_b", PER_HEAD, twice, TOL_FP32)]
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
