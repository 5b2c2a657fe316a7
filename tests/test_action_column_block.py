"""column_block: a one-column-per-program reduction becomes coalesced column tiles, and nothing else does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy import HeuristicPolicy, PolicyState

from corpus.kernels import kernel_path

ROOT = Path(__file__).resolve().parents[1]
COL_SUM = kernel_path("col_sum").read_text()  # the benchmark suite's kernel
H200 = get_profile("h200")

# A second kernel in the same file and other names: a scaled column sum over columns of a
# row-major view, launched with the column count computed at the launch.
TWO_KERNELS = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def colsum_kernel(inp, res, height, ld, scale, RB: tl.constexpr):
    """Scaled column sums."""
    j = tl.program_id(axis=0)
    s = 0.0
    for i0 in tl.range(0, height, RB):
        i = i0 + tl.arange(0, RB)
        off = i * ld
        v = tl.load(inp + off + j, mask=i < height, other=0.0)
        s = s + tl.sum(v * scale, 0)
    tl.store(res + j, s)


def scaled_col_sum(x, scale=0.5):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    out = torch.empty(x.size(1), device=x.device, dtype=x.dtype)
    colsum_kernel[(x.size(1),)](y, out, x.size(0), y.stride(0), scale, RB=16)
    return out
'''

# Semantics under the interpreter: each file's host function against a float64 torch column sum.
RUNNER = r'''
import importlib.util, json, sys, torch
jobs, results = json.load(open(sys.argv[1])), []
for job in jobs:
    spec = importlib.util.spec_from_file_location("m%d" % len(results), job["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    worst = 0.0
    for rows, cols, dtype in job["shapes"]:
        torch.manual_seed(len(results) * 7919 + rows * 1000 + cols)  # no job reuses another's result memory
        x = torch.randn(rows, cols, dtype=getattr(torch, dtype))
        got = getattr(module, job["entry"])(x, *job.get("extra", []))
        want = x.double().sum(0) * job.get("scale", 1.0)
        if got.shape != want.shape or got.dtype != x.dtype:
            worst = float("inf")
            break
        worst = max(worst, float(((got.double() - want).abs() / (1.0 + want.abs())).max()))
    results.append({"name": job["name"], "worst": worst})
json.dump(results, open(sys.argv[2], "w"))
'''


def offered(text: str, kernel: str, target=H200) -> list[Candidate]:
    return [c for c in applicable(analyze(text), kernel, target) if c.action == "column_block"]


def run_interpreted(tmp_path: Path, jobs: list[dict]) -> dict[str, float]:
    for job in jobs:
        path = tmp_path / f"{job['name']}.py"
        path.write_text(job.pop("text"))
        job["path"] = str(path)
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "runner.py").write_text(RUNNER)
    proc = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "jobs.json"), str(tmp_path / "out.json")],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["name"]: r["worst"] for r in json.loads((tmp_path / "out.json").read_text())}


def test_offered_for_the_naive_column_sum_on_every_target():
    for key in ("h200", "h100", "a100", "v100"):
        cands = offered(COL_SUM, "col_sum_kernel", get_profile(key))
        assert cands, key
        for cand in one_slab(cands):
            assert set(cand.params) == {"BLOCK_COLS", "BLOCK_SIZE"}
            assert cand.params["BLOCK_COLS"] * cand.params["BLOCK_SIZE"] <= 8192
            assert cand.kind == "Tiling"
    assert len(offered(COL_SUM, "col_sum_kernel")) >= 3


def test_offered_among_other_kernels_and_other_names():
    assert offered(TWO_KERNELS, "colsum_kernel")
    assert not offered(TWO_KERNELS, "scale_kernel")


@pytest.mark.parametrize("path,kernel", [
    ("reduction", "row_sum_kernel"), ("matmul", "matmul_kernel"), ("elementwise", "add_relu_kernel"),
    ("softmax", "softmax_kernel"), ("layernorm", None),
])
def test_not_offered_for_other_kernel_shapes(path, kernel):
    analysis = analyze(kernel_path(path).read_text())
    for k in analysis.kernels if kernel is None else [analysis.kernel(kernel)]:
        assert not [c for c in applicable(analysis, k, H200) if c.action == "column_block"], k.name


@pytest.mark.parametrize("old,new", [
    ("+ col,", "+ col * 2,"),  # col is scaled: not a unit-stride column offset
    ("out_ptr + col,", "out_ptr + col * 1,"),
    ("total = 0.0", "total = 1.0"),  # accumulator does not start at zero
    ("axis=0", "axis=-1"),
    ("tl.store(out_ptr + col, total)", "tl.store(out_ptr + col, total, mask=col < 4096)"),
    ("col_sum_kernel[(n_cols,)]", "col_sum_kernel[(n_cols, 1)]"),  # 2-D grid
    ("tl.sum(x, axis=0)", "tl.max(x, axis=0)"),
    ("mask=rows < n_rows", "mask=(rows < n_rows) & (col < 7)"),  # col outside the address
    ("rows = start + tl.arange(0, BLOCK_SIZE)", "rows = start + tl.arange(0, BLOCK_SIZE)[:, None]"),
])
def test_not_offered_when_a_precondition_breaks(old, new):
    assert old in COL_SUM
    assert not offered(COL_SUM.replace(old, new), "col_sum_kernel")


def one_slab(cands: list[Candidate]) -> list[Candidate]:
    return [c for c in cands if "ROWS_PER_PROGRAM" not in c.params]


def test_the_edit_is_small_and_keeps_the_output_dtype():
    cand = one_slab(offered(COL_SUM, "col_sum_kernel"))[0]
    edit = apply_candidate(COL_SUM, cand, H200)
    assert edit.changed_lines <= 12
    assert "tl.zeros([BLOCK_COLS], dtype=tl.float32)" in edit.new_text
    assert "tl.store(out_ptr + cols, total, mask=col_mask)" in edit.new_text
    assert "[(triton.cdiv(n_cols, BLOCK_COLS),)](x, out, n_rows, x.stride(0), n_cols," in edit.new_text
    # Applied once, the kernel no longer has a scalar column: not offered again.
    assert not offered(edit.new_text, "col_sum_kernel")


def test_stale_text_and_foreign_params_are_refused():
    cand = offered(COL_SUM, "col_sum_kernel")[0]
    stale = COL_SUM.replace("+ col,", "+ col * row_stride,")
    with pytest.raises(ActionError):
        apply_candidate(stale, cand, H200)
    already = apply_candidate(COL_SUM, cand, H200).new_text
    with pytest.raises(ActionError):
        apply_candidate(already, cand, H200)
    wrong = Candidate(cand.action, cand.kind, cand.kernel, {"BLOCK_COLS": 48, "BLOCK_SIZE": 64}, "x", 0)
    with pytest.raises(ActionError):
        apply_candidate(COL_SUM, wrong, H200)


def test_heuristic_ranks_it_above_retiling_for_the_column_sum():
    analysis = analyze(COL_SUM)
    cands = applicable(analysis, "col_sum_kernel", H200)
    assert {"tiling", "column_block"} <= {c.action for c in cands}
    ranked = HeuristicPolicy().rank(PolicyState(analysis, analysis.kernel("col_sum_kernel"), H200, []), cands)
    actions = [r.candidate.action for r in ranked]
    # Both coalesced-column rewrites rank above retiling, column_block first: on col_sum (H200, session 7)
    # column_block gave 7.5x, rows_per_program's column tiles 3.1x (8 columns wide for the grid's sake).
    assert actions[:2] == ["column_block", "column_block"] or actions[0] == "column_block"
    assert actions.index("column_block") < actions.index("rows_per_program")
    assert actions.index("column_block") < actions.index("tiling")
    first_column_block = next(r.candidate for r in ranked if r.candidate.action == "column_block")
    assert first_column_block == offered(COL_SUM, "col_sum_kernel")[0]


@pytest.mark.slow
def test_rewritten_column_sums_match_torch_under_the_interpreter(tmp_path):
    fp32 = [[200, 48, "float32"], [200, 37, "float32"], [37, 130, "float32"], [2100, 37, "float32"]]  # 2100: three row slabs
    fp16 = [[64, 37, "float16"]]  # the output stays fp16 (the fp32 accumulator converts at the store)
    jobs = [{"name": "before", "text": COL_SUM, "entry": "col_sum", "shapes": fp32}]
    cands = offered(COL_SUM, "col_sum_kernel")
    for i, cand in enumerate(cands):
        after = apply_candidate(COL_SUM, cand, H200).new_text
        jobs.append({"name": f"after{i}", "text": after, "entry": "col_sum", "shapes": fp32})
        jobs.append({"name": f"fp16_after{i}", "text": after, "entry": "col_sum", "shapes": fp16})
    other = apply_candidate(TWO_KERNELS, offered(TWO_KERNELS, "colsum_kernel")[0], H200).new_text
    jobs.append({"name": "two_kernels", "text": other, "entry": "scaled_col_sum", "shapes": fp32})
    # A planted mistake the comparison must catch: the grid drops the last, partial column block.
    first = apply_candidate(COL_SUM, cands[0], H200).new_text
    planted = first.replace("triton.cdiv(n_cols, BLOCK_COLS)", "n_cols // BLOCK_COLS")
    assert planted != first
    jobs.append({"name": "planted", "text": planted, "entry": "col_sum", "shapes": fp32[1:2]})
    worst = run_interpreted(tmp_path, jobs)
    assert worst.pop("planted") > 0.3
    for name, err in worst.items():
        # tl.sum of fp16 adds in fp16 (Triton's rule, before and after); the interpreter's numpy sum
        # down a column adds sequentially, so a whole fp16 tile drifts by a few 1e-3 relative.
        assert err < (3e-2 if name.startswith("fp16") else 5e-5), (name, err)  # fp32: 2100-row sums drift ~1e-5


def test_row_slabs_come_first_on_recent_gpus_and_add_partial_sums_atomically():
    cands = offered(COL_SUM, "col_sum_kernel")
    assert cands[0].params == {"BLOCK_COLS": 64, "BLOCK_SIZE": 64, "ROWS_PER_PROGRAM": 1024}
    assert not [c for c in offered(COL_SUM, "col_sum_kernel", get_profile("v100")) if "ROWS_PER_PROGRAM" in c.params]
    new = apply_candidate(COL_SUM, cands[0], H200).new_text
    assert "out = torch.zeros(n_cols, device=x.device, dtype=x.dtype)" in new  # the atomic adds need a zeroed output
    assert "for start in range(row_start, tl.minimum(row_start + ROWS_PER_PROGRAM, n_rows), BLOCK_SIZE):" in new
    assert "tl.atomic_add(out_ptr + cols, total, mask=col_mask)" in new
    assert "[(triton.cdiv(n_cols, BLOCK_COLS), triton.cdiv(n_rows, ROWS_PER_PROGRAM))]" in new
    # The scaled sum of the other file keeps its scale inside each partial sum: still linear in the sum.
    other = [c for c in offered(TWO_KERNELS, "colsum_kernel") if "ROWS_PER_PROGRAM" in c.params]
    assert other and "torch.zeros(x.size(1)" in apply_candidate(TWO_KERNELS, other[0], H200).new_text


@pytest.mark.parametrize("old,new", [
    ("tl.store(out_ptr + col, total)", "tl.store(out_ptr + col, total * total)"),  # partial squares do not add up
    ("dtype=x.dtype)", "dtype=torch.float16)"),  # partial sums added in half precision
    ("    BLOCK_SIZE = 64\n", "    BLOCK_SIZE = 64\n    out.fill_(1.0)\n"),  # the output is used before the launch
    ("range(0, n_rows, BLOCK_SIZE)", "range(BLOCK_SIZE, n_rows, BLOCK_SIZE)"),  # the loop skips a block
    ("out = torch.empty(", "out = make_output("),  # not a fresh torch.empty
])
def test_row_slabs_not_offered_when_partial_sums_would_not_add_up(old, new):
    assert old in COL_SUM
    cands = offered(COL_SUM.replace(old, new), "col_sum_kernel")
    assert cands and not [c for c in cands if "ROWS_PER_PROGRAM" in c.params]
