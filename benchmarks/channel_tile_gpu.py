"""Time the engine's channel_tile edits against the channel-loop kernels they rewrite, over several channel counts.

Two modes, as in mask_free_k_gpu.py (the GPU machine has no libcst):
- ``python benchmarks/channel_tile_gpu.py --generate``: apply ``channel_tile`` to the dev KernelBench RMS norm
  (``benchmarks/wild/dev/norm_rmsnorm_kernelbench.py``) and the corpus channel layer norm
  (``tests/corpus/kernels/channel_norm.py``), write both versions and ``manifest.json`` to
  ``benchmarks/generated/channel_tile/`` (committed).
- ``python3 benchmarks/channel_tile_gpu.py --out DIR`` (the GPU machine): for each problem and channel count, check
  the loop version and the tile version against PyTorch, time each with ``triton.testing.do_bench`` (median), and
  write ``channel_tile.md``/``.json``. ``--dry-run`` runs it in the interpreter at tiny sizes (checks the script).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "benchmarks" / "generated" / "channel_tile"
TARGET = "h200"
PROBLEMS = {  # name -> (source, kernel)
    "rmsnorm_kernelbench": ("benchmarks/wild/dev/norm_rmsnorm_kernelbench.py", "rms_norm_channels_kernel"),
    "channel_layernorm": ("tests/corpus/kernels/channel_norm.py", "channel_norm_kernel"),
}
# (batch, channels, height, width): KernelBench's RMS norm shape (32 channels), then fewer and more channels;
# at 256 channels and more the host caps BLOCK_S below the file's 256 (8192 // BLOCK_C).
GPU_SHAPES = [(16, 3, 256, 256), (16, 32, 256, 256), (16, 64, 256, 256), (16, 128, 128, 128), (8, 512, 64, 64),
              (4, 2048, 32, 32)]
DRY_SHAPES = [(2, 5, 7, 11), (1, 40, 3, 5)]
TOL = (1e-4, 1e-4)


def generate() -> int:
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile(TARGET)
    GENERATED.mkdir(parents=True, exist_ok=True)
    entries = []
    for problem, (path, kernel) in PROBLEMS.items():
        text = (ROOT / path).read_text()
        (candidate,) = [c for c in applicable(analyze(text), kernel, target) if c.action == "channel_tile"]
        for variant, source in (("loop", text), ("channel_tile", apply_candidate(text, candidate, target).new_text)):
            out = GENERATED / f"{problem}_{variant}.py"
            out.write_text(source)
            entries.append({"problem": problem, "variant": variant, "path": str(out.relative_to(ROOT)), "source": path})
    (GENERATED / "manifest.json").write_text(json.dumps({"target": TARGET, "variants": entries}, indent=1) + "\n")
    print(f"wrote {len(entries)} files to {GENERATED.relative_to(ROOT)}")
    return 0


def load(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"ct_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runner(module, problem: str, channels: int, device: str):
    """(the file's Triton call, PyTorch's result for the same input) for one problem at ``channels``."""
    import torch

    if problem == "rmsnorm_kernelbench":
        model = module.ModelNew(channels)
        return (lambda x: model(x)), (lambda x: module.Model(channels)(x))
    w = torch.randn(channels, device=device)
    return (lambda x: module.channel_norm(x, w)), (lambda x: module.reference(x, w))


def bench(out_dir: Path, rep: int, dry_run: bool) -> int:
    if dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    if dry_run:
        def do_bench(fn, warmup=0, rep=0, return_mode="median"):
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
    else:
        from triton.testing import do_bench
    device = "cpu" if dry_run else "cuda"
    manifest = json.loads((GENERATED / "manifest.json").read_text())
    results = []
    for index, entry in enumerate(manifest["variants"]):
        module = load(ROOT / entry["path"], str(index))
        for shape in DRY_SHAPES if dry_run else GPU_SHAPES:
            row = {**entry, "shape": list(shape), "ok": False, "ms": None, "torch_ms": None, "error": None}
            try:
                torch.manual_seed(0)
                x = torch.randn(*shape, device=device)
                fn, reference = runner(module, entry["problem"], shape[1], device)
                out, want = fn(x), reference(x)  # compiles once, outside the timing
                row["max_abs_err"] = float((out.double() - want.double()).abs().max())
                if not torch.allclose(out, want, rtol=TOL[0], atol=TOL[1]):
                    row["error"] = f"wrong result: max abs err {row['max_abs_err']:.3g}"
                else:
                    row["ms"] = do_bench(lambda: fn(x), warmup=25, rep=rep, return_mode="median")
                    row["torch_ms"] = do_bench(lambda: reference(x), warmup=25, rep=rep, return_mode="median")
                    row["ok"] = True
            except Exception as exc:  # noqa: BLE001 - a failing variant is a result, not a crash
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            results.append(row)
            print(f"{entry['problem']:20s} {entry['variant']:13s} {str(shape):22s} {row['ms'] or float('nan'):9.4f} ms  "
                  f"{row['error'] or ''}", flush=True)
    loop = {(r["problem"], tuple(r["shape"])): r["ms"] for r in results if r["variant"] == "loop" and r["ok"]}
    for r in results:
        base = loop.get((r["problem"], tuple(r["shape"])))
        r["x_loop"] = base / r["ms"] if r["ok"] and base else None
        r["x_torch"] = r["torch_ms"] / r["ms"] if r["ok"] else None
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
            "gpu": "CPU interpreter (dry run)" if dry_run else torch.cuda.get_device_name(0),
            "torch": torch.__version__, "triton": triton.__version__}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "channel_tile.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    lines = [f"# channel_tile, {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, {meta['date']})", "",
             "The loop version (one [BLOCK_S] load per channel per pass) and the engine's channel_tile edit of it; fp32 "
             "[B, C, H, W]. Median of `triton.testing.do_bench` of the host call; each checked against PyTorch first "
             "(x torch: PyTorch eager time / this time).",
             "", "| problem | variant | shape | ms | x loop | x torch | error |", "|---|---|---|---:|---:|---:|---|"]
    fmt = lambda v, spec: format(v, spec) if v is not None else ""  # noqa: E731
    for r in results:
        lines.append(f"| {r['problem']} | {r['variant']} | {'x'.join(map(str, r['shape']))} | {fmt(r['ms'], '.4f')} | "
                     f"{fmt(r['x_loop'], '.3f')} | {fmt(r['x_torch'], '.3f')} | {r['error'] or ''} |")
    (out_dir / "channel_tile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", action="store_true", help="write the variants (needs the project's libcst)")
    parser.add_argument("--out", type=Path, help="time the generated variants and write the table here")
    parser.add_argument("--rep", type=int, default=200, help="do_bench's rep (ms)")
    parser.add_argument("--dry-run", action="store_true", help="the interpreter at tiny sizes")
    args = parser.parse_args(argv)
    if args.generate:
        return generate()
    if args.out is None:
        parser.error("--generate or --out DIR")
    return bench(args.out, args.rep, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
