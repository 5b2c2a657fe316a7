"""Time the engine's own persistent edits on the suite's matmuls: one program per tile against one per SM.

Two modes (``_variants.py``; the GPU machine has no libcst):
- ``python benchmarks/persistent_gpu.py --generate``: on each suite matmul apply the engine's tiling (128x256x64,
  8 warps), 3 stages and grouped order (``reordering`` GROUP_M=8: persistent needs a 1-D tile grid), then each
  variant (``persistent`` with and without ``flatten``, over pointer loads and over ``tensor_descriptor``'s TMA
  loads), written with ``manifest.json`` to ``benchmarks/generated/persistent/`` (committed).
- ``python3 benchmarks/persistent_gpu.py --out DIR`` (the GPU machine): check each variant against the file's
  reference, time its host function with ``triton.testing.do_bench`` (median), write ``persistent.md``/``.json``.
  ``--dry-run`` runs it in the interpreter on the CPU sizes (checks the script, times nothing real).
What it decides: whether persistent is kept by the loop on the suite's matmuls, and its rank against
tensor_descriptor (a hand-written persistent descriptor kernel ran C = A @ B^T at 1.10x of cuBLAS,
``results/h200/warp_specialize/``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: F401
import _variants as v

ROOT = v.ROOT
GENERATED = ROOT / "benchmarks" / "generated" / "persistent"
TARGET = "h200"
# Suite file -> (path, kernel); the sizes are the files' own GPU sizes (8192-size fp16 matmuls).
PROBLEMS = {
    "matmul": ("mtmc_lsp/examples/matmul.py", "matmul_kernel"),
    "matmul_transposed": ("benchmarks/suite/matmul_transposed.py", "matmul_bt_kernel"),
    "linear_gelu": ("benchmarks/suite/linear_gelu.py", "linear_kernel"),
}
BASE = [("tiling", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}),
        ("reordering", {"GROUP_M": 8})]
VARIANTS = {  # name -> steps after BASE
    "grouped": [],
    "persistent": [("persistent", {"flatten": False})],
    "persistent, flattened": [("persistent", {"flatten": True})],
    "descriptors": [("tensor_descriptor", {})],
    "descriptors, persistent": [("tensor_descriptor", {}), ("persistent", {"flatten": False})],
    "descriptors, persistent, flattened": [("tensor_descriptor", {}), ("persistent", {"flatten": True})],
    # Session 13: descriptors inside the tile loop, made once before it (the order the search takes: persistent first).
    "persistent, descriptors": [("persistent", {"flatten": False}), ("tensor_descriptor", {})],
}
TOL = (2e-2, 5e-2)  # rtol, atol: fp16 output of a K=4096-8192 sum against an fp32 reference


def generate() -> int:
    return v.generate_suite_variants(GENERATED, TARGET, PROBLEMS, BASE, VARIANTS)


def bench(out_dir: Path, rep: int, dry_run: bool) -> int:
    results = v.check_and_time(GENERATED, "persistent", TOL, rep, dry_run)
    v.speedup_over(results, "grouped", "x_grouped")
    meta = v.environment(dry_run)
    lines = [f"# persistent on the suite's matmuls, {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, "
             f"{meta['date']})", "",
             ("The engine's own edits: tiling 128x256x64 (8 warps), 3 stages and grouped order, then each variant. Median of "
              "`triton.testing.do_bench` of the host function; each variant checked against the file's reference first."), "",
             "| problem | variant | ms | x grouped | error |", "|---|---|---:|---:|---|"]
    lines += [f"| {r['problem']} | {r['variant']} | {v.cell(r['ms'], '.4f')} | {v.cell(r['x_grouped'], '.3f')} | "
              f"{r['error'] or ''} |" for r in results]
    v.write_results(out_dir, "persistent", meta, results, lines)
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    return v.main(argv, __doc__.splitlines()[0], generate, bench)


if __name__ == "__main__":
    sys.exit(main())
