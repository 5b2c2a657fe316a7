"""row_grid: a flat index split by ``// W`` and ``% W`` becomes a grid of rows and column blocks; refusals where it would not be the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import job, run_jobs  # noqa: E402

H100 = get_profile("h100")
DEV = Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev"
GEGLU = (DEV / "ew_geglu_kernelbench.py").read_text()
BATCHNORM = (DEV / "norm_batchnorm_kernelbench.py").read_text()

# A per-channel scale over a flat NCHW index, the grid through a host name; interpreter-sized inputs.
CHANNEL_SCALE = '''import torch
import triton
import triton.language as tl

ENTRY = "channel_scale"


@triton.jit
def channel_scale_kernel(x_ptr, s_ptr, y_ptr, n, C, HW, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ch = (offs // HW) % C
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    s = tl.load(s_ptr + ch, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, x * s, mask=offs < n)


def channel_scale(x, s):
    N, C, H, W = x.shape
    y = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 64),)
    channel_scale_kernel[grid](x, s, y, n, C, H * W, BLOCK=64)
    return y


def get_inputs(device="cpu"):
    return [torch.randn(2, 3, 5, 7, device=device), torch.randn(3, device=device)]


def reference(x, s):
    return x * s[None, :, None, None]
'''


def offered(text: str, kernel: str):
    return [c for c in applicable(analyze(text), kernel, H100) if c.action == "row_grid"]


def test_per_channel_values_become_one_load_per_program():
    (cand,) = offered(CHANNEL_SCALE, "channel_scale_kernel")
    new = apply_candidate(CHANNEL_SCALE, cand, H100).new_text
    assert "    ch = row % C\n" in new and "//" not in new.split("def channel_scale(")[0]
    assert "    s = tl.load(s_ptr + ch)\n" in new  # one channel per row: one value, read without the lane mask
    assert "x = tl.load(x_ptr + offs, mask=(offs < n) & (col < HW), other=0.0)" in new  # inline masks widened there
    assert "grid = (triton.cdiv(n, H * W), triton.cdiv(H * W, 64))" in new  # the host's grid name keeps its line


def test_dev_files_offer_it():
    assert offered(GEGLU, "geglu_kernel") and offered(BATCHNORM, "batchnorm_eval_kernel")
    new = apply_candidate(GEGLU, offered(GEGLU, "geglu_kernel")[0], H100).new_text
    assert "geglu_kernel[(triton.cdiv(n, half), triton.cdiv(half, 512))]" in new
    assert "    mask = (offs < n_rows * half) & (col < half)\n" in new
    # A later step can still retile the column block (the grid divides by the launch's literal).
    assert any(c.action == "tiling" for c in applicable(analyze(new), "geglu_kernel", H100))


@pytest.mark.parametrize("change, why", [
    (("    tl.store(y_ptr + offs, x * s, mask=offs < n)\n",
      "    tl.store(y_ptr + offs, x * s, mask=offs < n)\n    tl.atomic_add(y_ptr, tl.sum(x, axis=0))\n"), "mixes lanes"),
    (("mask=offs < n, other=0.0)\n    s =", "other=0.0)\n    s ="), "an unmasked access"),
    (("    ch = (offs // HW) % C\n", "    ch = (offs // HW) % C + offs // C\n"), "two widths"),
    (("grid = (triton.cdiv(n, 64),)", "grid = (triton.cdiv(x.numel() // 2, 64),)"), "the grid counts fewer than n"),
    (("grid = (triton.cdiv(n, 64),)", "grid = (triton.cdiv(n + 64, 64),)"), "the grid counts other elements"),
    (("    ch = (offs // HW) % C\n", "    ch = (offs // HW) % C + pid * 0\n"), "the program id read elsewhere"),
    (("    ch = (offs // HW) % C\n", "    ch = (offs // 2 * HW) % C\n"), "divided by an expression"),
    (("s = tl.load(s_ptr + ch, mask=offs < n,", "s = tl.load(s_ptr + ch, mask=(offs < n) & (ch > 0),"),
     "a per-row load masked by more than the count: the row may never have read it"),
    (("channel_scale_kernel[grid](x, s, y, n, C, H * W, BLOCK=64)",
      "channel_scale_kernel[grid](x, s, y, n, C, H * W, BLOCK=64)\n    print(grid)"), "the grid read elsewhere"),
])
def test_refused_when_not_the_same(change, why):
    text = CHANNEL_SCALE.replace(*change)
    assert text != CHANNEL_SCALE, why
    assert not offered(text, "channel_scale_kernel"), why


def test_a_stale_candidate_is_refused():
    (cand,) = offered(CHANNEL_SCALE, "channel_scale_kernel")
    with pytest.raises(ActionError):
        apply_candidate(CHANNEL_SCALE.replace("grid = (triton.cdiv(n, 64),)", "grid = (triton.cdiv(n // 2, 64),)"), cand, H100)


@pytest.mark.slow
def test_row_grid_stays_equivalent(tmp_path):
    tol = (1e-5, 1e-5)
    new = apply_candidate(CHANNEL_SCALE, offered(CHANNEL_SCALE, "channel_scale_kernel")[0], H100).new_text
    results = run_jobs([job(tmp_path, "channel_scale:reference", CHANNEL_SCALE, CHANNEL_SCALE, tol, reference=True),
                        job(tmp_path, "channel_scale:row_grid", CHANNEL_SCALE, new, tol)], tmp_path)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
