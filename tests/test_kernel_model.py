"""The kernel model: program-id pieces, index expressions, strides, reductions, loops and producer/consumer links."""

from __future__ import annotations

from pathlib import Path

import sympy as sp

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.analysis.kernel_model import file_links, kernel_model, linear_coefficient

SPELLINGS = Path(__file__).parent / "corpus" / "spellings"
S = sp.Symbol


def model_of(text: str, name: str):
    analysis = analyze(text)
    return analysis, kernel_model(analysis, analysis.kernel(name))


def test_a_flat_program_id_split_by_mod_and_floor_is_read_as_its_pieces():
    text = (SPELLINGS / "dev" / "rope_heads_split.py").read_text()
    _, model = model_of(text, "rope_kernel")
    pid = model.program_ids[0]
    heads = S("n_heads", integer=True)
    assert {p.name: p.expr for p in model.parts if p.name != "pid"} == {
        "token": sp.floor(pid / heads), "head": sp.Mod(pid, heads)}
    stores = model.stores()
    assert len(stores) == 2 and {s.tensor for s in stores} == {"out_ptr"}
    terms = model.program_terms(stores[0].offset)
    assert terms == {sp.floor(pid / heads): S("stride_s", integer=True), sp.Mod(pid, heads): S("stride_h", integer=True)}
    # The cos table is read per token only: its index has no head piece.
    cos = next(a for a in model.loads() if a.tensor == "cos_ptr")
    assert set(model.program_terms(cos.offset)) == {sp.floor(pid / heads)}


def test_strides_and_tile_layout_of_a_transposed_operand():
    text = (SPELLINGS / "dev" / "mm_transposed_a_strides.py").read_text()
    _, model = model_of(text, "at_b_kernel")
    a_load = next(a for a in model.loads() if a.tensor == "a_ptr")
    rows, ks = a_load.dims  # [BLOCK_M, BLOCK_K] tile: m along dim 0, k along dim 1
    (m_axis,), (k_axis,) = rows, ks
    assert model.aranges[k_axis].name == "offs_k"
    assert a_load.stride(m_axis) == 1 and a_load.stride(k_axis) == S("M", integer=True)  # A^T: m contiguous
    (dot,) = [r for r in model.reductions if r.op == "dot"]
    assert dot.reduced == frozenset({k_axis})
    (loop,) = model.loops
    assert loop.carried == ("acc",) and loop.stop == sp.ceiling(S("K", integer=True) / S("BLOCK_K", integer=True))


def test_reductions_name_the_axis_they_remove_and_loops_what_they_carry():
    text = '''
import triton
import triton.language as tl

@triton.jit
def row_stats(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    ptrs = x_ptr + row * stride + tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        total += tl.load(ptrs, mask=tl.arange(0, BLOCK) + start < n_cols, other=0.0)
        ptrs += BLOCK
    tl.store(out_ptr + row, tl.sum(total, axis=0))
'''
    _, model = model_of(text, "row_stats")
    (loop,) = model.loops
    assert loop.carried == ("ptrs", "total")
    (load,) = model.loads()
    (axis,) = load.dims[0]
    # The pointer moved by ``ptrs += BLOCK`` is the trip count times BLOCK past its start.
    assert linear_coefficient(load.offset, loop.trips) == S("BLOCK", integer=True)
    assert load.stride(model.program_ids[0]) == S("stride", integer=True) and load.stride(axis) == 1
    (total,) = [r for r in model.reductions if r.op == "sum"]
    assert total.axis == 0 and total.reduced == frozenset({axis})
    (store,) = model.stores()
    assert store.offset == model.program_ids[0] and store.dims == ()


def test_a_gather_is_indirect_never_affine():
    text = '''
import triton
import triton.language as tl

@triton.jit
def gather(idx_ptr, table_ptr, out_ptr, D: tl.constexpr):
    row = tl.program_id(0)
    token = tl.load(idx_ptr + row)
    cols = tl.arange(0, D)
    tl.store(out_ptr + row * D + cols, tl.load(table_ptr + token * D + cols))
'''
    _, model = model_of(text, "gather")
    table = next(a for a in model.loads() if a.tensor == "table_ptr")
    assert table.indirect and not next(a for a in model.loads() if a.tensor == "idx_ptr").indirect


def test_block_pointers_name_their_tensor():
    text = '''
import triton
import triton.language as tl

@triton.jit
def copy(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (tl.program_id(0) * BLOCK_M, 0), (BLOCK_M, BLOCK_N), (1, 0))
    for _ in range(0, N, BLOCK_N):
        block = tl.load(src, boundary_check=(0, 1))
        src = tl.advance(src, (0, BLOCK_N))
    tl.store(y_ptr + tl.arange(0, BLOCK_N), tl.sum(block, axis=0))
'''
    _, model = model_of(text, "copy")
    load = model.loads()[0]
    assert load.block_pointer and load.tensor == "x_ptr"


def test_links_join_a_store_to_the_later_launch_that_loads_it():
    text = (SPELLINGS / "dev" / "attn_three_kernels_heads.py").read_text()
    analysis = analyze(text)
    pairs = {(link.producer, link.consumer, link.buffer) for link in file_links(analysis)}
    assert pairs == {("qk_kernel", "row_softmax_kernel", "scores"), ("row_softmax_kernel", "pv_kernel", "probs")}
    grid = kernel_model(analysis, analysis.kernel("qk_kernel")).launches[0].grid
    assert grid == (sp.ceiling(S("S", integer=True) / 16), S("B", integer=True) * S("H", integer=True))


def test_the_model_is_built_once_per_text():
    text = (SPELLINGS / "heldout" / "rope_flat_pid.py").read_text()
    analysis = analyze(text)
    kernel = analysis.kernel("rope_kernel")
    assert kernel_model(analysis, kernel) is kernel_model(analyze(text), kernel)


def test_masks_are_read_as_bounds():
    text = (SPELLINGS / "dev" / "mm_then_bias_gelu_rows.py").read_text()
    _, model = model_of(text, "mm_kernel")
    store = model.stores()[0]
    (rows,), (cols,) = store.dims
    pid_m, pid_n = model.program_ids[0], model.program_ids[1]
    block_m, block_n = S("BLOCK_M", integer=True), S("BLOCK_N", integer=True)
    assert store.bounds == ((block_m * pid_m + rows, S("M", integer=True)), (block_n * pid_n + cols, S("N", integer=True)))
    _, consumer = model_of(text, "bias_gelu_kernel")
    assert all(a.bounds == consumer.loads()[0].bounds for a in consumer.accesses)  # one `mask` name for all


def test_launches_follow_grid_names_and_autotune_configs():
    text = (SPELLINGS / "dev" / "ew_autotuned_scale_add.py").read_text().replace(
        'scale_add_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, z, y, n, alpha)',
        'grid = lambda META: (triton.cdiv(n, META["BLOCK"]),)\n    scale_add_kernel[grid](x, z, y, n, alpha)')
    _, model = model_of(text, "scale_add_kernel")
    (launch,) = model.launches
    assert launch.grid == (sp.ceiling(S("n", integer=True) / S("BLOCK", integer=True)),)
    assert sorted(c["BLOCK"] for c in launch.constexprs) == [64, 64, 128, 128]  # one per config


def test_pointers_moved_by_assignment_and_block_pointers_passed_in_keep_their_tensor():
    text = '''
import triton
import triton.language as tl

@triton.jit
def _inner(acc, K_block_ptr, x_ptr, n, BLOCK: tl.constexpr):
    ptrs = x_ptr + tl.arange(0, BLOCK)
    for _ in range(0, n, BLOCK):
        k = tl.load(K_block_ptr)
        acc += tl.sum(tl.load(ptrs), axis=0) + tl.sum(k, axis=0)
        ptrs = ptrs + BLOCK
        K_block_ptr = tl.advance(K_block_ptr, (BLOCK, 0))
    return acc
'''
    _, model = model_of(text, "_inner")
    (loop,) = model.loops
    block_load, moved = model.loads()
    assert block_load.block_pointer and block_load.tensor == "K_block_ptr" and block_load.offset is None
    assert moved.tensor == "x_ptr" and linear_coefficient(moved.offset, loop.trips) == S("BLOCK", integer=True)
