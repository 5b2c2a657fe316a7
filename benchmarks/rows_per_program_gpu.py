"""Time rows_per_program on the GPU: each dev-corpus row kernel before and after, at its own and at short-row sizes.

Two modes, because the GPU machine has no libcst:
- ``python benchmarks/rows_per_program_gpu.py --generate`` (any machine with the project installed):
  apply ``rows_per_program`` (TILE 4096 and 8192, target h200) to the dev kernels it is offered for
  (and after ``single_pass`` where that applies, with ``single_pass`` alone for comparison) and write the
  sources plus ``manifest.json`` to ``benchmarks/generated/rows_per_program/`` (committed). The manifest
  also keeps the heuristic policy's score of each variant's step (``prior``).
- ``python3 benchmarks/rows_per_program_gpu.py --out DIR`` (the GPU machine): run the original dev
  file and each variant on the same inputs, check the outputs agree, time each with
  ``triton.testing.do_bench`` (median ms) and write ``rows_per_program.md`` / ``.json`` to DIR.
Only ``benchmarks/wild/dev`` files are used (the held-out part is never tuned on).

What the next H200 run checks: the ``prior`` column against the speedups. The prior follows the shape
effect session 5 measured (optimizer/policy/heuristic.py ``rows_per_program_prior``): 0.9+ (columns,
constant row blocks of 256 or less) should go with 1.5x and more, 0.6 (run-time-wide whole rows) with
gains only at the narrow sizes, 0.45 (multi-pass kernels) with single_pass doing better; and the
preferred TILE (score 1.0 of the pair) should be the faster one. Session 5's "sizes | ERROR" rows were this
script's table treating each row's ``sizes`` dict as a variant, not failures (fixed: variants are kept
under ``variants``). Its "PassManager::run failed" rows are real: rows_per_program alone on the 3-pass
log_softmax makes ``row_max`` a [BLOCK_M] loop accumulator that two later loops read, and Triton 3.6's
OptimizeThreadLocality pass asserts on a reduction accumulator with more than one use after its loop
(``loopResult.hasOneUse()``; reproduced by compiling for sm_90 with triton 3.6.0 on the CPU; 3.9 compiles
it). The step now adds one line after such a loop (``row_max = tl.max(row_max[:, None], axis=1)``: one read of the
loop's result, bit-for-bit the same) and the log_softmax tile variants compile with 3.6 (session 6,
benchmarks/compile_triton_version.py); the policy also puts single_pass first there (prior 0.45).
Also new and not yet timed: split program ids (group_norm, mean_dim1, conv1d: is 0.9 right for 64-wide
blocks there?) and the elementwise rows' priors (0.5 for a whole row of run-time width, 0.2 from 1024).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "benchmarks" / "wild" / "dev"
GENERATED = ROOT / "benchmarks" / "generated" / "rows_per_program"
TARGET = "h200"
TILES = (4096, 8192)

# dev file -> (kernel, host entry called with get_inputs(...)'s list, get_inputs keyword sets: the file's
# own default first, then short rows, where one row per program leaves the GPU idle).
CASES: dict[str, tuple[str, str, list[dict]]] = {
    "norm_rmsnorm_liger.py": ("_rms_norm_forward_kernel", "m.rms_norm_forward", [
        {}, {"batch": 8, "seq_len": 4096, "hidden": 128}, {"batch": 8, "seq_len": 4096, "hidden": 512},
        {"batch": 8, "seq_len": 4096, "hidden": 1024}, {"batch": 8, "seq_len": 4096, "hidden": 2048}]),
    "sm_softmax_tutorial.py": ("softmax_kernel", "m.softmax", [
        {}, {"rows": 32768, "cols": 128}, {"rows": 32768, "cols": 512}, {"rows": 32768, "cols": 1024}]),
    "norm_layernorm_residual.py": ("_add_layernorm_fwd", "m.add_layernorm", [
        {}, {"tokens": 32768, "hidden": 256}, {"tokens": 32768, "hidden": 1024}, {"tokens": 32768, "hidden": 2048}]),
    "quant_per_token_int8_vllm.py": ("_per_token_quant_int8", "m.per_token_quant_int8", [
        {}, {"tokens": 32768, "hidden": 512}, {"tokens": 32768, "hidden": 2048}]),
    "norm_layernorm_tutorial.py": ("_layer_norm_fwd_fused", "m.layer_norm", [{}, {"M": 32768, "N": 1024}]),
    "red_row_sum_literal.py": ("row_sum_kernel", "m.row_sum", [{}, {"M": 65536, "N": 256}]),
    "sm_log_softmax_kernelbench.py": ("log_softmax_kernel", "lambda x: m.ModelNew()(x)", [{}, {"batch": 32768, "features": 1024}]),
    "sm_online_loop.py": ("online_softmax_kernel", "m.softmax", [{}, {"rows": 32768, "cols": 512}]),
    "red_col_max.py": ("col_max_kernel", "m.col_max", [{}, {"M": 1024, "N": 65536}]),
    # Elementwise row kernels (no reduction) and grids of several axes with one row axis:
    "ew_swiglu_liger.py": ("_swiglu_forward_kernel", "m.swiglu_forward", [
        {}, {"batch": 8, "seq_len": 4096, "intermediate": 128}, {"batch": 8, "seq_len": 4096, "intermediate": 512}]),
    "ew_rope_lightllm.py": ("_rotary_kernel", "m.rotary_emb_fwd", [{}, {"tokens": 32768, "heads": 32, "head_dim": 64}]),
    "ew_bias_add_2d.py": ("bias_add_kernel", "m.bias_add", [{}, {"M": 65536, "N": 256}]),
    "misc_embedding_gather.py": ("embedding_kernel", "m.embedding", [{}, {"batch": 8, "seq_len": 4096, "dim": 256}]),
    "norm_rmsnorm_kernelbench.py": ("rms_norm_channels_kernel", "lambda x: m.ModelNew(m.features)(x)", [{}]),
    # One grid axis split into two indices (``b = pid // C``, ``c = pid % C``): many (b, c) rows a program.
    # mean_dim1's rows are neighbouring columns, so a row block also coalesces its strided loads.
    "red_mean_kernelbench.py": ("mean_dim1_kernel", "lambda x: m.ModelNew(1)(x)", [{}, {"batch": 16, "d1": 1024, "d2": 1024}]),
    "misc_conv1d_depthwise.py": ("causal_conv1d_kernel", "m.causal_conv1d", [{}, {"batch": 8, "dim": 1024, "seqlen": 512}]),
    # A test-style file without get_inputs: the sizes spell the inputs (many small groups, then few large ones).
    "norm_groupnorm_test.py": ("group_norm_kernel", "m.group_norm", [
        {"inputs": "[torch.randn(64, 256, 8, 8), 64, torch.randn(256), torch.randn(256)]"},
        {"inputs": "[torch.randn(16, 512, 32, 32), 32, torch.randn(512), torch.randn(512)]"}]),
}


def generate() -> None:
    """Write every variant and the manifest (needs the project: libcst, the actions)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _bootstrap  # noqa: F401
    from mtmc_lsp.optimizer.actions import Candidate, applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile
    from mtmc_lsp.optimizer.policy.base import PolicyState
    from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy

    target = get_profile(TARGET)

    def prior(source: str, tile: int) -> float:
        """The heuristic policy's score of rows_per_program at ``tile`` on ``source``'s kernel."""
        analysis = analyze(source)
        ranked = HeuristicPolicy().rank(PolicyState(analysis, analysis.kernel(kernel), target),
                                        applicable(analysis, kernel, target))
        return next(r.score for r in ranked if r.candidate.action == "rows_per_program" and r.candidate.params["TILE"] == tile)

    GENERATED.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, (kernel, entry, sizes) in CASES.items():
        text = (DEV / name).read_text()
        variants = {}
        priors = {}
        starts = {"": text}
        # Where single_pass applies (rows walked in several passes), the policy ranks it first: also
        # time it alone and followed by rows_per_program.
        single = [c for c in applicable(analyze(text), kernel, target) if c.action == "single_pass"]
        if single:
            starts["single_pass+"] = apply_candidate(text, single[0], target).new_text
            out = GENERATED / f"{Path(name).stem}_single_pass.py"
            out.write_text(starts["single_pass+"])
            variants["single_pass"] = str(out.relative_to(ROOT))
        for prefix, start in starts.items():
            for tile in TILES:
                edit = apply_candidate(start, Candidate("rows_per_program", "Tiling", kernel, {"TILE": tile}, "", 0), target)
                tag = f"{prefix}tile{tile}"
                out = GENERATED / f"{Path(name).stem}_{tag.replace('+', '_')}.py"
                out.write_text(edit.new_text)
                variants[tag] = str(out.relative_to(ROOT))
                priors[tag] = prior(start, tile)
        manifest.append({"file": str((DEV / name).relative_to(ROOT)), "kernel": kernel, "entry": entry, "sizes": sizes,
                         "variants": variants, "prior": priors})
    (GENERATED / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest)} kernels, {sum(len(m['variants']) for m in manifest)} variants -> {GENERATED.relative_to(ROOT)}")


def _load(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(tag, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs(module, sizes: dict) -> list:
    import torch

    if "inputs" in sizes:  # our own manifest's expression, for a file without get_inputs
        return [x.to("cuda") if isinstance(x, torch.Tensor) else x for x in eval(sizes["inputs"], {"torch": torch})]
    takes_device = "device" in inspect.signature(module.get_inputs).parameters
    inputs = module.get_inputs(device="cuda", **sizes) if takes_device else module.get_inputs(**sizes)
    return [x.to("cuda") if isinstance(x, torch.Tensor) else x for x in inputs]


def _outputs(module, entry: str, inputs: list) -> list:
    import torch

    out = eval(entry, {"m": module})(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])  # our own manifest's entry
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _agree(want: list, got: list) -> tuple[bool, float]:
    import torch

    worst = 0.0
    for w, g in zip(want, got):
        if w.shape != g.shape or w.dtype != g.dtype:
            return False, float("inf")
        diff = (w.double() - g.double()).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        # int8 quantisation may round a .5 the other way when a scale differs in the last ulp.
        atol = 1.0 if w.dtype == torch.int8 else 2e-2 if w.dtype in (torch.float16, torch.bfloat16) else 1e-4
        if not torch.allclose(w.double(), g.double(), atol=atol, rtol=1e-3):
            return False, worst
    return True, worst


def measure(out: Path, files: list[str] | None = None) -> None:
    import torch
    import triton
    from triton.testing import do_bench

    manifest = json.loads((GENERATED / "manifest.json").read_text())
    if files:
        manifest = [m for m in manifest if any(Path(m["file"]).stem.startswith(Path(f).stem) for f in files)]
    rows = []
    for case in manifest:
        before = _load(ROOT / case["file"], "before")
        variants = {tag: _load(ROOT / path, tag) for tag, path in case["variants"].items()}
        for sizes in case["sizes"]:
            torch.manual_seed(0)
            inputs = _inputs(before, sizes)
            want = _outputs(before, case["entry"], inputs)
            fn = eval(case["entry"], {"m": before})
            row = {"file": Path(case["file"]).name, "sizes": sizes or "default", "shape": [list(x.shape) for x in inputs
                   if isinstance(x, torch.Tensor)][:1], "before_ms": do_bench(lambda fn=fn, inputs=inputs: fn(*inputs), return_mode="median"),
                   "variants": {}}
            for tag, module in variants.items():
                result: dict = {"prior": case.get("prior", {}).get(tag)}
                try:
                    ok, worst = _agree(want, _outputs(module, case["entry"], inputs))
                    vfn = eval(case["entry"], {"m": module})
                    ms = do_bench(lambda vfn=vfn, inputs=inputs: vfn(*inputs), return_mode="median")
                    result.update(ok=ok, max_abs_diff=worst, ms=ms, speedup=row["before_ms"] / ms)
                except Exception as exc:  # noqa: BLE001 - a failing variant is a result
                    result.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
                row["variants"][tag] = result
            rows.append(row)
            print(json.dumps(row), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (out / "rows_per_program.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = markdown(meta, rows)
    (out / "rows_per_program.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def markdown(meta: dict, rows: list[dict]) -> list[str]:
    """The table: one line per (row of sizes, variant)."""
    lines = [f"# rows_per_program on {meta['gpu']}", "", (f"torch {meta['torch']}, triton {meta['triton']}, {meta['when']}; "
             "median ms of the host function (triton.testing.do_bench); speedup = original / variant; ok = same outputs "
             "as the original; prior = the heuristic policy's score of the variant's step."), "",
             "| file | sizes | original ms | variant | prior | ms | speedup | ok |", "|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        for tag, v in r["variants"].items():
            prior = "-" if v.get("prior") is None else f"{v['prior']:.2f}"
            if "ms" in v:
                lines.append(f"| {r['file']} | {r['sizes']} | {r['before_ms']:.4f} | {tag} | {prior} | {v['ms']:.4f} | "
                             f"{v['speedup']:.2f}x | {'ok' if v['ok'] else 'WRONG'} |")
            else:
                lines.append(f"| {r['file']} | {r['sizes']} | {r['before_ms']:.4f} | {tag} | {prior} | - | - | "
                             f"ERROR {v.get('error', '')} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", action="store_true", help="write the variants and manifest (needs the project)")
    parser.add_argument("--out", help="measure on the GPU and write the tables here")
    parser.add_argument("--files", nargs="+", help="only these dev files (names or stems); default: all in the manifest")
    args = parser.parse_args(argv)
    if args.generate:
        generate()
    if args.out:
        measure(Path(args.out), args.files)
    if not args.generate and not args.out:
        parser.error("give --generate or --out DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
