"""tiling: a row block that @triton.heuristics caps (``min(next_power_of_2(N), CAP)``) gets larger caps, never smaller."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.actions.tiling import Tiling
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")

# Row logsumexp: the whole row in one block up to 64 elements, an online loop of 64-element blocks past it.
CAPPED_LSE = '''import torch
import triton
import triton.language as tl

ENTRY = "lse"


@triton.heuristics({
    "BLOCK": lambda args: min(triton.next_power_of_2(args["n_cols"]), 64),
    "WHOLE_ROW": lambda args: args["n_cols"] <= 64,
})
@triton.jit
def lse_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, WHOLE_ROW: tl.constexpr):
    x_ptr += tl.program_id(0) * n_cols
    if WHOLE_ROW:
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))
        m = tl.max(x, axis=0)
        s = tl.sum(tl.exp(x - m), axis=0)
    else:
        m = float("-inf")
        s = 0.0
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
    tl.store(out_ptr + tl.program_id(0), m + tl.log(s))


def lse(x, y):
    out = torch.empty(x.shape[0] + y.shape[0], device=x.device)
    lse_kernel[(x.shape[0],)](x, out, x.shape[1])
    lse_kernel[(y.shape[0],)](y, out[x.shape[0]:], y.shape[1])
    return out


def get_inputs(device="cpu"):
    return [torch.randn(3, 50, device=device), torch.randn(3, 3000, device=device)]


def reference(x, y):
    return torch.cat([torch.logsumexp(x, dim=1), torch.logsumexp(y, dim=1)])
'''


def caps(text: str) -> list[dict]:
    return [c.params for c in applicable(analyze(text), "lse_kernel", H100) if c.action == "tiling"]


def test_a_heuristics_cap_is_only_raised():
    assert caps(CAPPED_LSE) == [{"BLOCK": 1024}, {"BLOCK": 2048}, {"BLOCK": 4096}]
    assert caps(CAPPED_LSE.replace("), 64),", "), 2048),")) == [{"BLOCK": 4096}]
    new = apply_candidate(CAPPED_LSE, Candidate("tiling", "Tiling", "lse_kernel", {"BLOCK": 2048}, "", 0), H100).new_text
    assert 'lambda args: min(triton.next_power_of_2(args["n_cols"]), 2048),' in new
    assert new.count("\n") == CAPPED_LSE.count("\n") and 'args["n_cols"] <= 64' in new
    with pytest.raises(ActionError):  # lowering it would give the whole-row branch a block shorter than the row
        apply_candidate(CAPPED_LSE, Candidate("tiling", "Tiling", "lse_kernel", {"BLOCK": 32}, "", 0), H100)


@pytest.mark.parametrize("change", [
    ('min(triton.next_power_of_2(args["n_cols"]), 64)', 'triton.next_power_of_2(args["n_cols"]) // 2'),  # no cap
    ('min(triton.next_power_of_2(args["n_cols"]), 64)', 'min(args["n_cols"], 64)'),  # not a power of two
    ("x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float(\"-inf\"))\n            m_new",
     "x = tl.load(x_ptr + cols)\n            m_new"),  # an unmasked access the block moves
    ("for start in range(0, n_cols, BLOCK):", "for start in range(0, n_cols, 64):"),  # no loop steps by the block
])
def test_a_cap_that_cannot_be_proved_safe_is_refused(change):
    text = CAPPED_LSE.replace(*change)
    assert text != CAPPED_LSE
    assert caps(text) == []


@pytest.mark.slow
def test_a_raised_cap_stays_equivalent(tmp_path):
    new = apply_candidate(CAPPED_LSE, Candidate("tiling", "Tiling", "lse_kernel", {"BLOCK": 1024}, "", 0), H100).new_text
    results = run_jobs([job(tmp_path, "lse:reference", CAPPED_LSE, CAPPED_LSE, TOL_FP32, reference=True),
                        job(tmp_path, "lse:heuristics_cap", CAPPED_LSE, new, TOL_FP32)], tmp_path)
    assert all(r["ok"] for r in results), results


# ---- block sizes the host computes -------------------------------------------------------------
# Liger's spelling: a row loop of BLOCK_SIZE columns, the block capped by a module constant.
HOST_CAPPED_LSE = '''import torch
import triton
import triton.language as tl

ENTRY = "lse"
MAX_FUSED_SIZE = 65536 // 2


@triton.jit
def lse_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    x_ptr += tl.program_id(0) * n_cols
    m = float("-inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + tl.program_id(0), m + tl.log(s))


def lse(x):
    out = torch.empty(x.shape[0], device=x.device)
    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))
    lse_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK_SIZE=BLOCK_SIZE)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(3, 3000, device=device)]


def reference(x):
    return torch.logsumexp(x, dim=1)
'''

# fla's spelling: BK, BV = min(K, 32), min(V, 32); the grid counts the blocks (no loop), every access masked.
FLA_OUTER = '''import torch
import triton
import triton.language as tl

ENTRY = "outer"


@triton.jit
def outer_kernel(k, v, o, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_k, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    b_k = tl.load(k + i_b * K + o_k, mask=o_k < K, other=0)
    b_v = tl.load(v + i_b * V + o_v, mask=o_v < V, other=0)
    mask = (o_k[:, None] < K) & (o_v[None, :] < V)
    tl.store(o + i_b * K * V + o_k[:, None] * V + o_v[None, :], b_k[:, None] * b_v[None, :], mask=mask)


def outer(k, v):
    B, K = k.shape
    V = v.shape[1]
    BK, BV = min(K, 32), min(V, 32)
    NK, NV = triton.cdiv(K, BK), triton.cdiv(V, BV)
    o = k.new_empty(B, K, V)
    outer_kernel[(NV, NK, B)](k, v, o, K=K, V=V, BK=BK, BV=BV)
    return o


def get_inputs(device="cpu"):
    return [torch.randn(2, 64, device=device), torch.randn(2, 96, device=device)]


def reference(k, v):
    return k[:, :, None] * v[:, None, :]
'''


def tiling_of(text: str, kernel: str) -> list[dict]:
    return [c.params for c in applicable(analyze(text), kernel, H100) if c.action == "tiling"]


def applied(text: str, kernel: str, params: dict) -> str:
    return apply_candidate(text, Candidate("tiling", "Tiling", kernel, params, "", 0), H100).new_text


def why(text: str, kernel: str) -> str:
    analysis = analyze(text)
    return Tiling().why_not(analysis, analysis.kernel(kernel), H100) or ""


HOST_LINE = "    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))"


def test_a_host_cap_in_a_module_constant_is_changed_there():
    assert tiling_of(HOST_CAPPED_LSE, "lse_kernel") == [{"BLOCK_SIZE": 1024}, {"BLOCK_SIZE": 2048}, {"BLOCK_SIZE": 4096}]
    new = applied(HOST_CAPPED_LSE, "lse_kernel", {"BLOCK_SIZE": 2048})
    assert "\nMAX_FUSED_SIZE = 2048\n" in new and HOST_LINE in new
    assert new.count("\n") == HOST_CAPPED_LSE.count("\n")


def test_a_module_constant_read_elsewhere_is_left_and_the_cap_inlined():
    text = HOST_CAPPED_LSE.replace("    return out\n", "    assert x.shape[1] <= MAX_FUSED_SIZE * 64\n    return out\n", 1)
    new = applied(text, "lse_kernel", {"BLOCK_SIZE": 1024})
    assert "\nMAX_FUSED_SIZE = 65536 // 2\n" in new
    assert "    BLOCK_SIZE = min(1024, triton.next_power_of_2(x.shape[1]))" in new


@pytest.mark.parametrize("spelling, applied_line", [
    ("min(triton.next_power_of_2(x.shape[1]), 1024)", "min(triton.next_power_of_2(x.shape[1]), 2048)"),
    ("min(1024, triton.next_power_of_2(x.shape[1]))", "min(2048, triton.next_power_of_2(x.shape[1]))"),
    ("builtins.min(1024, triton.next_power_of_2(x.shape[1]))", "builtins.min(2048, triton.next_power_of_2(x.shape[1]))"),
])
def test_a_literal_host_cap_in_either_order(spelling, applied_line):
    text = HOST_CAPPED_LSE.replace("min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))", spelling)
    assert tiling_of(text, "lse_kernel") == [{"BLOCK_SIZE": 2048}, {"BLOCK_SIZE": 4096}]
    new = applied(text, "lse_kernel", {"BLOCK_SIZE": 2048})
    assert f"    BLOCK_SIZE = {applied_line}\n" in new and "\nMAX_FUSED_SIZE = 65536 // 2\n" in new


def test_a_cap_written_at_the_launch_is_changed_there():
    text = HOST_CAPPED_LSE.replace(HOST_LINE + "\n", "").replace(
        "BLOCK_SIZE=BLOCK_SIZE)", "BLOCK_SIZE=min(triton.next_power_of_2(x.shape[1]), 4096))")
    assert tiling_of(text, "lse_kernel") == [{"BLOCK_SIZE": 1024}, {"BLOCK_SIZE": 2048}]
    new = applied(text, "lse_kernel", {"BLOCK_SIZE": 1024})
    assert "BLOCK_SIZE=min(triton.next_power_of_2(x.shape[1]), 1024))" in new


def test_fla_min_caps_are_raised_with_the_size_rounded_up():
    assert tiling_of(FLA_OUTER, "outer_kernel") == [{"BK": 64, "BV": 64}, {"BK": 32, "BV": 128}, {"BK": 128, "BV": 32}]
    new = applied(FLA_OUTER, "outer_kernel", {"BK": 64, "BV": 64})
    assert "    BK, BV = min(triton.next_power_of_2(K), 64), min(triton.next_power_of_2(V), 64)\n" in new
    new = applied(FLA_OUTER, "outer_kernel", {"BK": 128, "BV": 32})
    assert "    BK, BV = min(triton.next_power_of_2(K), 128), min(V, 32)\n" in new
    without_triton = FLA_OUTER.replace("import triton\n", "from triton import cdiv\n").replace("triton.cdiv", "cdiv")
    assert tiling_of(without_triton, "outer_kernel") == []  # raising needs triton.next_power_of_2 in scope


def test_a_lowered_plain_size_cap_keeps_the_size():
    text = FLA_OUTER.replace("min(K, 32), min(V, 32)", "min(K, 64), min(V, 64)")
    assert {"BK": 32, "BV": 128} in tiling_of(text, "outer_kernel")
    new = applied(text, "outer_kernel", {"BK": 32, "BV": 128})
    assert "    BK, BV = min(K, 32), min(triton.next_power_of_2(V), 128)\n" in new


def test_a_cap_is_only_raised_when_a_constexpr_branch_may_use_the_block_for_a_whole_row():
    whole_row = HOST_CAPPED_LSE.replace("n_cols, BLOCK_SIZE: tl.constexpr):", "n_cols, BLOCK_SIZE: tl.constexpr, WHOLE: tl.constexpr):") \
        .replace("    m = float(\"-inf\")\n    s = 0.0\n    for start",
                 "    m = float(\"-inf\")\n    s = 0.0\n    if WHOLE:\n        cols = tl.arange(0, BLOCK_SIZE)\n"
                 "        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float(\"-inf\"))\n"
                 "        m = tl.max(x, axis=0)\n        s = tl.sum(tl.exp(x - m), axis=0)\n    for start") \
        .replace("BLOCK_SIZE=BLOCK_SIZE)", "BLOCK_SIZE=BLOCK_SIZE, WHOLE=x.shape[1] <= 1024)") \
        .replace("min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))", "min(triton.next_power_of_2(x.shape[1]), 1024)")
    assert "if WHOLE:" in whole_row and "WHOLE=x.shape[1]" in whole_row
    assert tiling_of(whole_row, "lse_kernel") == [{"BLOCK_SIZE": 2048}, {"BLOCK_SIZE": 4096}]
    with pytest.raises(ActionError):
        applied(whole_row, "lse_kernel", {"BLOCK_SIZE": 512})
    # A constexpr branch that never reads the block: every read is inside the loop, so lowering is fine.
    flag = HOST_CAPPED_LSE.replace("n_cols, BLOCK_SIZE: tl.constexpr):", "n_cols, BLOCK_SIZE: tl.constexpr, LOG: tl.constexpr):") \
        .replace("    tl.store(out_ptr + tl.program_id(0), m + tl.log(s))",
                 "    if LOG:\n        s = tl.log(s)\n    tl.store(out_ptr + tl.program_id(0), m + s)") \
        .replace("BLOCK_SIZE=BLOCK_SIZE)", "BLOCK_SIZE=BLOCK_SIZE, LOG=True)")
    assert "if LOG:" in flag
    assert tiling_of(flag, "lse_kernel") == [{"BLOCK_SIZE": 1024}, {"BLOCK_SIZE": 2048}, {"BLOCK_SIZE": 4096}]


WHOLE_ROW_SOFTMAX = '''import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def softmax(x):
    y = torch.empty_like(x)
    BLOCK_SIZE = SPELLING
    softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK_SIZE=BLOCK_SIZE)
    return y
'''


@pytest.mark.parametrize("spelling", [
    "triton.next_power_of_2(x.shape[1])",
    "min(triton.next_power_of_2(x.shape[1]), 1024)",
    "max(64, triton.next_power_of_2(x.shape[1]))",
    "min(x.shape[1], 32)",
])
def test_a_block_that_holds_the_whole_row_keeps_its_size(spelling):
    text = WHOLE_ROW_SOFTMAX.replace("SPELLING", spelling)
    assert tiling_of(text, "softmax_kernel") == []
    assert "covers the whole row" in why(text, "softmax_kernel")
    with pytest.raises(ActionError):
        applied(text, "softmax_kernel", {"BLOCK_SIZE": 2048})


@pytest.mark.parametrize("change, reason", [
    (("min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))", "triton.next_power_of_2(x.shape[1])"), "no cap to change"),
    (("min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))", "max(64, triton.next_power_of_2(x.shape[1]))"),
     "not a `min(next_power_of_2(n), CAP)`"),
    (("MAX_FUSED_SIZE = 65536 // 2", "MAX_FUSED_SIZE = 3000"), "not a power-of-two integer constant"),
    (("x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float(\"-inf\"))", "x = tl.load(x_ptr + cols)"), "no mask"),
])
def test_a_looped_block_without_a_provable_cap_is_refused(change, reason):
    text = HOST_CAPPED_LSE.replace(*change)
    assert text != HOST_CAPPED_LSE
    assert tiling_of(text, "lse_kernel") == []
    assert reason in why(text, "lse_kernel")


@pytest.mark.slow
def test_changed_host_caps_stay_equivalent(tmp_path):
    inline = HOST_CAPPED_LSE.replace(HOST_LINE + "\n", "").replace(
        "BLOCK_SIZE=BLOCK_SIZE)", "BLOCK_SIZE=min(triton.next_power_of_2(x.shape[1]), 4096))")
    jobs = [job(tmp_path, "lse:reference", HOST_CAPPED_LSE, HOST_CAPPED_LSE, TOL_FP32, reference=True),
            job(tmp_path, "lse:module_cap", HOST_CAPPED_LSE, applied(HOST_CAPPED_LSE, "lse_kernel", {"BLOCK_SIZE": 1024}), TOL_FP32),
            job(tmp_path, "lse:launch_cap", inline, applied(inline, "lse_kernel", {"BLOCK_SIZE": 1024}), TOL_FP32),
            job(tmp_path, "outer:reference", FLA_OUTER, FLA_OUTER, TOL_FP32, reference=True)]
    jobs += [job(tmp_path, f"outer:{bk}x{bv}", FLA_OUTER, applied(FLA_OUTER, "outer_kernel", {"BK": bk, "BV": bv}), TOL_FP32)
             for bk, bv in ((64, 64), (128, 32))]
    results = run_jobs(jobs, tmp_path)
    assert len(results) == len(jobs) and all(r["ok"] for r in results), results


def test_a_block_computed_by_a_helper_says_how():
    """Liger's calculate_settings: the block comes from code tiling does not read."""
    text = HOST_CAPPED_LSE.replace("MAX_FUSED_SIZE = 65536 // 2\n", "\n").replace(
        "    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))",
        "    BLOCK_SIZE, num_warps = settings(x.shape[1])") + \
        "\n\ndef settings(n):\n    return min(triton.next_power_of_2(n), 4096), 4\n"
    assert tiling_of(text, "lse_kernel") == []
    assert "set by code tiling does not read" in why(text, "lse_kernel")


def test_a_constant_unpacked_from_a_tuple_is_tiled_in_place():
    """flash-linear-attention writes ``BT, BK, BV = 64, 32, 32``: the element is the constant, edited where it is."""
    line = "    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(x.shape[1]))"
    text = HOST_CAPPED_LSE.replace(line, "    BLOCK_SIZE, unused = 1024, 0")
    offered = tiling_of(text, "lse_kernel")
    assert offered and all(set(p) == {"BLOCK_SIZE"} or "num_warps" in p for p in offered)
    new = applied(text, "lse_kernel", {"BLOCK_SIZE": 4096})
    assert "    BLOCK_SIZE, unused = 4096, 0" in new and new.replace("4096, 0", "1024, 0") == text


def test_a_cap_computed_at_run_time_is_refused():
    text = HOST_CAPPED_LSE.replace("MAX_FUSED_SIZE = 65536 // 2\n", "").replace(
        "    BLOCK_SIZE = min(", "    MAX_FUSED_SIZE = 65536 // x.element_size()\n    BLOCK_SIZE = min(")
    assert tiling_of(text, "lse_kernel") == []
    assert "computed at run time (`65536 // x.element_size()`)" in why(text, "lse_kernel")


def test_a_loop_that_stages_more_than_two_tiles_counts_them_and_gets_two_stages():
    """A W4A16 matmul loads packed weights, scales and zeros beside A: 128x256x64 at 3 stages needed 475,136
    bytes of shared memory for sm_90 (over the H200's 232,448); tiling now counts those tiles and offers two stages."""
    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "quant_int4_packed_test.py").read_text()
    from corpus.kernels import kernel_path

    matmul = kernel_path("matmul").read_text()
    analysis = analyze(text)
    cands = [c for c in applicable(analysis, "w4a16_matmul_kernel", get_profile("h200")) if c.action == "tiling"]
    assert cands and all(c.params.get("num_stages") == 2 for c in cands)
    assert not [c for c in cands if c.params.get("BLOCK_N") == 256]  # 128x256 overflows even at two stages
    new = apply_candidate(text, cands[0], get_profile("h200")).new_text
    assert "num_stages=2" in new
    # A plain matmul stages only its two operands: no stage lowering there. Its launch pins num_stages=1, so its
    # tiles come with Triton's default 3 on sm_80+ (and keep the launch's stages on Volta, which has no async copies).
    plain = [c for c in applicable(analyze(matmul), "matmul_kernel", get_profile("h200")) if c.action == "tiling"]
    assert plain and all(c.params.get("num_stages") == 3 for c in plain)
    volta = [c for c in applicable(analyze(matmul), "matmul_kernel", get_profile("v100")) if c.action == "tiling"]
    assert volta and not [c for c in volta if "num_stages" in c.params]


FLA_PROJECT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def project_kernel(x, w, o, T, K, V, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_t, i_v = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_v = i_v * BV + tl.arange(0, BV)
    b_o = tl.zeros([BT, BV], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        b_x = tl.load(x + o_t[:, None] * K + o_k[None, :], mask=(o_t[:, None] < T) & (o_k[None, :] < K), other=0.0)
        b_w = tl.load(w + o_k[:, None] * V + o_v[None, :], mask=(o_k[:, None] < K) & (o_v[None, :] < V), other=0.0)
        b_o += tl.dot(b_x, b_w)
    tl.store(o + o_t[:, None] * V + o_v[None, :], b_o, mask=(o_t[:, None] < T) & (o_v[None, :] < V))


def project(x, w):
    T, K = x.shape
    V = w.shape[1]
    o = torch.empty(T, V, device=x.device, dtype=torch.float32)
    BT, BK, BV = 16, 16, 16
    project_kernel[(triton.cdiv(T, BT), triton.cdiv(V, BV))](x, w, o, T, K, V, BT=BT, BK=BK, BV=BV)
    return o
'''


def test_a_dot_kernel_named_the_fla_way_gets_matmul_tiles():
    """fla's BT (rows), BV (columns) and BK (a K loop here): the accumulator ``tl.zeros([BT, BV])`` says which is m
    and n, and the one block a loop steps by is k."""
    from mtmc_lsp.optimizer.actions import _common as c

    kernel = analyze(FLA_PROJECT).kernel("project_kernel")
    assert c.dot_block_roles(kernel, FLA_PROJECT) == {"BT": "m", "BV": "n", "BK": "k"}
    offered = tiling_of(FLA_PROJECT, "project_kernel")
    assert offered and all({"BT", "BK", "BV"} <= set(p) for p in offered)
    new = applied(FLA_PROJECT, "project_kernel", offered[-1])
    assert f"BT, BK, BV = {offered[-1]['BT']}, {offered[-1]['BK']}, {offered[-1]['BV']}" in new


H200 = get_profile("h200")


def test_an_ieee_fp32_dot_gets_fma_tiles_not_the_tensor_cores():
    """H200, session 13: 128 x 256 x 64 ran the dev corpus' IEEE sgemm 3x slower than its 32 x 32 x 16."""
    from mtmc_lsp.optimizer.actions.autotune import FMA_DOT_CONFIGS
    from mtmc_lsp.optimizer.actions.tiling import FMA_TILES

    exact = FLA_PROJECT.replace("tl.dot(b_x, b_w)", 'tl.dot(b_x, b_w, input_precision="ieee")')
    tiles = {(p["BT"], p["BV"], p["BK"]) for p in tiling_of(exact, "project_kernel")}
    assert tiles and tiles <= set(FMA_TILES)
    assert {(p["BT"], p["BV"], p["BK"]) for p in tiling_of(FLA_PROJECT, "project_kernel")}.isdisjoint(FMA_TILES)
    tuned, = [c for c in applicable(analyze(exact), "project_kernel", H200) if c.action == "autotune"]
    new = apply_candidate(exact, tuned, H200).new_text
    # The FMA configs, then the launch's own tile (autotune keeps it as the last choice).
    assert new.count("triton.Config(") == len(FMA_DOT_CONFIGS) + 1 and "'BT': 64, 'BV': 64, 'BK': 32" in new.replace('"', "'")


def test_a_column_block_whose_rows_follow_it_is_retiled(tmp_path):
    """The suite's row sum after rows_per_program: the launch computes ``BLOCK_M = max(1, min(8192 // BLOCK_SIZE,
    ...))`` from the column block, so a wider column block keeps the tile's size and tiling may change it (before,
    BLOCK_M's run-time value kept tiling from offering anything)."""
    from mtmc_lsp.optimizer.actions.tiling import FOLLOWED_BLOCKS

    suite = Path(__file__).resolve().parents[1] / "benchmarks" / "suite" / "row_sum.py"
    before = suite.read_text() + '\nENTRY = "row_sum"  # for the equivalence runner\n'
    (rows,) = [c for c in applicable(analyze(before), "row_sum_kernel", H100)
               if c.action == "rows_per_program" and c.params == {"TILE": 8192}]
    text = apply_candidate(before, rows, H100).new_text
    assert "8192 // BLOCK_SIZE" in text
    assert tiling_of(text, "row_sum_kernel") == [{"BLOCK_SIZE": b} for b in FOLLOWED_BLOCKS]
    new = applied(text, "row_sum_kernel", {"BLOCK_SIZE": 256})
    assert "BLOCK_SIZE = 256" in new and "8192 // BLOCK_SIZE" in new
    results = run_jobs([job(tmp_path, "row_sum:reference", before, before, TOL_FP32, reference=True),
                        job(tmp_path, "row_sum:followed", before, new, TOL_FP32)], tmp_path)
    assert all(r["ok"] for r in results), results
