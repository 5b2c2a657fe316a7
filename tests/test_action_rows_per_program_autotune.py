"""rows_per_program on kernels autotuned over block sizes: the row block comes from a heuristic under the autotune decorator."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_action_rows_per_program import DEV, applied, offered, run_interpreted, why_not  # noqa: E402

CONFIGS = ('[triton.Config({"BLOCK_N": 1024}, num_warps=4), triton.Config({"BLOCK_N": 2048}, num_warps=8)]')

# The example of the task: an RMS norm autotuned over its column block, one program per row.
EXAMPLE = f'''import torch
import triton
import triton.language as tl


@triton.autotune(configs={CONFIGS}, key=["n_cols"])
@triton.jit
def rms_kernel(x_ptr, y_ptr, stride, n_cols, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * stride + cols, x * rstd, mask=mask)


def rms(x, eps=1e-6):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rms_kernel[(n_rows,)](x, y, x.stride(0), n_cols, eps)
    return y
'''

# TILE=8192 on the H100 (132 SMs: the floor divides the rows by 528).
EXAMPLE_AFTER = f'''import torch
import triton
import triton.language as tl


@triton.autotune(configs={CONFIGS}, key=["n_cols"])
@triton.heuristics({{"BLOCK_M": lambda args: max(1, min(min(8192, 1024 * args.get("num_warps", 4)) // args["BLOCK_N"], triton.next_power_of_2(triton.cdiv(args["n_rows"], 528))))}})
@triton.jit
def rms_kernel(x_ptr, y_ptr, stride, n_cols, eps, n_rows, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row[:, None] * stride + cols[None, :], mask=row_mask[:, None] & mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    tl.store(y_ptr + row[:, None] * stride + cols[None, :], x * rstd[:, None], mask=row_mask[:, None] & mask)


def rms(x, eps=1e-6):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rms_kernel[lambda META: (triton.cdiv(n_rows, META["BLOCK_M"]),)](x, y, x.stride(0), n_cols, eps, n_rows)
    return y
'''

# Configs built by a comprehension (the analysis cannot read them): the heuristic does not need to.
GENERATED = EXAMPLE.replace(CONFIGS, '[triton.Config({"BLOCK_N": b}, num_warps=w) for b, w in ((128, 2), (256, 4))]')
# The configs set another constexpr, the column block keeps its default: the heuristic reads it with that default.
DEFAULTED = (EXAMPLE.replace(CONFIGS, '[triton.Config({"SCALE": 1}), triton.Config({"SCALE": 2})]')
             .replace("eps, BLOCK_N: tl.constexpr)", "eps, SCALE: tl.constexpr, BLOCK_N: tl.constexpr = 128)")
             .replace("x * rstd, mask=mask)", "x * rstd * SCALE, mask=mask)"))
# The same with no default: nothing gives the heuristic the column block.
UNREADABLE = DEFAULTED.replace("BLOCK_N: tl.constexpr = 128)", "BLOCK_N: tl.constexpr)")
JITTED_BY_CALL = (EXAMPLE.replace(f'@triton.autotune(configs={CONFIGS}, key=["n_cols"])\n@triton.jit\ndef rms_kernel(', "def _rms(")
                  .replace("\n\ndef rms(", f'\n\nrms_kernel = triton.autotune(configs={CONFIGS}, key=["n_cols"])(triton.jit(_rms))'
                                           "\n\n\ndef rms("))
WITH_HEURISTICS = (EXAMPLE.replace("@triton.jit\n", '@triton.heuristics({"EVEN": lambda args: args["n_cols"] % 2 == 0})\n@triton.jit\n')
                   .replace("BLOCK_N: tl.constexpr)", "EVEN: tl.constexpr, BLOCK_N: tl.constexpr)"))
META_ROWS = EXAMPLE.replace("rms_kernel[(n_rows,)]", 'rms_kernel[lambda META: (triton.cdiv(n_rows, META["BLOCK_N"]),)]')
VAR = (DEV / "red_var_autotune.py").read_text()
RMS_DEV = (DEV / "norm_rmsnorm_autotune_rows.py").read_text()


@pytest.mark.parametrize("text,kernel", [
    (EXAMPLE, "rms_kernel"), (GENERATED, "rms_kernel"), (DEFAULTED, "rms_kernel"),
    (VAR, "var_kernel"), (RMS_DEV, "rms_norm_kernel"),
])
def test_offered_for_kernels_autotuned_over_blocks(text, kernel):
    assert why_not(text, kernel) is None
    assert [c.params for c in offered(text, kernel)] == [{"TILE": 4096}, {"TILE": 8192}]


@pytest.mark.parametrize("text,kernel,reason", [
    (JITTED_BY_CALL, "_rms", "jitted by a call: no decorator list"),
    (WITH_HEURISTICS, "rms_kernel", "@triton.heuristics sets the kernel's blocks"),
    (UNREADABLE, "rms_kernel", "the configs set blocks but not always BLOCK_N, and the launch passes none"),
    (META_ROWS, "rms_kernel", "the grid's row count reads the grid lambda's meta-parameters"),
])
def test_refused_with_a_reason(text, kernel, reason):
    assert not offered(text, kernel)
    assert reason in why_not(text, kernel)


def test_the_example_gets_a_heuristic_under_the_autotune_and_a_meta_grid():
    assert applied(EXAMPLE, "rms_kernel") == EXAMPLE_AFTER


def test_generated_configs_and_the_key_stay_and_a_default_block_is_read_with_its_default():
    new = applied(GENERATED, "rms_kernel", tile=4096)
    assert '[triton.Config({"BLOCK_N": b}, num_warps=w) for b, w in ((128, 2), (256, 4))], key=["n_cols"])' in new
    assert 'min(min(4096, 1024 * args.get("num_warps", 4)) // args["BLOCK_N"]' in new
    defaulted = applied(DEFAULTED, "rms_kernel")
    assert '// args.get("BLOCK_N", 128)' in defaulted  # heuristics see the call's arguments and the config, not defaults
    # The decorator order is what makes it work: autotune calls the heuristic with each config's kwargs.
    lines = [line.split("(")[0] for line in defaulted.splitlines() if line.startswith("@")]
    assert lines == ["@triton.autotune", "@triton.heuristics", "@triton.jit"]


def test_a_lambda_grid_keeps_its_own_meta_name_and_the_warps_stay_with_the_configs():
    new = applied(VAR, "var_kernel")
    assert 'var_kernel[lambda META: (triton.cdiv(M, META["BLOCK_M"]),)](x, out, M, N, correction)' in new
    assert "grid = lambda META" not in new  # the one-use grid name is folded into the launch
    assert 'triton.cdiv(args["M"], 528)' in new  # the kernel's own row-count argument, no new one
    assert "num_warps" not in new.split("def var_rows(")[1]
    lowercase = VAR.replace("lambda META: (M,)", "lambda meta: (M,)")
    assert 'lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)' in applied(lowercase, "var_kernel")


# Interpreter jobs: (name, before, entry, inputs). sm_cap=4 lets 37 rows take 4 or 8 rows a program, so the
# last row block is partial (37 = 9 * 4 + 1 = 4 * 8 + 5).
FIRST_CONFIG_LAST = EXAMPLE.replace(CONFIGS, '[triton.Config({"BLOCK_N": 2048}, num_warps=8), '
                                              'triton.Config({"BLOCK_N": 1024}, num_warps=4)]')
INTERPRETED = [
    # The interpreter's autotuner times every config the same, so the first one runs: both orders are checked.
    ("example", EXAMPLE, "m.rms", "[torch.randn(37, 100)]"),
    ("example_other_config", FIRST_CONFIG_LAST, "m.rms", "[torch.randn(37, 100)]"),
    ("generated", GENERATED, "m.rms", "[torch.randn(37, 100)]"),  # 100 columns: both configs span the row
    ("defaulted", DEFAULTED, "m.rms", "[torch.randn(37, 100)]"),
    ("var", VAR, "m.var_rows", "m.get_inputs(device='cpu', M=37, N=300)"),
    ("rms_dev", RMS_DEV, "m.rms_norm", "m.get_inputs(device='cpu', M=37, N=300)"),
]


@pytest.mark.slow
def test_rewritten_kernels_match_the_originals_under_the_interpreter(tmp_path):
    kernels = {"example": "rms_kernel", "example_other_config": "rms_kernel", "generated": "rms_kernel",
               "defaulted": "rms_kernel", "var": "var_kernel", "rms_dev": "rms_norm_kernel"}
    jobs = [{"name": name, "before": text, "after": applied(text, kernels[name], sm_cap=4), "entry": entry, "inputs": inputs}
            for name, text, entry, inputs in INTERPRETED]
    # A planted mistake the comparison must catch: the grid drops the last, partial row block.
    planted = applied(EXAMPLE, "rms_kernel", sm_cap=4).replace('triton.cdiv(n_rows, META["BLOCK_M"])', 'n_rows // META["BLOCK_M"]')
    assert planted != applied(EXAMPLE, "rms_kernel", sm_cap=4)
    jobs.append({"name": "planted", "before": EXAMPLE, "after": planted, "entry": "m.rms", "inputs": "[torch.randn(37, 100)]"})
    results = run_interpreted(tmp_path, jobs)
    assert results.pop("planted")["worst"] > 1e-3
    assert set(results) == set(kernels)
    for name, r in results.items():
        assert r["error"] is None, (name, r)
        assert r["worst"] <= 1e-5, (name, r)


def _row_block(new_text: str, **args) -> int:
    """BLOCK_M as the rewritten file's heuristic computes it for one call and config."""
    import triton

    source = new_text.split('@triton.heuristics({"BLOCK_M": ', 1)[1].split("})\n", 1)[0]
    return eval(source, {"triton": triton})(args)


def test_the_heuristic_keeps_each_configs_tile_within_its_warps_and_the_per_sm_floor():
    new = applied(EXAMPLE, "rms_kernel", sm_cap=4)
    # The interpreter jobs' 37 rows: 4 rows a program for either config, the last block partial.
    assert _row_block(new, n_rows=37, BLOCK_N=1024, num_warps=4) == 4
    assert _row_block(new, n_rows=37, BLOCK_N=2048, num_warps=8) == 4
    assert _row_block(new, n_rows=37, BLOCK_N=256, num_warps=8) == 16  # the floor: cdiv(37, 4) -> 16
    full = applied(EXAMPLE, "rms_kernel")
    assert _row_block(full, n_rows=100_000, BLOCK_N=256, num_warps=2) == 8  # 2 warps: 2048 elements, not 8192
    assert _row_block(full, n_rows=100_000, BLOCK_N=256, num_warps=8) == 32
    assert _row_block(full, n_rows=1000, BLOCK_N=256, num_warps=8) == 2  # at least ~4 programs per SM of the H100
    assert _row_block(full, n_rows=100_000, BLOCK_N=16384, num_warps=16) == 1  # a row wider than the tile keeps one row
