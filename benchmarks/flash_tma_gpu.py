"""A sweep of the flash kernel the engine writes for the suite's attention: TMA descriptors, scale folding, tiles.

``python3 benchmarks/flash_tma_gpu.py --out DIR`` (a GPU with Triton >= 3.4): the kernel is the engine's
flash_attention output for ``benchmarks/suite/attention.py`` (base-2 exponent, EVEN_N, 128x64 w8 s3), written
once with constexpr switches: ``FOLD`` multiplies the scores by ``scale * log2(e)`` once instead of twice,
``TMA`` loads Q, K, V (and stores O) through ``tl.make_tensor_descriptor``. Each variant is checked against
``scaled_dot_product_attention`` and timed with ``triton.testing.do_bench`` (median, L2 flushed) beside it.
Writes ``DIR/flash_tma.json`` and ``.md``. What it decides: whether the tensor_descriptor action should reach the
flash kernel's K/V loads, and which tile the flash action should lead with on Hopper.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def flash_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale, stride_h, stride_s,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 FOLD: tl.constexpr, TMA: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if TMA:
        q_desc = tl.make_tensor_descriptor(q_ptr + head * stride_h, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
        k_desc = tl.make_tensor_descriptor(k_ptr + head * stride_h, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_ptr + head * stride_h, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        q = q_desc.load([pid_m * BLOCK_M, 0])
    else:
        q = tl.load(q_ptr + head * stride_h + offs_m[:, None] * stride_s + offs_d[None, :])
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    qk_scale = scale * 1.4426950408889634
    for start in range(0, seq_len, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        if TMA:
            k = k_desc.load([start, 0])
        else:
            k = tl.load(k_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :])
        if FOLD:
            s = tl.dot(q, tl.trans(k)) * qk_scale
        else:
            s = tl.dot(q, tl.trans(k)) * scale
            s = s.to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if TMA:
            v = v_desc.load([start, 0])
        else:
            v = tl.load(v_ptr + head * stride_h + offs_n[:, None] * stride_s + offs_d[None, :])
        acc += tl.dot(p.to(q_ptr.dtype.element_ty), v)
    acc = acc / l_i[:, None]
    if TMA:
        o_desc = tl.make_tensor_descriptor(o_ptr + head * stride_h, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
        o_desc.store([pid_m * BLOCK_M, 0], acc.to(o_ptr.dtype.element_ty))
    else:
        tl.store(o_ptr + head * stride_h + offs_m[:, None] * stride_s + offs_d[None, :], acc.to(o_ptr.dtype.element_ty))


def run(q3, k3, v3, out, fold, tma, bm, bn, warps, stages):
    seq_len, head_dim = q3.shape[1], q3.shape[2]
    flash_kernel[(triton.cdiv(seq_len, bm), q3.shape[0])](
        q3, k3, v3, out, seq_len, head_dim ** -0.5, q3.stride(0), q3.stride(1),
        HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, FOLD=fold, TMA=tma, num_warps=warps, num_stages=stages)
    return out


VARIANTS = [  # (label, fold, tma, BLOCK_M, BLOCK_N, warps, stages)
    ("engine 128x64 w8 s3", False, False, 128, 64, 8, 3),
    ("fold 128x64 w8 s3", True, False, 128, 64, 8, 3),
    ("fold+TMA 128x64 w8 s3", True, True, 128, 64, 8, 3),
    ("fold+TMA 128x64 w8 s2", True, True, 128, 64, 8, 2),
    ("fold+TMA 128x128 w8 s2", True, True, 128, 128, 8, 2),
    ("fold+TMA 128x128 w8 s3", True, True, 128, 128, 8, 3),
    ("fold 128x128 w8 s2", True, False, 128, 128, 8, 2),
    ("fold+TMA 64x128 w4 s3", True, True, 64, 128, 4, 3),
    ("fold+TMA 128x64 w4 s3", True, True, 128, 64, 4, 3),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rep", type=int, default=200)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    batch, heads, seq_len, head_dim = 4, 16, 4096, 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq_len, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
    q3, k3, v3 = (t.reshape(batch * heads, seq_len, head_dim) for t in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v).reshape(batch * heads, seq_len, head_dim)
    flops = 4 * batch * heads * seq_len * seq_len * head_dim
    from triton.testing import do_bench

    rows = [{"variant": "torch SDPA", "ms": do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v),
                                                     warmup=25, rep=args.rep)}]
    for label, fold, tma, bm, bn, warps, stages in VARIANTS:
        out = torch.empty_like(q3)
        row = {"variant": label}
        try:
            run(q3, k3, v3, out, fold, tma, bm, bn, warps, stages)
            torch.cuda.synchronize()
            row["max_abs_err"] = float((out.float() - expected.float()).abs().max())
            if row["max_abs_err"] > 2e-2:
                row["error"] = f"wrong: max abs err {row['max_abs_err']:.3g}"
            else:
                row["ms"] = do_bench(lambda: run(q3, k3, v3, out, fold, tma, bm, bn, warps, stages), warmup=25,
                                     rep=args.rep)
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a finding
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:200]
        rows.append(row)
        print(json.dumps(row), flush=True)
    for row in rows:
        if row.get("ms"):
            row["tflops"] = flops / row["ms"] / 1e9
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "problem": f"{batch}x{heads}x{seq_len}x{head_dim} fp16",
            "rows": rows}
    (args.out / "flash_tma.json").write_text(json.dumps(info, indent=1))
    base = rows[1].get("ms")
    lines = [f"# Flash kernel sweep: TMA, scale folding, tiles ({info['device']})", "",
             f"torch {info['torch']}, triton {info['triton']}, {info['utc']} UTC; attention {info['problem']}, "
             "non-causal; `python3 benchmarks/flash_tma_gpu.py --out DIR`. Median of do_bench (L2 flushed).", "",
             "| variant | ms | TFLOP/s | x engine | error |", "|---|---:|---:|---:|---|"]
    for row in rows:
        ms = row.get("ms")
        cells = [f"{ms:.4f}", f"{row['tflops']:.0f}", f"{base / ms:.2f}x" if base else "-"] if ms else ["-"] * 3
        lines.append(f"| {row['variant']} | {' | '.join(cells)} | {row.get('error', '')} |")
    (args.out / "flash_tma.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
