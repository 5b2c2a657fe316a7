"""Time the engine's own tensor_descriptor edits on the suite's matmuls: pointer loads against TMA descriptor loads.

Two modes (``_variants.py``; the GPU machine has no libcst):
- ``python benchmarks/tensor_descriptor_gpu.py --generate``: on each suite matmul apply the engine's tiling
  (128x256x64, 8 warps) and 3 stages, then each variant (``tensor_descriptor``, ``reordering`` GROUP_M=8, both;
  ``mask_free_k`` alone and with GROUP_M=8, the steps it competes with), written with ``manifest.json`` to
  ``benchmarks/generated/tensor_descriptor/`` (committed). The suite's inputs are contiguous and 16-byte aligned,
  so each launch's ``USE_TMA`` check is true and the descriptor branch is what runs.
- ``python3 benchmarks/tensor_descriptor_gpu.py --out DIR`` (the GPU machine): check each variant against the file's
  reference, time its host function with ``triton.testing.do_bench`` (median), write ``tensor_descriptor.md``/``.json``.
  ``--dry-run`` runs it in the interpreter on the CPU sizes (checks the script, times nothing real).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: F401
import _variants as v

ROOT = v.ROOT
GENERATED = ROOT / "benchmarks" / "generated" / "tensor_descriptor"
TARGET = "h200"
# Suite file -> (path, kernel); the sizes are the files' own GPU sizes (8192-size fp16 matmuls).
PROBLEMS = {
    "matmul": ("mtmc_lsp/examples/matmul.py", "matmul_kernel"),
    "matmul_transposed": ("benchmarks/suite/matmul_transposed.py", "matmul_bt_kernel"),
    "linear_gelu": ("benchmarks/suite/linear_gelu.py", "linear_kernel"),
    "bmm": ("benchmarks/suite/bmm.py", "bmm_kernel"),
}
BASE = [("tiling", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3})]
VARIANTS = {  # name -> steps after BASE
    "pointer loads": [],
    "descriptors": [("tensor_descriptor", {})],
    "grouped": [("reordering", {"GROUP_M": 8})],
    "grouped+descriptors": [("reordering", {"GROUP_M": 8}), ("tensor_descriptor", {})],  # as suite_tiles_gpu.py's TMA kernel
    "grouped+unmasked": [("mask_free_k", {"GROUP_M": 8})],  # mask_free_k's grouped step: the alternative to descriptors
    "unmasked": [("mask_free_k", {})],
}
TOL = (2e-2, 5e-2)  # rtol, atol: fp16 output of a K=4096-8192 sum against an fp32 reference


def generate() -> int:
    return v.generate_suite_variants(GENERATED, TARGET, PROBLEMS, BASE, VARIANTS)


def bench(out_dir: Path, rep: int, dry_run: bool) -> int:
    results = v.check_and_time(GENERATED, "tma", TOL, rep, dry_run)
    v.speedup_over(results, "pointer loads", "x_pointer")
    v.speedup_over(results, "grouped", "x_grouped")
    meta = v.environment(dry_run)
    lines = [f"# tensor_descriptor on the suite's matmuls, {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, "
             f"{meta['date']})", "",
             ("The engine's own edits: tiling 128x256x64 (8 warps) and 3 stages, then each variant. Median of "
              "`triton.testing.do_bench` of the host function; each variant checked against the file's reference first."), "",
             "| problem | variant | ms | x pointer loads | x grouped | error |", "|---|---|---:|---:|---:|---|"]
    lines += [f"| {r['problem']} | {r['variant']} | {v.cell(r['ms'], '.4f')} | {v.cell(r['x_pointer'], '.3f')} | "
              f"{v.cell(r['x_grouped'], '.3f')} | {r['error'] or ''} |" for r in results]
    v.write_results(out_dir, "tensor_descriptor", meta, results, lines)
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    return v.main(argv, __doc__.splitlines()[0], generate, bench)


if __name__ == "__main__":
    sys.exit(main())
