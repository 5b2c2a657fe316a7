"""First look at a GPU machine: versions, the two ceilings, and the bundled examples timed.

Run from the repo root: ``python3 benchmarks/gpu_probe.py --out DIR``. Writes probe.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import _bootstrap  # noqa: F401

import torch
import triton
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]


def ceilings() -> dict:
    n = 1 << 30  # 1 GiB bf16 buffer -> 2 GiB of traffic per copy
    src = torch.randn(n // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    copy_gbs = 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    ms_mm = do_bench(lambda: a @ b, warmup=50, rep=300, return_mode="median")
    return {"copy_gbs": copy_gbs, "bf16_matmul_tflops": 2 * m**3 / (ms_mm * 1e-3) / 1e12, "matmul_ms": ms_mm}


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_example(name: str, host: str, kwargs: dict) -> dict:
    module = load(ROOT / "mtmc_lsp" / "examples" / f"{name}.py")
    inputs = module.get_inputs(device="cuda", **kwargs)
    fn = getattr(module, host)
    out = fn(*inputs)
    ref = module.reference(*inputs)
    err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    ms = do_bench(lambda: fn(*inputs), warmup=25, rep=200, return_mode="median")
    ms2 = do_bench(lambda: fn(*inputs), warmup=25, rep=200, return_mode="median")
    return {"example": name, "sizes": kwargs, "rel_err": err, "ms": ms, "ms_repeat": ms2}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="probe-out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
        capture_output=True, text=True,
    ).stdout.strip()
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "nvidia_smi": smi,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "l2_bytes": getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None),
    }
    try:
        import libcst  # noqa: F401

        result["libcst"] = libcst.__version__ if hasattr(libcst, "__version__") else "present"
    except ImportError:
        result["libcst"] = None
    result["ceilings"] = ceilings()
    result["examples"] = [
        time_example("matmul", "matmul", {"size": 4096}),
        time_example("softmax", "softmax", {"rows": 32768, "cols": 4096}),
        time_example("gelu_bias", "gelu_bias", {"n": 1 << 26}),
    ]
    (out / "probe.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
