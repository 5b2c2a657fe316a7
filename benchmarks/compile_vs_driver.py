"""Do the offline compile numbers (no GPU, GPUTarget) match what the driver compiles on a real GPU?

For a few corpus kernels, compile each config twice on the GPU machine:
- offline: ``optimizer.compile.compile_kernel`` (worker process, ``GPUTarget("cuda", arch, 32)``,
  the runtime-like specialization MTMC-LSP uses), exactly as on the CPU-only machine;
- driver: ``JITFunction.warmup`` with real CUDA tensors (16-byte aligned, sizes multiple of 16,
  unit strides), then the loaded kernel's ``n_regs`` / ``n_spills`` / ``metadata.shared``.

Run from the repo root: ``python3 benchmarks/compile_vs_driver.py --out DIR``. Prints a table and
writes ``compile_vs_driver.json`` to DIR.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "realworld"

# (file, kernel, constexprs, num_warps, num_stages)
CASES = [
    (CORPUS / "vector_add.py", "add_kernel", {"BLOCK_SIZE": 1024}, 4, 3),
    (CORPUS / "rms_norm_bf16.py", "rms_norm_kernel", {"BLOCK_N": 4096}, 8, 3),
    (CORPUS / "layernorm.py", "_layer_norm_fwd_fused", {"BLOCK_SIZE": 1024}, 4, 3),
    (CORPUS / "static_range_unroll.py", "polynomial", {"DEGREE": 3, "BLOCK": 512}, 4, 3),
    (ROOT / "mtmc_lsp" / "examples" / "matmul.py", "matmul_kernel",
     {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}, 4, 1),
    (CORPUS / "matmul_autotune.py", "matmul_kernel",
     {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "ACTIVATION": "",
      "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}, 8, 3),
    (CORPUS / "matmul_autotune.py", "matmul_kernel",
     {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8, "ACTIVATION": "",
      "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}, 4, 4),
]
DTYPES = {"*fp16": "float16", "*fp32": "float32", "*bf16": "bfloat16", "*i32": "int32", "*i64": "int64"}


def _driver(path: Path, kernel: str, signature: dict, constexprs: dict, num_warps: int, num_stages: int) -> dict:
    import torch

    spec = importlib.util.spec_from_file_location(f"corpus_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, kernel)
    from triton.runtime.jit import JITFunction

    while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):  # autotune/heuristics wrappers
        fn = fn.fn
    values = dict(constexprs)  # constexprs and specialized unit strides, by name
    for name, kind in signature.items():
        if name in values:
            continue
        if kind.startswith("*"):
            values[name] = torch.zeros(1 << 20, dtype=getattr(torch, DTYPES.get(kind, "float32")), device="cuda")
        elif kind.startswith("fp"):
            values[name] = 0.5
        else:
            values[name] = 4096  # a multiple of 16, as the offline compile assumes
    start = time.perf_counter()
    compiled = fn.warmup(grid=(1,), num_warps=num_warps, num_stages=num_stages, **values)
    compiled._init_handles()
    return {
        "registers": compiled.n_regs, "spills": compiled.n_spills, "shared_bytes": compiled.metadata.shared,
        "compile_s": round(time.perf_counter() - start, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder for compile_vs_driver.json")
    args = parser.parse_args()
    import torch
    import triton

    from mtmc_lsp.optimizer.compile import compile_kernel
    from mtmc_lsp.optimizer.hardware import get_profile, resolve_target

    target = resolve_target("") if torch.cuda.is_available() else get_profile("h200")
    rows = []
    for path, kernel, constexprs, warps, stages in CASES:
        text = path.read_text()
        offline = compile_kernel(text, kernel, constexprs, target, num_warps=warps, num_stages=stages, cache_dir=None)
        row = {"file": path.name, "kernel": kernel, "constexprs": constexprs, "num_warps": warps, "num_stages": stages,
               "offline": offline.to_json()}
        if offline.ok and torch.cuda.is_available():
            try:
                row["driver"] = _driver(path, kernel, offline.signature, constexprs, warps, stages)
            except Exception as exc:  # noqa: BLE001 - report and go on
                row["driver"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        rows.append(row)
    result = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "target": target.key, "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_vs_driver.json").write_text(json.dumps(result, indent=2, default=str))
    print(f"{result['gpu']}  triton {result['triton']}  target {target.key}")
    print(f"{'kernel':28s} {'config':34s} {'regs off/drv':>13s} {'spill off/drv':>14s} {'shared off/drv':>17s} {'s off/drv':>11s}")
    for row in rows:
        off, drv = row["offline"], row.get("driver") or {}
        config = ",".join(f"{v}" for k, v in row["constexprs"].items() if not k.startswith("stride"))
        config = f"{config} w{row['num_warps']} s{row['num_stages']}"
        if off["status"] != "ok":
            print(f"{row['kernel']:28s} {config:34s} offline {off['status']}: {off['error']}")
            continue
        if "error" in drv:
            print(f"{row['kernel']:28s} {config:34s} driver failed: {drv['error']}")
            continue
        print(f"{row['kernel']:28s} {config:34s} {off['registers']:>6}/{drv.get('registers', '-'):<6} "
              f"{off['spills']:>7}/{drv.get('spills', '-'):<6} {off['shared_bytes']:>8}/{drv.get('shared_bytes', '-'):<8} "
              f"{off['compile_s']:>5}/{drv.get('compile_s', '-')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
