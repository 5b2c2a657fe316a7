"""Time the engine's channel_tile edits against the channel-loop kernels they rewrite, over several channel counts.

Two modes (``_variants.py``; the GPU machine has no libcst):
- ``python benchmarks/channel_tile_gpu.py --generate``: apply ``channel_tile`` to the dev KernelBench RMS norm
  (``benchmarks/wild/dev/norm_rmsnorm_kernelbench.py``) and the corpus channel layer norm
  (``tests/corpus/kernels/channel_norm.py``), write both versions and ``manifest.json`` to
  ``benchmarks/generated/channel_tile/`` (committed).
- ``python3 benchmarks/channel_tile_gpu.py --out DIR`` (the GPU machine): for each problem and channel count, check
  the loop version and the tile version against PyTorch, time each with ``triton.testing.do_bench`` (median), and
  write ``channel_tile.md``/``.json``. ``--dry-run`` runs it in the interpreter at tiny sizes (checks the script).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401
import _variants as v

ROOT = v.ROOT
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
    GENERATED.mkdir(parents=True, exist_ok=True)
    entries = []
    for problem, (path, kernel) in PROBLEMS.items():
        text = (ROOT / path).read_text()
        for variant, source in (("loop", text), ("channel_tile", v.apply_steps(text, kernel, [("channel_tile", None)],
                                                                                TARGET))):
            out = GENERATED / f"{problem}_{variant}.py"
            out.write_text(source)
            entries.append({"problem": problem, "variant": variant, "path": str(out.relative_to(ROOT)), "source": path})
    v.write_manifest(GENERATED, TARGET, entries)
    return 0


def runner(module, problem: str, channels: int, device: str):
    """(the file's Triton call, PyTorch's result for the same input) for one problem at ``channels``."""
    import torch

    if problem == "rmsnorm_kernelbench":
        model = module.ModelNew(channels)
        return (lambda x: model(x)), (lambda x: module.Model(channels)(x))
    w = torch.randn(channels, device=device)
    return (lambda x: module.channel_norm(x, w)), (lambda x: module.reference(x, w))


def bench(out_dir: Path, rep: int, dry_run: bool) -> int:
    do_bench = v.timer(dry_run)
    import torch

    device = "cpu" if dry_run else "cuda"
    results = []
    for index, entry in enumerate(v.read_manifest(GENERATED)):
        module = v.load(ROOT / entry["path"], f"ct_{index}")
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
                row["error"] = v.error_text(exc)
            results.append(row)
            print(f"{entry['problem']:20s} {entry['variant']:13s} {str(shape):22s} {row['ms'] or float('nan'):9.4f} ms  "
                  f"{row['error'] or ''}", flush=True)
    loop = {(r["problem"], tuple(r["shape"])): r["ms"] for r in results if r["variant"] == "loop" and r["ok"]}
    for r in results:
        base = loop.get((r["problem"], tuple(r["shape"])))
        r["x_loop"] = base / r["ms"] if r["ok"] and base else None
        r["x_torch"] = r["torch_ms"] / r["ms"] if r["ok"] else None
    meta = v.environment(dry_run)
    lines = [f"# channel_tile, {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, {meta['date']})", "",
             "The loop version (one [BLOCK_S] load per channel per pass) and the engine's channel_tile edit of it; fp32 "
             "[B, C, H, W]. Median of `triton.testing.do_bench` of the host call; each checked against PyTorch first "
             "(x torch: PyTorch eager time / this time).",
             "", "| problem | variant | shape | ms | x loop | x torch | error |", "|---|---|---|---:|---:|---:|---|"]
    lines += [f"| {r['problem']} | {r['variant']} | {'x'.join(map(str, r['shape']))} | {v.cell(r['ms'], '.4f')} | "
              f"{v.cell(r['x_loop'], '.3f')} | {v.cell(r['x_torch'], '.3f')} | {r['error'] or ''} |" for r in results]
    v.write_results(out_dir, "channel_tile", meta, results, lines)
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    return v.main(argv, __doc__.splitlines()[0], generate, bench)


if __name__ == "__main__":
    sys.exit(main())
