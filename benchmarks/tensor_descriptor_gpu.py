"""Time the engine's own tensor_descriptor edits on the suite's matmuls: pointer loads against TMA descriptor loads.

Two modes, as in mask_free_k_gpu.py (the GPU machine has no libcst):
- ``python benchmarks/tensor_descriptor_gpu.py --generate``: on each suite matmul apply the engine's tiling
  (128x256x64, 8 warps) and 3 stages, then each variant (``tensor_descriptor``, ``reordering`` GROUP_M=8, both;
  ``mask_free_k`` GROUP_M=8, the step the heuristic ranks just above it), written with ``manifest.json`` to
  ``benchmarks/generated/tensor_descriptor/`` (committed). The suite's inputs are contiguous and 16-byte aligned,
  so each launch's ``USE_TMA`` check is true and the descriptor branch is what runs.
- ``python3 benchmarks/tensor_descriptor_gpu.py --out DIR`` (the GPU machine): check each variant against the file's
  reference, time its host function with ``triton.testing.do_bench`` (median), write ``tensor_descriptor.md``/``.json``.
  ``--dry-run`` runs it in the interpreter on the CPU sizes (checks the script, times nothing real).
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
import _bootstrap  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "benchmarks" / "generated" / "tensor_descriptor"
TARGET = "h200"
# Suite file -> (path, kernel); the sizes are the files' own GPU sizes (8192-size fp16 matmuls).
PROBLEMS = {
    "matmul": ("mtmc_lsp/examples/matmul.py", "matmul_kernel"),
    "matmul_transposed": ("benchmarks/suite/matmul_transposed.py", "matmul_bt_kernel"),
    "linear_gelu": ("benchmarks/suite/linear_gelu.py", "linear_kernel"),
    "bmm": ("benchmarks/suite/bmm.py", "bmm_kernel"),
}
BASE = [("tiling", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8}), ("pipelining", {"num_stages": 3})]
VARIANTS = {  # name -> steps after BASE
    "pointer loads": [],
    "descriptors": [("tensor_descriptor", {})],
    "grouped": [("reordering", {"GROUP_M": 8})],
    "grouped+descriptors": [("reordering", {"GROUP_M": 8}), ("tensor_descriptor", {})],  # as suite_tiles_gpu.py's TMA kernel
    "grouped+unmasked": [("mask_free_k", {"GROUP_M": 8})],  # mask_free_k_gpu.py's best: the alternative to descriptors
}
TOL = (2e-2, 5e-2)  # rtol, atol: fp16 output of a K=4096-8192 sum against an fp32 reference


def generate() -> int:
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile(TARGET)
    GENERATED.mkdir(parents=True, exist_ok=True)
    entries = []
    for problem, (path, kernel) in PROBLEMS.items():
        for index, (variant, steps) in enumerate(VARIANTS.items()):
            text = (ROOT / path).read_text()
            try:
                for action, params in BASE + steps:
                    chosen = next((c for c in applicable(analyze(text), kernel, target)
                                   if c.action == action and c.params == params), None)
                    if chosen is None:
                        raise LookupError(f"{action} {params} not offered")
                    text = apply_candidate(text, chosen, target).new_text
            except LookupError as exc:
                print(f"{problem}: {variant} skipped ({exc})")
                continue
            out = GENERATED / f"{problem}_{index}.py"
            out.write_text(text)
            entries.append({"problem": problem, "variant": variant, "path": str(out.relative_to(ROOT)),
                            "entry": Path(path).stem, "steps": [a for a, _ in BASE + steps]})
    (GENERATED / "manifest.json").write_text(json.dumps({"target": TARGET, "variants": entries}, indent=1) + "\n")
    print(f"wrote {len(entries)} variants to {GENERATED.relative_to(ROOT)}")
    return 0


def load(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"tma_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    results, inputs, refs = [], {}, {}
    for index, entry in enumerate(manifest["variants"]):
        problem = entry["problem"]
        row = {**entry, "ok": False, "ms": None, "error": None}
        try:
            module = load(ROOT / entry["path"], str(index))
            if problem not in inputs:
                torch.manual_seed(0)
                inputs[problem] = module.get_inputs(device=device)
                refs[problem] = module.reference(*inputs[problem])
            fn = getattr(module, entry["entry"])
            out = fn(*inputs[problem])  # compiles once, outside the timing
            row["max_abs_err"] = float((out.double() - refs[problem].double()).abs().max())
            if not torch.allclose(out.double(), refs[problem].double(), rtol=TOL[0], atol=TOL[1]):
                row["error"] = f"wrong result: max abs err {row['max_abs_err']:.3g}"
            else:
                row["ms"] = do_bench(lambda fn=fn, args=inputs[problem]: fn(*args), warmup=25, rep=rep, return_mode="median")
                row["ok"] = True
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result, not a crash
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        results.append(row)
        print(f"{problem:18s} {entry['variant']:22s} {row['ms'] or float('nan'):9.4f} ms  {row['error'] or ''}", flush=True)
    pointer = {r["problem"]: r["ms"] for r in results if r["variant"] == "pointer loads" and r["ok"]}
    grouped = {r["problem"]: r["ms"] for r in results if r["variant"] == "grouped" and r["ok"]}
    for r in results:
        r["x_pointer"] = pointer[r["problem"]] / r["ms"] if r["ok"] and r["problem"] in pointer else None
        r["x_grouped"] = grouped[r["problem"]] / r["ms"] if r["ok"] and r["problem"] in grouped else None
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
            "gpu": "CPU interpreter (dry run)" if dry_run else torch.cuda.get_device_name(0),
            "torch": torch.__version__, "triton": triton.__version__}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tensor_descriptor.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    title = (f"# tensor_descriptor on the suite's matmuls, {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, "
             f"{meta['date']})")
    lines = [title, "",
             ("The engine's own edits: tiling 128x256x64 (8 warps) and 3 stages, then each variant. Median of "
              "`triton.testing.do_bench` of the host function; each variant checked against the file's reference first."), "",
             "| problem | variant | ms | x pointer loads | x grouped | error |", "|---|---|---:|---:|---:|---|"]
    for r in results:
        fmt = lambda v, spec: format(v, spec) if v is not None else ""
        lines.append(f"| {r['problem']} | {r['variant']} | {fmt(r['ms'], '.4f')} | {fmt(r['x_pointer'], '.3f')} | "
                     f"{fmt(r['x_grouped'], '.3f')} | {r['error'] or ''} |")
    (out_dir / "tensor_descriptor.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", action="store_true", help="write the variants (needs the project's libcst)")
    parser.add_argument("--out", type=Path, help="time the generated variants and write the table here")
    parser.add_argument("--rep", type=int, default=200, help="do_bench's rep (ms)")
    parser.add_argument("--dry-run", action="store_true", help="the interpreter on the CPU sizes")
    args = parser.parse_args(argv)
    if args.generate:
        return generate()
    if args.out is None:
        parser.error("--generate or --out DIR")
    return bench(args.out, args.rep, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
