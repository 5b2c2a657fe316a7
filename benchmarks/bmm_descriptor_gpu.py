"""Does a 3-D tensor descriptor close the suite's bmm gap? Per-tile 2-D descriptors against one 3-D descriptor.

The engine's bmm route (tiling 128x256x64, persistent tiles, TMA loads) ran 0.90x of cuBLAS in session 14: its
descriptors are made inside the tile loop, because the batch moves the base pointer. A descriptor over
``[batch, M, K]`` with a ``[1, BLOCK_M, BLOCK_K]`` block is made once per program and indexed by the batch instead.
This script times, beside ``torch.bmm``:
- ``engine``: the engine's own edit (tiling, persistent, tensor_descriptor);
- ``3-D loads``: the same kernel with 3-D descriptors made once, before the tile loop;
- ``3-D loads+store``: and the output tile stored through a 3-D descriptor too;
- ``engine non-persistent``: tiling then tensor_descriptor (descriptors per program, one tile each).

Modes as in ``_variants.py``: ``--generate`` (a development machine with libcst) writes the variants to
``benchmarks/generated/bmm_descriptor/`` with ``manifest.json``; ``--out DIR`` (the GPU machine) checks and times
them, ``--dry-run`` runs them in the interpreter at the CPU sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: F401
import _variants as v

ROOT = v.ROOT
GENERATED = ROOT / "benchmarks" / "generated" / "bmm_descriptor"
TARGET = "h200"
SOURCE = "benchmarks/suite/bmm.py"
TILE = ("tiling", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3})
PERSISTENT = ("persistent", {"flatten": False})  # the one the suite run kept
DESCRIPTORS = ("tensor_descriptor", {})
TOL = (2e-2, 5e-2)  # rtol, atol: fp16 output of a K=2048 sum against an fp32 reference

PER_TILE = """        if USE_TMA:
            a_desc = tl.make_tensor_descriptor(a_base, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
            b_desc = tl.make_tensor_descriptor(b_base, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
"""
HOISTED = """    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[batch_count, M, K], strides=[stride_ab, stride_am, 1],
                                           block_shape=[1, BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[batch_count, K, N], strides=[stride_bb, stride_bk, 1],
                                           block_shape=[1, BLOCK_K, BLOCK_N])
"""
LOADS_2D = """                a = a_desc.load([pid_m * BLOCK_M, k])
                b = b_desc.load([k, pid_n * BLOCK_N])
"""
LOADS_3D = """                a = a_desc.load([batch, pid_m * BLOCK_M, k]).reshape(BLOCK_M, BLOCK_K)
                b = b_desc.load([batch, k, pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N)
"""
TILE_LOOP = "    for tile in tl.range("
STORE = """        tl.store(
            c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
            acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
        )
"""
STORE_3D = """        if USE_TMA:
            c_desc.store([batch, pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty).reshape(1, BLOCK_M, BLOCK_N))
        else:
""" + "".join("    " + line + "\n" for line in STORE.splitlines())
C_DESC = """        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[batch_count, M, N], strides=[stride_cb, stride_cm, 1],
                                           block_shape=[1, BLOCK_M, BLOCK_N])
"""
C_READY = " and _tma_ready(b, b.stride(2), b.stride(1), b.stride(0)),"


def hoisted(text: str, store: bool) -> str:
    """The engine's persistent descriptor kernel with one 3-D descriptor per operand, made before the tile loop."""
    for old in (PER_TILE, LOADS_2D, TILE_LOOP):
        if old not in text:
            raise LookupError(f"the engine's text changed: {old.strip()[:60]!r} not found")
    text = text.replace(PER_TILE, "").replace(LOADS_2D, LOADS_3D)
    text = text.replace(TILE_LOOP, (HOISTED + C_DESC if store else HOISTED) + TILE_LOOP, 1)
    if store:
        if STORE not in text or C_READY not in text:
            raise LookupError("the engine's store or TMA check changed")
        text = text.replace(STORE, STORE_3D).replace(
            C_READY, " and _tma_ready(b, b.stride(2), b.stride(1), b.stride(0)) and _tma_ready(c, c.stride(2), c.stride(1), c.stride(0)),")
    return text


def generate() -> int:
    GENERATED.mkdir(parents=True, exist_ok=True)
    source = (ROOT / SOURCE).read_text()
    engine = v.apply_steps(source, "bmm_kernel", [TILE, PERSISTENT, DESCRIPTORS], TARGET)
    texts = {
        "engine": engine,
        "3-D loads": hoisted(engine, store=False),
        "3-D loads+store": hoisted(engine, store=True),
        "engine non-persistent": v.apply_steps(source, "bmm_kernel", [TILE, DESCRIPTORS], TARGET),
    }
    entries = []
    for index, (variant, text) in enumerate(texts.items()):
        out = GENERATED / f"bmm_{index}.py"
        out.write_text(text)
        entries.append({"problem": "bmm", "variant": variant, "path": str(out.relative_to(ROOT)), "entry": "bmm"})
    v.write_manifest(GENERATED, TARGET, entries)
    return 0


def bench(out_dir: Path, rep: int, dry_run: bool) -> int:
    results = v.check_and_time(GENERATED, "bmm_desc", TOL, rep, dry_run)
    results.append(torch_row(rep, dry_run))
    v.speedup_over(results, "engine", "x_engine")
    meta = v.environment(dry_run)
    lines = [f"# bmm descriptors, {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, {meta['date']})", "",
             ("16 x 2048 x 2048 x 2048 fp16 (the suite's bmm). Median of `triton.testing.do_bench` of the host "
              "function; each variant checked against the file's reference first."), "",
             "| variant | ms | x engine | error |", "|---|---:|---:|---|"]
    lines += [f"| {r['variant']} | {v.cell(r['ms'], '.4f')} | {v.cell(r['x_engine'], '.3f')} | {r['error'] or ''} |"
              for r in results]
    v.write_results(out_dir, "bmm_descriptor", meta, results, lines)
    return 0 if all(r["ok"] for r in results) else 1


def torch_row(rep: int, dry_run: bool) -> dict:
    """``torch.bmm`` (cuBLAS) on the same inputs."""
    import torch

    module = v.load(ROOT / SOURCE, "bmm_torch")
    torch.manual_seed(0)
    inputs = module.get_inputs(device="cpu" if dry_run else "cuda")
    ms = v.timer(dry_run)(lambda: torch.bmm(*inputs), warmup=25, rep=rep, return_mode="median")
    return {"problem": "bmm", "variant": "torch.bmm", "ok": True, "ms": ms, "error": None}


def main(argv: list[str] | None = None) -> int:
    return v.main(argv, __doc__.splitlines()[0], generate, bench)


if __name__ == "__main__":
    sys.exit(main())
