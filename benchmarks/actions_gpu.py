"""Time each optimization action before/after on the GPU: a matmul, a softmax and elementwise kernels.

Two modes, because the GPU machine has no libcst:
- ``python3 benchmarks/actions_gpu.py --generate`` (any machine with the project installed): apply
  every applicable action (first candidate of each, all tiling candidates) and a few expert chains
  to the corpus files, and write the resulting sources plus ``manifest.json`` to
  ``benchmarks/generated/`` (committed).
- ``python3 benchmarks/actions_gpu.py --out DIR`` (the GPU machine): load those sources, check each
  against PyTorch, time it with ``triton.testing.do_bench`` (median), and print/write the table.
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
sys.path.insert(0, str(ROOT / "tests"))
from corpus.kernels import kernel_path  # noqa: E402  (each corpus kernel, wherever it lives)

GENERATED = ROOT / "benchmarks" / "generated"
TARGET = "h200"

# Corpus file -> GPU sizes (get_inputs keyword arguments), work per call and its unit.
PROBLEMS: dict[str, dict] = {
    "matmul": {"sizes": {"m": 4096, "n": 4096, "k": 4096}, "work": 2 * 4096**3, "unit": "TFLOP/s", "tol": (2e-2, 5e-2)},
    "softmax": {"sizes": {"rows": 32768, "cols": 4096}, "work": 2 * 32768 * 4096 * 4, "unit": "GB/s", "tol": (1e-4, 1e-6)},
    "elementwise": {"sizes": {"n": 1 << 26}, "work": 3 * (1 << 26) * 4, "unit": "GB/s", "tol": (1e-5, 1e-6)},
    "gelu_bias": {"sizes": {"n": 1 << 26}, "work": 4 * (1 << 26) * 4, "unit": "GB/s", "tol": (1e-5, 1e-6)},
    "epilogue": {"sizes": {"n": 1 << 26}, "work": 3 * (1 << 26) * 4, "unit": "GB/s", "tol": (1e-5, 1e-6)},
}
# Expert chains (docs/measurements.md's measured route for a matmul; one read per row for softmax; wide
# blocks and fusion for elementwise). Each step: (action, kernel, params); params None = first offered.
CHAINS: dict[str, list[tuple[str, str, dict | None]]] = {
    # Tiling offers a tile together with the warps it needs (num_warps=8 for these tiles on sm_90).
    "matmul": [
        ("tiling", "matmul_kernel", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8}),
        ("pipelining", "matmul_kernel", {"num_stages": 3}),
        ("reordering", "matmul_kernel", {"GROUP_M": 8}),
    ],
    # The same route without the spilling 128x256 tile (compiling for sm_90 here: 128x256x64 over 8
    # warps spills ~520 bytes per thread in this kernel; 128x128x64 over 8 warps does not spill).
    "matmul:d": [
        ("tiling", "matmul_kernel", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8}),
        ("pipelining", "matmul_kernel", {"num_stages": 4}),
        ("reordering", "matmul_kernel", {"GROUP_M": 8}),
    ],
    "softmax": [
        ("single_pass", "softmax_kernel", {}),
        ("warps", "softmax_kernel", {"num_warps": 8}),
    ],
    "elementwise": [
        ("tiling", "add_relu_kernel", {"BLOCK_SIZE": 4096}),
        ("warps", "add_relu_kernel", {"num_warps": 8}),
    ],
    "epilogue": [
        ("epilogue", "axpy_kernel", {"op": "gelu"}),
        ("tiling", "axpy_kernel", {"BLOCK_SIZE": 4096}),
        ("warps", "axpy_kernel", {"num_warps": 8}),
    ],
    "gelu_bias": [
        ("fusion", "scale_bias_kernel", {"consumer": "gelu_kernel"}),
        ("tiling", "scale_bias_kernel", {"BLOCK_SIZE": 4096}),
        ("warps", "scale_bias_kernel", {"num_warps": 8}),
    ],
}


# ---- generation (needs libcst: run where the project is installed) ---------------------------------
def generate() -> int:
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.actions.base import Candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile(TARGET)
    manifest = []
    for name in PROBLEMS:
        folder = GENERATED / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.py"):
            old.unlink()
        base = kernel_path(name).read_text()
        entries = [("00_base", base, None, None)]
        analysis = analyze(base)
        index = 1
        for kernel in analysis.kernels:
            seen: set[str] = set()
            for cand in applicable(analysis, kernel, target):
                if cand.action in seen and cand.action != "tiling":
                    continue
                seen.add(cand.action)
                edit = apply_candidate(base, cand, target)
                if any(edit.new_text == e[1] for e in entries):
                    continue  # the same source through another kernel (a shared host constant)
                entries.append((f"{index:02d}_{cand.action}", edit.new_text, "00_base", (cand, edit)))
                index += 1
        for chain_name, chain in CHAINS.items():
            if chain_name.split(":")[0] == name:
                _chain(entries, chain_name, chain, base, target)
        for variant, source, parent_name, info in entries:

            path = folder / f"{variant}.py"
            path.write_text(source)
            cand, edit = info if info else (Candidate("base", "-", "-", {}, "unchanged corpus file", 0), None)
            manifest.append({
                "problem": name, "variant": variant, "path": str(path.relative_to(ROOT)), "parent": parent_name,
                "chain": not variant[0].isdigit(), "action": cand.action, "kernel": cand.kernel, "params": cand.params,
                "title": cand.title, "changed_lines": edit.changed_lines if edit else 0,
            })
    (GENERATED / "manifest.json").write_text(json.dumps({"target": TARGET, "variants": manifest}, indent=1) + "\n")
    print(f"wrote {len(manifest)} variants to {GENERATED.relative_to(ROOT)}")
    return 0


def _chain(entries: list, chain_name: str, chain: list, base: str, target) -> None:
    """Apply one expert chain step by step; each step's variant is ``<letter><step>_<action>``."""
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze

    letter = chain_name.split(":")[1] if ":" in chain_name else "c"
    text, parent = base, "00_base"
    for step, (action, kernel, params) in enumerate(chain, 1):
        offered = [c for c in applicable(analyze(text), kernel, target) if c.action == action]
        chosen = next((c for c in offered if params is None or c.params == params), None)
        if chosen is None:
            raise SystemExit(f"{chain_name}: step {action} {params} not offered; offered {[c.params for c in offered]}")
        edit = apply_candidate(text, chosen, target)
        variant = f"{letter}{step}_{action}"
        entries.append((variant, edit.new_text, parent, (chosen, edit)))
        text, parent = edit.new_text, variant


# ---- timing (the GPU machine) -----------------------------------------------------------------------
def load(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"bench_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench(out_dir: Path, only: set[str] | None, rep: int, dry_run: bool = False) -> int:
    if dry_run:  # CPU check of this script: Triton's interpreter, small default shapes, one timed call
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    if dry_run:
        from triton.runtime import autotuner

        autotuner.Autotuner.do_bench = property(lambda self: (lambda fn, quantiles: (fn(), [1.0] * len(quantiles))[1]))

        def do_bench(fn, warmup=0, rep=0, return_mode="median"):
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
    else:
        from triton.testing import do_bench
    device = "cpu" if dry_run else "cuda"

    manifest = json.loads((GENERATED / "manifest.json").read_text())
    results = []
    inputs_cache: dict[str, list] = {}
    refs: dict[str, object] = {}
    for entry in manifest["variants"]:
        name = entry["problem"]
        if only and name not in only:
            continue
        spec = PROBLEMS[name]
        row = {**entry, "ok": False, "ms": None, "rate": None, "error": None}
        try:
            module = load(ROOT / entry["path"], f"{name}_{entry['variant']}")
            if name not in inputs_cache:
                torch.manual_seed(0)
                inputs_cache[name] = module.get_inputs(device=device, **({} if dry_run else spec["sizes"]))
                refs[name] = module.reference(*inputs_cache[name])
            inputs = inputs_cache[name]
            fn = getattr(module, module.ENTRY)
            t0 = time.perf_counter()
            out = fn(*inputs)  # compiles (and autotunes) once, outside the timing
            if not dry_run:
                torch.cuda.synchronize()
            row["first_call_s"] = time.perf_counter() - t0
            rtol, atol = spec["tol"]
            ref = refs[name]
            row["max_abs_err"] = float((out.double() - ref.double()).abs().max())
            if not torch.allclose(out.double(), ref.double(), rtol=rtol, atol=atol):
                row["error"] = f"wrong result: max abs err {row['max_abs_err']:.3g}"
            else:
                row["ms"] = do_bench(lambda: fn(*inputs), warmup=25, rep=rep, return_mode="median")
                scale = 1e12 if spec["unit"] == "TFLOP/s" else 1e9
                row["rate"] = spec["work"] / (row["ms"] * 1e-3) / scale
                row["ok"] = True
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result, not a crash
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        results.append(row)
        print(f"{name:12s} {entry['variant']:16s} {row['ms'] if row['ms'] else float('nan'):9.4f} ms  {row['error'] or ''}", flush=True)
    by_key = {(r["problem"], r["variant"]): r for r in results}
    for r in results:
        parent = by_key.get((r["problem"], r["parent"])) if r["parent"] else None
        base = by_key.get((r["problem"], "00_base"))
        r["speedup_vs_parent"] = parent["ms"] / r["ms"] if r["ok"] and parent and parent.get("ms") else None
        r["speedup_vs_base"] = base["ms"] / r["ms"] if r["ok"] and base and base.get("ms") else None
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": "CPU interpreter (dry run)" if dry_run else torch.cuda.get_device_name(0), "python": platform.python_version(),
        "torch": torch.__version__, "triton": triton.__version__, "target_profile": manifest["target"],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "actions_gpu.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    table = render(meta, results)
    (out_dir / "actions_gpu.md").write_text(table)
    print(table)
    return 0


def render(meta: dict, results: list[dict]) -> str:
    lines = [
        f"# Actions before/after on {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, {meta['date']})",
        "",
        "Median of triton.testing.do_bench; every variant checked against PyTorch first. `c<N>`/`d<N>` rows are",
        "expert chains (each step applied to the row before it); numbered rows apply one action to the corpus file.",
        "",
        "| problem | variant | action (title) | lines | ms | rate | x vs before | x vs base |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        unit = PROBLEMS[r["problem"]]["unit"]
        ms = f"{r['ms']:.4f}" if r["ok"] else (r["error"] or "failed")[:60]
        rate = f"{r['rate']:.0f} {unit}" if r["ok"] else "-"
        sp = f"{r['speedup_vs_parent']:.2f}" if r.get("speedup_vs_parent") else "-"
        sb = f"{r['speedup_vs_base']:.2f}" if r.get("speedup_vs_base") else "-"
        lines.append(f"| {r['problem']} | {r['variant']} | {r['title']} | {r['changed_lines']} | {ms} | {rate} | {sp} | {sb} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", action="store_true", help="write benchmarks/generated/ (needs libcst)")
    parser.add_argument("--out", default="actions-gpu-out", help="folder for actions_gpu.json / .md")
    parser.add_argument("--only", default="", help="comma-separated problems (matmul,softmax,elementwise,gelu_bias,epilogue)")
    parser.add_argument("--rep", type=int, default=200, help="do_bench repetition time in ms")
    parser.add_argument("--dry-run", action="store_true", help="check the script on the CPU (interpreter, small shapes)")
    args = parser.parse_args()
    if args.generate:
        return generate()
    only = {p for p in args.only.split(",") if p} or None
    return bench(Path(args.out), only, args.rep, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
