"""Sweep the code shapes the engine could emit for the suite's slowest kernels against torch on the GPU.

The suite's geomean sits below torch.compile on attention, col_sum and the matmuls. This script asks, for the
suite's own sizes, which spellings of the engine's output would close the gap, so that the actions emit those:
- attention (4x16x4096x128 fp16): the flash kernel ``flash_attention`` writes, with ``exp`` or ``exp2`` over a
  scale folded with log2(e), with or without the per-block key mask, K loaded transposed or ``tl.trans``, over
  several tiles; against ``F.scaled_dot_product_attention``.
- matmuls (8192^3; 8192x8192x4096 with B stored (N, K); the same with a bias + GELU epilogue): the tiled kernel
  ``tiling`` + ``pipelining`` write, with the K mask or not, grouped program order or not, over several tiles,
  and one TMA tensor-descriptor variant; against ``torch.matmul`` / ``F.linear`` + ``F.gelu``.
- col_sum (32768x4096 fp32): ``column_block``'s best tile, against a row-split variant whose programs each sum a
  slab of rows for a block of columns and add it with ``tl.atomic_add`` (into a zeroed output); against
  ``x.sum(0)``.

Every variant is checked against torch before it is timed (``triton.testing.do_bench`` median, L2 flushed).
Run on the GPU machine: ``python3 benchmarks/suite_tiles_gpu.py --out DIR`` writes ``DIR/suite_tiles.json`` and
``.md``. ``--quick`` runs a few variants at small sizes (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def flash_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale, stride_h, stride_s,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 EXP2: tl.constexpr, MASK: tl.constexpr, K_T: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + head * stride_h + offs_m[:, None] * stride_s + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    qk_scale = scale
    if EXP2:
        qk_scale = scale * 1.44269504
    for start in range(0, seq_len, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        if K_T:
            if MASK:
                kt = tl.load(k_ptr + head * stride_h + offs_n[None, :] * stride_s + offs_d[:, None], mask=offs_n[None, :] < seq_len, other=0.0)
            else:
                kt = tl.load(k_ptr + head * stride_h + offs_n[None, :] * stride_s + offs_d[:, None])
            s = tl.dot(q, kt)
        else:
            if MASK:
                k = tl.load(k_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
            else:
                k = tl.load(k_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :])
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale
        if MASK:
            s = tl.where(offs_n[None, :] < seq_len, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        if EXP2:
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - m_new[:, None])
        else:
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if MASK:
            v = tl.load(v_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
        else:
            v = tl.load(v_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :])
        acc += tl.dot(p.to(v.dtype), v)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + head * stride_h + offs_m[:, None] * stride_s + offs_d[None, :], acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  EVEN_K: tl.constexpr, WRAP_MN: tl.constexpr, GELU: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    if GROUP_M > 1:
        width = GROUP_M * grid_n
        group_id = pid // width
        first_m = group_id * GROUP_M
        group_size = min(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % width) % group_size
        pid_n = (pid % width) // group_size
    else:
        pid_m = pid // grid_n
        pid_n = pid % grid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if WRAP_MN:
        rows = offs_m % M
        cols = offs_n % N
    else:
        rows = offs_m
        cols = offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a_ptrs = a_ptr + rows[:, None] * stride_am + (k + offs_k)[None, :] * stride_ak
        b_ptrs = b_ptr + (k + offs_k)[:, None] * stride_bk + cols[None, :] * stride_bn
        if WRAP_MN:
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                a = tl.load(a_ptrs, mask=(k + offs_k)[None, :] < K, other=0.0)
                b = tl.load(b_ptrs, mask=(k + offs_k)[:, None] < K, other=0.0)
        else:
            if EVEN_K:
                a = tl.load(a_ptrs, mask=rows[:, None] < M, other=0.0)
                b = tl.load(b_ptrs, mask=cols[None, :] < N, other=0.0)
            else:
                a = tl.load(a_ptrs, mask=(rows[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
                b = tl.load(b_ptrs, mask=((k + offs_k)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    if GELU:
        acc = acc + tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, B_NK: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    group_size = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_size
    pid_n = (pid % width) // group_size
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_NK:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        if B_NK:
            b = b_desc.load([pid_n * BLOCK_N, k]).T
        else:
            b = b_desc.load([k, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


@triton.jit
def col_block_kernel(x_ptr, out_ptr, n_rows, n_cols, row_stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(0, n_rows, BLOCK_R):
        rows = start + tl.arange(0, BLOCK_R)
        x = tl.load(x_ptr + rows[:, None] * row_stride + cols[None, :], mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0)
        acc += tl.sum(x, axis=0)
    tl.store(out_ptr + cols, acc, mask=cols < n_cols)


@triton.jit
def col_split_kernel(x_ptr, out_ptr, n_rows, n_cols, row_stride, ROWS_PER: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    first = tl.program_id(1) * ROWS_PER
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(first, first + ROWS_PER, BLOCK_R):
        rows = start + tl.arange(0, BLOCK_R)
        x = tl.load(x_ptr + rows[:, None] * row_stride + cols[None, :], mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0)
        acc += tl.sum(x, axis=0)
    tl.atomic_add(out_ptr + cols, acc, mask=cols < n_cols)


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300)


def close(a, b, tol) -> float:
    """Relative L2 error of a against b (raises when over tol)."""
    err = ((a.float() - b.float()).norm() / b.float().norm()).item()
    if not err <= tol:
        raise AssertionError(f"relative error {err:.2e} over {tol}")
    return err


def attention_rows(quick: bool) -> list[dict]:
    bh, n, d = (8, 512, 64) if quick else (64, 4096, 128)
    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    scale = d ** -0.5
    ref = F.scaled_dot_product_attention(q, k, v)
    rows = [{"problem": f"attention {bh}x{n}x{d} fp16", "variant": "torch SDPA", "ms": bench(lambda: F.scaled_dot_product_attention(q, k, v)), "err": 0.0}]
    flops = 4 * bh * n * n * d
    flag_sets = {"engine (exp, mask, trans)": (0, 1, 0), "exp2": (1, 1, 0), "no mask": (0, 0, 0), "K^T load": (0, 1, 1),
                 "exp2, no mask": (1, 0, 0), "exp2, no mask, K^T": (1, 0, 1)}
    tiles = [(128, 64, 8, 3)] if quick else [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
                                             (128, 64, 8, 4), (128, 32, 4, 3), (64, 128, 4, 3)]
    combos = [(name, flags, tiles[0]) for name, flags in flag_sets.items()]
    combos += [(name, flags, t) for t in tiles[1:] for name, flags in (("engine (exp, mask, trans)", (0, 1, 0)), ("exp2, no mask", (1, 0, 0)), ("exp2", (1, 1, 0)))]
    for name, (exp2, mask, k_t), (bm, bn, w, s) in combos:
        o = torch.empty_like(q)

        def run():
            flash_kernel[(triton.cdiv(n, bm), bh)](q, k, v, o, n, scale, q.stride(0), q.stride(1), HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn,
                                                   EXP2=exp2, MASK=mask, K_T=k_t, num_warps=w, num_stages=s)
        row = {"problem": f"attention {bh}x{n}x{d} fp16", "variant": f"{name} {bm}x{bn} w{w} s{s}"}
        try:
            run()
            row["err"] = close(o, ref, 1e-2)
            row["ms"] = bench(run)
            row["tflops"] = flops / row["ms"] / 1e9
        except Exception as exc:  # a tile that does not fit, or a wrong result: recorded, not fatal
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
        print(row, flush=True)
    return rows


def matmul_rows(quick: bool) -> list[dict]:
    out = []
    shapes = [("matmul", 512, 512, 512, False, False)] if quick else [
        ("matmul", 8192, 8192, 8192, False, False), ("matmul_transposed", 8192, 8192, 4096, True, False),
        ("linear_gelu", 8192, 8192, 4096, True, True)]
    configs = [(128, 256, 64, 8, 3)] if quick else [(128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
                                                    (256, 128, 64, 8, 3), (128, 128, 128, 8, 3), (128, 256, 32, 8, 4)]
    flag_sets = {"engine (masks)": (1, 0, 0), "group 8": (8, 0, 0), "no K mask": (1, 1, 0), "wrap M/N": (1, 0, 1),
                 "group 8, no K mask, wrap": (8, 1, 1)}
    for label, m, n, kk, b_nk, gelu in shapes:
        a = torch.randn(m, kk, device="cuda", dtype=torch.float16)
        b = torch.randn(n, kk, device="cuda", dtype=torch.float16) if b_nk else torch.randn(kk, n, device="cuda", dtype=torch.float16)
        bias = torch.randn(n, device="cuda", dtype=torch.float16)
        bt = b.t() if b_nk else b  # (K, N) view either way
        if gelu:
            def torch_fn():
                return F.gelu(F.linear(a, b, bias))
        else:
            def torch_fn():
                return a @ bt
        ref = torch_fn()
        problem = f"{label} {m}x{n}x{kk} fp16"
        out.append({"problem": problem, "variant": "torch", "ms": bench(torch_fn), "err": 0.0})
        flops = 2 * m * n * kk
        combos = [(name, flags, configs[0]) for name, flags in flag_sets.items()]
        combos += [(name, flags, cfg) for cfg in configs[1:] for name, flags in (("engine (masks)", (1, 0, 0)), ("group 8, no K mask, wrap", (8, 1, 1)))]
        for name, (group, even_k, wrap), (bm, bn, bk, w, s) in combos:
            c = torch.empty(m, n, device="cuda", dtype=torch.float16)

            def run():
                matmul_kernel[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](
                    a, bt, c, bias, m, n, kk, a.stride(0), a.stride(1), bt.stride(0), bt.stride(1), c.stride(0), c.stride(1),
                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, EVEN_K=even_k, WRAP_MN=wrap, GELU=gelu, num_warps=w, num_stages=s)
            out.append(_timed(problem, f"{name} {bm}x{bn}x{bk} w{w} s{s}", run, c, ref, flops))
        if not gelu:
            triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
            for bm, bn, bk, w, s in configs[:3]:
                c = torch.empty(m, n, device="cuda", dtype=torch.float16)

                def run():
                    matmul_tma_kernel[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](a, b, c, m, n, kk, B_NK=b_nk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                                                  GROUP_M=8, num_warps=w, num_stages=s)
                out.append(_timed(problem, f"TMA descriptors, group 8 {bm}x{bn}x{bk} w{w} s{s}", run, c, ref, flops))
    return out


def _timed(problem: str, variant: str, run, result, ref, flops: float, tol: float = 1e-2) -> dict:
    row = {"problem": problem, "variant": variant}
    try:
        run()
        row["err"] = close(result, ref, tol)
        row["ms"] = bench(run)
        row["tflops"] = flops / row["ms"] / 1e9
    except Exception as exc:  # a config that does not fit, or a wrong result: recorded, not fatal
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    print(row, flush=True)
    return row


def col_sum_rows(quick: bool) -> list[dict]:
    n_rows, n_cols = (1024, 256) if quick else (32768, 4096)
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float32)
    ref = x.double().sum(0).float()
    problem = f"col_sum {n_rows}x{n_cols} fp32"
    rows = [{"problem": problem, "variant": "torch x.sum(0)", "ms": bench(lambda: x.sum(0)), "err": close(x.sum(0), ref, 1e-4)}]
    out = torch.empty(n_cols, device="cuda", dtype=torch.float32)
    for bc, br, w in [(8, 512, 8), (8, 1024, 8), (16, 512, 8)]:
        def run():
            col_block_kernel[(triton.cdiv(n_cols, bc),)](x, out, n_rows, n_cols, x.stride(0), BLOCK_R=br, BLOCK_C=bc, num_warps=w)
        rows.append(_timed(problem, f"column_block {bc}x{br} w{w}", run, out, ref, 0, 1e-4))
    splits = [(64, 512, 32, 4)] if quick else [(bc, rp, br, w) for bc in (32, 64, 128) for rp in (256, 512, 1024, 2048) for br, w in ((32, 4), (64, 4), (64, 8))]
    for bc, rows_per, br, w in splits:
        if br > rows_per:
            continue

        def run():
            out.zero_()
            col_split_kernel[(triton.cdiv(n_cols, bc), triton.cdiv(n_rows, rows_per))](
                x, out, n_rows, n_cols, x.stride(0), ROWS_PER=rows_per, BLOCK_R=br, BLOCK_C=bc, num_warps=w)
        rows.append(_timed(problem, f"row split {bc} cols x {rows_per} rows (block {br}) w{w}, atomic", run, out, ref, 0, 1e-4))
    return rows


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"# Suite tile sweep on the {meta['gpu']}", "",
             f"{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, {meta['date']}. `{meta['command']}`. "
             "Median of `triton.testing.do_bench` (L2 flushed); each variant checked against torch first.", ""]
    for problem in dict.fromkeys(r["problem"] for r in rows):
        group = [r for r in rows if r["problem"] == problem]
        base = next((r["ms"] for r in group if "ms" in r and not r["variant"].startswith("torch")), None)
        torch_ms = next((r["ms"] for r in group if r["variant"].startswith("torch")), None)
        lines += [f"## {problem}", "", "| variant | ms | TFLOP/s | x first variant | x torch | rel err |", "|---|---:|---:|---:|---:|---:|"]
        for r in group:
            if "ms" not in r:
                lines.append(f"| {r['variant']} | {r.get('error', '-')} | | | | |")
                continue
            tf = f"{r['tflops']:.0f}" if r.get("tflops") else ""
            lines.append(f"| {r['variant']} | {r['ms']:.4f} | {tf} | {base / r['ms']:.2f}x | {torch_ms / r['ms']:.2f}x | {r.get('err', 0):.1e} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="a few variants at small sizes")
    parser.add_argument("--only", choices=["attention", "matmul", "col_sum"], action="append")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": "python3 benchmarks/suite_tiles_gpu.py " + " ".join(sys.argv[1:])}
    rows: list[dict] = []
    for part, fn in (("col_sum", col_sum_rows), ("attention", attention_rows), ("matmul", matmul_rows)):
        if args.only and part not in args.only:
            continue
        rows += fn(args.quick)
        (args.out / "suite_tiles.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        (args.out / "suite_tiles.md").write_text(markdown(meta, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
