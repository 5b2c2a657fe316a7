"""persistent: one program per SM walks a 1-D tile grid; what moves before the loop, the grid, refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP16, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
ROOT = Path(__file__).resolve().parents[1]
LINEAR = (ROOT / "tests" / "corpus" / "kernels" / "linear_grouped.py").read_text()  # tutorial style, META grid
# The suite's transposed-B matmul after the engine's grouped order and TMA descriptors (generated, committed).
DESCRIPTORS = (ROOT / "benchmarks" / "generated" / "tensor_descriptor" / "matmul_transposed_3.py").read_text()

TILES = '''import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    tiles = triton.cdiv(M, 16) * triton.cdiv(N, 16)
    mm_kernel[(tiles,)](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    return c
'''


def persistent(text: str, kernel: str, flatten: bool = False) -> str:
    candidate = Candidate("persistent", "Reordering", kernel, {"flatten": flatten}, "t", 0)
    return apply_candidate(text, candidate, H100).new_text


def why_not(text: str, kernel: str, target=H100) -> str | None:
    analysis = analyze(text)
    return ACTIONS["persistent"].why_not(analysis, analysis.kernel(kernel), target)


def test_a_meta_grid_is_counted_in_the_kernel_and_capped_at_the_sms():
    after = persistent(LINEAR, "linear_kernel")
    assert ("for pid in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_SIZE_M) * tl.cdiv(N, BLOCK_SIZE_N), "
            "tl.num_programs(0)):") in after
    assert 'lambda META: (min(_num_sms(), triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"])),)' in after
    assert after.count("def _num_sms()") == 1
    # Sizes and the K offsets move before the loop; the accumulator, reset per tile, stays in it.
    head, loop = after.split("for pid in tl.range(")
    assert "num_pid_in_group = GROUP_SIZE_M * num_pid_n" in head and "offs_k = tl.arange(0, BLOCK_SIZE_K)" in head
    assert "acc = tl.zeros(" in loop and "group_id = pid // num_pid_in_group" in loop
    # Pointers stepped in the K loop are bound twice: they stay with their tile.
    assert "x_ptrs = x_ptr +" in loop


def test_a_host_name_for_the_tile_count_is_followed_to_what_the_kernel_receives():
    after = persistent(TILES, "mm_kernel", flatten=True)
    assert "tl.range(tl.program_id(0), (tl.cdiv(M, 16) * tl.cdiv(N, 16)), tl.num_programs(0), flatten=True)" in after
    assert "mm_kernel[(min(_num_sms(), tiles),)]" in after


def test_tma_descriptors_move_out_of_the_tile_loop_and_the_output_store_stays():
    after = persistent(DESCRIPTORS, "matmul_bt_kernel")
    head, loop = after.split("for pid in tl.range(")
    for desc in ("a_desc", "b_desc", "c_desc"):
        assert f"{desc} = tl.make_tensor_descriptor(" in head, desc
    assert head.count("if USE_TMA:") == 1  # the output's descriptor joins the operands' block
    assert "c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], c)" in loop and "tl.store(" in loop


@pytest.mark.parametrize("change, reason", [
    ("    pid = tl.program_id(0)\n", "program ids are not read"),
    ("    rk = tl.arange(0, BLOCK_K)\n", "tl.num_programs"),
    ("    acc = tl.zeros(", "returns early"),
    ("    acc = tl.zeros(", "may wait on another program"),
    ("    mm_kernel[(tiles,)]", "one axis"),
    ("    tiles = triton.cdiv(M, 16) * triton.cdiv(N, 16)\n", "not computed from what the launch passes"),
])
def test_refusals_say_why(change, reason):
    replacements = {
        "program ids are not read": ("    pid = tl.program_id(0)\n", "    pid = tl.program_id(0) + 0\n"),
        "tl.num_programs": ("    rk = tl.arange(0, BLOCK_K)\n", "    rk = tl.arange(0, BLOCK_K) + tl.num_programs(0) * 0\n"),
        "returns early": ("    acc = tl.zeros(", "    if pid > 1000000:\n        return\n    acc = tl.zeros("),
        "may wait on another program": ("    acc = tl.zeros(", "    tl.atomic_cas(c_ptr, 0.0, 1.0)\n    acc = tl.zeros("),
        "one axis": ("    mm_kernel[(tiles,)]", "    mm_kernel[(tiles, 1)]"),
        "not computed from what the launch passes": ("    tiles = triton.cdiv(M, 16) * triton.cdiv(N, 16)\n",
                                                     "    tiles = len(a) * 7\n"),
    }
    old, new = replacements[reason]
    assert old == change and old in TILES
    assert reason in (why_not(TILES.replace(old, new), "mm_kernel") or "")


def test_a_2d_grid_becomes_one_tile_loop_in_launch_order_and_older_gpus_are_refused():
    two_d = (ROOT / "benchmarks" / "generated" / "tensor_descriptor" / "matmul_transposed_0.py").read_text()
    after = persistent(two_d, "matmul_bt_kernel")
    assert ("for tile in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), tl.num_programs(0)):"
            in after)
    assert "pid_m = tile % tl.cdiv(M, BLOCK_M)" in after and "pid_n = tile // tl.cdiv(M, BLOCK_M)" in after
    assert "grid = (min(_num_sms(), triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)),)" in after
    assert "tl.program_id(1)" not in after
    assert "async copies" in why_not(TILES, "mm_kernel", get_profile("v100"))


BMM = (ROOT / "benchmarks" / "suite" / "bmm.py").read_text()


def test_a_3d_grid_walks_batches_last_and_the_launch_passes_the_batch_count():
    """The suite's bmm: the batch is grid axis 2, ``B``, which no kernel argument carries."""
    after = persistent(BMM, "bmm_kernel")
    assert ("for tile in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) * batch_count, "
            "tl.num_programs(0)):") in after
    assert "pid_n = tile // tl.cdiv(M, BLOCK_M) % tl.cdiv(N, BLOCK_N)" in after
    assert "batch = tile // (tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N))" in after
    assert "BLOCK_K: tl.constexpr, batch_count," in after and "num_stages=1, batch_count=B," in after
    assert "grid = (min(_num_sms(), triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N) * B),)" in after
    inline = BMM.replace("    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N), B)\n    bmm_kernel[grid](",
                         "    bmm_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N), B)](")
    assert inline != BMM
    after = persistent(inline, "bmm_kernel")
    assert "bmm_kernel[(min(_num_sms(), triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N) * B),)](" in after
    assert "batch_count=B" in after


def test_the_heuristic_tries_persistent_before_descriptors_and_flattened_after_them():
    from mtmc_lsp.optimizer.policy.base import PolicyState
    from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy

    grouped = (ROOT / "benchmarks" / "generated" / "tensor_descriptor" / "matmul_transposed_2.py").read_text()
    analysis = analyze(grouped)
    kernel = analysis.kernel("matmul_bt_kernel")
    ranked = HeuristicPolicy().rank(PolicyState(analysis, kernel, get_profile("h200"), []), applicable(
        analysis, kernel, get_profile("h200")))
    order = [r.candidate.action + str(r.candidate.params.get("flatten", "")) for r in ranked]
    assert order.index("persistentFalse") < order.index("tensor_descriptor") < order.index("persistentTrue")


def test_the_edit_computes_the_same_under_the_interpreter(tmp_path):
    after = persistent(LINEAR, "linear_kernel", flatten=True)  # 72x40 at 16x16: 15 tiles over 4 programs
    tiles = persistent(TILES, "mm_kernel")
    tiles_reference = TILES + '''

ENTRY = "mm"


def get_inputs(device="cpu"):
    return [torch.randn(40, 24, device=device), torch.randn(24, 56, device=device)]


def reference(a, b):
    return a @ b
'''
    tiles = tiles + tiles_reference[len(TILES):]
    suite = (ROOT / "benchmarks" / "suite" / "matmul_transposed.py").read_text() + '\nENTRY = "matmul_transposed"\n'  # 2-D grid
    two_d = persistent(suite, "matmul_bt_kernel", flatten=True)
    bmm = BMM + '\nENTRY = "bmm"\n'  # 3-D grid, the batch count passed by the launch
    results = run_jobs([job(tmp_path, "linear", LINEAR, after, TOL_FP16),
                        job(tmp_path, "tiles", tiles_reference, tiles, (1e-3, 1e-3)),
                        job(tmp_path, "two_d", suite, two_d, TOL_FP16),
                        job(tmp_path, "three_d", bmm, persistent(bmm, "bmm_kernel"), TOL_FP16)], tmp_path)
    assert all(r["ok"] for r in results), results
