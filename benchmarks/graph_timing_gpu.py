"""CUDA-graph timing on the GPU: what it changes on small kernels, and the cheats it must refuse.

``python3 benchmarks/graph_timing_gpu.py --out DIR [FILE ...]``

1. Planted implementations that a graph cannot time honestly (work on another stream, on another
   thread, a host sync, a result cached across calls): each must be refused by ``GraphCall.prove``, and
   ``torch.randn`` on the GPU must work after each refusal (a failed capture once left it broken).
2. An elementwise Triton kernel at three sizes, two block sizes: the verifier's ``interleaved``
   timing synchronized and as CUDA graphs, each twice (median ms, the speedup and its noise band).
3. Optionally FILEs verified against themselves (a true 1.0x), graphs off and on: the times and
   the noise band the search has to beat.

Writes ``DIR/graph_timing.json`` and ``DIR/graph_timing.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: F401
import torch
import triton
import triton.language as tl
from mtmc_lsp.optimizer.verify.runtime.graphs import GraphCall, GraphRefused
from mtmc_lsp.optimizer.verify.runtime.stats import speedup_stats
from mtmc_lsp.optimizer.verify.runtime.timing import interleaved
from mtmc_lsp.optimizer.verify.runtime.versions import clone_inputs


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(args, block=1024):
    x, y = args
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block)
    return out


_side = None


def on_side_stream(args):
    global _side
    _side = _side or torch.cuda.Stream()
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        out = add(args)
    return out


def on_thread(args):
    box = {}
    worker = threading.Thread(target=lambda: box.update(out=add(args)))
    worker.start()
    worker.join()
    return box["out"]


def host_sync(args):
    out = add(args)
    if out.sum().item() == float("inf"):
        out = out * 1
    return out


def host_list(args):  # as a reference that walks sequence lengths on the host (lightllm's context attention)
    return add(args) * len(args[0][:2].tolist())


_cache: dict = {}


def cached_by_shape(args):
    key = tuple(args[0].shape)
    if key not in _cache:
        _cache[key] = add(args)
    return _cache[key]


def inputs(n, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)]


def planted() -> list[dict]:
    rows = []
    for name, fn in [("honest", add), ("side stream", on_side_stream), ("thread", on_thread),
                     ("host sync", host_sync), ("host sync in tolist", host_list), ("cached by shape", cached_by_shape)]:
        try:
            GraphCall.prove(fn, inputs(1 << 16, 1), inputs(1 << 16, 2), clone_inputs)
            rows.append({"case": name, "refused": False, "why": ""})
        except GraphRefused as exc:
            rows.append({"case": name, "refused": True, "why": str(exc)[:200]})
        torch.cuda.synchronize()
        try:  # a failed capture must not leave the default generator marked as capturing (get_inputs draws from it)
            torch.randn(4, device="cuda")
            rows[-1]["rng_after"] = "ok"
        except RuntimeError as exc:
            rows[-1]["rng_after"] = str(exc).splitlines()[0][:200]
        print(json.dumps(rows[-1]), flush=True)
    return rows


def timing_rows() -> list[dict]:
    rows = []
    for n in (1 << 16, 1 << 20, 1 << 24):
        impls = {"old": lambda a: add(a, 128), "new": lambda a: add(a, 1024)}
        for method in ("synchronized", "cuda_graph", "synchronized", "cuda_graph"):
            sizing: dict = {}
            rounds = interleaved(impls, lambda r, n=n: inputs(n, r), 5, 25, 100, True, clone_inputs, lambda m: None,
                                 adaptive=True, sizing=sizing, graphs=method == "cuda_graph")
            stats = speedup_stats(rounds, "old", "new")
            old = sorted(r["old"]["median_ms"] for r in rounds)[len(rounds) // 2]
            new = sorted(r["new"]["median_ms"] for r in rounds)[len(rounds) // 2]
            rows.append({"n": n, "method": sizing.get("method"), "old_ms": old, "new_ms": new,
                         "speedup": stats["speedup"], "band_rel": stats["band_rel"], "rounds": len(rounds),
                         "refused": sizing.get("graph_refused")})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def file_rows(paths: list[Path], limit_s: float) -> list[dict]:
    """Each file verified against itself, graphs off then on: the times, and the noise of a 1.0x ratio."""
    from mtmc_lsp.optimizer.hardware import get_profile
    from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file

    rows, started = [], time.monotonic()
    for path in paths:
        for graphs in (False, True):
            if time.monotonic() - started > limit_s:
                return rows
            t0 = time.monotonic()
            text = path.read_text()
            report = verify_file(text, text, str(path), get_profile("h200"),
                                 VerifyOptions(seeds=2, timing_rounds=5, cuda_graphs=graphs))
            speed = report.speed
            rows.append({"file": path.name, "graphs": graphs, "status": report.status,
                         "method": speed.sizing.get("method") if speed else None,
                         "refused": speed.sizing.get("graph_refused") if speed else None,
                         "old_ms": speed.baseline_ms if speed else None, "new_ms": speed.candidate_ms if speed else None,
                         "eager_ms": speed.reference_ms if speed else None,
                         "ratio": speed.speedup if speed else None, "band_rel": speed.band_rel if speed else None,
                         "wall_s": round(time.monotonic() - t0, 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _ms(value) -> str:
    return f"{value:.4g}" if value else "-"


def markdown(out: dict) -> str:
    lines = [f"# CUDA-graph timing on the {out['device']}", "", out["versions"], "",
             "## Planted implementations (each but `honest` must be refused)", "",
             "| case | refused | why | torch.randn on the GPU afterwards |", "|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['refused']} | {r['why']} | {r.get('rng_after', '-')} |" for r in out["planted"]]
    lines += ["", "## Elementwise add, BLOCK 128 (old) vs 1024 (new), verifier's interleaved timing", "",
              "| n | method | old ms | new ms | speedup | band |", "|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['n']} | {r['method']} | {r['old_ms']:.4f} | {r['new_ms']:.4f} | {r['speedup']:.3f}x | "
              f"±{100 * r['band_rel']:.1f}% |" for r in out["timing"]]
    if out.get("files"):
        lines += ["", "## Files verified against themselves (verify_file, 2 seeds, 5 rounds): a true 1.0x", "",
                  "| file | method | old ms | new ms | eager ms | ratio | band | wall s | graphs refused |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in out["files"]:
            band = "-" if r["band_rel"] is None else f"±{100 * r['band_rel']:.1f}%"
            lines.append(f"| {r['file']} | {r['method']} | {_ms(r['old_ms'])} | {_ms(r['new_ms'])} | "
                         f"{_ms(r['eager_ms'])} | {_ms(r['ratio'])} | {band} | {r['wall_s']} | {(r['refused'] or '')[:90]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--files-limit-s", type=float, default=240)
    parser.add_argument("files", nargs="*", type=Path, help="files to verify against themselves, graphs off and on")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    out = {"device": torch.cuda.get_device_name(),
           "versions": f"torch {torch.__version__}, triton {triton.__version__}, "
                       f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
           "planted": planted(), "timing": timing_rows()}
    if args.files:
        out["files"] = file_rows(args.files, args.files_limit_s)
    (args.out / "graph_timing.json").write_text(json.dumps(out, indent=1))
    (args.out / "graph_timing.md").write_text(markdown(out))
    return 0 if all(r["refused"] == (r["case"] != "honest") and r["rng_after"] == "ok" for r in out["planted"]) else 1


if __name__ == "__main__":
    sys.exit(main())
