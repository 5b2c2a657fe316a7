"""flash_attention: scores, softmax and P @ V kernels become one flash kernel; refusals when the chain is not exactly that."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.actions import flash_attention as fa
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy.base import PolicyState
from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path
from test_actions_semantics import TOL_FP16, TOL_FP32, job, run_jobs

H100 = get_profile("h100")
THREE = kernel_path("attention_three_kernels").read_text()  # causal, fp16, contiguous [B, H, S, D]
PADDED = kernel_path("attention_padded_strided").read_text()  # fp32, strides, per-batch key lengths, scores loop over keys
TWO = kernel_path("attention_two_kernels").read_text()  # scores + softmax in one kernel, fp16 probabilities
MATMUL_STYLE = kernel_path("attention_matmul_style").read_text()  # Q @ K^T looping over the head dim, probabilities in q.dtype
# The suite's: strided, a three-pass softmax, the key block named BLOCK_N in one kernel and BLOCK_K in the other,
# probabilities in q.dtype while the kernels get q3 = q.reshape(...).
LOOPED = kernel_path("suite_attention").read_text()
# The scale applied by the softmax kernel (softmax(scores * scale)) instead of the scores kernel.
SCALE_IN_SOFTMAX = THREE.replace("    s = tl.dot(q, tl.trans(k)) * scale\n", "    s = tl.dot(q, tl.trans(k))\n").replace(
    "def row_softmax_kernel(x_ptr, y_ptr, n_cols, row_stride, BLOCK: tl.constexpr):",
    "def row_softmax_kernel(x_ptr, y_ptr, n_cols, row_stride, sm_scale, BLOCK: tl.constexpr):").replace(
    "    x = x - tl.max(x, axis=0)\n", "    x = x * sm_scale\n    x = x - tl.max(x, axis=0)\n").replace(
    "(scores, probs, seq_len, seq_len,\n", "(scores, probs, seq_len, seq_len, head_dim ** -0.5,\n")
# The softmax written over the scores in place; P @ V reads the same buffer.
IN_PLACE = THREE.replace("    probs = torch.empty_like(scores)\n", "").replace(
    "(scores, probs, seq_len, seq_len,", "(scores, scores, seq_len, seq_len,").replace("](probs, v, out, seq_len,", "](scores, v, out, seq_len,")
# The masks named once and passed by name (``mask = cols < n_cols``), as Triton's softmax tutorial writes them.
NAMED_MASKS = THREE.replace("    x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols,",
                            "    in_row = cols < n_cols\n    x = tl.load(x_ptr + row * row_stride + cols, mask=in_row,").replace(
    "tl.store(y_ptr + row * row_stride + cols, y, mask=cols < n_cols)", "tl.store(y_ptr + row * row_stride + cols, y, mask=in_row)")
CHAINS = {"three": (THREE, "qk_scores_kernel", "row_softmax_kernel", "pv_kernel"),
          "named_masks": (NAMED_MASKS, "qk_scores_kernel", "row_softmax_kernel", "pv_kernel"),
          "in_place": (IN_PLACE, "qk_scores_kernel", "row_softmax_kernel", "pv_kernel"),
          "scale_in_softmax": (SCALE_IN_SOFTMAX, "qk_scores_kernel", "row_softmax_kernel", "pv_kernel"),
          "padded": (PADDED, "attn_scores", "softmax_rows", "attn_pv"),
          "two": (TWO, "softmax_scores_kernel", "", "probs_v_kernel"),
          "matmul_style": (MATMUL_STYLE, "scores_matmul_kernel", "softmax_kernel", "pv_matmul_kernel"),
          "looped": (LOOPED, "scores_kernel", "row_softmax_kernel", "pv_kernel")}


def offered(text: str, kernel: str, small: bool = False) -> list:
    """The flash candidates at the target's tiles (``small``: only the small-tile variants)."""
    return [cand for cand in applicable(analyze(text), kernel, H100)
            if cand.action == "flash_attention" and ("tile" in cand.params) == small]


def fused(text: str, kernel: str) -> str:
    (cand,) = offered(text, kernel)
    return apply_candidate(text, cand, H100).new_text


def refusal(text: str, chain: str = "three") -> str:
    """Why the chain is not fused (the plan's ActionError message)."""
    _, scores, softmax, pv = CHAINS[chain]
    with pytest.raises(ActionError) as info:
        ACTIONS["flash_attention"]._plan(c.parse(text), analyze(text), scores, softmax, pv)
    return str(info.value)


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_offered_on_every_kernel_of_the_chain(chain):
    text, scores, softmax, pv = CHAINS[chain]
    for kernel in filter(None, (scores, softmax, pv)):
        (cand,) = offered(text, kernel)
        assert cand.kind == "Fusion" and cand.params == {"scores": scores, "softmax": softmax, "pv": pv}
        assert cand.title.startswith("Fuse attention into one flash kernel")


def test_three_kernels_become_one_flash_kernel():
    new = fused(THREE, "pv_kernel")
    assert "qk_scores_kernel" not in new and "row_softmax_kernel" not in new  # launches and definitions gone
    assert "scores = torch.empty" not in new and "probs = torch.empty_like" not in new
    assert "pv_kernel[(triton.cdiv(seq_len, BLOCK), batch * heads)](v, out, seq_len,\n" in new
    assert "q, k, head_dim ** -0.5,\n" in new  # the host's own spelling, on a line of its own like the launch's groups
    assert "def pv_kernel(v_ptr, o_ptr, seq_len,\n              q_ptr, k_ptr, scale,\n              HEAD_DIM: tl.constexpr," in new
    body = new.split("def pv_kernel", 1)[1].split("\ndef ", 1)[0]
    loop = body.split("    for start_n", 1)[1]
    assert "q = tl.load(q_ptr" in body.split("    for start_n", 1)[0]  # the query tile is loaded once, before the loop
    assert 's = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))  # causal' in loop  # the mask, at the loop's keys
    assert "acc = acc * alpha[:, None]" in loop and "acc = acc / l_i[:, None]" in body
    # Causal: the key loop stops after the row block's last row (later blocks are all masked).
    assert "    for start_n in range(0, tl.minimum(seq_len, (pid_m + 1) * BLOCK_M), BLOCK_N):\n" in body


def test_the_key_loop_stops_early_only_for_a_causal_mask_it_can_read():
    assert "tl.minimum" not in fused(PADDED, "attn_pv") and "tl.minimum" not in fused(TWO, "probs_v_kernel")
    strict = THREE.replace("offs_m[:, None] >= offs_n[None, :], s,", "offs_m[:, None] > offs_n[None, :], s,")
    assert strict != THREE and "tl.minimum" not in fused(strict, "pv_kernel")
    assert "tl.minimum" not in fused(SCALE_IN_SOFTMAX, "pv_kernel")  # the softmax kernel's pre-step comes after the mask
    flipped = THREE.replace("offs_m[:, None] >= offs_n[None, :], s,", "offs_n[None, :] <= offs_m[:, None], s,")
    assert "(pid_m + 1) * BLOCK_M" in fused(flipped, "pv_kernel")


def test_strides_and_padding_keep_their_spelling():
    new = fused(PADDED, "attn_scores")
    assert "p.stride(" not in new and "s.stride(" not in new and "stride_pb" not in new  # the buffers' strides go with them
    before_loop, loop = new.split("def attn_pv", 1)[1].split("    for start_n", 1)
    assert "kv_len = tl.load(kv_lens + off_b)" in before_loop  # per-batch length, hoisted
    assert "qk = tl.where((start_n + offs_n_qk)[None, :] < kv_len, qk, float(\"-inf\"))" in loop
    assert "stride_qb, stride_qh, stride_qm, stride_qd" in new and "q.stride(0), q.stride(1)" in new


def test_what_the_softmax_kernel_does_first_comes_along():
    assert SCALE_IN_SOFTMAX.count("sm_scale") == 2
    new = fused(SCALE_IN_SOFTMAX, "row_softmax_kernel")
    assert 's = tl.where(offs_n[None, :] < seq_len, s.to(tl.float32) * sm_scale * 1.4426950408889634, float("-inf"))' in new
    assert "q, k, head_dim ** -0.5,\n" in new and "q_ptr, k_ptr, sm_scale,\n" in new
    assert "row_softmax_kernel" not in new


def test_two_kernel_form_casts_probabilities_like_the_buffer():
    new = fused(TWO, "softmax_scores_kernel")
    assert "probs = torch.empty" not in new and "softmax_scores_kernel" not in new
    assert "p = p.to(tl.float16)" in new  # the probabilities were stored as fp16 before P @ V
    assert "row_max" not in new  # the one-block softmax is not copied, the online one replaces it


@pytest.mark.parametrize("chain, change, why", [
    ("three", ("    y = num / tl.sum(num, axis=0)\n", "    y = num / tl.sum(num, axis=0) * (tl.rand(7, cols) > 0.1)\n"), "random numbers"),
    ("three", ("mask=(offs_m[:, None] < seq_len) & (offs_n[None, :] < seq_len), other=0.0)\n        v =",
               "mask=(offs_m[:, None] < seq_len) & (offs_n[None, :] % 2 == 0), other=0.0)\n        v ="), "does not read"),
    ("three", ("x_ptr + row * row_stride + cols, mask", "x_ptr + row + cols * row_stride, mask"), "unit-stride axis"),
    ("three", ("    return out\n", "    return out, probs\n"), "for something besides"),
    ("three", ("BLOCK=triton.next_power_of_2(seq_len))", "BLOCK=64)"), "may not cover the row"),
    ("three", ("    x = x - tl.max(x, axis=0)\n", "    x = tl.where(cols < 8, x, -float('inf'))\n    x = x - tl.max(x, axis=0)\n"),
     "an elementwise function of its scalar parameters"),
    ("three", ("dtype=torch.float32)", "dtype=torch.float16)"), "not fp32"),
    ("three", ("scores = torch.empty(", "scores = torch.zeros("), "starts as zeros"),
    ("three", ("        acc += tl.dot(p.to(v.dtype), v)\n", "        acc += tl.dot(p.to(v.dtype), v)\n    last_p = p\n"), "besides one tl.dot"),
    ("three", ("    pv_kernel[", "    q = q * 2\n    pv_kernel["), "changes what qk_scores_kernel reads"),
    ("three", ("    pv_kernel[", "    torch.cuda.synchronize()\n    pv_kernel["), "shape arithmetic"),
    ("three", ("acc += tl.dot(p.to(v.dtype), v)", "acc += tl.dot((p * 2.0).to(v.dtype), v)"), "left operand"),
    ("three", ("offs_m[:, None] * seq_len + offs_n[None, :], s,", "offs_m[:, None] + offs_n[None, :] * seq_len, s,"), "alike"),
    ("three", ("    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)\n", "    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32) + 1.0\n"),
     "tl.zeros((rows, dim), dtype=tl.float32)"),
    ("padded", ("    for start_n in range(0, seq_k, BLOCK_N):\n        k_ptrs",
                "    for start_n in range(0, seq_k, BLOCK_N):\n        q = q * 1.0\n        k_ptrs"), "carries q"),
    ("two", ("BLOCK_N=triton.next_power_of_2(seq_len))", "BLOCK_N=64)"), "every key"),
    ("two", ("tl.sum(e, axis=1)[:, None]", "tl.sum(e, axis=1)[:, None] * 2.0"), "neither"),
])
def test_refused_with_a_reason(chain, change, why):
    text = CHAINS[chain][0]
    changed = text.replace(*change)
    assert changed != text, why
    assert why in refusal(changed, chain)
    assert not offered(changed, CHAINS[chain][-1])


def test_offered_on_the_unfused_dev_files():
    dev = Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev"
    for name, pv in (("attn_unfused_causal_strided.py", "_pv_kernel"), ("attn_two_kernels_kernelbench.py", "pv_kernel")):
        (cand,) = offered((dev / name).read_text(), pv)
        assert "flash_attention" == cand.action, name


def test_small_tile_variants_for_short_sequences():
    # THREE sets both blocks from one constant (square tiles: the target's choice is 64 x 64): 32 x 32 is the variant.
    (variant,) = offered(THREE, "pv_kernel", small=True)
    assert variant.params["tile"] == 32 and "32x32 tiles (more programs" in variant.title
    new = apply_candidate(THREE, variant, H100).new_text
    assert "    BLOCK = 32\n" in new and "EVEN_N=seq_len % BLOCK == 0" in new
    assert "    BLOCK = 64\n" in apply_candidate(THREE, offered(THREE, "pv_kernel")[0], H100).new_text
    # Two blocks set apart: 64 x 64 and 32 x 32 beside the target's 128 x 64.
    assert [v.params["tile"] for v in offered(TWO, "probs_v_kernel", small=True)] == [64, 32]
    with pytest.raises(ActionError):
        apply_candidate(THREE, Candidate("flash_attention", "Fusion", "pv_kernel", {**variant.params, "tile": 48}, "x", 0), H100)


def test_why_not_names_the_chain_and_its_refusal():
    text = THREE.replace("scores = torch.empty(", "scores = torch.zeros(")
    why = ACTIONS["flash_attention"].why_not(analyze(text), analyze(text).kernel("pv_kernel"), H100)
    assert why.startswith("qk_scores_kernel -> row_softmax_kernel -> pv_kernel: ") and "starts as zeros" in why
    assert ACTIONS["flash_attention"].why_not(analyze(THREE), analyze(THREE).kernel("pv_kernel"), H100) is None


def test_refused_when_the_softmax_arguments_change_before_the_last_launch():
    text = SCALE_IN_SOFTMAX.replace("seq_len, seq_len, head_dim ** -0.5,\n", "seq_len, seq_len, sm_scale,\n").replace(
        "    BLOCK = 16\n", "    BLOCK = 16\n    sm_scale = head_dim ** -0.5\n").replace("    pv_kernel[", "    sm_scale = sm_scale * 2\n    pv_kernel[")
    assert text.count("sm_scale = ") == 2
    assert "changes what row_softmax_kernel reads" in refusal(text, "scale_in_softmax")


def test_a_head_dim_loop_is_nested_in_the_key_loop():
    new = fused(MATMUL_STYLE, "scores_matmul_kernel")
    loop = new.split("def pv_matmul_kernel", 1)[1].split("    for n in range(0, N, BLOCK_N):\n", 1)[1]
    assert "        acc_qk = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n        for k in range(0, D, BLOCK_K):\n" in loop
    assert "p = p.to(a_ptr.dtype.element_ty)" in loop  # probs had q's dtype: the fused kernel's pointer to q says which
    assert "BLOCK_K=16" in new and "kt.stride(1)" in new and "scores.stride(" not in new and "probs" not in new


def test_accumulating_by_keyword_is_the_same_dot():
    text = TWO.replace("acc = tl.dot(p, v, acc)", "acc = tl.dot(p, v, acc=acc)")
    assert text != TWO and "acc = tl.dot(p, v, acc=acc)" in fused(text, "probs_v_kernel")


def test_refused_when_the_pv_kernel_moves_its_pointers_by_hand():
    text = THREE.replace("    for start_n in range(0, seq_len, BLOCK_N):\n        offs_n = start_n + tl.arange(0, BLOCK_N)\n        p = tl.load(p_ptr + ",
                         "    p_ptrs = p_ptr + tl.arange(0, BLOCK_N)[None, :]\n"
                         "    for start_n in range(0, seq_len, BLOCK_N):\n        offs_n = start_n + tl.arange(0, BLOCK_N)\n        p = tl.load(p_ptrs + ").replace(
        "offs_m[:, None] * seq_len + offs_n[None, :],\n                    mask=", "offs_m[:, None] * seq_len,\n                    mask=").replace(
        "        acc += tl.dot(p.to(v.dtype), v)\n", "        acc += tl.dot(p.to(v.dtype), v)\n        p_ptrs += BLOCK_N\n")
    assert text.count("p_ptrs += BLOCK_N") == 1 and "p = tl.load(p_ptrs + bh" in text and "offs_m[:, None] * seq_len,\n" in text
    assert "does not advance with its loop" in refusal(text)


def test_not_offered_on_kernels_that_are_already_one_kernel():
    dev = Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev"
    unfused = {"attn_unfused_causal_strided.py", "attn_two_kernels_kernelbench.py", "attn_vit_short_seq.py"}  # the dev files this action is for
    for path in [*sorted(p for p in dev.glob("attn_*.py") if p.name not in unfused), kernel_path("attention")]:
        analysis = analyze(path.read_text(), str(path))
        for kernel in analysis.kernels:
            assert not [cd for cd in applicable(analysis, kernel, H100) if cd.action == "flash_attention"], path.name


def test_stale_candidate_is_refused():
    (cand,) = offered(THREE, "pv_kernel")
    with pytest.raises(ActionError, match="fp32"):
        apply_candidate(THREE.replace("dtype=torch.float32)", "dtype=torch.bfloat16)"), cand, H100)


def test_heuristic_ranks_it_first():
    analysis = analyze(THREE)
    kernel = analysis.kernel("pv_kernel")
    cands = applicable(analysis, kernel, H100)
    assert len(cands) > 1
    state = PolicyState(analysis=analysis, kernel=kernel, target=H100)
    assert HeuristicPolicy().rank(state, cands)[0].candidate.action == "flash_attention"


@pytest.mark.slow
def test_flash_kernel_stays_equivalent(tmp_path):
    jobs = []
    for name, (text, scores, _softmax, pv) in sorted(CHAINS.items()):
        tol = TOL_FP16 if "float16" in text else TOL_FP32
        new = fused(text, scores)
        piped = next(cand for cand in applicable(analyze(new), pv, H100) if cand.action == "pipelining")
        jobs += [job(tmp_path, f"{name}:reference", text, text, tol, reference=True),
                 job(tmp_path, f"{name}:flash", text, new, tol),
                 job(tmp_path, f"{name}:flash+pipelining", text, apply_candidate(new, piped, H100).new_text, tol)]
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]


def fused_edit(text: str, kernel: str, target=H100):
    (cand,) = [cd for cd in applicable(analyze(text), kernel, target) if cd.action == "flash_attention" and "tile" not in cd.params]
    return apply_candidate(text, cand, target)


def test_a_looping_softmax_is_read_in_one_block_first():
    edit = fused_edit(LOOPED, "row_softmax_kernel", get_profile("h200"))
    assert edit.notes[0] == "row_softmax_kernel's passes over the row read as one block first (as single_pass does)"
    new = edit.new_text
    assert "row_softmax_kernel" not in new and "scores_kernel" not in new and "probs" not in new
    assert "p = p.to(q_ptr.dtype.element_ty)" in new  # q.dtype reaches the kernel as q3's pointer
    # The key block is the loop's BLOCK_K: tiled like a query x key tile.
    assert "    BLOCK_M = 128\n" in new and "    BLOCK_K = 64\n" in new
    assert edit.notes[-2].startswith("pv_kernel tiled for H200: BLOCK_M=128, BLOCK_K=64, num_warps=8")


def test_the_flash_kernel_gets_tiles_for_the_target():
    h200 = get_profile("h200")
    three = fused_edit(THREE, "pv_kernel", h200)
    assert "    BLOCK = 64\n" in three.new_text  # one constant sets both blocks: square tiles
    assert "num_warps" not in three.new_text and "num_stages" not in three.new_text
    padded = fused_edit(PADDED, "attn_scores", h200).new_text
    assert "    BLOCK_M, BLOCK_N = 128, 64\n    grid = (triton.cdiv(seq_q, BLOCK_M), batch, heads)\n" in padded  # the tuple stays a tuple
    assert "BLOCK_D=head_dim, EVEN_N=seq_k % BLOCK_N == 0, num_warps=8, num_stages=2)" in padded  # fp32 K/V tiles: two stages fit 227 KiB
    two = fused_edit(TWO, "probs_v_kernel", h200)
    assert "grid = (triton.cdiv(seq_len, 128), heads)" in two.new_text  # the grid follows BLOCK_M
    assert "BLOCK_M=128, BLOCK_N=64, EVEN_N=seq_len % 64 == 0, num_warps=8)" in two.new_text  # fp16: the default three stages fit
    assert two.notes[-2].startswith("probs_v_kernel tiled for H200: BLOCK_M=128, BLOCK_N=64, num_warps=8 (was 16x16")


def test_a_head_dim_named_like_a_block_is_not_the_key_block():
    # Triton's older tutorials name the head dim BLOCK_DMODEL and pass it at run time: the key block is the one that
    # steps the key loop (BLOCK_N), so the target's tiles are still set (they were kept at the chain's 32 x 32).
    dev = Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "attn_unfused_causal_strided.py"
    edit = fused_edit(dev.read_text(), "_pv_kernel", get_profile("h200"))
    assert "    BLOCK = 64\n" in edit.new_text and "BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_DMODEL=D" in edit.new_text
    assert edit.notes[-2].startswith("_pv_kernel tiled for H200: BLOCK_M=64, BLOCK_N=64 (was 32x32")
    # One constant for both blocks: 64 x 64 is the target's square tile, so only 32 x 32 is offered beside it.
    assert [v.params["tile"] for v in offered(dev.read_text(), "_pv_kernel", small=True)] == [32]


def test_tiles_follow_the_targets_shared_memory():
    small = fused_edit(TWO, "probs_v_kernel", get_profile("rtx4090")).new_text  # 99 KiB per block
    assert "BLOCK_M=64, BLOCK_N=64, EVEN_N=seq_len % 64 == 0, num_stages=2)" in small and "grid = (triton.cdiv(seq_len, 64), heads)" in small
    volta = fused_edit(TWO, "probs_v_kernel", get_profile("v100")).new_text  # no async copies: nothing staged
    assert "BLOCK_M=128, BLOCK_N=64, EVEN_N=seq_len % 64 == 0, num_warps=8)" in volta
    for bm, bn, warps, stages in [fa.choose_flash_tile(t, 2, 4, True, False) for t in (H100, get_profile("a100"))]:
        assert (bm, bn, warps, stages) == (128, 64, 8, 3)
        assert fa.flash_shared_bytes(bm, bn, fa.HEAD_DIM_GUESS, 2, stages) <= get_profile("a100").max_shared_per_block
    assert fa.choose_flash_tile(H100, 2, 4, True, square=True) == (64, 64, 4, 3)
    assert fa.choose_flash_tile(H100, 2, 4, False, False) == (64, 64, 4, 3)  # num_warps cannot change: no 8-warp tile


def test_tiles_already_large_or_not_constants_are_kept():
    big = fused_edit(THREE.replace("    BLOCK = 16\n", "    BLOCK = 128\n"), "pv_kernel")
    assert "    BLOCK = 128\n" in big.new_text and "kept at 128x128" in big.notes[-2]
    computed = TWO.replace("HEAD=head_dim, BLOCK_M=16, BLOCK_N=16)", "HEAD=head_dim, BLOCK_M=16, BLOCK_N=max(16, head_dim // 4))")
    kept = fused_edit(computed, "probs_v_kernel")
    assert "BLOCK_M=16, BLOCK_N=max(16, head_dim // 4), EVEN_N=seq_len % max(16, head_dim // 4) == 0)" in kept.new_text and "tiles kept" in kept.notes[-2]


def test_tuple_constants_keep_their_comment():
    commented = PADDED.replace("    BLOCK_M, BLOCK_N = 16, 16\n", "    BLOCK_M, BLOCK_N = 16, 16  # rows, keys\n")
    new = fused_edit(commented, "attn_scores").new_text
    assert "    BLOCK_M, BLOCK_N = 128, 64  # rows, keys\n" in new and "__mtmc_split" not in new
    split, joins = fa._split_tuple_constants("x = 1\n    BLOCK_M, BLOCK_N = 16, 16  # c\n    a, b = 1, 2\n")
    assert split.count("__mtmc_split_0__") == 2 and "a, b = 1, 2" in split  # only block names are split
    assert fa._join_tuple_constants(split, joins) == "x = 1\n    BLOCK_M, BLOCK_N = 16, 16  # c\n    a, b = 1, 2\n"


# ---- EVEN_N: the key masks only where the last key block is partial -----------------------------------
# Interpreter sizes per chain: the key length goes in ``{L}`` (the fused kernels' key block is 64 on the H200).
EVEN_SIZES = {"three": {"batch": 1, "heads": 2, "seq_len": "L", "head_dim": 16},
              "padded": {"batch": 2, "heads": 1, "seq_q": 40, "seq_k": "L", "head_dim": 16},
              "matmul_style": {"bh": 2, "seq": "L", "dim": 16},
              "two": {"heads": 2, "seq_len": "L", "head_dim": 16},
              "looped": {"batch": 1, "heads": 2, "seq_len": "L", "head_dim": 16}}
EVEN_LENGTHS = (128, 100)  # two whole key blocks; a partial last block
_EVEN_RUNNER = '''
import importlib.util, json, sys, torch
jobs = json.loads(open(sys.argv[1]).read())
out = []
for j in jobs:
    mods = []
    for i, path in enumerate((j["before"], j["after"])):
        spec = importlib.util.spec_from_file_location(f"m{len(out)}_{i}", path)
        mods.append(importlib.util.module_from_spec(spec))
        spec.loader.exec_module(mods[-1])
    torch.manual_seed(0)
    inputs = mods[0].get_inputs(device="cpu", **j["sizes"])
    before, after = (getattr(m, m.ENTRY)(*inputs).float() for m in mods)
    out.append({"name": j["name"], "ok": bool(torch.allclose(after, before, atol=j["atol"], rtol=j["rtol"])),
                "max_diff": float((after - before).abs().max())})
open(sys.argv[2], "w").write(json.dumps(out))
'''


def even_jobs(tmp_path, versions: dict[str, str], chain: str, text: str) -> list[dict]:
    """One job per (version, key length): the version against the naive chain at that length."""
    tol = TOL_FP16 if "float16" in text else TOL_FP32
    jobs = []
    for label, new in versions.items():
        for length in EVEN_LENGTHS:
            sizes = {k: length if v == "L" else v for k, v in EVEN_SIZES[chain].items()}
            jobs.append(job(tmp_path, f"{chain}:{label}:{length}", text, new, tol, sizes=sizes))
    return jobs


def run_even(jobs: list[dict], tmp_path) -> dict[str, dict]:
    runner, jobs_file, results = tmp_path / "even_runner.py", tmp_path / "even_jobs.json", tmp_path / "even_results.json"
    runner.write_text(_EVEN_RUNNER)
    jobs_file.write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(runner), str(jobs_file), str(results)], env={**os.environ, "TRITON_INTERPRET": "1"},
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["name"]: r for r in json.loads(results.read_text())}


def test_the_key_masks_branch_on_even_n():
    new = fused_edit(THREE, "pv_kernel", get_profile("h200"))
    loop = new.new_text.split("    for start_n", 1)[1].split("    acc = acc / l_i", 1)[0]
    assert loop.count("        if EVEN_N:\n") == 3 and loop.count("        else:\n") == 3  # K load, scores, V load
    even_k = "        if EVEN_N:\n            k = tl.load(k_ptr + bh * seq_len * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :])\n"
    assert even_k in loop
    assert "            s = s.to(tl.float32) * 1.4426950408889634\n" in loop  # no tl.where on the key mask
    assert 's = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))  # causal' in loop  # outside the branches
    assert loop.count("< seq_len") == 3  # only in the else branches
    assert "mask=offs_m[:, None] < seq_len, other=0.0)" in new.new_text.split("    for start_n", 1)[0]  # query rows stay masked
    assert "BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):" in new.new_text
    assert "BLOCK_M=BLOCK, BLOCK_N=BLOCK, EVEN_N=seq_len % BLOCK == 0)" in new.new_text  # the host's own names
    assert new.notes[-1].startswith("pv_kernel's key masks only where the last key block is partial: EVEN_N=seq_len % BLOCK == 0")


def test_even_n_keeps_masks_that_are_not_on_the_loops_keys():
    padded = fused_edit(PADDED, "attn_scores", get_profile("h200")).new_text
    # The per-batch length is no key-block bound: its tl.where stays outside the branches.
    assert '        qk = tl.where((start_n + offs_n_qk)[None, :] < kv_len, qk, float("-inf"))\n        if EVEN_N:\n' in padded
    matmul = fused_edit(MATMUL_STYLE, "pv_matmul_kernel", get_profile("h200")).new_text
    # The head-dim loop nested in the key loop: only the key part of K's mask goes (M and N are both ``seq``).
    assert "            if EVEN_N:\n                b = tl.load(" in matmul and "mask=(k + rk)[:, None] < D, other=0.0)" in matmul
    assert "mask=rd[None, :] < D, other=0.0)" in matmul and "EVEN_N=seq % 64 == 0" in matmul
    two = fused_edit(TWO, "probs_v_kernel", get_profile("h200")).new_text
    # Two tl.where on the key mask in a row: in the EVEN_N branch one statement is left, not ``scores = scores``.
    assert "        if EVEN_N:\n            scores = scores.to(tl.float32) * 1.4426950408889634\n        else:\n" in two
    looped = fused_edit(LOOPED, "row_softmax_kernel", get_profile("h200")).new_text
    assert looped.count("if EVEN_N:") == 3  # offs_n = (k // BLOCK_K) * BLOCK_K + arange: exact, the loop's keys
    assert "EVEN_N=seq_len % BLOCK_K == 0" in looped


def test_even_n_is_left_out_with_a_reason():
    masked = fa.FlashAttention()
    masked.mask_free_keys = False
    analysis = analyze(THREE)
    (cand,) = offered(THREE, "pv_kernel")
    plain = masked.apply(THREE, analysis, analysis.kernel("pv_kernel"), cand.params, H100).new_text
    assert "EVEN_N" not in plain
    text, note = fa.even_keys(plain.replace("for start_n in range(0, tl.minimum(", "for start_n in range(1, tl.minimum("), "pv_kernel")
    assert "EVEN_N" not in text and "range(0, N, BLOCK)" in note
    taken = plain.replace("    pid_m = tl.program_id(0)\n", "    pid_m = tl.program_id(0)\n    EVEN_N = 1\n    EVEN_KEYS = 2\n")
    assert "are taken" in fa.even_keys(taken, "pv_kernel")[1]
    no_key_mask = plain.replace("mask=offs_n[:, None] < seq_len, other=0.0)", "mask=offs_n[:, None] < seq_len - 1, other=0.0)")
    no_key_mask = no_key_mask.replace("tl.where(offs_n[None, :] < seq_len,", "tl.where(offs_n[None, :] <= seq_len - 1,")
    assert "no mask in the key loop is on its keys" in fa.even_keys(no_key_mask, "pv_kernel")[1]


@pytest.mark.slow
def test_even_n_is_equivalent_at_whole_and_partial_key_blocks(tmp_path):
    """Every chain, fused with and without EVEN_N, against the naive chain at a key length that is a multiple of
    the key block and one that is not; planted mistakes show both branches run and the test catches them."""
    h200 = get_profile("h200")
    masked = fa.FlashAttention()
    masked.mask_free_keys = False
    jobs = []
    planted = {}
    for chain in sorted(EVEN_SIZES):
        text, scores, softmax, pv = CHAINS[chain]
        analysis = analyze(text)
        new = fused_edit(text, pv, h200).new_text
        launch_value = re.search(r"EVEN_N=([^,)]+ == 0)", new)[1]
        versions = {"even": new, "masked": masked.apply(text, analysis, analysis.kernel(pv), {"scores": scores, "softmax": softmax, "pv": pv},
                                                        h200).new_text}
        if chain in ("three", "two"):
            # EVEN_N forced True: the last partial block reads keys past the length unmasked.
            versions["planted_true"] = new.replace(f"EVEN_N={launch_value}", "EVEN_N=True")
            # A wrong scale in the EVEN_N branch only: seen exactly at whole key blocks.
            versions["planted_branch"] = new.replace("* 1.4426950408889634\n        else:", "* 2.0\n        else:")
            assert all(v != new for k, v in versions.items() if k.startswith("planted")), chain
            planted[chain] = True
        jobs += even_jobs(tmp_path, versions, chain, text)
    results = run_even(jobs, tmp_path)
    for name, r in results.items():
        chain, label, length = name.split(":")
        if label == "planted_true":
            assert r["ok"] == (int(length) % 64 == 0), r
        elif label == "planted_branch":
            assert r["ok"] == (int(length) % 64 != 0), r
        else:
            assert r["ok"], r
    assert len(results) == 2 * (2 * len(EVEN_SIZES) + 2 * len(planted))


def test_even_keys_reads_a_hand_written_flash_kernel():
    """even_keys alone, on a user-written flash kernel (K and V loaded together, the key mask last): the same branches."""
    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "attn_kernelbench_sdpa.py").read_text()
    new, note = fa.even_keys(text, "sdpa_fwd_kernel")
    assert "EVEN_N=S % 32 == 0, num_warps=4" in new and "change both together" in note  # the launch passes BLOCK_N=32
    assert "        if EVEN_N:\n            k = tl.load(" in new  # the two loads in one branch
    assert '        if not EVEN_N:\n            s = tl.where(offs_n[None, :] < seq_len, s, float("-inf"))\n' in new  # nothing left when even
    # A where whose value is a constant keeps its mask: without it the constant would not have the mask's shape.
    additive = text.replace('s = tl.where(offs_n[None, :] < seq_len, s, float("-inf"))',
                            's = s + tl.where(offs_n[None, :] < seq_len, 0.0, float("-inf"))')
    assert additive != text
    new, note = fa.even_keys(additive, "sdpa_fwd_kernel")
    assert "(2 masked statements" in note and "s = s + tl.where(offs_n[None, :] < seq_len, 0.0, float(\"-inf\"))" in new
