"""Tile sweep of an fp32 matmul whose tl.dot is pinned to IEEE precision (FMA units, not tensor cores).

``python3 benchmarks/fma_tiles_gpu.py --out DIR`` (GPU): for each problem and each (BLOCK_M, BLOCK_N, BLOCK_K,
num_warps, num_stages) it checks the kernel against an fp64 product and times it with ``triton.testing.do_bench``
(median, L2 flushed), beside torch.matmul in fp32 with TF32 off. The tiling action's wgmma-sized tiles (128 x 256 x 64)
ran such a kernel 3x slower on the H200 (results/h200/wild_dev_session13: mm_fp32_ieee_test): this sweep says which
tiles suit FMA dots, for the tiling table.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def sgemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


PROBLEMS = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 1024, 1024))
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
CONFIGS = [
    (32, 32, 16, 4, 2), (64, 64, 16, 4, 2), (64, 64, 32, 4, 2), (64, 64, 8, 4, 3), (64, 64, 32, 4, 3),
    (128, 64, 16, 4, 2), (64, 128, 16, 4, 2), (128, 64, 32, 4, 3), (128, 128, 16, 8, 2), (128, 128, 8, 8, 3),
    (128, 128, 32, 8, 2), (128, 128, 16, 4, 2), (64, 64, 16, 2, 2), (32, 64, 32, 4, 2), (64, 32, 32, 4, 2),
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 3),
]


def run(out: Path) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for m, n, k in PROBLEMS:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", generator=gen)
        b = torch.randn(k, n, device="cuda", generator=gen)
        expect = (a.double() @ b.double()).float()
        torch_ms = triton.testing.do_bench(lambda: torch.matmul(a, b))
        flops = 2 * m * n * k
        for bm, bn, bk, warps, stages in CONFIGS:
            c = torch.empty(m, n, device="cuda")
            grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))

            def call():
                sgemm_kernel[grid](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0),
                                   BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)

            row = {"problem": [m, n, k], "tile": [bm, bn, bk], "num_warps": warps, "num_stages": stages,
                   "torch_ms": torch_ms}
            try:
                call()
                torch.cuda.synchronize()
                row["max_abs_err"] = float((c - expect).abs().max())
                ms = triton.testing.do_bench(call)
                row.update(ms=ms, tflops=flops / ms / 1e9, x_torch=torch_ms / ms)
            except Exception as exc:  # noqa: BLE001 - out of resources for one tile is a result, not a stop
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {
        "what": "fp32 IEEE tl.dot matmul, tile sweep", "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "fma_tiles.json").write_text(json.dumps(result, indent=1))
    lines = [f"# fp32 IEEE tl.dot tiles on {result['device']}", "",
             f"torch {result['torch']}, triton {result['triton']}; {result['time']}. x torch = torch.matmul fp32 "
             "(TF32 off) time / kernel time.", "",
             "| problem | tile | warps | stages | ms | TFLOP/s | x torch | max abs err |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        p, t = "x".join(map(str, r["problem"])), "x".join(map(str, r["tile"]))
        if "error" in r:
            lines.append(f"| {p} | {t} | {r['num_warps']} | {r['num_stages']} | {r['error'][:60]} | | | |")
        else:
            lines.append(f"| {p} | {t} | {r['num_warps']} | {r['num_stages']} | {r['ms']:.4f} | {r['tflops']:.1f} | "
                         f"{r['x_torch']:.2f} | {r['max_abs_err']:.1e} |")
    (out / "fma_tiles.md").write_text("\n".join(lines) + "\n")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("fma-tiles"))
    run(parser.parse_args().out)
