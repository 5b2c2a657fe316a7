"""warps sizes a kernel without a block named BLOCK/TILE by the kernel model's tile (its tl.arange extents)."""

from __future__ import annotations

from pathlib import Path

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

H100 = get_profile("h100")
ROPE = (Path(__file__).parent / "corpus" / "spellings" / "dev" / "rope_heads_split.py").read_text()


def warps_offered(text: str) -> list[int]:
    return sorted(c.params["num_warps"] for c in applicable(analyze(text), "rope_kernel", H100) if c.action == "warps")


def test_a_literal_extent_sizes_the_warps():
    # HALF=256 at the launch: a 256-element tile takes at most 8 warps (32 x 8 = 256), and num_warps=1 was too few.
    text = ROPE.replace("HALF=D // 2, num_warps=1", "HALF=256, num_warps=1")
    assert warps_offered(text) == [2, 4, 8]
    cand = next(c for c in applicable(analyze(text), "rope_kernel", H100) if c.action == "warps")
    assert f"HALF=256, num_warps={cand.params['num_warps']})" in apply_candidate(text, cand, H100).new_text


def test_an_extent_computed_at_the_launch_is_a_row_sized_block():
    assert warps_offered(ROPE) == [4, 8, 16]  # HALF=D // 2: sized like a computed row block
