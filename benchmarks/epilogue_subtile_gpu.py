"""Does a matmul's fused epilogue pay for running in two column halves? The suite's linear_gelu, by hand.

``python3 benchmarks/epilogue_subtile_gpu.py --out DIR`` (a GPU). The engine's final linear_gelu of session 18
(tiles 128x256x64, bias + GELU fused into the persistent matmul) compiles for sm_90 to 255 registers a thread and
500 bytes of spills, where the same kernel without the epilogue (matmul_transposed) needs 214 and none. The files
in ``benchmarks/generated/epilogue_subtile/`` change one thing each: the bias read as one row instead of a masked
[BLOCK_M, BLOCK_N] tile; the epilogue run on two [BLOCK_M, BLOCK_N / 2] halves of the accumulator (``tl.split``,
as Triton's persistent-matmul tutorial's EPILOGUE_SUBTILE; 245 registers, no spills); and both over tensor
descriptor loads. Each file runs in its own process: checked against its float32 reference first, then timed
with ``triton.testing.do_bench`` (median, L2 flushed) in several rounds, beside torch eager and torch.compile.
Writes ``DIR/epilogue_subtile.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "benchmarks" / "generated" / "epilogue_subtile").glob("*.py"))
ROUNDS = 5


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem.lstrip("0123456789_") or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one(label: str) -> dict:
    """Check and time one variant (a file's host function, or torch) in this process."""
    import torch
    from triton.testing import do_bench

    base = load(FILES[0])
    torch.manual_seed(0)
    inputs = base.get_inputs("cuda")
    if label == "torch eager":
        call = base.eager
    elif label.startswith("torch.compile"):
        mode = label.split(" ", 1)[1] if " " in label else None
        call = torch.compile(base.eager, mode=mode)
    else:
        call = load(next(f for f in FILES if f.stem == label)).linear_gelu
    expected = base.reference(*inputs).float()
    got = call(*inputs).float()
    error = float((got - expected).norm() / expected.norm())
    if not error < 1e-2:
        return {"label": label, "error": error, "ms": None}
    times = [do_bench(lambda: call(*inputs), warmup=50, rep=200) for _ in range(ROUNDS)]
    return {"label": label, "error": error, "ms": sorted(times)[len(times) // 2], "rounds": times}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return 0
    import torch
    import triton
    labels = ["torch eager", "torch.compile", "torch.compile max-autotune-no-cudagraphs", *(f.stem for f in FILES)]
    rows = []
    for label in labels:
        run = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--one", label],
                             capture_output=True, text=True, timeout=300)
        last = (run.stdout.strip().splitlines() or [""])[-1]
        try:
            rows.append(json.loads(last))
        except json.JSONDecodeError:
            rows.append({"label": label, "ms": None, "error": (run.stderr.strip().splitlines() or ["?"])[-1][:200]})
        print(rows[-1], flush=True)
    eager = next(r["ms"] for r in rows if r["label"] == "torch eager")
    head = (f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    lines = ["# Fused matmul epilogue in two halves (linear_gelu 8192x8192x4096 fp16)", "", head, "",
             "| variant | ms (median of rounds) | spread | x eager | rel. L2 error |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("ms") is None:
            lines.append(f"| {r['label']} | - | - | - | {r.get('error')} |")
            continue
        spread = (max(r["rounds"]) - min(r["rounds"])) / r["ms"]
        lines.append(f"| {r['label']} | {r['ms']:.4f} | ±{spread / 2:.1%} | {eager / r['ms']:.3f} | {r['error']:.1e} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "epilogue_subtile.json").write_text(json.dumps({"header": head, "rows": rows}, indent=1))
    (args.out / "epilogue_subtile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
