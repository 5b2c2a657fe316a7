"""rows_per_program on spellings public kernels use: tl.cdiv and compiler hints, Python's min/max of per-row values,
``name: tl.constexpr = value`` in the body, and grid-stride loops whose count is bound to ``num_programs``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_action_rows_per_program import applied, offered, run_interpreted, why_not

# Liger's column-tiled layer norm: the number of column blocks from tl.cdiv, three sweeps over the row.
LAYERNORM_CDIV = '''import torch
import triton
import triton.language as tl


@triton.jit
def layer_norm_tiled_kernel(y_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    n_blocks = tl.cdiv(n_cols, BLOCK)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + row * stride
    total = 0.0
    for blk in range(n_blocks):
        cols = blk * BLOCK + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        total += tl.sum(x, axis=0)
    mean = total / n_cols
    sq = 0.0
    for blk in range(n_blocks):
        cols = blk * BLOCK + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        sq += tl.sum(d * d, axis=0)
    rstd = 1.0 / tl.sqrt(sq / n_cols + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for blk in range(n_blocks):
        cols = blk * BLOCK + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * stride + cols, (x - mean) * rstd * w + b, mask=mask)


def layer_norm(x, w, b, eps=1e-5):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    layer_norm_tiled_kernel[(n_rows,)](y, x, w, b, mean, rstd, x.stride(0), n_cols, eps, BLOCK=32)
    return y, mean, rstd
'''

# Hints in the FlagGems / lightllm style: the column start a multiple of the block, the offsets contiguous,
# and a per-row offset a multiple of 4 (every row starts 4-aligned: the strides the host passes are).
SUM_HINTS = '''import torch
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    row_off = tl.multiple_of(pid * stride, 4)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        cols = tl.max_contiguous(tl.multiple_of(start + tl.arange(0, BLOCK_N), BLOCK_N), BLOCK_N)
        acc += tl.load(x_ptr + row_off + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def row_sum(x):
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    row_sum_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK_N=16)
    return out
'''

# Python's min/max of per-row values (Triton's builtin_min folds tl.minimum): token ids clamped into the table,
# and the last row a program may read, as Liger's backward kernels bound their rows.
GATHER_CLAMP = '''import torch
import triton
import triton.language as tl


@triton.jit
def clamped_gather_kernel(ids_ptr, table_ptr, out_ptr, n_rows, vocab, dim, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    tok = tl.load(ids_ptr + row)
    tok = max(min(tok, vocab - 1), 0)
    prev = max(row - 1, 0, row * 0)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < dim
    emb = tl.load(table_ptr + tok * dim + cols, mask=mask, other=0.0)
    before = tl.load(table_ptr + max(min(tl.load(ids_ptr + prev), vocab - 1), 0) * dim + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * dim + cols, emb + 0.5 * before, mask=mask)


def clamped_gather(ids, table):
    n_rows, dim = ids.numel(), table.shape[1]
    out = torch.empty(n_rows, dim, dtype=table.dtype, device=table.device)
    clamped_gather_kernel[(n_rows,)](ids, table, out, n_rows, table.shape[0], dim, BLOCK_D=triton.next_power_of_2(dim))
    return out
'''

# FlagGems-style constants as local constexprs in the body (the tanh GELU of each row, scaled by the row's max).
GELU_CONSTEXPR = '''import torch
import triton
import triton.language as tl


@triton.jit
def gelu_rows_kernel(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    SQRT_2_OVER_PI: tl.constexpr = 0.7978845608
    COEFF: tl.constexpr = 0.044715
    HALF: tl.constexpr = BLOCK // 2
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    inner = SQRT_2_OVER_PI * (x + COEFF * x * x * x)
    t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    g = 0.5 * x * (1.0 + t)
    peak = tl.max(tl.where(mask, tl.abs(g), 0.0), axis=0) + HALF * 0.0
    tl.store(y_ptr + row * stride + cols, g / (peak + 1.0), mask=mask)


def gelu_rows(x):
    y = torch.empty_like(x)
    gelu_rows_kernel[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''

# Liger's Ascend persistent norms: the program count bound to a name spelled like the function it calls,
# tl.cdiv of the column blocks before the loop, and tl.range's step given by keyword.
RMS_PERSISTENT = '''import torch
import triton
import triton.language as tl


@triton.jit
def rms_norm_persistent_kernel(y_ptr, x_ptr, w_ptr, rstd_ptr, stride, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    n_blocks = tl.cdiv(n_cols, BLOCK)
    offs = tl.arange(0, BLOCK)
    for row in tl.range(pid, n_rows, step=num_programs):
        ss = 0.0
        for blk in range(n_blocks):
            cols = blk * BLOCK + offs
            x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
            ss += tl.sum(x * x, axis=0)
        rstd = 1.0 / tl.sqrt(ss / n_cols + eps)
        tl.store(rstd_ptr + row, rstd)
        for blk in range(n_blocks):
            cols = blk * BLOCK + offs
            mask = cols < n_cols
            x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0)
            tl.store(y_ptr + row * stride + cols, x * rstd * w, mask=mask)


def rms_norm(x, w, eps=1e-6, programs=3):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rms_norm_persistent_kernel[(min(programs, n_rows),)](y, x, w, rstd, x.stride(0), n_rows, n_cols, eps, BLOCK=32)
    return y, rstd
'''

CASES = [(LAYERNORM_CDIV, "layer_norm_tiled_kernel"), (SUM_HINTS, "row_sum_kernel"), (GATHER_CLAMP, "clamped_gather_kernel"),
         (GELU_CONSTEXPR, "gelu_rows_kernel"), (RMS_PERSISTENT, "rms_norm_persistent_kernel")]


@pytest.mark.parametrize("text,kernel", CASES)
def test_offered_on_public_spellings(text, kernel):
    assert why_not(text, kernel) is None
    assert [c.params for c in offered(text, kernel)] == [{"TILE": 4096}, {"TILE": 8192}]


def test_scalar_helpers_and_hints_stay_as_written():
    new = applied(LAYERNORM_CDIV, "layer_norm_tiled_kernel")
    assert "    n_blocks = tl.cdiv(n_cols, BLOCK)\n" in new and "total = tl.zeros([BLOCK_M], dtype=tl.float32)" in new
    hints = applied(SUM_HINTS, "row_sum_kernel")
    # The per-row offset keeps its hint as a [BLOCK_M] vector; the column hints are untouched.
    assert "row_off = tl.multiple_of(pid * stride, 4)" in hints and "row_off[:, None] + cols[None, :]" in hints
    assert "cols = tl.max_contiguous(tl.multiple_of(start + tl.arange(0, BLOCK_N), BLOCK_N), BLOCK_N)" in hints


def test_min_and_max_of_per_row_values_become_tl_minimum_and_maximum():
    new = applied(GATHER_CLAMP, "clamped_gather_kernel")
    assert "tok = tl.maximum(tl.minimum(tok, vocab - 1), 0)" in new
    assert "prev = tl.maximum(tl.maximum(row - 1, 0), row * 0)" in new
    assert "tl.maximum(tl.minimum(tl.load(ids_ptr + prev, mask=row_mask), vocab - 1), 0)[:, None] * dim" in new
    # Row-independent min/max stay Python's (a constexpr or a scalar the host passes).
    kept = GATHER_CLAMP.replace("    cols = tl.arange(0, BLOCK_D)\n", "    cols = tl.arange(0, BLOCK_D) + min(vocab, 0)\n")
    assert "+ min(vocab, 0)" in applied(kept, "clamped_gather_kernel")


def test_local_constexprs_stay_and_the_grid_stride_step_keyword_is_scaled():
    gelu = applied(GELU_CONSTEXPR, "gelu_rows_kernel")
    assert "    SQRT_2_OVER_PI: tl.constexpr = 0.7978845608\n    COEFF: tl.constexpr = 0.044715\n" in gelu
    rms = applied(RMS_PERSISTENT, "rms_norm_persistent_kernel")
    assert "    num_programs = tl.num_programs(0)\n" in rms
    assert "for row_block in tl.range(pid * BLOCK_M, n_rows, step=num_programs * BLOCK_M):" in rms


@pytest.mark.parametrize("text,old,new,reason", [
    # ``//`` of the row index by a block: rows would share the addresses it reaches.
    (LAYERNORM_CDIV, "    tl.store(mean_ptr + row, mean)\n", "    tl.store(mean_ptr + tl.cdiv(row, 2), mean)\n",
     "`tl.cdiv(row, 2)` divides a per-row value"),
    # A contiguity claim on a per-row value would span the rows of the [BLOCK_M] vector.
    (SUM_HINTS, "tl.multiple_of(pid * stride, 4)", "tl.max_contiguous(pid * stride, 4)", "hints on a per-row value"),
    # multiple_of takes one value per axis: a row's columns become a 2-D tile.
    (SUM_HINTS, "        acc += tl.load(", "        acc += tl.multiple_of(row_off + cols, 4) * 0\n        acc += tl.load(",
     "hints on a row block"),
    (SUM_HINTS, "tl.multiple_of(pid * stride, 4)", "tl.multiple_of(pid * stride, pid)", "is not a hint on one value"),
    (GATHER_CLAMP, "max(min(tok, vocab - 1), 0)", "max(tok)", "is not min/max of two or more plain arguments"),
    # A clamped row index maps several rows onto one: a store must still reach the row itself.
    (GATHER_CLAMP, "tl.store(out_ptr + row * dim + cols", "tl.store(out_ptr + min(row, 5) * dim + cols",
     "or through min/max: rows would share its addresses"),
    (GELU_CONSTEXPR, "    COEFF: tl.constexpr = 0.044715\n", "    COEFF: tl.float32 = 0.044715\n",
     "annotated assignment other than `name: tl.constexpr = value`"),
    (GELU_CONSTEXPR, "    HALF: tl.constexpr = BLOCK // 2\n", "    HALF: tl.constexpr = row // 2\n", "makes a constexpr of a tensor value"),
    # Python's range drops a keyword step when compiled (steps by 1) and raises under the interpreter.
    (RMS_PERSISTENT, "tl.range(pid, n_rows, step=num_programs)", "range(pid, n_rows, step=num_programs)",
     "passes a keyword to Python's range, which Triton's compiler ignores"),
    # The bound program count read elsewhere than the header is still refused (a real use, not the attribute).
    (RMS_PERSISTENT, "        ss = 0.0\n", "        ss = num_programs * 0.0\n",
     "num_programs (`tl.num_programs(0)`) is used outside the grid-stride loop's header"),
    # The kernel walks blocks of rows by the program count itself (Liger's Ascend norms): nothing left to widen.
    (RMS_PERSISTENT, "tl.range(pid, n_rows, step=num_programs)", "tl.range(pid * 2, n_rows, step=num_programs * 2)",
     "the kernel shares its rows out among the programs itself: `for row in tl.range(pid * 2, n_rows, step=num_programs * 2)`"),
    # Liger's backward kernels walk a program's own rows: ``range(row_start, row_end)`` from the program id.
    (LAYERNORM_CDIV, "    for blk in range(n_blocks):\n        cols = blk * BLOCK + offs\n        mask = cols < n_cols\n",
     "    for blk in range(row, min(row + 2, n_blocks)):\n        cols = blk * BLOCK + offs\n        mask = cols < n_cols\n",
     "`for blk in range(row, min(row + 2, n_blocks))` has bounds from the row index"),
    # Dtypes are not callable in Triton 3.9: the kernel does not compile, whatever the rewrite.
    (LAYERNORM_CDIV, "    total = 0.0\n", "    total = tl.float32(0.0)\n", "Triton dtypes are not callable"),
])
def test_refused_with_a_reason(text, old, new, reason):
    assert old in text
    changed = text.replace(old, new)
    kernel = next(k for t, k in CASES if t is text)
    assert not offered(changed, kernel)
    assert reason in why_not(changed, kernel)


def test_python_min_in_a_device_function_of_per_row_values_is_refused():
    # The device function is left as written: its Python min would meet [BLOCK_M] vectors (Python's own min when interpreted).
    text = GATHER_CLAMP.replace("@triton.jit\ndef clamped_gather_kernel",
                                "@triton.jit\ndef _clamp(v, hi):\n    return max(min(v, hi), 0)\n\n\n@triton.jit\ndef clamped_gather_kernel")
    text = text.replace("tok = max(min(tok, vocab - 1), 0)", "tok = _clamp(tok, vocab - 1)")
    assert "_clamp(tok, vocab - 1)" in text and "def _clamp" in text
    assert "a device function the kernel calls takes `min(v, hi)` of a per-row value" in why_not(text, "clamped_gather_kernel")
    # Of row-independent values it is fine.
    assert why_not(text.replace("_clamp(tok, vocab - 1)", "tok + _clamp(vocab, 3) * 0"), "clamped_gather_kernel") is None


@pytest.mark.slow
def test_rewritten_public_spellings_match_the_originals_under_the_interpreter(tmp_path):
    # sm_cap 4: 37 rows give up to 16 rows a program with a partial last block.
    cases = [
        ("layernorm_cdiv", LAYERNORM_CDIV, "layer_norm_tiled_kernel", "m.layer_norm",
         "[torch.randn(37, 100), torch.randn(100), torch.randn(100)]"),
        ("sum_hints", SUM_HINTS, "row_sum_kernel", "m.row_sum", "[torch.randn(37, 100)]"),
        ("gather_clamp", GATHER_CLAMP, "clamped_gather_kernel", "m.clamped_gather",
         "[torch.randint(-3, 60, (37,), dtype=torch.int32), torch.randn(50, 40)]"),
        ("gelu_constexpr", GELU_CONSTEXPR, "gelu_rows_kernel", "m.gelu_rows", "[torch.randn(37, 100)]"),
        ("rms_persistent", RMS_PERSISTENT, "rms_norm_persistent_kernel", "m.rms_norm", "[torch.randn(37, 100), torch.randn(100)]"),
    ]
    jobs = [{"name": name, "before": text, "after": applied(text, kernel, sm_cap=4), "entry": entry, "inputs": inputs}
            for name, text, kernel, entry, inputs in cases]
    # A planted mistake the comparison must catch: the clamp one row short on the rewritten side.
    planted = applied(GATHER_CLAMP, "clamped_gather_kernel", sm_cap=4).replace("tl.minimum(tok, vocab - 1)", "tl.minimum(tok, vocab - 2)")
    jobs.append({"name": "planted", "before": GATHER_CLAMP, "after": planted, "entry": "m.clamped_gather",
                 "inputs": "[torch.randint(-3, 60, (37,), dtype=torch.int32), torch.randn(50, 40)]"})
    results = run_interpreted(tmp_path, jobs)
    assert results.pop("planted")["worst"] > 1e-3
    for name, r in results.items():
        assert r["error"] is None and r["worst"] <= 1e-5, (name, r)
