"""Time the reduction steps on the GPU: single_pass, Welford (online_softmax's mean/variance form) and heuristic caps.

Two modes, because the GPU machine has no libcst:
- ``python benchmarks/reduction_actions_gpu.py --generate`` (any machine with the project installed): apply
  each chain of steps below to its dev-corpus kernel (target h200) and write the sources plus
  ``manifest.json`` to ``benchmarks/generated/reduction_actions/`` (committed).
- ``python3 benchmarks/reduction_actions_gpu.py --out DIR`` (the GPU machine): run the original dev file
  and each variant on the same inputs, check the outputs agree, time each with ``triton.testing.do_bench``
  (median ms) and write ``reduction_actions.md`` / ``.json`` to DIR.
Only ``benchmarks/wild/dev`` files are used (the held-out part is never tuned on).

What it should show: single_pass ahead while a row (a group) fits one block (up to about 8K elements),
Welford ahead past it (one read of the row fewer, no spills), Welford then single_pass like single_pass;
a raised @triton.heuristics cap on 50K-wide logsumexp rows (fewer loop trips and block reductions); decode
attention (64 programs on 132 SMs) faster with 64-key blocks and faster again split over 8-16 programs per
(sequence, head), the split mattering less at 1024 programs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "benchmarks" / "wild" / "dev"
GENERATED = ROOT / "benchmarks" / "generated" / "reduction_actions"
TARGET = "h200"
WELFORD = ("online_softmax", "mean")  # the online_softmax candidate whose params name a mean

# dev file -> (kernel, host entry, input makers (Python source over torch and the module m), variants: tag -> chain
# of (action, params the candidate must have, or a params key it must have)).
CASES: dict[str, tuple[str, str, list[str], dict[str, list[tuple[str, object]]]]] = {
    "red_var_autotune.py": ("var_kernel", "m.var_rows", [
        "m.get_inputs(device='cuda')",  # 16384 x 3000
        "m.get_inputs(device='cuda', M=65536, N=512)",
        "m.get_inputs(device='cuda', M=2048, N=65536)",  # a row past one block: single_pass spills
    ], {"single_pass": [("single_pass", {})], "welford": [WELFORD],
        "welford+single_pass": [WELFORD, ("single_pass", {})]}),
    "norm_groupnorm_test.py": ("group_norm_kernel", "lambda x, w, b: m.group_norm(x, 32, w, b)", [
        "[torch.randn(32, 256, 32, 32, device='cuda'), torch.randn(256, device='cuda'), torch.randn(256, device='cuda')]",
        "[torch.randn(16, 512, 64, 64, device='cuda'), torch.randn(512, device='cuda'), torch.randn(512, device='cuda')]",
    ], {"single_pass": [("single_pass", {})], "welford": [WELFORD],
        "welford+single_pass": [WELFORD, ("single_pass", {})]}),
    # Decode attention's key loop is a reduction too (online softmax): bigger key blocks, then flash decoding.
    "attn_decode_vllm.py": ("_decode_attention_kernel", "m.decode_attention", [
        "m.get_inputs(device='cuda')",  # 8 sequences x 8 heads (64 programs), up to 4096 keys, head 128, fp16
        "m.get_inputs(device='cuda', num_seqs=32, num_heads=32, max_len=2048)",  # 1024 programs
    ], {"tile64": [("tiling", {"BLOCK_T": 64})], "split8": [("split_kv", {"NUM_SPLITS": 8})],
        "tile64+split8": [("tiling", {"BLOCK_T": 64}), ("split_kv", {"NUM_SPLITS": 8})],
        "tile64+split16": [("tiling", {"BLOCK_T": 64}), ("split_kv", {"NUM_SPLITS": 16})]}),
    "sm_logsumexp_heuristics.py": ("logsumexp_kernel", "m.logsumexp", [
        "m.get_inputs(device='cuda')",  # 4096 x 50257 fp16
        "m.get_inputs(device='cuda', M=16384, N=3000)",
    ], {"cap2048": [("tiling", {"BLOCK_N": 2048})], "cap4096": [("tiling", {"BLOCK_N": 4096})]}),
}


def generate() -> None:
    """Write every variant and the manifest (needs the project: libcst, the actions)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _bootstrap  # noqa: F401
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile(TARGET)
    GENERATED.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, (kernel, entry, inputs, chains) in CASES.items():
        variants = {}
        for tag, chain in chains.items():
            text = (DEV / name).read_text()
            for action, want in chain:
                offered = [c for c in applicable(analyze(text), kernel, target) if c.action == action]
                step = next(c for c in offered if (c.params == want if isinstance(want, dict) else want in c.params))
                text = apply_candidate(text, step, target).new_text
            out = GENERATED / f"{Path(name).stem}_{tag.replace('+', '_')}.py"
            out.write_text(text)
            variants[tag] = str(out.relative_to(ROOT))
        manifest.append({"file": str((DEV / name).relative_to(ROOT)), "kernel": kernel, "entry": entry,
                         "inputs": inputs, "variants": variants})
    (GENERATED / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest)} kernels, {sum(len(m['variants']) for m in manifest)} variants -> {GENERATED.relative_to(ROOT)}")


def _load(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(tag, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        if not torch.allclose(w.double(), g.double(), atol=1e-3, rtol=1e-3):  # sums in another order
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
        for maker in case["inputs"]:
            torch.manual_seed(0)
            inputs = eval(maker, {"m": before, "torch": torch})  # our own manifest's input maker
            want = _outputs(before, case["entry"], inputs)
            fn = eval(case["entry"], {"m": before})
            row = {"file": Path(case["file"]).name, "inputs": maker,
                   "shape": [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)][:1],
                   "before_ms": do_bench(lambda fn=fn, inputs=inputs: fn(*inputs), return_mode="median"), "variants": {}}
            for tag, module in variants.items():
                result: dict = {}
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
    (out / "reduction_actions.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = markdown(meta, rows)
    (out / "reduction_actions.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def markdown(meta: dict, rows: list[dict]) -> list[str]:
    """The table: one line per (inputs, variant)."""
    lines = [f"# Reduction steps on {meta['gpu']}", "", (f"torch {meta['torch']}, triton {meta['triton']}, {meta['when']}; "
             "median ms of the host function (triton.testing.do_bench); speedup = original / variant; ok = same outputs "
             "as the original (atol = rtol = 1e-3)."), "",
             "| file | first input | original ms | variant | ms | speedup | ok |", "|---|---|---:|---|---:|---:|---|"]
    for r in rows:
        for tag, v in r["variants"].items():
            if "ms" in v:
                lines.append(f"| {r['file']} | {r['shape']} | {r['before_ms']:.4f} | {tag} | {v['ms']:.4f} | "
                             f"{v['speedup']:.2f}x | {'ok' if v['ok'] else 'WRONG'} |")
            else:
                lines.append(f"| {r['file']} | {r['shape']} | {r['before_ms']:.4f} | {tag} | - | - | ERROR {v.get('error', '')} |")
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
