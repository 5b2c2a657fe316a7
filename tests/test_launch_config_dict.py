"""Launches that spread a literal dict (vLLM's ``kernel[grid](..., **config)``) and pass dtypes as constexprs.

The launch model reads the dict's entries as the launch's keyword arguments; tiling edits them in the dict,
where the host's other uses of ``config`` see the new sizes too; anything that would have to take the values
over (autotune) or cannot tell what the dict holds refuses.
"""

from __future__ import annotations

import pytest

from corpus.kernels import kernel_path
from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.actions.refusals import refusals
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.compile.compiler import Expression
from mtmc_lsp.optimizer.compile.plan import plan_jobs
from mtmc_lsp.optimizer.hardware import get_profile

H100 = get_profile("h100")
TEXT = kernel_path("matmul_config_dict").read_text()
CONFIG = '    config = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}\n'


def offered(text: str, action: str):
    return [c for c in applicable(analyze(text), "matmul_kernel", H100) if c.action == action]


def why_not(text: str, action: str) -> str:
    analysis = analyze(text)
    return next(r.reason for r in refusals(analysis, analysis.kernel("matmul_kernel"), H100) if r.action == action)


def test_the_launch_model_reads_the_spread_dict():
    analysis = analyze(TEXT)
    (site,) = analysis.launches
    kernel = analysis.kernel("matmul_kernel")
    assert site.constexpr_values(kernel) == {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}
    assert [(a.param, a.source) for a in site.args if a.source.startswith("**")] == [(None, "**config")]
    assert site.grid_value is None  # the META grid reads the dict's blocks, but M and N are run-time sizes


def test_tiling_edits_the_dict_and_nothing_else():
    candidate = next(c for c in offered(TEXT, "tiling") if c.params.get("BLOCK_SIZE_N") == 256)
    new = apply_candidate(TEXT, candidate, H100).new_text
    assert '    config = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64}\n' in new
    assert "**config, num_warps=8)" in new and new.count("BLOCK_SIZE_M") == TEXT.count("BLOCK_SIZE_M")


def test_autotune_refuses_to_take_over_a_spread_dict():
    assert offered(TEXT, "autotune") == []
    why = why_not(TEXT, "autotune")
    assert "**config" in why


@pytest.mark.parametrize("change, why", [
    ('    config["BLOCK_SIZE_M"] = 64\n', "run time"),  # changed after it is bound
    ("    config.update(extra)\n", "run time"),
    ('    del config["BLOCK_SIZE_K"]\n', "run time"),
    ('    config["BLOCK_SIZE_N"] *= 2\n', "run time"),
])
def test_a_dict_changed_after_its_binding_is_not_read(change, why):
    text = TEXT.replace(CONFIG, CONFIG + change)
    assert offered(text, "tiling") == []
    assert why in why_not(text, "tiling")
    assert analyze(text).launches[0].constexpr_values(analyze(text).kernel("matmul_kernel")) == {}


def test_a_dict_two_kernels_share_is_not_edited_for_one():
    text = TEXT.replace("    return c\n\n\ndef get_inputs", "    other_kernel[(1,)](c, **config)\n    return c\n\n\ndef get_inputs")
    text = text.replace("def matmul(a, b):", (
        "@triton.jit\ndef other_kernel(c_ptr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,"
        " BLOCK_SIZE_K: tl.constexpr):\n    pass\n\n\ndef matmul(a, b):"))
    assert offered(text, "tiling") == []
    assert "also launches other_kernel" in why_not(text, "tiling")


def test_positions_after_a_starred_argument_bind_nothing():
    text = TEXT.replace("a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),\n"
                        "                        **config, num_warps=4)",
                        "*strides, 32, 32, 32, num_warps=4)").replace(CONFIG, "    strides = (a.stride(0), a.stride(1))\n")
    assert offered(text, "tiling") == []


def test_a_spread_dict_after_a_starred_argument_still_sets_its_blocks():
    """Liger's grpo_loss: ``kernel[(B, L)](..., *dloss.stride(), L, N, **kwargs)``: the dict names the blocks, so
    the star cannot reach them (Python refuses two values for one parameter)."""
    text = TEXT.replace("a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),\n"
                        "                        **config, num_warps=4)",
                        "*strides, c.stride(0), c.stride(1), **config, num_warps=4)").replace(
        CONFIG, CONFIG + "    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1))\n")
    candidate = next(c for c in offered(text, "tiling") if c.params.get("BLOCK_SIZE_N") == 256)
    assert '{"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64}' in apply_candidate(text, candidate, H100).new_text


def test_a_dtype_constexpr_is_compiled_as_that_dtype():
    text = TEXT.replace("BLOCK_SIZE_K: tl.constexpr):", "BLOCK_SIZE_K: tl.constexpr, OUT_DTYPE: tl.constexpr):")
    text = text.replace("c = acc.to(tl.float16)", "c = acc.to(OUT_DTYPE)").replace(
        "**config, num_warps=4)", "**config, OUT_DTYPE=tl.float16, num_warps=4)")
    (job,) = [p.job for p in plan_jobs(analyze(text), H100)]
    assert job.constexprs["OUT_DTYPE"] == "tl.float16" and isinstance(job.constexprs["OUT_DTYPE"], Expression)
    assert job.constexprs["BLOCK_SIZE_M"] == 32  # from the spread dict
