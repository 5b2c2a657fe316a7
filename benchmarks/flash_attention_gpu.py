"""Time the flash_attention step on the GPU: naive attention chains before, one flash kernel after.

Two modes, because the GPU machine has no libcst:
- ``python3 benchmarks/flash_attention_gpu.py --generate`` (any machine with the project installed):
  apply ``flash_attention`` for the H200 to the four attention chains of the test corpus and write the
  results to ``benchmarks/generated/flash_attention/`` (committed), with ``manifest.json``. Per chain:
  ``flash`` is the engine's step (the fused kernel with the tiles ``gpu_tiles`` chooses for the target and
  the key masks only where ``EVEN_N`` is false, ``even_keys``), ``flash, key masks in every block`` the same
  without ``even_keys`` (the step before it), ``flash, chain's tiles`` the fusion keeping the naive chain's
  tiles (the step before it chose tiles), and ``flash BMxBN wW (by hand)`` other tiles through the same
  ``gpu_tiles`` (not engine steps: what the next run compares the engine's choice with; a variant equal to
  another one is left out). Every variant but the masked one has ``EVEN_N``.
- ``python3 benchmarks/flash_attention_gpu.py --out DIR`` (the GPU machine): load before and after,
  check both against the file's PyTorch reference and each other at the files' GPU sizes, time each with
  ``triton.testing.do_bench`` (median) and write ``DIR/flash_attention.json`` and ``.md``.
  ``--dry-run`` does the same at the corpus's tiny sizes in the Triton interpreter (no timing).

What the next H200 run checks (session 5 measured 16x16 flash at 1.1-2.8x, 64x64 by hand at 2.9-12.9x):
``flash`` should be about as fast as the best by-hand row of its problem; if a by-hand tile wins clearly
everywhere, ``FLASH_TILES`` in optimizer/actions/flash_attention.py should lead with it. ``flash`` against
``flash, key masks in every block``: the EVEN_N branch (the GPU sizes are multiples of every key block), about
1.05x on the suite's attention by the hand-written sweep (benchmarks/results/h200/suite_tiles).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from corpus.kernels import kernel_path

GENERATED = ROOT / "benchmarks" / "generated" / "flash_attention"

# Corpus file -> FLOPs per call at its GPU sizes (``SIZES["cuda"]``: two matmuls, 4*B*H*Sq*Sk*D, a causal mask
# counted in full) and tolerance (atol, rtol) against the reference and each other.
PROBLEMS: dict[str, dict] = {
    "attention_three_kernels": {  # causal, fp16; one BLOCK constant sets both blocks: square tiles only
        "flops": lambda s: 4 * s["batch"] * s["heads"] * s["seq_len"] ** 2 * s["head_dim"], "tol": (2e-2, 2e-2),
    },
    "attention_padded_strided": {  # fp32 inputs: tl.dot runs in tf32 before and after
        "flops": lambda s: 4 * s["batch"] * s["heads"] * s["seq_q"] * s["seq_k"] * s["head_dim"], "tol": (2e-2, 2e-2),
    },
    "attention_matmul_style": {  # Q @ K^T tiled over the head dim: its loop stays, nested in the key loop
        "flops": lambda s: 4 * s["bh"] * s["seq"] ** 2 * s["dim"], "tol": (2e-2, 2e-2),
    },
    "attention_two_kernels": {  # the scores kernel holds a whole row of keys: short sequences only
        "flops": lambda s: 4 * s["heads"] * s["seq_len"] ** 2 * s["head_dim"], "tol": (2e-2, 2e-2),
    },
    "suite_attention": {  # the suite's (4x16x4096x128 fp16): a three-pass softmax, BLOCK_N / BLOCK_K key blocks
        "flops": lambda s: 4 * s["batch"] * s["heads"] * s["seq_len"] ** 2 * s["head_dim"], "tol": (2e-2, 2e-2),
    },
}
# Tiles set by hand through gpu_tiles, to compare with the engine's choice: label -> ((BLOCK_M, BLOCK_N, num_warps),).
BY_HAND = {"64x64 w4": ((64, 64, 4),), "128x64 w4": ((128, 64, 4),), "128x128 w8": ((128, 128, 8),)}


def generate() -> int:
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.actions import flash_attention as fa
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile("h200")
    GENERATED.mkdir(parents=True, exist_ok=True)
    for old in GENERATED.glob("*.py"):
        old.unlink()
    chain_tiles = fa.FlashAttention()
    chain_tiles.tiles = ()  # the fusion alone, as the step was before it chose tiles
    chain_tiles.mask_free_keys = False  # EVEN_N after the tiles below: its launch value reads the key block
    masked = fa.FlashAttention()
    masked.mask_free_keys = False  # the engine's tiles, the key masks in every block
    manifest = []
    for name in PROBLEMS:
        text = kernel_path(name).read_text()
        analysis = analyze(text)
        cand = next(cd for k in analysis.kernels for cd in applicable(analysis, k, target) if cd.action == "flash_attention")
        edit = apply_candidate(text, cand, target)
        kernel = analysis.kernel(cand.kernel)
        untiled = chain_tiles.apply(text, analysis, kernel, cand.params, target).new_text
        pv = cand.params["pv"]
        variants = {"flash": edit.new_text,
                    "flash, key masks in every block": masked.apply(text, analysis, kernel, cand.params, target).new_text,
                    "flash, chain's tiles": fa.even_keys(untiled, pv)[0]}
        for label, tiles in BY_HAND.items():
            tiled = fa.even_keys(fa.gpu_tiles(untiled, pv, target, tiles)[0], pv)[0]
            if tiled not in variants.values():
                variants[f"flash {label} (by hand)"] = tiled
        after = {}
        for label, source in variants.items():
            slug = re.sub(r"[^0-9A-Za-z]+", "_", label.replace(" (by hand)", "").replace("'s", "")).strip("_")
            (GENERATED / f"{name}_{slug}.py").write_text(source)
            after[label] = f"benchmarks/generated/flash_attention/{name}_{slug}.py"
        manifest.append({"problem": name, "before": str(kernel_path(name).relative_to(ROOT)), "after": after,
                         "step": cand.title, "tiles": edit.notes[-2], "keys": edit.notes[-1]})
    (GENERATED / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(manifest)} problems to {GENERATED.relative_to(ROOT)}")
    return 0


def load(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"flash_bench_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench(out_dir: Path | None, rep: int, dry_run: bool) -> int:
    import torch
    import triton

    device = "cpu" if dry_run else "cuda"
    manifest = json.loads((GENERATED / "manifest.json").read_text())
    rows = []
    for entry in manifest:
        name = entry["problem"]
        problem = PROBLEMS[name]
        sizes = None if dry_run else load(ROOT / entry["before"], f"{name}_sizes").SIZES["cuda"]
        versions = {"before": ROOT / entry["before"], **{k: ROOT / v for k, v in entry["after"].items()}}
        modules = {k: load(p, f"{name}_{i}") for i, (k, p) in enumerate(versions.items())}
        torch.manual_seed(0)
        inputs = modules["before"].get_inputs(device=device)  # its own sizes: tiny on the CPU, GPU-sized on cuda
        expected = modules["before"].reference(*inputs).float()
        atol, rtol = problem["tol"]
        before_out = None
        for version, module in modules.items():
            fn = getattr(module, module.ENTRY)
            out = fn(*inputs).float()
            before_out = out if version == "before" else before_out
            row = {"problem": name, "version": version, "sizes": sizes,
                   "max_abs_err_vs_reference": float((out - expected).abs().max()),
                   "max_abs_diff_vs_before": float((out - before_out).abs().max()),
                   "correct": bool(torch.allclose(out, expected, atol=atol, rtol=rtol) and torch.allclose(out, before_out, atol=atol, rtol=rtol))}
            if not dry_run:
                from triton.testing import do_bench

                row["ms"] = do_bench(lambda fn=fn, inputs=inputs: fn(*inputs), warmup=25, rep=rep, return_mode="median")
                row["tflops"] = problem["flops"](sizes) / row["ms"] / 1e9
            rows.append(row)
            print(json.dumps(row), flush=True)
        for row in rows:
            if row["problem"] == name and "ms" in row:
                base = next(r["ms"] for r in rows if r["problem"] == name and r["version"] == "before")
                row["speedup_vs_before"] = base / row["ms"]
    env = {"device": "interpreter" if dry_run else torch.cuda.get_device_name(0), "torch": torch.__version__,
           "triton": triton.__version__, "python": platform.python_version()}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "flash_attention.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1) + "\n")
        lines = [f"# flash_attention on {env['device']} (torch {env['torch']}, triton {env['triton']})", "",
                 "| problem | version | ms | TFLOP/s | speedup | max err vs reference | correct |", "|---|---|---:|---:|---:|---:|---|"]
        for r in rows:
            ms = f"{r['ms']:.3f}" if "ms" in r else "-"
            tf = f"{r['tflops']:.1f}" if "tflops" in r else "-"
            sp = f"{r['speedup_vs_before']:.2f}x" if "speedup_vs_before" in r else "-"
            lines.append(f"| {r['problem']} | {r['version']} | {ms} | {tf} | {sp} | {r['max_abs_err_vs_reference']:.2e} | {r['correct']} |")
        (out_dir / "flash_attention.md").write_text("\n".join(lines) + "\n")
    return 0 if all(r["correct"] for r in rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", action="store_true", help="apply the step and write the sources (needs libcst)")
    parser.add_argument("--out", type=Path, default=None, help="folder for flash_attention.json/.md")
    parser.add_argument("--rep", type=int, default=200, help="do_bench repetition time in ms")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes in the Triton interpreter, no timing")
    args = parser.parse_args()
    if args.generate:
        return generate()
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    return bench(args.out, args.rep, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
