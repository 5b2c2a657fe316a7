#!/usr/bin/env python3
"""Benchmark `mtmc optimize` on the wild corpus: naive -> optimized vs PyTorch eager and torch.compile (issue 11).

Run from the repo root on the GPU machine::

    python benchmarks/wild_bench.py --part heldout --out $OUT/wild [--budget-s 15] [--files a.py b.py]
    python benchmarks/wild_bench.py --part heldout --shard 1/2 --out $OUT/wild1   # half the files per command
    python benchmarks/wild_bench.py --merge A/results.json B/results.json --out benchmarks/results/h200/wild
    python benchmarks/wild_bench.py --cpu-smoke --part dev --files red_row_sum_literal.py --out /tmp/smoke

Per file of ``benchmarks/wild/<part>``:

1. ``optimizer.search.optimize`` (kernel=None: every kernel of the file in turn) with the heuristic
   policy and ``search.make_verifier``, each step verified in a worker with one seed and short timing
   (as ``benchmarks/bench.py`` does), within ``--budget-s`` seconds of loop per kernel of the file (at most 3).
2. One final ``verify_file`` of the final text against the original with two seeds and more timing
   rounds: naive ms (``baseline_ms``), optimized ms (``candidate_ms``) and eager ms (``reference_ms``: the
   file's ``eager()``, the call a user writes in the inputs' precision, else the harness's reference:
   ``reference()`` or KernelBench's ``Model``), each with its noise band.
3. ``torch.compile`` of that same eager baseline, loaded in this process from the original file with the
   verifier's harness discovery (inputs from ``get_inputs`` under the verifier's timing seed), timed
   with ``triton.testing.do_bench`` interleaved with it uncompiled. Test-style files have no
   separate reference: no eager and no torch.compile figure there (the report says so).

A reference that computes wider than its inputs (``.float()`` on fp16 inputs) with no ``eager()`` is timed but
marked: its x eager and x torch.compile are shown, not counted in the geomeans (issue 35).

``results.json`` is rewritten after every file, so a run cut short still leaves numbers; ``--resume``
skips files already finished in ``--out``. ``report.md`` and ``speedup.png`` (when matplotlib imports)
are written at the end and by ``--merge``. ``--cpu-smoke`` runs the same code path under the Triton
interpreter (no timing, no torch.compile) on dev files; it refuses the held-out part.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import math
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import _bootstrap  # noqa: F401  (makes mtmc_lsp importable from an uninstalled checkout)
import bench

WILD = HERE / "wild"
PARTS = ("dev", "heldout")
# Issue 11's goal on the held-out part.
GOALS = {"structural_share": 0.80, "x_naive": 3.0, "x_compile": 1.0}
# The rule for "a structural step": a kept step of one of these kinds (optimizer/actions/base.py KINDS),
# i.e. one that changes the work a program does or the order it does it in (tiling, single_pass and
# column_block are Tiling, fusion/row_fusion/epilogue Fusion, use_dot TensorCore). Not structural: launch
# knobs (Warps, Autotune), Hoist, Precision, Prepare (name_block), and the contiguity action, which is
# kind Reordering but only adds compiler hints.
STRUCTURAL_KINDS = ("Tiling", "Pipelining", "Reordering", "Fusion", "TensorCore")
HINT_ONLY_ACTIONS = ("contiguity",)
# Seconds a file needs besides its optimize loop before the first file has shown the real figure
# (final verification ~5-10 s on the H200, torch.compile 5-20 s).
FIRST_RESERVE_S = 25.0
MIN_LOOP_S = 5.0
SMOKE_FILES = ("red_row_sum_literal.py", "red_cumsum_test.py")
TIMING_SEED = 10_000  # the verifier's first timing round uses get_inputs under this seed
TEST_STYLE_SKIP = "test-style file: its tests check against PyTorch inline; there is no separate reference to time"


def is_structural(step: dict) -> bool:
    return step.get("kind") in STRUCTURAL_KINDS and step.get("action") not in HINT_ONLY_ACTIONS


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------

def select_files(part: str, names: list[str] | None, shard: str | None) -> list[Path]:
    """The part's files (or those named, by file name or stem), then every n-th from the i-th for ``shard`` "i/n"."""
    folder = WILD / part
    available = {p.name: p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")}
    if names:
        picked = []
        for name in names:
            key = Path(name).name if Path(name).name.endswith(".py") else f"{Path(name).name}.py"
            if key not in available:
                raise SystemExit(f"wild_bench: {name} is not in {folder.relative_to(ROOT)}")
            picked.append(available[key])
    else:
        picked = list(available.values())
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        if not 1 <= index <= count:
            raise SystemExit(f"wild_bench: --shard {shard}: want i/n with 1 <= i <= n")
        picked = picked[index - 1::count]
    return picked


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --------------------------------------------------------------------------------------------
# Step 1: the MTMC loop
# --------------------------------------------------------------------------------------------

def loop_options(gpu: bool):
    """Per-step verification: one seed and short timing (the final check re-verifies with more)."""
    from mtmc_lsp.optimizer.verify import VerifyOptions

    return VerifyOptions(seeds=1, timing_rounds=3, warmup_ms=10, rep_ms=50, time_reference=False,
                         compile_timeout_s=90, run_timeout_s=45, mode="gpu" if gpu else "interpreter")


def final_options(gpu: bool):
    """The final check: two seeds, five rounds (more when noisy), the reference timed too."""
    from mtmc_lsp.optimizer.verify import VerifyOptions

    return VerifyOptions(seeds=2, timing_rounds=5, time_reference=True, compile_timeout_s=120, run_timeout_s=60,
                         mode="gpu" if gpu else "interpreter")


warm_up = bench.warm_up  # one home: the suite's bench starts its worker the same way


def step_record(attempt) -> dict:
    cand = attempt.candidate
    record = {"kernel": cand.kernel, "action": cand.action, "kind": cand.kind, "params": dict(cand.params),
              "title": cand.title, "depth": attempt.depth, "speedup": attempt.speedup,
              "changed_lines": attempt.changed_lines, "summary": attempt.summary,
              "enabling": getattr(attempt, "enabling", False), "detour": getattr(attempt, "detour", False),
              "phases": (attempt.report or {}).get("phases") or {}, "verify_s": attempt.timings.get("verify_s")}
    record["structural"] = is_structural(record)
    return record


def run_loop(text: str, path: Path, target, policy, steps: int, budget_s: float, gpu: bool,
             out: Path | None = None) -> dict:
    """``search.optimize`` over every kernel of the file; the kept steps and what the loop spent."""
    from mtmc_lsp.optimizer import search

    verify = search.make_verifier(str(path), target, loop_options(gpu))
    started = time.monotonic()
    # The loop keeps to budget_s (it cancels the running verification); the alarm is a backstop only.
    with bench.time_limit(budget_s + 90):
        # On a GPU every attempt is kept as training data (held-out files' episodes are never trained on).
        result = search.optimize(text, str(path), kernel=None, target=target, policy=policy, verify=verify,
                                 steps=steps, beam=1, budget_s=budget_s,
                                 record=bench.run_recorder(out, gpu) if out is not None else None)
    verified = [a for a in result.attempts if "verify_s" in a.timings]
    statuses: dict[str, int] = {}
    for attempt in result.attempts:
        statuses[attempt.status] = statuses.get(attempt.status, 0) + 1
    return {
        "final_text": result.final_text, "step_texts": [a.new_text for a in result.steps],
        "kept": [step_record(a) for a in result.steps],
        "attempts": len(result.attempts), "verifications": len(verified), "attempt_statuses": statuses,
        "rejected": [{"action": a.candidate.action, "kernel": a.candidate.kernel, "reason": a.reason}
                     for a in result.attempts if a.status == "rejected"][:12],
        # Every verified try in order, kept or not: which variants the loop measured and at what speed.
        "tried": [{"depth": a.depth, "kernel": a.candidate.kernel, "action": a.candidate.action,
                   "params": {k: v for k, v in a.candidate.params.items() if isinstance(v, int | float | str | bool)},
                   "status": a.status, "speedup": a.speedup, "correct": a.correct}
                  for a in verified],
        "stopped": result.stopped, "notes": list(result.notes), "policy": result.policy,
        "speed_measured": result.speed_measured, "wall_s": round(time.monotonic() - started, 2),
    }


# --------------------------------------------------------------------------------------------
# Step 2: the final verification (naive, optimized, eager, with noise bands)
# --------------------------------------------------------------------------------------------

def role_times(raw_rounds: list[dict], role: str) -> tuple[float | None, float | None]:
    """(median over rounds of the role's do_bench median, largest deviation of a round from it / median)."""
    values = sorted(row[role]["median_ms"] for row in raw_rounds or [] if role in row)
    if not values:
        return None, None
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return median, (max(abs(v - median) for v in values) / median if median else None)


def final_check(final_text: str, original: str, path: Path, target, gpu: bool, stop_at: float | None = None) -> dict:
    """Verify the final text against the original; the three times and the speedups from one report.

    ``stop_at`` (a ``time.monotonic()`` value) cancels the verification, so a hung kernel cannot take
    the command past the device's limit."""
    from mtmc_lsp.optimizer.verify import verify_file
    from mtmc_lsp.optimizer.verify.runtime.stats import SYNCHRONIZED_NEW

    started = time.monotonic()
    cancel = (lambda: time.monotonic() > stop_at) if stop_at else None
    report = verify_file(final_text, original, str(path), target, final_options(gpu), cancel=cancel)
    out = {"status": report.status, "summary": report.summary, "mode": report.mode, "device": report.device,
           "correct": report.correct, "seeds": report.seeds, "compared_against": list(report.compared_against),
           "harness": (report.harness or {}).get("style"), "error": (report.error or "")[:600] or None,
           "wall_s": round(time.monotonic() - started, 2)}
    if report.mismatch is not None:
        out["mismatch"] = report.mismatch.describe()
    speed = report.speed
    if speed is None:
        out["speed_unavailable"] = report.speed_unavailable_reason
        return out
    naive_ms, naive_band = role_times(speed.raw_rounds, "old")
    _, opt_band = role_times(speed.raw_rounds, "new")
    _, eager_band = role_times(speed.raw_rounds, "reference")
    out.update(eager_timed=speed.reference_timed, eager_upcast=speed.reference_upcast)
    out.update(
        naive_ms=speed.baseline_ms, naive_band_rel=naive_band, optimized_ms=speed.candidate_ms, optimized_band_rel=opt_band,
        eager_ms=speed.reference_ms, eager_band_rel=eager_band if speed.reference_ms is not None else None,
        x_naive=speed.speedup, x_naive_band=speed.band, believed=speed.believed, rounds=speed.rounds,
        x_eager=speed.speedup_vs_reference, bound=speed.bound, roofline_pct=speed.roofline_pct,
        compute_pct=speed.compute_pct, method=speed.method or None, sizing=speed.sizing,
    )
    if naive_ms is not None and abs(naive_ms - speed.baseline_ms) > 1e-9:
        out["naive_ms_all_rounds"] = naive_ms  # baseline_ms counts only rounds that timed both versions
    synchronized_ms, _ = role_times(speed.raw_rounds, SYNCHRONIZED_NEW)
    if synchronized_ms is not None:
        out["optimized_synchronized_ms"] = synchronized_ms  # beside a reference that could not be a CUDA graph
    return out


def optimized_ms_timed_like(final: dict, compile_sizing: dict) -> float | None:
    """The optimized time measured the way the torch.compile column was: a graph, or synchronized."""
    if compile_sizing.get("method") == "synchronized" and (final.get("sizing") or {}).get("method") != "synchronized":
        return final.get("optimized_synchronized_ms")
    return final.get("optimized_ms")


# --------------------------------------------------------------------------------------------
# Step 3: torch.compile of the reference, in this process
# --------------------------------------------------------------------------------------------

def _flatten(value) -> list:
    if isinstance(value, (list, tuple)):
        return [y for x in value for y in _flatten(x)]
    if isinstance(value, dict):
        return [y for k in sorted(value, key=str) for y in _flatten(value[k])]
    return [value]


def _agree(a, b) -> tuple[bool, float | None]:
    """Whether the compiled reference gives the eager reference's answer (loose: it only guards the timing)."""
    import torch

    xs, ys = _flatten(a), _flatten(b)
    if len(xs) != len(ys):
        return False, None
    worst = 0.0
    for x, y in zip(xs, ys):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            continue
        if x.shape != y.shape:
            return False, None
        if x.numel() == 0:
            continue
        xd, yd = x.detach().double(), y.detach().double()
        tol = 2e-2 if x.dtype in (torch.float16, torch.bfloat16) or y.dtype in (torch.float16, torch.bfloat16) else 1e-3
        err = ((xd - yd).abs() / (yd.abs() + tol)).max().item() if x.is_floating_point() else float(not torch.equal(x, y))
        if not math.isfinite(err):
            if not torch.equal(torch.isnan(xd), torch.isnan(yd)):
                return False, None
            continue
        worst = max(worst, err)
    return worst <= 1.0, worst


def reference_callable(module, harness, device: str = "cuda") -> tuple[object | None, str | None]:
    """The eager baseline as a ``fn(*inputs)``: the file's ``eager()``, else the harness's reference (built the way
    the verifier's worker builds it)."""
    import torch

    if harness.style == "test":
        return None, TEST_STYLE_SKIP
    if not harness.reference or not callable(getattr(module, harness.reference, None)):
        return None, "no reference in the harness"
    name = harness.eager if harness.eager and callable(getattr(module, harness.eager, None)) else harness.reference
    ref = getattr(module, name)
    if harness.style != "kernelbench" or not isinstance(ref, type):
        return ref, None
    init_fn = getattr(module, harness.init_inputs, None) if harness.init_inputs else None
    torch.manual_seed(0)
    model = ref(*(list(init_fn()) if init_fn else []))
    if isinstance(model, torch.nn.Module):
        model = model.to(device).eval()
    return model, None


def make_inputs(module, harness, seed: int, device: str = "cuda", **knobs) -> list:
    """``get_inputs`` as the verifier's worker calls it (device= when accepted, then moved to the device)."""
    import torch

    gen = getattr(module, harness.inputs)
    kwargs = {"device": device, **knobs} if "device" in inspect.signature(gen).parameters else dict(knobs)
    torch.manual_seed(seed)
    out = gen(**kwargs)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    return [x.to(device) if isinstance(x, torch.Tensor) and x.device.type != torch.device(device).type else x
            for x in out]


def _time_eager_and_compiled(fn, compiled, module, harness, rounds: int, device: str, knobs: dict, out: dict) -> list:
    """Rounds of the reference eager and compiled, timed as the verifier times its roles (same graphs, same rules)."""
    if not device.startswith("cuda"):
        samples = []
        for r in range(rounds):
            inputs = make_inputs(module, harness, TIMING_SEED + r, device, **knobs)
            samples.append({name: {"median_ms": bench.measure_ms(call, inputs, device, 25, 100)}
                            for name, call in (("eager", fn), ("compile", compiled))})
        return samples
    from mtmc_lsp.optimizer.verify.runtime.timing import interleaved
    from mtmc_lsp.optimizer.verify.runtime.versions import clone_inputs

    sizing: dict = {}
    raw = interleaved({"eager": lambda args: fn(*args), "compile": lambda args: compiled(*args)},
                      lambda r: make_inputs(module, harness, TIMING_SEED + r, device, **knobs), rounds, 25, 100,
                      True, clone_inputs, lambda message: None, adaptive=True, sizing=sizing, graphs=True)
    out["sizing"] = sizing
    return raw


def time_torch_compile(path: Path, text: str, timeout_s: float, rounds: int, device: str = "cuda",
                       backend: str = "inductor", knobs: dict | None = None) -> dict:
    """torch.compile(eager baseline) vs the baseline uncompiled, both timed here with do_bench, interleaved.

    ``device``, ``backend`` and ``knobs`` (get_inputs sizes) exist for the CPU test of this path."""
    import torch
    from mtmc_lsp.optimizer.verify.harness import Harness, discover_harness
    from mtmc_lsp.optimizer.verify.runtime.compare import upcast

    harness = discover_harness(text, str(path))
    if not isinstance(harness, Harness):
        return {"skipped": f"no harness: {harness.reason}"}
    if harness.style == "test":  # decided before importing: some test files run their tests at import
        return {"skipped": TEST_STYLE_SKIP, "harness": harness.style}
    started = time.monotonic()
    module = bench.load_module(path)
    try:
        fn, why = reference_callable(module, harness, device)
        if fn is None:
            return {"skipped": why, "harness": harness.style}
        torch._dynamo.reset()  # a fresh cache per file: no recompile limits carried over from the last one
        compiled = torch.compile(fn, backend=backend)
        grad = harness.style != "kernelbench"  # the worker runs KernelBench models under no_grad, functions with grad
        out: dict = {"harness": harness.style, "reference": harness.reference, "compiled": harness.eager or harness.reference}
        with torch.set_grad_enabled(grad):
            inputs = make_inputs(module, harness, TIMING_SEED, device, **(knobs or {}))
            if not harness.eager:
                out["upcast"] = upcast(harness.reference_casts_to, inputs)
            expected = fn(*inputs)
            t0 = time.perf_counter()
            try:
                with bench.time_limit(timeout_s):
                    got = compiled(*inputs)
                    bench.sync(device)
            except bench.RunTimeout as exc:
                torch._dynamo.reset()
                return {**out, "error": f"torch.compile did not finish: {exc}"}
            except Exception as exc:  # noqa: BLE001 - a reference torch.compile cannot handle is a finding
                torch._dynamo.reset()
                return {**out, "error": f"torch.compile failed: {type(exc).__name__}: {exc}"[:600]}
            out["compile_s"] = round(time.perf_counter() - t0, 2)
            out["matches_eager"], out["max_rel_diff"] = _agree(got, expected)
            del got, expected
            del inputs
            raw_rounds = _time_eager_and_compiled(fn, compiled, module, harness, rounds, device, knobs or {}, out)
        for name in ("eager", "compile"):
            median, band = role_times(raw_rounds, name)
            out[f"{name}_ms"], out[f"{name}_band_rel"] = median, band
        out["wall_s"] = round(time.monotonic() - started, 2)
        return out
    finally:
        sys.modules.pop(module.__name__, None)
        torch._dynamo.reset()
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------------

def structural_kernels(original: str, final_text: str, kept: list[dict], path: Path) -> list[dict]:
    """Per kernel of the original file: the kept steps on it, and whether one was structural.

    A kernel that a kept Fusion step removed (fused into another kernel) counts as structurally changed, and so
    does a kernel the step names as a parameter (flash_attention, offered on the scores kernel, rewrites the P @ V
    kernel into the flash kernel). An enabling step (kept within the noise for what it opens) counts only when a
    faster step was kept after it.
    """
    from mtmc_lsp.optimizer.analysis import analyze

    names = [k.name for k in analyze(original, str(path)).kernels]
    remaining = {k.name for k in analyze(final_text, str(path)).kernels}
    counted = [s for i, s in enumerate(kept) if not s.get("enabling") or any(not t.get("enabling") for t in kept[i + 1:])]
    fused = any(s["kind"] == "Fusion" for s in counted)
    rows = []
    for name in names:
        mine = [s for s in kept if s["kernel"] == name]
        named = [s for s in counted if s["kind"] == "Fusion" and s["kernel"] != name and name in (s.get("params") or {}).values()]
        removed = name not in remaining
        rows.append({"kernel": name,
                     "steps": [f"{s['action']} ({s['kind']}{', enabling' if s.get('enabling') else ''}{', detour' if s.get('detour') else ''})" for s in mine],
                     "structural": any(s["structural"] for s in mine if s in counted) or (removed and fused)
                     or any(s["structural"] for s in named),
                     "fused_away": removed and fused})
    return rows


PREFIX_TRIES = 2  # final checks of shorter runs of kept steps after the whole run fails its own


def accepted_prefix(step_texts: list[str], original: str, path: Path, target, gpu: bool, args) -> tuple[int, dict | None]:
    """How many first kept steps pass the final check (longest first, at most PREFIX_TRIES tries), and that check."""
    tried = 0
    for count in range(len(step_texts) - 1, 0, -1):
        text = step_texts[count - 1]
        if text == original or tried >= PREFIX_TRIES or (args.stop_at and time.monotonic() > args.stop_at):
            break
        tried += 1
        check = final_check(text, original, path, target, gpu, args.stop_at)
        if check["status"] == "verified":
            return count, check
    return 0, None


def bench_file(path: Path, args, target, policy, loop_budget_s: float, gpu: bool) -> dict:
    original = path.read_text()
    started = time.monotonic()
    record: dict = {"file": path.name, "path": rel(path), "part": path.parent.name}
    try:
        loop = run_loop(original, path, target, policy, args.steps, loop_budget_s, gpu, args.out)
    except Exception as exc:  # noqa: BLE001 - the file still gets its naive/eager/compile figures below
        loop = {"final_text": original, "kept": [], "error": f"{type(exc).__name__}: {exc}"[:800],
                "traceback": traceback.format_exc()[-1500:]}
    final_text = loop.pop("final_text")
    step_texts = loop.pop("step_texts", [])
    record["loop"] = loop
    record["loop_budget_s"] = round(loop_budget_s, 1)
    record["changed"] = final_text != original
    record["final"] = final_check(final_text, original, path, target, gpu, args.stop_at)
    record["fallback"] = None
    if record["changed"] and record["final"]["status"] != "verified":
        # The final check disagrees with the loop: the tool would not keep these steps. The longest run of
        # first steps that passes the same check counts (a user accepts the steps one by one, so a wrong last step
        # costs only itself); if none passes, the file counts at its naive code (1.0x), with the times of the
        # original verified against itself.
        record["final_optimized_check"] = record["final"]
        kept, status = loop["kept"], record["final"]["status"]
        prefix, check = accepted_prefix(step_texts, original, path, target, gpu, args)
        loop["kept_before_fallback"], loop["kept"] = kept, kept[:prefix]
        if prefix:
            record["fallback"] = (f"final check of the optimized text: {status}; its first {prefix} of {len(kept)} "
                                  "kept steps pass it and are counted")
            final_text, record["final"] = step_texts[prefix - 1], check
        else:
            record["fallback"] = f"final check of the optimized text: {status}; counted as the naive code"
            final_text, record["final"] = original, final_check(original, original, path, target, gpu, args.stop_at)
            record["changed"] = False
    record["kernels"] = structural_kernels(original, final_text if record["changed"] else original, loop["kept"], path)
    record["structural"] = any(k["structural"] for k in record["kernels"])
    if gpu and not args.no_compile:
        try:
            left = (args.stop_at - time.monotonic()) if args.stop_at else args.compile_timeout_s
            if left < 5:
                record["compile"] = {"skipped": "no time left in this command (the run's hard stop)"}
            else:
                record["compile"] = time_torch_compile(path, original, min(args.compile_timeout_s, left),
                                                       args.compile_rounds)
        except Exception as exc:  # noqa: BLE001 - one broken reference must not lose the file's other numbers
            record["compile"] = {"error": f"{type(exc).__name__}: {exc}"[:600], "traceback": traceback.format_exc()[-1500:]}
    else:
        record["compile"] = {"skipped": "no GPU (interpreter smoke run)" if not gpu else "--no-compile"}
    final, comp = record["final"], record["compile"]
    optimized_ms = optimized_ms_timed_like(final, comp.get("sizing") or {})
    if optimized_ms and comp.get("compile_ms") and comp.get("matches_eager", True):
        record["x_compile"] = comp["compile_ms"] / optimized_ms
    record["upcast_baseline"] = final.get("eager_upcast") or comp.get("upcast")
    if args.keep_texts and record["changed"]:
        variants = args.out / "variants"
        variants.mkdir(parents=True, exist_ok=True)
        (variants / path.name).write_text(final_text)
    record["status"] = "done"
    record["wall_s"] = round(time.monotonic() - started, 2)
    return record


# --------------------------------------------------------------------------------------------
# Summary, report, plot
# --------------------------------------------------------------------------------------------

def summarize(files: list[dict]) -> dict:
    done = [f for f in files if f.get("status") == "done"]
    kernels = [k for f in done for k in f.get("kernels", [])]
    timed = [f for f in done if f["final"].get("x_naive")]
    # Against a reference computing wider than its inputs (no eager()), x eager / x compile flatter: not counted.
    native = [f for f in timed if not f.get("upcast_baseline")]
    with_eager = [f for f in native if f["final"].get("x_eager")]
    with_compile = [f for f in native if f.get("x_compile")]
    summary = {
        "files": len(files), "files_done": len(done), "files_timed": len(timed),
        "kernels": len(kernels), "kernels_structural": sum(k["structural"] for k in kernels),
        "files_structural": sum(bool(f.get("structural")) for f in done),
        "geomean_x_naive": bench.geomean(f["final"]["x_naive"] for f in timed),
        "geomean_x_eager": bench.geomean(f["final"]["x_eager"] for f in with_eager), "files_with_eager": len(with_eager),
        "geomean_x_compile": bench.geomean(f["x_compile"] for f in with_compile), "files_with_compile": len(with_compile),
        "not_timed": [f["file"] for f in done if not f["final"].get("x_naive")],
        "not_done": [f["file"] for f in files if f.get("status") != "done"],
        "fallbacks": [f["file"] for f in done if f.get("fallback")],
        "upcast_baselines": [f["file"] for f in timed if f.get("upcast_baseline")],
    }
    share = summary["kernels_structural"] / summary["kernels"] if summary["kernels"] else None
    summary["structural_share"] = share
    summary["files_structural_share"] = summary["files_structural"] / len(done) if done else None
    g = summary
    summary["goals"] = {
        "structural_share>=0.8": None if share is None else share >= GOALS["structural_share"],
        "geomean_x_naive>=3": None if g["geomean_x_naive"] is None else g["geomean_x_naive"] >= GOALS["x_naive"],
        "geomean_x_compile>=1": None if g["geomean_x_compile"] is None else g["geomean_x_compile"] >= GOALS["x_compile"],
    }
    return summary


def _x(value, band=None) -> str:
    if not value:
        return "-"
    return f"{value:.2f}x" + (f" ±{band:.2f}" if band else "")


def _ms(value, band_rel=None) -> str:
    if value is None:
        return "-"
    text = f"{value:.4g}" if value < 1 else f"{value:.3g}" if value < 100 else f"{value:.0f}"
    return text + (f" ±{100 * band_rel:.0f}%" if band_rel is not None and band_rel >= 0.005 else "")


def _pct(a, b) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"


def _goal(met) -> str:
    return "n/a" if met is None else "**met**" if met else "not met"


def report_markdown(results: dict) -> str:
    s, env = results["summary"], results.get("environment", {})
    files = results["files"]
    gm = lambda v: f"{v:.2f}x" if v else "-"
    lines = [
        f"# Wild corpus ({results.get('part', '?')}): `mtmc optimize` vs naive, eager and torch.compile",
        "",
        (f"{env.get('gpu', results.get('mode'))}, driver {env.get('driver', '-')}, torch {env.get('torch', '-')}, "
        f"triton {env.get('triton', '-')}, Python {env.get('python', '-')}; {env.get('date', '-')}; "
        f"engine {results.get('engine', '-')}; target {results.get('target', '-')}."),
        "",
        (f"Command: `{results.get('command', '-')}`. Per file: the MTMC loop (heuristic policy, {results['settings'].get('steps')} "
        f"kept steps per kernel, beam 1, {results['settings'].get('budget_s')} s of loop per {'kernel of a file (up to 3)' if results['settings'].get('budget_per') == 'kernel' else 'file'}, each step verified "
        "with 1 seed and 3 short timing rounds), then one final verification of the final text against the original "
        "(2 seeds, 5+ interleaved do_bench rounds, L2 flushed) giving the naive, optimized and eager times; eager is "
        "the file's `eager()`, the PyTorch call a user writes in the inputs' precision, else the harness's reference "
        "where that keeps the inputs' precision (the reference stays the correctness check). torch.compile (default "
        "mode) of the same eager call is timed in the bench process by the "
        "verifier's timing code, interleaved with it uncompiled. Both time CUDA-graph replays of each call "
        "where every implementation captures and reproduces itself on new inputs (else the call and a device "
        "synchronize; the notes say which). ± is the largest deviation of a round from the median."),
        "",
        (f"Structural step: a kept step of kind {', '.join(STRUCTURAL_KINDS)} (optimizer/actions/base.py), except the "
        "hint-only `contiguity` action; a kernel fused into another by a kept Fusion step counts. Warps, Autotune, "
        "Hoist, Precision and Prepare steps do not."),
        "",
        "| goal (issue 11) | measured | target | |",
        "|---|---:|---:|---|",
        (f"| kernels with a structural step kept | {_pct(s['kernels_structural'], s['kernels'])} | 80% | "
        f"{_goal(s['goals']['structural_share>=0.8'])} |"),
        f"| geomean x naive ({s['files_timed']} files) | {gm(s['geomean_x_naive'])} | 3x | {_goal(s['goals']['geomean_x_naive>=3'])} |",
        (f"| geomean x torch.compile ({s['files_with_compile']} files) | {gm(s['geomean_x_compile'])} | 1.0x | "
        f"{_goal(s['goals']['geomean_x_compile>=1'])} |"),
        f"| geomean x eager ({s['files_with_eager']} files) | {gm(s['geomean_x_eager'])} | - | |",
        f"| files with a structural step kept | {_pct(s['files_structural'], s['files_done'])} | - | |",
        "",
    ]
    if s["not_done"]:
        lines += [f"Not run (time): {', '.join(s['not_done'])}.", ""]
    if s["not_timed"]:
        lines += [f"Not timed (final check did not measure speed): {', '.join(s['not_timed'])}.", ""]
    if s.get("upcast_baselines"):
        lines += [f"Eager baseline upcasts (a reference computing wider than its inputs, no `eager()`): x eager and "
                  f"x torch.compile shown, not counted: {', '.join(s['upcast_baselines'])}.", ""]
    if s["fallbacks"]:
        lines += [f"Final check rejected the optimized text (the first kept steps that pass it count, else the naive code): {', '.join(s['fallbacks'])}.", ""]
    lines += [
        "| file | harness | naive ms | MTMC ms | eager ms | compile ms | x naive | x eager | x compile | structural | kept steps | loop s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for f in files:
        if f.get("status") != "done":
            lines.append(f"| {f['file']} | - | | | | | | | | | {f.get('status', '?')}: {f.get('error', '')[:120]} | |")
            continue
        fin, comp, loop = f["final"], f.get("compile", {}), f.get("loop", {})
        kept = ", ".join(f"{s['action']}@{s['kernel']}" for s in loop.get("kept", [])) or "-"
        comp_ms = _ms(comp.get("compile_ms"), comp.get("compile_band_rel")) if comp.get("compile_ms") else "-"
        if comp.get("compile_ms") and not comp.get("matches_eager", True):
            comp_ms += " (differs from eager: not counted)"
        if f.get("upcast_baseline"):
            comp_ms += f" (upcast baseline, {f['upcast_baseline']}: not counted)"
        lines.append(
            f"| {f['file']} | {fin.get('harness') or '-'} | {_ms(fin.get('naive_ms'), fin.get('naive_band_rel'))} | "
            f"{_ms(fin.get('optimized_ms'), fin.get('optimized_band_rel'))} | {_ms(fin.get('eager_ms'), fin.get('eager_band_rel'))} | "
            f"{comp_ms} | {_x(fin.get('x_naive'), fin.get('x_naive_band'))} | {_x(fin.get('x_eager'))} | {_x(f.get('x_compile'))} | "
            f"{'yes' if f.get('structural') else 'no'} | {kept} | {loop.get('wall_s', '-')} |")
    lines += ["", "## Per kernel", "", "| file | kernel | kept steps | structural |", "|---|---|---|---|"]
    for f in files:
        for k in f.get("kernels", []):
            steps = ", ".join(k["steps"]) or ("fused into another kernel" if k["fused_away"] else "-")
            lines.append(f"| {f['file']} | `{k['kernel']}` | {steps} | {'yes' if k['structural'] else 'no'} |")
    notes = []
    for f in files:
        if f.get("status") != "done":
            continue
        fin, comp, loop = f["final"], f.get("compile", {}), f.get("loop", {})
        bits = []
        if fin.get("status") != "verified":
            bits.append(f"final check {fin.get('status')}: {fin.get('summary', '')[:200]}")
        if f.get("fallback"):
            bits.append(f["fallback"])
        if fin.get("believed") is False:
            bits.append("the speedup over naive was not confirmed by the verifier's recheck (counted as measured)")
        if comp.get("skipped"):
            bits.append(f"torch.compile skipped: {comp['skipped']}")
        if comp.get("error"):
            bits.append(f"torch.compile: {comp['error'][:200]}")
        if loop.get("error"):
            bits.append(f"loop error: {loop['error'][:200]}")
        methods = {(fin.get("sizing") or {}).get("method"), (comp.get("sizing") or {}).get("method")} - {None}
        if methods:
            refused = [r for r in ((fin.get("sizing") or {}).get("graph_refused"),
                                   (comp.get("sizing") or {}).get("graph_refused")) if r]
            bits.append("timed as " + " and ".join(sorted(methods)) + (f" ({refused[0][:160]})" if refused else ""))
        if comp.get("eager_ms") and fin.get("eager_ms"):
            bits.append(f"eager here {comp['eager_ms']:.4g} ms vs in the verifier {fin['eager_ms']:.4g} ms")
        bits.append(f"loop stopped: {loop.get('stopped', '-')}, {loop.get('verifications', 0)} verifications")
        notes.append(f"- {f['file']}: " + "; ".join(bits))
    lines += ["", "## Notes per file", "", *notes, ""]
    lines += [f"Total wall time {results.get('total_wall_s', 0):.0f} s.", ""]
    return "\n".join(lines)


def plot(results: dict, out: Path) -> str:
    """speedup.png: per file, the optimized code over naive, eager and torch.compile (log scale)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no plot: matplotlib is not importable here ({exc}); rerun with --merge where it is"
    files = [f for f in results["files"] if f.get("status") == "done" and f["final"].get("x_naive")]
    if not files:
        return "no plot: no file was timed"
    series = [("x naive", [f["final"].get("x_naive") for f in files], "#4c72b0"),
              ("x eager", [f["final"].get("x_eager") for f in files], "#dd8452"),
              ("x torch.compile", [f.get("x_compile") for f in files], "#55a868")]
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * len(files) + 2), 5))
    for i, (label, values, color) in enumerate(series):
        xs = [j + (i - 1) * width for j, v in enumerate(values) if v]
        ax.bar(xs, [v for v in values if v], width, label=label, color=color)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(GOALS["x_naive"], color="#4c72b0", linestyle="--", linewidth=0.8, label="goal: 3x naive (geomean)")
    ax.set_xticks(range(len(files)))
    ax.set_xticklabels([Path(f["file"]).stem for f in files], rotation=60, ha="right", fontsize=8)
    s = results["summary"]
    ax.set_title(f"MTMC-optimized wild kernels ({results.get('part')}), {results.get('environment', {}).get('gpu', '')}: "
                 f"geomean {s['geomean_x_naive'] or 0:.2f}x naive, {s['geomean_x_compile'] or 0:.2f}x torch.compile",
                 fontsize=9)
    ax.set_ylabel("speedup of the optimized code (log)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "speedup.png", dpi=120)
    plt.close(fig)
    return "speedup.png"


def write_all(out: Path, results: dict, final: bool) -> None:
    results["summary"] = summarize(results["files"])
    bench.write_results(out, results)
    if final:
        (out / "report.md").write_text(report_markdown(results))
        results["plot"] = plot(results, out)
        bench.write_results(out, results)


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------

def environment(gpu: bool) -> dict:
    if gpu:
        return bench.environment()
    import platform

    import torch
    import triton

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "python": platform.python_version(),
            "torch": torch.__version__, "triton": triton.__version__, "gpu": "CPU (Triton interpreter)"}


def run(args) -> int:
    gpu = not args.cpu_smoke
    if gpu:
        import torch

        if not torch.cuda.is_available():
            print("wild_bench: no CUDA GPU here; use --cpu-smoke --part dev", file=sys.stderr)
            return 2
    elif args.part == "heldout":
        print("wild_bench: the held-out part is measured on the GPU only (never looked at while developing)",
              file=sys.stderr)
        return 2
    files = select_files(args.part, args.files or (list(SMOKE_FILES) if args.cpu_smoke else None), args.shard)
    args.out.mkdir(parents=True, exist_ok=True)
    libcst = bench.libcst_status(args.wheels)
    if not libcst["available"]:
        print(f"wild_bench: libcst is not importable ({libcst.get('error')}); the actions need it. "
              "Carry a wheel in .whl/ (docs/benchmarks.md).", file=sys.stderr)
        return 2
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile(args.target)
    policy = bench.make_policy(args.policy)
    previous = {}
    resume = args.out / "results.json" if args.resume == "out" else Path(args.resume) if args.resume else None
    if resume is not None and resume.exists():
        old = json.loads(resume.read_text())
        previous = {f["file"]: f for f in old.get("files", []) if f.get("status") == "done"}
    started = time.monotonic()
    # Past this, a running final check is cancelled and torch.compile skipped (the device allows 600 s a command).
    args.stop_at = started + args.deadline_s + args.grace_s
    results = {
        "schema": 1, "bench": "wild", "part": args.part, "mode": "gpu" if gpu else "cpu-interpreter",
        "command": "python benchmarks/wild_bench.py " + " ".join(sys.argv[1:]),
        "environment": environment(gpu), "engine": bench.engine_version(), "target": target.key, "libcst": libcst,
        "policy": policy.describe(),
        "structural_rule": {"kinds": list(STRUCTURAL_KINDS), "except_actions": list(HINT_ONLY_ACTIONS)},
        "settings": {"steps": args.steps, "budget_s": args.budget_s, "budget_per": "kernel", "deadline_s": args.deadline_s,
                     "compile_timeout_s": args.compile_timeout_s, "compile_rounds": args.compile_rounds,
                     "shard": args.shard, "files": [p.name for p in files]},
        "files": [previous[p.name] if p.name in previous else {"file": p.name, "path": rel(p), "status": "pending"}
                  for p in files],
    }
    write_all(args.out, results, final=False)
    todo = [p for p, f in zip(files, results["files"]) if f.get("status") != "done"]
    if todo and args.deadline_s - (time.monotonic() - started) - FIRST_RESERVE_S >= MIN_LOOP_S:
        results["warm_up"] = warm_up(todo[0], target, gpu)
        print(f"wild_bench: verification worker started ({results['warm_up']['wall_s']:.0f} s)", flush=True)
    spent: list[float] = []  # per file: seconds besides the loop, to plan the rest
    for index, path in enumerate(files):
        if results["files"][index].get("status") == "done":
            print(f"wild_bench: {path.name}: done in an earlier run (--resume)", flush=True)
            continue
        elapsed = time.monotonic() - started
        reserve = max(spent) if spent else FIRST_RESERVE_S
        # The loop visits the file's kernels in turn and splits its budget among them: --budget-s is per kernel
        # (up to 3 kernels' worth), or a three-kernel chain gets 5 s a kernel, less than one first verification.
        loop_budget = min(args.budget_s * min(3, bench.loop_kernels(path.read_text(), path)), args.deadline_s - elapsed - reserve)
        if loop_budget < MIN_LOOP_S:
            results["files"][index].update(status="not_run", error=f"run deadline ({args.deadline_s:.0f} s): rerun with --resume")
            print(f"wild_bench: {path.name}: not run (deadline; rerun with --resume)", flush=True)
            continue
        print(f"wild_bench: [{index + 1}/{len(files)}] {path.name}: loop {loop_budget:.0f} s", flush=True)
        try:
            record = bench_file(path, args, target, policy, loop_budget, gpu)
            spent.append(record["wall_s"] - record["loop"].get("wall_s", loop_budget))
        except Exception as exc:  # noqa: BLE001 - one broken file must not lose the others
            record = {"file": path.name, "path": rel(path), "status": "error", "error": f"{type(exc).__name__}: {exc}"[:800],
                      "traceback": traceback.format_exc()[-2000:]}
        results["files"][index] = record
        results["total_wall_s"] = round(time.monotonic() - started, 1)
        write_all(args.out, results, final=False)
        fin = record.get("final", {})
        print(f"wild_bench: {path.name}: {record.get('status')} kept={len(record.get('loop', {}).get('kept', []))} "
              f"structural={record.get('structural')} x_naive={_x(fin.get('x_naive'))} x_eager={_x(fin.get('x_eager'))} "
              f"x_compile={_x(record.get('x_compile'))} ({record.get('wall_s', 0):.0f} s)"
              + (f" ERROR {record.get('error')}" if record.get("error") else ""), flush=True)
    bench.close_worker_pools()
    results["total_wall_s"] = round(time.monotonic() - started, 1)
    write_all(args.out, results, final=True)
    s = results["summary"]
    print(f"wild_bench: {s['files_done']}/{s['files']} files, structural {_pct(s['kernels_structural'], s['kernels'])} kernels, "
          f"geomean x naive {_x(s['geomean_x_naive'])}, x eager {_x(s['geomean_x_eager'])}, "
          f"x compile {_x(s['geomean_x_compile'])}; {results['total_wall_s']:.0f} s -> {args.out}", flush=True)
    if s["not_done"]:
        print(f"wild_bench: not run: rerun with --files {' '.join(s['not_done'])} (then --merge the results)", flush=True)
    return 0


def merge(paths: list[Path], out: Path) -> int:
    """Join the results of several runs (shards, or a run and its --resume) into one report; later files win."""
    runs = [json.loads(p.read_text()) for p in paths]
    by_file: dict[str, dict] = {}
    for r in runs:
        for f in r.get("files", []):
            if f.get("status") == "done" or f["file"] not in by_file:
                by_file[f["file"]] = f
    merged = dict(runs[0])
    merged["files"] = [by_file[k] for k in sorted(by_file)]
    # Inputs outside the checkout (a device machine's output folder) are named by their last two parts:
    # committed results name no machine path.
    merged["merged_from"] = [{"path": rel(p) if p.resolve().is_relative_to(ROOT) else "/".join(p.parts[-2:]),
                              "command": r.get("command"), "date": r.get("environment", {}).get("date"),
                              "total_wall_s": r.get("total_wall_s")} for p, r in zip(paths, runs)]
    merged["total_wall_s"] = sum(r.get("total_wall_s") or 0 for r in runs)
    merged["command"] = " ; ".join(r.get("command", "?") for r in runs)
    out.mkdir(parents=True, exist_ok=True)
    write_all(out, merged, final=True)
    s = merged["summary"]
    print(f"wild_bench merge: {s['files_done']}/{s['files']} files; geomean x naive {_x(s['geomean_x_naive'])}, "
          f"x compile {_x(s['geomean_x_compile'])} -> {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wild_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=PARTS, default="dev")
    parser.add_argument("--files", nargs="+", help="file names (or stems) of the part; default: all of it")
    parser.add_argument("--shard", help="i/n: every n-th file of the selection, from the i-th (split a run over commands)")
    parser.add_argument("--out", type=Path, default=Path("wild-results"))
    parser.add_argument("--resume", nargs="?", const="out", default=None, metavar="RESULTS_JSON",
                        help="skip files already done in --out/results.json (or in the results file given)")
    parser.add_argument("--budget-s", type=float, default=15.0,
                        help="seconds of optimize loop per kernel of a file (a file gets up to 3 kernels' worth)")
    parser.add_argument("--deadline-s", type=float, default=520.0,
                        help="start no file that cannot finish before this many seconds (device limit: 600 per command)")
    parser.add_argument("--grace-s", type=float, default=50.0,
                        help="after --deadline-s plus this, cancel a running final check and skip torch.compile")
    # 4 since session 14: tile, grouped order, persistent tiles and their TMA loads (the last three pay together).
    parser.add_argument("--steps", type=int, default=4, help="kept steps per kernel at most")
    parser.add_argument("--policy", default="heuristic")
    parser.add_argument("--target", default="h200")
    parser.add_argument("--compile-timeout-s", type=float, default=60.0)
    parser.add_argument("--compile-rounds", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--keep-texts", action="store_true", help="also write each optimized file under --out/variants/")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="folder of wheels (libcst) unpacked when missing")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="the same path under the Triton interpreter (dev files, no timing, no torch.compile)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="RESULTS_JSON", help="merge runs into --out and report")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    if args.cpu_smoke:
        args.budget_s = min(args.budget_s, 40.0)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
