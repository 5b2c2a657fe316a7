"""The LLM coder's gate and edit regions, on patched texts directly (no model, no diff)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.coder import CoderError
from mtmc_lsp.optimizer.coder.gate import check_rewrite
from mtmc_lsp.optimizer.coder.region import describe_regions, editable_regions

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"
GELU = (EXAMPLES / "gelu_bias.py").read_text()

MODULE_LAUNCH = '''import torch
import triton
import triton.language as tl

SCALE = 2.0


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr = 64):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


x = torch.randn(100)
y = torch.empty_like(x)
scale_kernel[(2,)](x, y, 100, BLOCK=64)
print(y.sum())
'''


def gate(text: str, kernel: str, new_text: str, limit: int = 30) -> int:
    analysis = analyze(text)
    return check_rewrite(analysis, analysis.kernel(kernel), new_text, limit)


def test_regions_are_the_kernel_then_its_host_function_or_module_level_launch():
    gelu = analyze(GELU)
    assert describe_regions(editable_regions(gelu, gelu.kernel("scale_bias_kernel"))) == (
        "kernel lines 8-16, host function gelu_bias() lines 29-37")
    module = analyze(MODULE_LAUNCH)
    assert describe_regions(editable_regions(module, module.kernel("scale_kernel"))) == (
        "kernel lines 8-11, launch lines 16-16")


def test_a_constexpr_default_and_the_launch_may_change_within_the_regions():
    new = MODULE_LAUNCH.replace("BLOCK: tl.constexpr = 64", "BLOCK: tl.constexpr = 128").replace(
        "scale_kernel[(2,)](x, y, 100, BLOCK=64)", "scale_kernel[(1,)](x, y, 100, BLOCK=128, num_warps=2)")
    assert gate(MODULE_LAUNCH, "scale_kernel", new) == 2


def test_a_helper_inserted_right_after_the_kernel_is_inside_but_module_code_is_not():
    helper = "\n\n@triton.jit\ndef _twice(v):\n    return v * 2.0\n"
    end_of_kernel = "mask=offs < n)\n"
    assert gate(MODULE_LAUNCH, "scale_kernel", MODULE_LAUNCH.replace(end_of_kernel, end_of_kernel + helper, 1)) == 5
    with pytest.raises(CoderError, match=r"the diff changes line 5, outside scale_kernel's code \(kernel lines 8-11, "
                                         r"launch lines 16-16\)"):
        gate(MODULE_LAUNCH, "scale_kernel", MODULE_LAUNCH.replace("SCALE = 2.0", "SCALE = 3.0"))
    with pytest.raises(CoderError, match="the diff changes line 17, outside"):
        gate(MODULE_LAUNCH, "scale_kernel", MODULE_LAUNCH.replace("print(y.sum())", "print(y.mean())"))


def test_the_limit_counts_changed_lines_like_rule_actions():
    line = "    y = tl.load(y_ptr + offsets, mask=mask)\n"
    new = GELU.replace(line, line + "    # a note\n" * 6)
    assert gate(GELU, "gelu_kernel", new, limit=6) == 6
    with pytest.raises(CoderError, match="the diff changes 6 lines; the limit is 5"):
        gate(GELU, "gelu_kernel", new, limit=5)


def test_constexpr_becoming_a_runtime_parameter_is_a_signature_change():
    new = GELU.replace("def gelu_kernel(y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr)",
                       "def gelu_kernel(y_ptr, out_ptr, n_elements, BLOCK_SIZE)")
    with pytest.raises(CoderError, match=r"kernel gelu_kernel's parameters changed from \(y_ptr, out_ptr, n_elements, "
                                         r"BLOCK_SIZE: constexpr\) to \(y_ptr, out_ptr, n_elements, BLOCK_SIZE\)"):
        gate(GELU, "gelu_kernel", new)
