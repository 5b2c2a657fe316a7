"""Actions that cannot prove their preconditions do not offer themselves; edits keep comments and are deterministic."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import planned_edits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H100 = get_profile("h100")

ADD = '''import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def add(x):
    out = torch.empty_like(x)
    add_kernel[GRID](x, out, x.numel(), BLOCK=128)
    return out
'''


def actions(text: str, kernel: str, target=H100, **kw) -> set[str]:
    return {c.action for c in applicable(analyze(text), kernel, target, **kw)}


def test_tiling_needs_the_grid_to_follow_the_block():
    follows = ADD.replace("GRID", "lambda META: (triton.cdiv(x.numel(), META['BLOCK']),)")
    repeats = ADD.replace("GRID", "(triton.cdiv(x.numel(), 128),)")  # the literal is rewritten with the block
    floors = ADD.replace("GRID", "(x.numel() // 128,)")  # not a ceiling division: a larger block drops the tail
    other_use = ADD.replace("GRID", "(triton.cdiv(x.numel(), 128), 128)")  # 128 also means something else
    assert "tiling" in actions(follows, "add_kernel")
    assert "tiling" in actions(repeats, "add_kernel")
    assert "tiling" not in actions(floors, "add_kernel")
    assert "tiling" not in actions(other_use, "add_kernel")
    unmasked = follows.replace("mask=offs < n), mask=offs < n)", "))")
    assert "tiling" not in actions(unmasked, "add_kernel")


def test_pipelining_only_with_async_copies():
    text = kernel_path("matmul").read_text()
    assert "pipelining" in actions(text, "matmul_kernel", get_profile("a100"))
    assert "pipelining" not in actions(text, "matmul_kernel", get_profile("v100"))


def test_launch_options_set_at_run_time_are_not_offered():
    # Seen in public code: ``num_stages=config["num_stages"]`` tuned by the caller. An offered step
    # must apply, so neither pipelining nor warps offers a value for a launch it cannot change.
    text = kernel_path("matmul").read_text()
    tuned = text.replace("    matmul_kernel[grid](", "    config = {'num_stages': 3, 'num_warps': 4}\n"
                         "    num_stages, warps = config['num_stages'], config['num_warps']\n    matmul_kernel[grid](")
    tuned = tuned.replace("num_warps=4, num_stages=1,", "num_warps=warps, num_stages=num_stages,")
    assert analyze(tuned).syntax_error is None
    assert "num_stages=num_stages" in tuned and "pipelining" in actions(text, "matmul_kernel")
    offered = actions(tuned, "matmul_kernel")
    assert "pipelining" not in offered and "warps" not in offered
    for cand in applicable(analyze(tuned), "matmul_kernel", H100):
        apply_candidate(tuned, cand, H100)  # what is offered applies


def test_reordering_needs_exactly_a_2d_cdiv_grid():
    assert "reordering" in actions(kernel_path("matmul").read_text(), "matmul_kernel")
    assert "reordering" not in actions(kernel_path("bmm").read_text(), "bmm_kernel")
    assert "reordering" not in actions(kernel_path("attention").read_text(), "attention_kernel")
    reads_programs = kernel_path("matmul").read_text().replace(
        "    offs_k = tl.arange(0, BLOCK_K)\n", "    offs_k = tl.arange(0, BLOCK_K) + 0 * tl.num_programs(0)\n")
    assert "reordering" not in actions(reads_programs, "matmul_kernel")


def test_fusion_needs_a_private_intermediate():
    text = kernel_path("gelu_bias").read_text()
    assert "fusion" in actions(text, "scale_bias_kernel")
    returned = text.replace("    return out\n", "    return out, y\n", 1)
    assert "fusion" not in actions(returned, "scale_bias_kernel")
    other_order = text.replace("    gelu_kernel[grid](y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)\n",
                               "    torch.cuda.synchronize()\n    gelu_kernel[grid](y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)\n")
    assert "fusion" not in actions(other_order, "scale_bias_kernel")


def test_single_pass_needs_a_block_free_grid():
    text = kernel_path("softmax").read_text()
    assert "single_pass" in actions(text, "softmax_kernel")
    gridded = text.replace("softmax_kernel[(n_rows,)]", "softmax_kernel[(n_rows + 0 * BLOCK_SIZE,)]")
    assert "single_pass" not in actions(gridded, "softmax_kernel")
    assert "single_pass" not in actions(kernel_path("matmul").read_text(), "matmul_kernel")


def test_hoist_keeps_loads_under_stores_in_place():
    text = kernel_path("rmsnorm").read_text()  # gain = tl.load(scale_ptr) in a loop that stores
    assert "hoist" not in actions(text, "rms_norm_kernel")
    assert "hoist" in actions(kernel_path("reduction").read_text(), "row_sum_kernel")


def test_precision_only_on_request():
    text = kernel_path("matmul_fp32").read_text()
    assert "precision" not in actions(text, "matmul_fp32_kernel")
    cands = [c for c in applicable(analyze(text), "matmul_fp32_kernel", H100, allow_precision=True) if c.action == "precision"]
    assert {c.params["mode"] for c in cands} == {"tf32", "fp16"} and all(c.changes_numerics for c in cands)


def test_stale_candidates_are_refused():
    text = kernel_path("matmul").read_text()
    cand = next(c for c in applicable(analyze(text), "matmul_kernel", H100) if c.action == "reordering")
    done = apply_candidate(text, cand, H100).new_text
    with pytest.raises(ActionError, match="already has GROUP_M"):
        apply_candidate(done, cand, H100)
    with pytest.raises(ActionError, match="no kernel named"):
        apply_candidate(text.replace("matmul_kernel", "mm_kernel"), cand, H100)
    with pytest.raises(ActionError, match="syntax error"):
        apply_candidate(text + "\ndef broken(:\n", cand, H100)
    with pytest.raises(ActionError, match="unknown action"):
        apply_candidate(text, Candidate("teleport", "Tiling", "matmul_kernel", {}, "x", 0), H100)


def _comments(text: str) -> list[str]:
    return sorted(m.group(0).strip() for m in re.finditer(r"#[^\n]*", text))


def test_edits_keep_comments_and_are_deterministic():
    for name, before, after, _ in planned_edits():
        assert set(_comments(before)) <= set(_comments(after)), f"{name} dropped a comment"
    text = kernel_path("softmax").read_text()
    for cand in applicable(analyze(text), "softmax_kernel", H100):
        assert apply_candidate(text, cand, H100).new_text == apply_candidate(text, cand, H100).new_text


def test_a_shared_block_constant_must_suit_every_kernel_it_feeds():
    text = kernel_path("gelu_bias").read_text()
    cand = next(c for c in applicable(analyze(text), "gelu_kernel", H100) if c.action == "tiling")
    assert any("scale_bias_kernel" in note for note in apply_candidate(text, cand, H100).notes)
    # scale_bias_kernel loses a mask: BLOCK_SIZE (shared by both launches) may no longer change for either.
    unsafe = text.replace("    x = tl.load(x_ptr + offsets, mask=mask)\n", "    x = tl.load(x_ptr + offsets)\n")
    assert "tiling" not in actions(unsafe, "gelu_kernel")
    assert "tiling" not in actions(unsafe, "scale_bias_kernel")


@pytest.mark.parametrize("tile,warps,arch,spills", [
    # ptxas through compile_kernel on the corpus-style fp16 matmul (triton 3.9): spilled bytes > 0 or not.
    ((128, 128, 64), 4, 90, True), ((128, 128, 64), 8, 90, False), ((64, 128, 64), 4, 90, False),
    ((128, 128, 32), 4, 90, False), ((128, 256, 32), 4, 90, True), ((128, 256, 32), 8, 90, False),
    ((128, 256, 64), 8, 90, False), ((128, 256, 64), 4, 90, True),
    ((128, 128, 64), 4, 80, True), ((128, 128, 64), 8, 80, False), ((128, 128, 32), 4, 80, True),
    ((128, 256, 64), 8, 80, True), ((128, 256, 32), 8, 80, False), ((64, 128, 64), 4, 80, False),
])
def test_dot_register_estimate_matches_ptxas_spills(tile, warps, arch, spills):
    from mtmc_lsp.optimizer.actions._common import MAX_REGS_PER_THREAD, dot_regs_per_thread
    assert (dot_regs_per_thread(*tile, warps, 2, arch) > MAX_REGS_PER_THREAD) == spills


def test_tiling_pairs_big_matmul_tiles_with_warps_that_do_not_spill():
    text = kernel_path("matmul").read_text()
    a = analyze(text)
    tiles = [c.params for c in applicable(a, "matmul_kernel", get_profile("h200")) if c.action == "tiling"]
    big = [p for p in tiles if (p["BLOCK_M"], p["BLOCK_N"], p["BLOCK_K"]) == (128, 128, 64)]
    assert big == [{"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}]
    assert {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3} in tiles
    edit = apply_candidate(text, Candidate("tiling", "Tiling", "matmul_kernel", big[0], "", 0), get_profile("h200"))
    assert "num_warps=8" in edit.new_text and "BLOCK_K = 64" in edit.new_text and "num_stages=3" in edit.new_text


def test_fusion_takes_a_consumers_extra_inputs_only_when_they_line_up():
    chain = kernel_path("silu_mul_add").read_text()
    assert "fusion" in actions(chain, "silu_kernel")
    edit = apply_candidate(chain, next(c for c in applicable(analyze(chain), "silu_kernel", H100) if c.action == "fusion"), H100)
    assert "def silu_kernel(x_ptr, y_ptr, n_elements, b_ptr, BLOCK_SIZE: tl.constexpr):" in edit.new_text
    assert "y = tl.load(b_ptr + offsets, mask=mask)" in edit.new_text
    assert "silu_kernel[grid](a, prod, n_elements, b, BLOCK_SIZE=BLOCK_SIZE)" in edit.new_text
    # The extra input loaded with another mask, read from a host expression, or the buffer read twice: refused.
    other_mask = chain.replace("    y = tl.load(y_ptr + offsets, mask=mask)\n    tl.store(out_ptr + offsets, x * y",
                               "    y = tl.load(y_ptr + offsets, mask=offsets < 7)\n    tl.store(out_ptr + offsets, x * y")
    expression = chain.replace("mul_kernel[grid](act, b, prod,", "mul_kernel[grid](act, b.flip(0), prod,")
    twice = chain.replace("mul_kernel[grid](act, b, prod,", "mul_kernel[grid](act, act, prod,")
    for text in (other_mask, expression, twice):
        assert text != chain
        assert not any(c.action == "fusion" and c.params == {"consumer": "mul_kernel"}
                       for c in applicable(analyze(text), "silu_kernel", H100))


def test_tiling_changes_only_m_and_n_of_a_dot_kernel_without_a_k_block():
    """Flash-style attention: the dot's inner size is the head dimension, so only BLOCK_M/BLOCK_N are tiles."""
    text = kernel_path("attention").read_text()
    tiles = [c.params for c in applicable(analyze(text), "attention_kernel", get_profile("h200")) if c.action == "tiling"]
    assert {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8} in tiles
    assert {"BLOCK_M": 64, "BLOCK_N": 64} in tiles
    assert all(p["BLOCK_M"] % p["BLOCK_N"] == 0 and "HEAD_DIM" not in p for p in tiles)  # causal kernels split by it
    edit = apply_candidate(text, Candidate("tiling", "Tiling", "attention_kernel", tiles[0], "", 0), get_profile("h200"))
    assert "grid = (triton.cdiv(seq_len, 128), heads)" in edit.new_text
    assert "BLOCK_M=128, BLOCK_N=64, HEAD_DIM=head_dim, num_warps=8" in edit.new_text
    # A matmul whose K has a block keeps the three-role tiles.
    mm = [c.params for c in applicable(analyze(kernel_path("matmul").read_text()), "matmul_kernel", get_profile("h200"))
          if c.action == "tiling"]
    assert all("BLOCK_K" in p for p in mm)


@pytest.mark.parametrize("host, changed", [
    # A grid function defined beside the launch, reading the block from its meta argument.
    ('''    def grid(meta):
        return (triton.cdiv(x.numel(), meta["BLOCK"]),)
    add_kernel[grid](x, out, x.numel(), BLOCK=128)''', "BLOCK=1024)"),
    # The number of programs computed first, then the grid names it.
    ('''    BLOCK_SIZE = 128
    num_blocks = triton.cdiv(x.numel(), BLOCK_SIZE)
    add_kernel[(num_blocks,)](x, out, x.numel(), BLOCK=BLOCK_SIZE)''', "BLOCK_SIZE = 1024"),
])
def test_tiling_follows_grids_written_as_functions_and_intermediate_counts(host, changed):
    text = ADD.replace("    add_kernel[GRID](x, out, x.numel(), BLOCK=128)", host)
    tiles = [c for c in applicable(analyze(text), "add_kernel", H100) if c.action == "tiling"]
    assert [c.params for c in tiles][0] == {"BLOCK": 1024}
    assert changed in apply_candidate(text, tiles[0], H100).new_text
    # Reassigning the count (or the grid function doing more than return) loses the link: refused.
    reassigned = text.replace("add_kernel[(num_blocks,)]", "num_blocks = 4\n    add_kernel[(num_blocks,)]")
    if reassigned != text:
        assert "tiling" not in actions(reassigned, "add_kernel")


def test_tiling_changes_a_module_constant_that_the_kernel_parameter_shadows():
    """``BLOCK_SIZE = 1024`` at module level and a kernel parameter ``BLOCK_SIZE``: the kernel's uses are its own."""
    text = ADD.replace("BLOCK: tl.constexpr", "BLOCK_SIZE: tl.constexpr").replace("* BLOCK +", "* BLOCK_SIZE +") \
        .replace("tl.arange(0, BLOCK)", "tl.arange(0, BLOCK_SIZE)") \
        .replace("\n\ndef add(x):", "\n\nBLOCK_SIZE = 128\n\n\ndef add(x):") \
        .replace("add_kernel[GRID](x, out, x.numel(), BLOCK=128)",
                 "add_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)")
    tiles = [c for c in applicable(analyze(text), "add_kernel", H100) if c.action == "tiling"]
    assert tiles and "BLOCK_SIZE = 1024" in apply_candidate(text, tiles[0], H100).new_text
    # Another host function reading the constant for something else keeps it fixed.
    other = text + "\n\ndef chunk(x):\n    return x[:BLOCK_SIZE]\n"
    assert "tiling" not in actions(other, "add_kernel")


HELPER = ADD.replace('''def add(x):
    out = torch.empty_like(x)
    add_kernel[GRID](x, out, x.numel(), BLOCK=128)
    return out
''', '''def _launch(x, out, block):
    add_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block)


def add(x):
    out = torch.empty_like(x)
    _launch(x, out, 128)
    return out


def add_twice(x):
    out = torch.empty_like(x)
    _launch(x, out, block=128)
    _launch(out, out, 128)
    return out
''')


def test_tiling_changes_the_literal_every_caller_of_a_launch_helper_passes():
    tiles = [c for c in applicable(analyze(HELPER), "add_kernel", H100) if c.action == "tiling"]
    new = apply_candidate(HELPER, tiles[0], H100).new_text
    assert new.count("_launch(x, out, 1024)") == 1 and "_launch(x, out, block=1024)" in new
    assert "_launch(out, out, 1024)" in new and "def _launch(x, out, block):" in new
    assert "autotune" in actions(HELPER, "add_kernel")
    apply_candidate(HELPER, next(c for c in applicable(analyze(HELPER), "add_kernel", H100) if c.action == "autotune"), H100)
    # Callers that disagree, pass a name, or a helper passed around: the block is not the engine's to change.
    for text in (HELPER.replace("_launch(out, out, 128)", "_launch(out, out, 256)"),
                 HELPER.replace("_launch(out, out, 128)", "_launch(out, out, x.numel())"),
                 HELPER + "\n\nLAUNCHERS = [_launch]\n"):
        assert "tiling" not in actions(text, "add_kernel")
        for tune in (c for c in applicable(analyze(text), "add_kernel", H100) if c.action == "autotune"):
            new = apply_candidate(text, tune, H100).new_text  # only the warps: the callers keep their blocks
            assert "triton.Config({}, num_warps=" in new and '"BLOCK"' not in new


KEY_LOOP = '''import torch
import triton
import triton.language as tl


@triton.jit
def dot_rows_kernel(q_ptr, k_ptr, out_ptr, n_keys, HEAD: tl.constexpr, BLOCK_T: tl.constexpr):
    row = tl.program_id(0)
    offs_d = tl.arange(0, HEAD)
    q = tl.load(q_ptr + row * HEAD + offs_d)
    acc = tl.zeros([HEAD], dtype=tl.float32)
    for start in range(0, n_keys, BLOCK_T):
        offs_t = start + tl.arange(0, BLOCK_T)
        k = tl.load(k_ptr + offs_t[:, None] * HEAD + offs_d[None, :], mask=offs_t[:, None] < n_keys, other=0.0)
        acc += tl.sum(k * q[None, :], axis=0)
    tl.store(out_ptr + row * HEAD + offs_d, acc)


def dot_rows(q, k):
    out = torch.empty_like(q)
    dot_rows_kernel[(q.shape[0],)](q, k, out, k.shape[0], HEAD=q.shape[1], BLOCK_T=16)
    return out
'''


def test_tiling_changes_a_loop_block_beside_unmasked_accesses_that_do_not_depend_on_it():
    """The head vector's loads need no mask to tile the key loop; the key block is one side of a 2-D tile."""
    tiles = [c.params for c in applicable(analyze(KEY_LOOP), "dot_rows_kernel", H100) if c.action == "tiling"]
    assert tiles == [{"BLOCK_T": 32}, {"BLOCK_T": 64}, {"BLOCK_T": 128, "num_warps": 8}]
    edit = apply_candidate(KEY_LOOP, Candidate("tiling", "Tiling", "dot_rows_kernel", tiles[1], "", 0), H100)
    assert "BLOCK_T=64)" in edit.new_text
    # An unmasked access that does read the block (through the loop offsets) still refuses it.
    unmasked = KEY_LOOP.replace(", mask=offs_t[:, None] < n_keys, other=0.0)", ")")
    assert "tiling" not in actions(unmasked, "dot_rows_kernel")
    # When the grid counts blocks, an unmasked vector access at program-id addresses moves with it: refused.
    grid_counts = ADD.replace("GRID", "(triton.cdiv(x.numel(), 128),)").replace(
        "    tl.store(out_ptr + offs,", "    tl.store(x_ptr + tl.program_id(0) * 16 + tl.arange(0, 16), tl.zeros([16], tl.float32))\n"
        "    tl.store(out_ptr + offs,")
    assert "tiling" in actions(ADD.replace("GRID", "(triton.cdiv(x.numel(), 128),)"), "add_kernel")
    assert "tiling" not in actions(grid_counts, "add_kernel")


def test_flash_linear_attention_block_names_are_block_sizes():
    from mtmc_lsp.optimizer.actions._common import block_role, is_block_name

    assert all(is_block_name(n) for n in ("BT", "BK", "BV", "BD", "BLOCK_M", "TILE"))
    assert not any(is_block_name(n) for n in ("B", "BATCH", "BKV", "HEAD_DIM", "K"))
    assert (block_role("BM"), block_role("BN"), block_role("BK"), block_role("BLOCK_K")) == ("m", "n", "1d", "k")
    fla = (ROOT / "benchmarks" / "wild" / "dev" / "attn_linear_recurrent_fla.py").read_text()
    assert "warps" in actions(fla, "fused_recurrent_linear_attn_fwd_kernel")


TWO_ROW_BLOCKS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def two_pass_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr, TAIL_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)
    tail = tl.arange(0, TAIL_BLOCK)
    tl.store(out_ptr + n + tail, tl.load(x_ptr + n + tail, mask=tail < 1), mask=tail < 1)


def two_pass(x):
    out = torch.empty(x.numel() + 1, device=x.device, dtype=x.dtype)
    n = x.numel() - 1
    two_pass_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK_SIZE=4096, TAIL_BLOCK=32, num_warps=4)
    return out
'''


def test_warps_read_every_row_block_not_one_per_role():
    """Two blocks of one role ("1d") were keyed into one dict entry, so the warps fitted the last one (32 values)."""
    a = analyze(TWO_ROW_BLOCKS)
    warps = [c.params["num_warps"] for c in applicable(a, "two_pass_kernel", get_profile("h200")) if c.action == "warps"]
    assert 8 in warps and 16 in warps  # fitted to the 4096-wide block
