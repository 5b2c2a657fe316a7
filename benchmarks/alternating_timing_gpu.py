"""Alternating timing on the GPU: does timing implementations run by run in turn narrow the noise band?

``python3 benchmarks/alternating_timing_gpu.py --out DIR``

Pairs whose true ratio is known or stable, timed by the verifier's ``interleaved`` (CUDA graphs, 5 rounds)
two ways: each implementation under its own ``do_bench`` one after the other (sessions 1-9), and
alternating run by run (``bench_alternating``, session 10). The pairs:

- the same fp16 matmul twice (a true 1.0x), at 8192^3, compute-bound: the clock sinks under its power draw;
- a 128x256x64 and a 128x128x64 Triton tile of that matmul (the suite's rejected 1.13x step);
- the same elementwise add twice at 64 MB (memory-bound, a true 1.0x).

Writes ``DIR/alternating_timing.json`` and ``DIR/alternating_timing.md``: speedup and band per pair and way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: F401
import torch
import triton
import triton.language as tl
from mtmc_lsp.optimizer.verify.runtime import timing
from mtmc_lsp.optimizer.verify.runtime.stats import speedup_stats
from mtmc_lsp.optimizer.verify.runtime.versions import clone_inputs


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))


def tiled(block_n: int, warps: int):
    def call(args):
        a, b = args
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        matmul_kernel[(M // 128, N // block_n)](a, b, c, M, N, K, BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=64,
                                                num_warps=warps, num_stages=3)
        return c

    return call


def matmul_inputs(seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(8192, 8192, device="cuda", dtype=torch.float16, generator=g),
            torch.randn(8192, 8192, device="cuda", dtype=torch.float16, generator=g)]


def add_inputs(seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(16 * 2**20, device="cuda", generator=g), torch.randn(16 * 2**20, device="cuda", generator=g)]


PAIRS = {
    "torch matmul vs itself (8192^3 fp16)": ({"old": lambda a: a[0] @ a[1], "new": lambda a: a[0] @ a[1]}, matmul_inputs),
    "Triton 128x256x64 w8 -> 128x128x64 w4 (8192^3 fp16)": ({"old": tiled(256, 8), "new": tiled(128, 4)}, matmul_inputs),
    "add vs itself (64 MB fp32)": ({"old": lambda a: a[0] + a[1], "new": lambda a: a[0] + a[1]}, add_inputs),
}


def measure(impls, make_inputs, alternating: bool) -> dict:
    saved = timing.bench_round
    if not alternating:  # the sessions 1-9 way: one do_bench per implementation, one after another
        timing.bench_round = lambda calls, w, r: {n: timing.bench_ms(fn, w, r, sync) for n, (fn, sync) in calls.items()}
    try:
        sizing: dict = {}
        started = time.perf_counter()
        rounds = timing.interleaved(impls, make_inputs, 5, 25, 100, True, clone_inputs, lambda m: None,
                                    sizing=sizing, graphs=True)
        stats = speedup_stats(rounds, "old", "new")
    finally:
        timing.bench_round = saved
    return {"speedup": round(stats["speedup"], 4), "band_rel": round(stats["band_rel"], 4),
            "ratios": [round(r, 4) for r in stats["ratios"]], "old_ms": round(stats["baseline_ms"], 4),
            "new_ms": round(stats["candidate_ms"], 4), "method": sizing.get("method"),
            "wall_s": round(time.perf_counter() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, (impls, make_inputs) in PAIRS.items():
        for repeat in (1, 2):
            for alternating in (False, True):
                row = {"pair": name, "way": "alternating" if alternating else "one do_bench each", "repeat": repeat,
                       **measure(impls, make_inputs, alternating)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    (out / "alternating_timing.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    lines = [f"# Alternating timing ({env['gpu']}, torch {env['torch']}, triton {env['triton']})", "",
             "| pair | way | run | speedup | band | ratios per round |", "|---|---|---:|---:|---:|---|"]
    lines += [f"| {r['pair']} | {r['way']} | {r['repeat']} | {r['speedup']:.3f}x | ±{100 * r['band_rel']:.1f}% | "
              f"{', '.join(f'{x:.3f}' for x in r['ratios'])} |" for r in rows]
    (out / "alternating_timing.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
