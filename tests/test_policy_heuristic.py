"""The heuristic policy: hardware-aware ordering of hand-built candidates for the bundled examples."""

from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions.base import Candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy import HeuristicPolicy, PolicyState, StepOutcome, make_policy
from mtmc_lsp.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"


def state_for(example: str, kernel: str, target: str = "h100", history=None) -> PolicyState:
    analysis = analyze((EXAMPLES / f"{example}.py").read_text())
    return PolicyState(analysis, analysis.kernel(kernel), get_profile(target), list(history or []))


def cand(action: str, kind: str, kernel: str, **params) -> Candidate:
    return Candidate(action, kind, kernel, params, f"{action} {params}", 0)


def order(ranked):
    return [r.candidate.key() for r in ranked]


def test_matmul_on_h100_prefers_big_tiles_and_pipelining_over_warps():
    tiles_big = cand("tiling", "Tiling", "matmul_kernel", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
    tiles_small = cand("tiling", "Tiling", "matmul_kernel", BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    stages = cand("pipelining", "Pipelining", "matmul_kernel", num_stages=4)
    warps = cand("warps", "Warps", "matmul_kernel", num_warps=8)
    ranked = HeuristicPolicy().rank(state_for("matmul", "matmul_kernel"), [warps, tiles_small, stages, tiles_big])
    keys = order(ranked)
    assert keys[0] == tiles_big.key()
    assert keys.index(stages.key()) < keys.index(warps.key())
    assert keys.index(tiles_big.key()) < keys.index(tiles_small.key())
    assert all(r.logprob is None and r.reason for r in ranked)
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)


def test_pipelining_depends_on_async_copies():
    stages = cand("pipelining", "Pipelining", "matmul_kernel", num_stages=3)
    policy = HeuristicPolicy()
    on_a100 = policy.score(state_for("matmul", "matmul_kernel", "a100"), stages)[0]
    on_v100 = policy.score(state_for("matmul", "matmul_kernel", "v100"), stages)[0]
    assert on_a100 > 2 * on_v100


def test_softmax_prefers_single_pass_and_elementwise_prefers_big_blocks():
    single = cand("single_pass_reduction", "Reordering", "softmax_kernel")
    warps = cand("warps", "Warps", "softmax_kernel", num_warps=8)
    assert order(HeuristicPolicy().rank(state_for("softmax", "softmax_kernel"), [warps, single]))[0] == single.key()

    small = cand("tiling", "Tiling", "gelu_kernel", BLOCK_SIZE=256)
    big = cand("tiling", "Tiling", "gelu_kernel", BLOCK_SIZE=4096)
    assert order(HeuristicPolicy().rank(state_for("gelu_bias", "gelu_kernel", "h200"), [small, big]))[0] == big.key()


def test_fusion_first_when_an_intermediate_buffer_exists():
    fusion = cand("fuse_elementwise", "Fusion", "scale_bias_kernel", consumer="gelu_kernel")
    tiles = cand("tiling", "Tiling", "scale_bias_kernel", BLOCK_SIZE=4096)
    ranked = HeuristicPolicy().rank(state_for("gelu_bias", "scale_bias_kernel"), [tiles, fusion])
    assert order(ranked)[0] == fusion.key()


def test_history_demotes_failed_kinds_and_repeats():
    tiles = cand("tiling", "Tiling", "matmul_kernel", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
    other_tiles = cand("tiling", "Tiling", "matmul_kernel", BLOCK_M=128, BLOCK_N=64, BLOCK_K=64)
    stages = cand("pipelining", "Pipelining", "matmul_kernel", num_stages=4)
    failed = StepOutcome(tiles, compiled=True, correct=False, speedup=None, reward=0.1, kept=False)
    ranked = HeuristicPolicy().rank(state_for("matmul", "matmul_kernel", history=[failed]), [tiles, other_tiles, stages])
    keys = order(ranked)
    assert keys[0] == stages.key()
    assert keys[-1] == tiles.key()


@pytest.mark.parametrize("settings,expected", [
    (Settings(policy="heuristic"), "heuristic policy"),
    (Settings(policy="endpoint"), "needs the policyEndpoint setting"),
    (Settings(policy="nonsense"), "unknown policy"),
    (Settings(policy="embedded", policy_model_path="/nonexistent/model.gguf"), "does not exist"),
])
def test_make_policy_falls_back_to_heuristic_with_a_reason(settings, expected):
    policy = make_policy(settings)
    assert isinstance(policy, HeuristicPolicy)
    assert expected in policy.describe()


def test_hopper_matmul_route_tiles_with_stages_then_groups_then_persistent_tma():
    """Tile 128x256x64 with 8 warps and 3 stages in one step (the launch pinned 1), grouped order, then persistent
    tiles and their TMA loads, which pay together (H200, persistent_ablation/: 1.03x of cuBLAS on both matmuls)."""
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate

    text = (EXAMPLES / "matmul.py").read_text()
    target = get_profile("h200")
    history, route = [], []
    for _ in range(4):
        analysis = analyze(text)
        kernel = analysis.kernel("matmul_kernel")
        ranked = HeuristicPolicy().rank(PolicyState(analysis, kernel, target, history),
                                        applicable(analysis, "matmul_kernel", target))
        best = ranked[0].candidate
        route.append((best.action, best.params))
        text = apply_candidate(text, best, target).new_text
        history.append(StepOutcome(best, True, True, 1.2, 0.5, True))
    assert route == [("tiling", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}),
                     ("reordering", {"GROUP_M": 8}), ("persistent", {"flatten": False}), ("tensor_descriptor", {})]
    assert "num_stages=3" in text and "GROUP_M" in text and "EVEN_K" not in text and "make_tensor_descriptor" in text


def test_contiguity_hints_rank_below_grouped_order():
    group = cand("reordering", "Reordering", "matmul_kernel", GROUP_M=8)
    hint = cand("contiguity", "Reordering", "matmul_kernel", name="offs_m")
    ranked = HeuristicPolicy().rank(state_for("matmul", "matmul_kernel", "h200"), [hint, group])
    assert order(ranked)[0] == group.key()


def test_fusion_stays_ahead_of_tiling_after_a_kept_fusion():
    """A chain of three elementwise kernels: fuse, fuse again, then tile (each fusion drops a pass over memory)."""
    fuse_add = cand("fusion", "Fusion", "scale_bias_kernel", consumer="add_kernel")
    tiles = cand("tiling", "Tiling", "scale_bias_kernel", BLOCK_SIZE=4096)
    kept = StepOutcome(cand("fusion", "Fusion", "scale_bias_kernel", consumer="gelu_kernel"), True, True, 1.9, 0.9, True)
    ranked = HeuristicPolicy().rank(state_for("gelu_bias", "scale_bias_kernel", "h200", [kept]), [tiles, fuse_add])
    assert order(ranked)[0] == fuse_add.key()


def test_a_loop_accumulating_a_block_reduced_after_it_is_a_reducing_pass():
    """The Triton tutorial's layer norm sums ``_mean += a`` in a loop and calls ``tl.sum`` after it."""
    from mtmc_lsp.optimizer.policy.features import kernel_features

    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "norm_layernorm_tutorial.py").read_text()
    analysis = analyze(text)
    features = kernel_features(analysis, analysis.kernel("_layer_norm_fwd_fused"))
    assert (features.data_passes, features.reduction_passes) == (3, 2)  # mean, variance; then normalise
    single = cand("single_pass", "Reordering", "_layer_norm_fwd_fused")
    state = PolicyState(analysis, analysis.kernel("_layer_norm_fwd_fused"), get_profile("h200"), [])
    assert HeuristicPolicy().score(state, single)[0] >= 0.9
    # An accumulator never reduced after its loop (a running output) is not a reducing pass.
    running = text.replace("    mean = tl.sum(_mean, axis=0) / N\n", "    mean = 0.0\n")
    analysis = analyze(running)
    assert kernel_features(analysis, analysis.kernel("_layer_norm_fwd_fused")).reduction_passes == 1


def _one_pass_features():
    from mtmc_lsp.optimizer.policy.features import KernelFeatures

    return KernelFeatures("k", uses_dot=False, dot_in_loop=False, loops=0, reduction_passes=0, data_passes=1,
                          elementwise_1d=False, loads=2, stores=1, transcendentals=[], autotuned=False)


@pytest.mark.parametrize("block,reduces,grid_dims,score", [
    # Reductions: the H200 numbers (1.8x at 128 columns, 1.0-1.3x at 512, 0.97-1.08x at 1024-2048).
    (128, True, 1, 0.9), (512, True, 1, 0.65), (2048, True, 1, 0.3), (None, True, 1, 0.6),
    # Elementwise rows: narrow ones as high, wide ones (a row fills a program, nothing to share) lower.
    (64, False, 1, 0.9), (512, False, 1, 0.65), (1024, False, 1, 0.2), (4096, False, 1, 0.2),
    # Run-time width: a whole elementwise row (mostly a hidden size) lower; a slice of a 2-axis grid (a head) not.
    (None, False, 1, 0.5), (None, False, 2, 0.6), (2048, True, 2, 0.3),
])
def test_rows_per_program_prior_splits_elementwise_rows_from_reductions(block, reduces, grid_dims, score):
    from mtmc_lsp.optimizer.actions.rows_per_program import RowFacts
    from mtmc_lsp.optimizer.policy.heuristic import rows_per_program_prior

    got, why = rows_per_program_prior(_one_pass_features(), RowFacts("row", block, False, reduces, grid_dims))
    assert got == score
    assert ("elementwise" in why) == (not reduces and got < 0.6)
    assert ("2-axis grid" in why) == (grid_dims == 2)
