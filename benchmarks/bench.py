#!/usr/bin/env python3
"""Benchmark the suite: naive Triton -> MTMC-optimized Triton vs PyTorch eager, torch.compile and the roofline.

Run from the repo root on a GPU machine: ``python3 benchmarks/bench.py --out DIR`` (or ``mtmc bench``).
For every kernel of ``benchmarks/suite``: optimize it with a fixed step budget, check every variant
against the high-precision reference on fresh inputs, then time all variants interleaved over
rounds (``triton.testing.do_bench`` medians, L2 flushed). Both ceilings (copy bandwidth, bf16 matmul
rate) are measured in the same run; each kernel's floor is max(bytes / bandwidth, FLOPs / peak).
Writes ``results.json`` (after every kernel, so a cut-short run still leaves numbers) and a report.

``--cpu-smoke`` runs every naive kernel under the Triton interpreter at tiny sizes instead and
checks it (and the eager baseline) against the reference: no timing, no GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import _bootstrap  # noqa: E402,F401  (makes mtmc_lsp importable from an uninstalled checkout)

DEFAULT_SUITE = HERE / "suite"
# Relative L2 error allowed against the reference, by output dtype (fp32 math vs half-precision storage).
TOLERANCE = {"float32": 1e-4, "float64": 1e-8, "float16": 1e-2, "bfloat16": 2e-2}
# Every element must also sit within this many tolerances of the reference, scaled by |ref| + rms(ref):
# the L2 norm alone would let one wrong 32x32 tile of an 8192^2 product through.
ELEMENT_SLACK = 10.0
# A kept step must beat the current version by more than the timing noise (same-version spread is ~1%).
KEEP_MARGIN = 0.97
# Seconds one kernel needs besides its optimize loop when budgeting the run (H200 estimates: Triton JIT,
# two correctness seeds, torch.compile default, interleaved timing; compute-bound kernels add max-autotune).
RESERVE_S = {"memory": 6.0, "compute": 30.0}  # first H200 run: 2-4 s and 9-31 s
MIN_OPTIMIZE_S = 8.0


# --------------------------------------------------------------------------------------------
# Suite discovery
# --------------------------------------------------------------------------------------------

def load_module(path: Path, name: str | None = None) -> types.ModuleType:
    """Import a Python file under a unique module name (Triton reads kernel source from the file)."""
    name = name or f"_bench_{path.stem}_{abs(hash(str(path))) % 10**8}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def discover(suite: Path, only: list[str] | None) -> list[Path]:
    """The suite files that define the full harness, in a stable order (or the order asked for)."""
    from suite import suite_files  # benchmarks/suite: the suite's own files and the ones kept elsewhere

    files = suite_files(suite)
    if only:
        missing = [k for k in only if k not in files]
        if missing:
            raise SystemExit(f"unknown kernels: {', '.join(missing)}; the suite has: {', '.join(files)}")
        return [files[k] for k in only]
    return list(files.values())


def check_harness(module: types.ModuleType, stem: str) -> list[str]:
    """What a suite file is missing, if anything."""
    needed = [stem, "get_inputs", "reference", "eager", "roofline_cost"]
    return [n for n in needed if not callable(getattr(module, n, None))]


# --------------------------------------------------------------------------------------------
# Correctness
# --------------------------------------------------------------------------------------------

def relative_error(out, ref) -> tuple[float, float]:
    """(||out - ref|| / ||ref||, max |out - ref| / (|ref| + rms(ref))) in float64; inf for a wrong shape or
    any non-finite value."""
    import torch

    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(ref.shape):
        return math.inf, math.inf
    o, r = out.detach().double(), ref.detach().double()
    if not bool(torch.isfinite(o).all()):
        return math.inf, math.inf
    diff = (o - r).abs_()
    norm = r.norm().item() or 1.0
    rms = norm / math.sqrt(max(1, r.numel()))
    worst = (diff / (r.abs() + rms)).max().item() if r.numel() else 0.0
    return diff.norm().item() / norm, worst


def tolerance_for(module, ref) -> float:
    return float(getattr(module, "TOLERANCE", TOLERANCE.get(str(ref.dtype).replace("torch.", ""), 1e-4)))


def poison_allocator(nbytes: int, device: str, copies: int = 3) -> None:
    """Leave NaN-filled blocks in the caching allocator so an output a kernel forgets to write shows up."""
    import torch

    if not device.startswith("cuda"):
        return
    blocks = [torch.full((nbytes // 4 + 1,), float("nan"), device=device) for _ in range(copies)]
    del blocks


def check_variant(fn, inputs, ref, tol: float, device: str) -> dict:
    """Run ``fn`` once on clones of the inputs and compare with the reference; also catch input mutation."""
    import torch

    clones = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    poison_allocator(ref.numel() * ref.element_size(), device)
    try:
        out = fn(*clones)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except Exception as exc:  # a variant that crashes is reported, not fatal to the run
        return {"correct": False, "rel_err": None, "error": f"{type(exc).__name__}: {exc}"[:500]}
    err, worst = relative_error(out, ref)
    del out
    mutated = any(
        isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(clones, inputs)
    )
    correct = err <= tol and worst <= ELEMENT_SLACK * tol and not mutated
    result = {"correct": bool(correct), "rel_err": err if math.isfinite(err) else None,
              "max_elem_err": worst if math.isfinite(worst) else None}
    if mutated:
        result["error"] = "modified its inputs in place"
    elif not math.isfinite(err):
        result["error"] = "wrong shape or non-finite output"
    elif err > tol:
        result["error"] = f"relative error {err:.3g} over tolerance {tol:g}"
    elif worst > ELEMENT_SLACK * tol:
        result["error"] = f"an element is off by {worst:.3g} of |ref| + rms(ref) (allowed {ELEMENT_SLACK * tol:g})"
    return result


# --------------------------------------------------------------------------------------------
# Environment and ceilings
# --------------------------------------------------------------------------------------------

def _wheel_fits(name: str) -> bool:
    """Whether a wheel's file name fits this interpreter (pure Python, or built for this CPython)."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return "-none-any" in name or f"-{tag}-" in name or ("-abi3-" in name and "x86_64" in name)


def libcst_status(wheels: Path | None) -> dict:
    """Whether libcst (the micro coder's rewriting library) imports; if not, unpack it from wheels when given.

    A wheel is a zip archive: unpacking it into a temporary folder on ``sys.path`` is all an import
    needs, so this works where pip cannot install anything.
    """
    try:
        import libcst

        return {"available": True, "version": getattr(libcst, "__version__", "present"), "source": "installed"}
    except ImportError as exc:
        error = str(exc)
    found = [p for p in sorted(wheels.glob("*.whl")) if _wheel_fits(p.name)] if wheels and wheels.is_dir() else []
    if found:
        import zipfile

        target = Path(tempfile.mkdtemp(prefix="mtmc-wheels-"))
        for wheel in found:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(target)
        sys.path.insert(0, str(target))
        # Worker processes (verification, compilation) inherit it through PYTHONPATH.
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
        importlib.invalidate_caches()
        try:
            import libcst

            return {"available": True, "version": getattr(libcst, "__version__", "present"),
                    "source": f"unpacked from {', '.join(p.name for p in found)}"}
        except ImportError as exc:
            error = f"unpacked {', '.join(p.name for p in found)} but the import still fails: {exc}"
    elif wheels:
        error += f" (no wheel for this Python in {wheels})"
    return {"available": False, "version": None, "source": None, "error": error}


def engine_version() -> str:
    """The engine's commit: ``MTMC_ENGINE`` when the caller sets it (the GPU machine's copy of the tree carries git
    metadata that can be stale: name the local commit there), else git's HEAD and whether optimizer/ has edits."""
    given = os.environ.get("MTMC_ENGINE", "").strip()
    if given:
        return f"{given} (named by the caller)"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "optimizer"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return f"{head}{' + uncommitted optimizer/ edits' if dirty else ''}" if head else "unknown (no git)"


def environment() -> dict:
    import torch
    import triton

    info = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
        "engine": engine_version(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), sm_count=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1), l2_bytes=getattr(props, "L2_cache_size", None))
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20,
            ).stdout.strip().splitlines()
            if smi:
                driver, clock, power = (s.strip() for s in (smi[0].split(",") + ["", "", ""])[:3])
                info.update(driver=driver, max_sm_clock=clock, power_limit=power)
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    return info


def measure_ceilings(device: str) -> dict:
    """The two roofs, measured now: device-to-device copy (read + write bytes) and a large bf16 matmul."""
    import torch

    gpu = device.startswith("cuda")
    # 1 GiB copied (2 GiB of traffic) and an 8192^3 bf16 product on a GPU; small fp32 stand-ins on a CPU.
    src = torch.randn((1 << 29) if gpu else (1 << 22), device=device, dtype=torch.bfloat16 if gpu else torch.float32)
    dst = torch.empty_like(src)
    copy_ms = measure_ms(lambda: dst.copy_(src), [], device, 25, 200)
    copy_gbs = 2 * src.numel() * src.element_size() / (copy_ms * 1e-3) / 1e9
    del src, dst
    m = 8192 if gpu else 256
    dtype = torch.bfloat16 if gpu else torch.float32
    a = torch.randn(m, m, device=device, dtype=dtype)
    b = torch.randn(m, m, device=device, dtype=dtype)
    mm_ms = measure_ms(lambda: a @ b, [], device, 25, 200)
    del a, b
    if gpu:
        torch.cuda.empty_cache()
    return {"copy_gbs": copy_gbs, "copy_ms": copy_ms, "matmul_tflops": 2 * m**3 / (mm_ms * 1e-3) / 1e12,
            "matmul_ms": mm_ms, "matmul_shape": [m, m, m], "matmul_dtype": str(dtype).replace("torch.", "")}


# --------------------------------------------------------------------------------------------
# The optimizer: the MTMC loop when it exists, else greedy policy-ranked steps verified here
# --------------------------------------------------------------------------------------------

class RunTimeout(Exception):
    """A torch.compile or an optimize loop ran past its limit."""


class time_limit:
    """Raise ``RunTimeout`` in the main thread after ``seconds`` (SIGALRM; a no-op elsewhere)."""

    def __init__(self, seconds: float):
        self.seconds = max(1, int(math.ceil(seconds)))
        self.armed = False

    def _fire(self, signum, frame):
        raise RunTimeout(f"over the {self.seconds} s limit")

    def __enter__(self):
        if hasattr(signal, "SIGALRM") and _in_main_thread():
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.alarm(self.seconds)
            self.armed = True
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def optimizer_status(libcst: dict, method: str = "auto") -> dict:
    """Which parts of the MTMC engine import here: the loop, the actions, the policy, the verifier."""
    status: dict = {"libcst": libcst["available"]}
    for part, module in (("search", "mtmc_lsp.optimizer.search"), ("actions", "mtmc_lsp.optimizer.actions"),
                         ("policy", "mtmc_lsp.optimizer.policy"), ("verify", "mtmc_lsp.optimizer.verify")):
        try:
            mod = importlib.import_module(module)
            status[part] = True
            if part == "actions":
                status["action_names"] = sorted(getattr(mod, "ACTIONS", {}))
            if part == "search":
                status["search_has_optimize"] = callable(getattr(mod, "optimize", None))
        except Exception as exc:  # noqa: BLE001 - any import failure means "not usable here"
            status[part] = False
            status[f"{part}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    usable = {"none": True, "greedy": bool(status.get("actions") and status.get("action_names"))}
    usable["search"] = usable["greedy"] and bool(status.get("search_has_optimize") and status.get("verify"))
    if method == "auto":
        status["method"] = "search" if usable["search"] else "greedy" if usable["greedy"] else "none"
    else:
        status["method"] = method if usable[method] else "none"
    if status["method"] == "none" and method != "none":
        if not libcst["available"]:
            status["note"] = ("libcst is not importable on this machine and the micro coder needs it: no optimized "
                              "variants. Carry libcst wheels in --wheels DIR (default .whl/) to enable the optimizer.")
        else:
            status["note"] = f"optimizer method {method!r} not available: " + "; ".join(
                f"{k}: {v}" for k, v in status.items() if k.endswith("_error"))
    return status


def make_policy(name: str):
    """The policy that ranks candidates (heuristic by default: the GPU machine has no llama.cpp)."""
    from mtmc_lsp.optimizer.policy import make_policy as factory
    from mtmc_lsp.settings import Settings

    return factory(Settings(policy=name))


def run_recorder(out: Path, gpu: bool):
    """Every attempt a GPU measured, kept as training data under ``OUT/.mtmc/trajectories`` (none on a CPU)."""
    from mtmc_lsp.optimizer.trajectories import TrajectoryRecorder

    return TrajectoryRecorder(Path(out)) if gpu else None


def run_search(text: str, path: Path, args, target, device: str, budget_s: float) -> dict:
    """The MTMC loop (``optimizer.search.optimize``) over every kernel of the file, verified in its workers."""
    from mtmc_lsp.optimizer import search
    from mtmc_lsp.optimizer.verify import VerifyOptions

    # One seed and short timing per step: the bench re-checks the final version on two fresh seeds
    # and times it interleaved with everything else, so each step only has to be right and faster.
    options = VerifyOptions(seeds=1, timing_rounds=3, warmup_ms=10, rep_ms=50, time_reference=False,
                            mode="auto" if device.startswith("cuda") else "interpreter")
    verify = search.make_verifier(str(path), target, options)
    # The loop keeps to budget_s itself; the alarm is only a backstop against a verification that hangs.
    with time_limit(budget_s + 60):
        result = search.optimize(text, str(path), kernel=None, target=target, policy=make_policy(args.policy),
                                 verify=verify, steps=args.steps, beam=args.beam, budget_s=budget_s,
                                 record=run_recorder(args.out, device.startswith("cuda")))
    attempts = []
    for attempt in result.attempts:
        entry = attempt.to_json()
        report = entry.pop("report", None) or {}  # the full verification report is large; its summary stays
        entry["phases"] = report.get("phases") or {}  # where the verification's seconds went (session 9: 10-16 s firsts)
        attempts.append(entry)
    # Only attempts that reached the verifier cost a verification (not: could not apply, unchanged, a cycle).
    verified = [a for a in result.attempts if "verify_s" in a.timings]
    return {"final_text": result.final_text, "steps": attempts, "kept": len(result.steps),
            "verifications": len(verified), "stopped": result.stopped, "notes": list(result.notes),
            "policy": result.policy, "speed_measured": result.speed_measured}


def loop_kernels(text: str, path: Path) -> int:
    """How many kernels ``optimize(kernel=None)`` visits in the file, splitting its budget among them."""
    from mtmc_lsp.optimizer.analysis import analyze

    return max(1, len(analyze(text, str(path)).kernels))


def warm_up(path: Path, target, gpu: bool) -> dict:
    """Start the verification worker (torch import, CUDA context) before the first loop, so that file's
    loop budget is not spent on it: one untimed check of the file against itself."""
    from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file

    started = time.monotonic()
    text = path.read_text()
    options = VerifyOptions(seeds=1, timing=False, mode="gpu" if gpu else "interpreter")
    report = verify_file(text, text, str(path), target, options)
    return {"file": path.name, "status": report.status, "wall_s": round(time.monotonic() - started, 2)}


def close_worker_pools() -> None:
    """Stop the verifier's worker processes (they hold a CUDA context and cached memory) at the end of a run."""
    try:
        from mtmc_lsp.optimizer.verify import api

        for pool in list(getattr(api, "_pools", {}).values()):
            pool.close()
        getattr(api, "_pools", {}).clear()
    except Exception:  # noqa: BLE001 - nothing was started
        pass


class GreedyOptimizer:
    """Without the MTMC loop: apply the top policy-ranked candidate, verify and time it here, keep it if faster."""

    def __init__(self, args, target, device: str, workdir: Path):
        from mtmc_lsp.optimizer import actions

        self.actions = actions
        self.args = args
        self.target = target
        self.device = device
        self.workdir = workdir
        self.history: dict[str, list] = {}
        self.action_errors: dict[str, str] = {}
        try:
            self.policy = make_policy(args.policy)
            self.policy_error = None
        except Exception as exc:  # noqa: BLE001 - rank in registry order instead
            self.policy, self.policy_error = None, f"{type(exc).__name__}: {exc}"[:300]

    def next_candidate(self, analysis, tried: set[str]):
        """The best untried candidate over all kernels of the file: each kernel's list ranked by the policy
        with that kernel's own state and history, then the highest score across kernels (file order on ties)."""
        best, best_score = None, -math.inf
        for kernel in analysis.kernels:
            candidates = [c for c in self.applicable(analysis, kernel) if c.key() not in tried]
            if not candidates:
                continue
            ranked = self._rank(analysis, kernel, candidates)
            top = ranked[0]
            score = top[1] if top[1] is not None else -len(tried)
            if best is None or score > best_score:
                best, best_score = top[0], score
        return best, best_score

    def applicable(self, analysis, kernel) -> list:
        """``actions.applicable``; when one action crashes, the others' candidates still count (error noted)."""
        try:
            return self.actions.applicable(analysis, kernel, self.target)
        except Exception:  # noqa: BLE001 - isolate the failing action below
            pass
        out = []
        for name, action in self.actions.ACTIONS.items():
            if getattr(action, "changes_numerics", False):
                continue
            try:
                out.extend(action.candidates(analysis, kernel, self.target))
            except Exception as exc:  # noqa: BLE001
                if not isinstance(exc, self.actions.ActionError):
                    self.action_errors[name] = f"{type(exc).__name__}: {exc}"[:300]
        return out

    def _rank(self, analysis, kernel, candidates: list) -> list[tuple]:
        """``[(candidate, score)]`` best first; registry order (score None) when no policy ranks."""
        if self.policy is not None:
            try:
                from mtmc_lsp.optimizer.policy import PolicyState

                state = PolicyState(analysis, kernel, self.target, list(self.history.get(kernel.name, [])))
                return [(r.candidate, r.score) for r in self.policy.rank(state, candidates)]
            except Exception as exc:  # noqa: BLE001 - fall back to the registry order, and say so
                self.policy_error = f"rank failed: {type(exc).__name__}: {exc}"[:300]
        return [(c, None) for c in candidates]

    def remember(self, candidate, correct: bool | None, speedup: float | None, kept: bool) -> None:
        """Feed the outcome back so the policy's history penalties see it on the next step."""
        try:
            from mtmc_lsp.optimizer.policy import StepOutcome

            outcome = StepOutcome(candidate, compiled=correct is not None, correct=correct, speedup=speedup,
                                  reward=None, kept=kept)
            self.history.setdefault(candidate.kernel, []).append(outcome)
        except Exception:  # noqa: BLE001 - history is advisory
            pass

    def run(self, module, stem: str, text: str, inputs, ref, tol: float, deadline: float) -> dict:
        from mtmc_lsp.optimizer.analysis import analyze

        host = getattr(module, stem)
        best_ms = measure_ms(host, inputs, self.device, 10, 50)
        best_text, tried, steps = text, set(), []
        for index in range(self.args.steps):
            if time.monotonic() > deadline:
                steps.append({"index": index, "status": "stopped", "reason": "time budget"})
                break
            candidate, score = self.next_candidate(analyze(best_text), tried)
            if candidate is None:
                steps.append({"index": index, "status": "stopped", "reason": "no untried candidate"})
                break
            tried.add(candidate.key())
            step = {"index": index, "candidate": candidate.to_json(), "key": candidate.key(),
                    "score": score if math.isfinite(score) else None}
            correct, speedup = None, None
            try:
                edit = self.actions.apply_candidate(best_text, candidate, self.target)
                path = self.workdir / f"{stem}_step{index:02d}.py"
                path.write_text(edit.new_text)
                fn = getattr(load_module(path), stem)
                check = check_variant(fn, inputs, ref, tol, self.device)
                correct = check["correct"]
                step.update(rel_err=check["rel_err"])
                if not correct:
                    step.update(status="rejected", reason=check.get("error", "incorrect"))
                else:
                    ms = measure_ms(fn, inputs, self.device, 10, 50)
                    speedup = best_ms / ms
                    step.update(ms=ms, previous_ms=best_ms, speedup=speedup)
                    if ms < best_ms * KEEP_MARGIN:
                        best_ms, best_text = ms, edit.new_text
                        step["status"] = "accepted"
                    else:
                        step.update(status="rejected", reason="not faster")
            except Exception as exc:  # noqa: BLE001 - a failing action is a rejected step, not a crash
                step.update(status="rejected", reason=f"{type(exc).__name__}: {exc}"[:300])
            self.remember(candidate, correct, speedup, step.get("status") == "accepted")
            sync(self.device)
            steps.append(step)
        verifications = sum(1 for s in steps if "candidate" in s)
        result = {"final_text": best_text, "steps": steps, "verifications": verifications}
        if self.policy_error:
            result["policy_error"] = self.policy_error
        if self.action_errors:
            result["action_errors"] = self.action_errors
        return result


# --------------------------------------------------------------------------------------------
# torch.compile and timing
# --------------------------------------------------------------------------------------------

def compiled(fn, mode: str | None):
    """torch.compile of a private copy of ``fn`` (its own code object, so each mode gets its own cache)."""
    import torch

    fresh = types.FunctionType(fn.__code__.replace(), fn.__globals__, f"{fn.__name__}_{mode or 'default'}",
                               fn.__defaults__, fn.__closure__)
    return torch.compile(fresh, mode=mode) if mode else torch.compile(fresh)


def warm_compile(fn, inputs, device: str, timeout_s: float) -> tuple[float | None, str | None]:
    """Run once to compile; return (seconds, error)."""
    start = time.perf_counter()
    try:
        with time_limit(timeout_s):
            fn(*inputs)
            sync(device)
    except RunTimeout as exc:
        return None, f"compile timeout: {exc}"
    except Exception as exc:  # noqa: BLE001 - recorded per variant
        return None, f"{type(exc).__name__}: {exc}"[:500]
    return time.perf_counter() - start, None


def time_interleaved(fns: dict, inputs, device: str, rounds: int, warmup_ms: int, rep_ms: int) -> dict[str, list[float]]:
    """Median ms of each variant per round; the order rotates every round so no variant always goes first.

    On a GPU the variants of a round alternate run by run (the verifier's ``bench_alternating``), so a clock
    that sinks under a compute-bound kernel's power draw slows them all alike.
    """
    from mtmc_lsp.optimizer.verify.runtime.timing import bench_alternating

    names = list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names)
        order = names[shift:] + names[:shift]
        if device.startswith("cuda"):
            row = bench_alternating({n: (lambda f=fns[n]: f(*inputs)) for n in order}, warmup_ms, rep_ms)
            for name in order:
                samples[name].append(row[name]["median_ms"])
            continue
        for name in order:
            samples[name].append(measure_ms(fns[name], inputs, device, warmup_ms, rep_ms))
    return samples


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_ms(fn, inputs, device: str, warmup_ms: int, rep_ms: int) -> float:
    """Median milliseconds of one call: do_bench (CUDA events, L2 flushed) on a GPU, a host clock on the CPU."""
    if device.startswith("cuda"):
        from triton.testing import do_bench

        return do_bench(lambda: fn(*inputs), warmup=warmup_ms, rep=rep_ms, return_mode="median")
    fn(*inputs)
    times = []
    deadline = time.perf_counter() + rep_ms / 1e3
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 100):
        start = time.perf_counter()
        fn(*inputs)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def geomean(values) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


# --------------------------------------------------------------------------------------------
# One kernel on the GPU
# --------------------------------------------------------------------------------------------

LOOP_WARN_S = 10.0  # planned loop per kernel under which first verifications were cancelled (the default suite run plans 12 s)


def plan_reserves(files: list[Path], ceilings: dict) -> dict[str, float]:
    """Per kernel, the seconds its non-optional work needs, from its roofline bound on meta tensors (no memory)."""
    reserves = {}
    for path in files:
        try:
            module = load_module(path)
            cost = module.roofline_cost(*module.get_inputs(device="meta"))
            compute = cost["flops"] / (ceilings["matmul_tflops"] * 1e12) > cost["bytes"] / (ceilings["copy_gbs"] * 1e9)
            reserves[path.stem] = RESERVE_S["compute" if compute else "memory"]
        except Exception:  # noqa: BLE001 - a broken file fails later, with its error recorded
            reserves[path.stem] = RESERVE_S["memory"]
    return reserves


def bench_kernel(path: Path, args, ceilings: dict, opt_status: dict, target, deadline: float,
                 reserve_now: float, reserve_after: float, kernels_left: int, out: Path) -> dict:
    """Optimize, check and time one suite kernel; ``reserve_*`` are the seconds kept back for this
    kernel's own non-optional work and for the kernels after it."""
    import torch

    started = time.monotonic()
    stem = path.stem
    module = load_module(path)
    record: dict = {"name": stem, "file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
                    "op_class": getattr(module, "OP_CLASS", "other"),
                    "description": (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else "",
                    "variants": {}}
    missing = check_harness(module, stem)
    if missing:
        record["error"] = f"suite file lacks: {', '.join(missing)}"
        return record
    device = args.device
    torch.manual_seed(0)
    inputs = module.get_inputs(device=device)
    record["shapes"] = [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]
    record["dtypes"] = [str(x.dtype).replace("torch.", "") for x in inputs if isinstance(x, torch.Tensor)]
    cost = module.roofline_cost(*inputs)
    record["bytes"], record["flops"] = int(cost["bytes"]), int(cost["flops"])
    memory_ms = record["bytes"] / (ceilings["copy_gbs"] * 1e9) * 1e3
    compute_ms = record["flops"] / (ceilings["matmul_tflops"] * 1e12) * 1e3
    record["floor_ms"] = max(memory_ms, compute_ms)
    record["bound"] = "memory" if memory_ms >= compute_ms else "compute"
    record["intensity"] = record["flops"] / record["bytes"]
    ref = module.reference(*inputs)
    tol = tolerance_for(module, ref)
    record["tolerance"] = tol

    # 1. The MTMC loop (or its greedy stand-in), with a share of the remaining time.
    text = path.read_text()
    workdir = out / "variants" / stem
    workdir.mkdir(parents=True, exist_ok=True)
    # What the run's budget holds beyond every remaining kernel's own work is shared evenly among the
    # optimize loops still to run (time one leaves unused flows on to the next).
    spare = deadline - time.monotonic() - reserve_now - reserve_after
    # The loop visits every kernel of the file in turn (optimize(kernel=None) splits its budget among them), so a
    # file of three kernels gets three shares: one share each left attention's 10 ms steps 7 s, which their first
    # verification (worker start, three compiles) outran on the H200 (session 7: every step cancelled).
    shares = loop_kernels(text, path) if opt_status["method"] != "none" else 1
    opt_budget = min(args.optimize_timeout_s, spare / (kernels_left + 1) * shares)
    optimize: dict = {"method": opt_status["method"], "steps_budget": args.steps}
    if opt_status["method"] == "none":
        optimize["skipped"] = opt_status.get("note") or "optimizer not available"
        final_text = text
    elif args.steps <= 0:
        optimize["skipped"] = "--steps 0"
        final_text = text
    elif opt_budget < MIN_OPTIMIZE_S:
        optimize["skipped"] = "time budget spent"
        final_text = text
    else:
        opt_start = time.monotonic()
        try:
            if opt_status["method"] == "search":
                result = run_search(text, path, args, target, device, opt_budget)
            else:
                greedy = GreedyOptimizer(args, target, device, workdir)
                result = greedy.run(module, stem, text, inputs, ref, tol, time.monotonic() + opt_budget)
            final_text = result.pop("final_text")
            optimize.update(result)
        except Exception as exc:  # noqa: BLE001 - the run goes on with the naive version as "final"
            optimize["error"] = f"{type(exc).__name__}: {exc}"[:800]
            optimize["traceback"] = traceback.format_exc()[-2000:]
            final_text = text
        optimize["wall_s"] = time.monotonic() - opt_start
        sync(device)
    optimize["changed"] = final_text != text
    record["optimize"] = optimize
    final_path = workdir / f"{stem}.py"
    final_path.write_text(final_text)

    # 2. The variants.
    fns: dict = {"naive": getattr(module, stem)}
    if final_text != text:
        try:
            fns["mtmc"] = getattr(load_module(final_path), stem)
        except Exception as exc:  # noqa: BLE001
            record["variants"]["mtmc"] = {"correct": False, "error": f"import failed: {exc}"[:500]}
    fns["eager"] = module.eager
    if not args.no_compile:
        modes = [("compile", None)]
        wants_autotune = args.max_autotune == "all" or (args.max_autotune == "auto" and record["bound"] == "compute")
        if wants_autotune:
            modes.append(("compile_max_autotune", args.max_autotune_mode))
        for name, mode in modes:
            remaining = deadline - time.monotonic() - reserve_after
            if remaining < 15:
                record["variants"][name] = {"correct": False, "skipped": "time budget spent"}
                continue
            fn = compiled(module.eager, mode)
            seconds, error = warm_compile(fn, inputs, device, min(args.compile_timeout_s, remaining))
            if error:
                record["variants"][name] = {"correct": False, "error": error}
                continue
            record["variants"][name] = {"compile_s": seconds, "mode": mode or "default"}
            fns[name] = fn
        if not wants_autotune:
            record["variants"]["compile_max_autotune"] = {
                "correct": False, "skipped": "memory-bound kernel (max-autotune run only for compute-bound ones)"}

    # 3. Correctness of every variant on fresh inputs (two seeds) before any timing.
    for seed in (1, 2):
        torch.manual_seed(seed)
        check_inputs = module.get_inputs(device=device)
        check_ref = module.reference(*check_inputs)
        for name in list(fns):
            result = check_variant(fns[name], check_inputs, check_ref, tol, device)
            entry = record["variants"].setdefault(name, {})
            for key in ("rel_err", "max_elem_err"):  # the worst over both seeds
                values = [v for v in (entry.get(key), result.get(key)) if v is not None]
                entry[key] = max(values) if values else None
            if not result["correct"]:
                entry.update(correct=False, error=f"seed {seed}: {result.get('error')}")
                del fns[name]
            else:
                entry["correct"] = True
        del check_inputs, check_ref
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    # 4. Timing, interleaved.
    samples = time_interleaved(fns, inputs, device, args.rounds, args.warmup_ms, args.rep_ms)
    for name, ms_list in samples.items():
        med = statistics.median(ms_list)
        entry = record["variants"][name]
        entry.update(
            ms=med, ms_rounds=ms_list, noise=(max(ms_list) - min(ms_list)) / med,
            gbs=record["bytes"] / (med * 1e-3) / 1e9, tflops=record["flops"] / (med * 1e-3) / 1e12,
            pct_of_floor=100.0 * record["floor_ms"] / med,
        )
    if "mtmc" not in fns and "mtmc" not in record["variants"]:
        # Nothing changed: the final version is the naive one (same code, same time).
        record["variants"]["mtmc"] = dict(record["variants"]["naive"], same_as="naive")
    record["noise"] = max((record["variants"][n]["noise"] for n in samples), default=None)
    record["speedups"] = speedups(record["variants"])
    record["wall_s"] = time.monotonic() - started
    return record


def speedups(variants: dict) -> dict:
    """The final (mtmc) version's speedup over each other variant, where both were timed."""
    final = variants.get("mtmc", {}).get("ms")
    out: dict = {}
    if not final:
        return out
    for name in ("naive", "eager", "compile", "compile_max_autotune"):
        ms = variants.get(name, {}).get("ms")
        if ms:
            out[f"over_{name}"] = ms / final
    best_compile = [variants.get(n, {}).get("ms") for n in ("compile", "compile_max_autotune")]
    best_compile = [m for m in best_compile if m]
    if best_compile:
        out["over_best_compile"] = min(best_compile) / final
    return out


def summarize(kernels: list[dict]) -> dict:
    """Geometric means and the issue's targets: >= 4x over naive, >= torch.compile, >= 70% of floor."""
    done = [k for k in kernels if k.get("speedups")]
    over = lambda key: [k["speedups"].get(key) for k in done]  # noqa: E731
    vs_compile = [k["speedups"].get("over_best_compile") for k in done if k["speedups"].get("over_best_compile")]
    memory = [k for k in done if k.get("bound") == "memory"]
    pct = {k["name"]: k["variants"]["mtmc"].get("pct_of_floor") for k in memory}
    summary = {
        "kernels": len(kernels), "timed": len(done),
        "geomean_over_naive": geomean(over("over_naive")),
        "geomean_over_eager": geomean(over("over_eager")),
        "geomean_over_compile": geomean(over("over_compile")),
        "geomean_over_best_compile": geomean(vs_compile),
        "memory_bound_pct_of_floor": pct,
        "optimize_wall_s": sum(k.get("optimize", {}).get("wall_s", 0.0) for k in kernels),
        "verifications": sum(int(k.get("optimize", {}).get("verifications") or 0) for k in kernels),
    }
    summary["targets"] = {
        "geomean_over_naive_ge_4": (summary["geomean_over_naive"] or 0) >= 4.0,
        "every_kernel_within_1_25x_of_compile": bool(vs_compile) and all(v >= 1 / 1.25 for v in vs_compile),
        "geomean_over_compile_ge_1": (summary["geomean_over_best_compile"] or 0) >= 1.0,
        "memory_bound_ge_70pct_of_floor": bool(pct) and all((v or 0) >= 70.0 for v in pct.values()),
    }
    return summary


# --------------------------------------------------------------------------------------------
# CPU smoke mode (Triton interpreter, tiny sizes)
# --------------------------------------------------------------------------------------------

def cpu_smoke(files: list[Path]) -> dict:
    """Every naive kernel (and its eager baseline) against the reference on two fresh tiny input sets."""
    import torch

    kernels = []
    for path in files:
        entry: dict = {"name": path.stem}
        started = time.monotonic()
        try:
            module = load_module(path)
            missing = check_harness(module, path.stem)
            if missing:
                raise RuntimeError(f"suite file lacks: {', '.join(missing)}")
            errors = {"naive": 0.0, "eager": 0.0}
            for seed in (1, 2):
                torch.manual_seed(seed)
                inputs = module.get_inputs(device="cpu")
                ref = module.reference(*inputs)
                tol = tolerance_for(module, ref)
                for name, fn in (("naive", getattr(module, path.stem)), ("eager", module.eager)):
                    check = check_variant(fn, inputs, ref, tol, "cpu")
                    if not check["correct"]:
                        raise RuntimeError(f"{name}, seed {seed}: {check.get('error')}")
                    errors[name] = max(errors[name], check["rel_err"])
                cost = module.roofline_cost(*inputs)
                if not (cost["bytes"] > 0 and cost["flops"] > 0):
                    raise RuntimeError(f"roofline_cost must be positive, got {cost}")
            entry.update(ok=True, rel_err=errors, tolerance=tol, shapes=[list(x.shape) for x in inputs])
        except Exception as exc:  # noqa: BLE001 - one failing kernel must not hide the others
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:800])
        entry["wall_s"] = time.monotonic() - started
        kernels.append(entry)
    return {"mode": "cpu-smoke", "kernels": kernels, "ok": all(k["ok"] for k in kernels)}


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="folder of suite kernels")
    parser.add_argument("--kernels", nargs="+", default=None, help="only these suite kernels (file stems)")
    # 5: a matmul with an epilogue to fuse keeps fusion, tile (with its stages), grouped order, persistent tiles and
    # their TMA loads (the last two pay only together, persistent_ablation/).
    parser.add_argument("--steps", type=int, default=5,
                        help="step budget: kept MTMC steps per kernel function (search), or verified candidates "
                             "per file (greedy)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="where results.json and the report go")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="check every naive kernel under the Triton interpreter at tiny sizes (no GPU)")
    parser.add_argument("--method", choices=("auto", "search", "greedy", "none"), default="auto",
                        help="search: the MTMC loop (optimizer.search, verified in worker processes); greedy: "
                             "top policy-ranked steps verified and timed in this process; auto: search if present")
    parser.add_argument("--beam", type=int, default=1,
                        help="search: candidates tried per state (1 = greedy; the loop stops at a kernel's first "
                             "rejected step); each extra costs verifications")
    parser.add_argument("--policy", default="heuristic", help="policy that ranks candidates (heuristic, embedded)")
    parser.add_argument("--target", default="h200", help="GPU profile the optimizer targets")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--warmup-ms", type=int, default=20, help="do_bench warm-up per round (ms)")
    parser.add_argument("--rep-ms", type=int, default=80, help="do_bench measuring time per round (ms)")
    parser.add_argument("--budget-s", type=float, default=450.0,
                        help="whole-run time budget: optional work (optimize, compiles) is skipped to fit it")
    parser.add_argument("--optimize-timeout-s", type=float, default=60.0, help="limit for one kernel's optimize loop")
    parser.add_argument("--compile-timeout-s", type=float, default=90.0, help="limit for one torch.compile")
    parser.add_argument("--max-autotune", choices=("auto", "all", "none"), default="auto",
                        help="torch.compile max-autotune: compute-bound kernels only (auto), all, or none")
    parser.add_argument("--max-autotune-mode", default="max-autotune-no-cudagraphs",
                        help="the torch.compile mode of the max-autotune variant. Without CUDA graphs by default: "
                             "with them every call copies its inputs into the graph's static buffers (first H200 "
                             "run: +0.12 ms on an 8192^3 matmul, slower than the default mode on every kernel)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile entirely")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl",
                        help="folder of wheels (libcst) unpacked into a temp dir when libcst is missing")
    parser.add_argument("--no-report", action="store_true", help="write results.json only")
    parser.add_argument("--device", default="cuda",
                        help="cuda; or cpu: the whole pipeline under the Triton interpreter at tiny sizes "
                             "(for tests: timings there mean nothing)")


def print_table(results: dict) -> None:
    rows = [("kernel", "naive", "mtmc", "eager", "compile", "c-maxat", "floor", "%floor", "x naive", "x comp", "verif")]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for k in results["kernels"]:
        v = k.get("variants", {})
        sp = k.get("speedups", {})
        rows.append((
            k["name"], fmt(v.get("naive", {}).get("ms")), fmt(v.get("mtmc", {}).get("ms")),
            fmt(v.get("eager", {}).get("ms")), fmt(v.get("compile", {}).get("ms")),
            fmt(v.get("compile_max_autotune", {}).get("ms")), fmt(k.get("floor_ms")),
            "-" if v.get("mtmc", {}).get("pct_of_floor") is None else f"{v['mtmc']['pct_of_floor']:.0f}",
            "-" if sp.get("over_naive") is None else f"{sp['over_naive']:.2f}",
            "-" if sp.get("over_best_compile") is None else f"{sp['over_best_compile']:.2f}",
            str(k.get("optimize", {}).get("verifications", "-")),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    s = results.get("summary", {})
    if s:
        g = lambda key: "-" if s.get(key) is None else f"{s[key]:.2f}x"  # noqa: E731
        print(f"geomean: over naive {g('geomean_over_naive')}, over eager {g('geomean_over_eager')}, "
              f"over best torch.compile {g('geomean_over_best_compile')}; "
              f"verifications {s.get('verifications')}, optimize wall {s.get('optimize_wall_s', 0):.0f} s")


def write_results(out: Path, results: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)
    return path


def run_gpu(args, files: list[Path]) -> int:
    import torch

    started = time.monotonic()
    deadline = started + args.budget_s
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench: no CUDA GPU here; use --cpu-smoke for the interpreter check", file=sys.stderr)
        return 2
    libcst = libcst_status(args.wheels)
    opt_status = optimizer_status(libcst, args.method)
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile(args.target)
    print(f"bench: optimizer method={opt_status['method']} libcst={'yes' if libcst['available'] else 'NO'}"
          + (f" ({opt_status['note']})" if opt_status.get("note") else ""), flush=True)
    results = {
        "schema": 1, "mode": "gpu" if args.device.startswith("cuda") else "cpu-interpreter",
        "device": args.device, "environment": environment(), "libcst": libcst, "optimizer": opt_status,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if not k.startswith("_")},
        "ceilings": measure_ceilings(args.device), "kernels": [],
    }
    c = results["ceilings"]
    print(f"bench: ceilings copy {c['copy_gbs']:.0f} GB/s, bf16 matmul {c['matmul_tflops']:.0f} TFLOP/s", flush=True)
    write_results(args.out, results)
    reserves = plan_reserves(files, results["ceilings"])
    loops = sum(loop_kernels(p.read_text(), p) for p in files) if opt_status["method"] != "none" else 0
    per_loop = (args.budget_s - sum(reserves.values())) / max(1, loops)
    if loops and per_loop < LOOP_WARN_S:
        # Session 8: 230 s for six files left attention's three kernels 10 s each; every flash step was cancelled.
        print(f"bench: warning: about {per_loop:.0f} s of optimize loop per kernel ({loops} kernels); a first "
              "verification can take 12-15 s: raise --budget-s (default 450 s for the whole suite)",
              file=sys.stderr, flush=True)
    if opt_status["method"] == "search" and files and args.steps > 0:
        # On a freshly started machine the first kernels' loops otherwise pay the worker's start out of a 10-20 s
        # share, and their first verification is cancelled (session 7: five kernels kept nothing).
        results["warm_up"] = warm_up(files[0], target, args.device.startswith("cuda"))
        print(f"bench: verification worker started ({results['warm_up']['wall_s']:.0f} s)", flush=True)
    for index, path in enumerate(files):
        try:
            after = sum(reserves[p.stem] for p in files[index + 1:])
            record = bench_kernel(path, args, results["ceilings"], opt_status, target, deadline,
                                  reserves[path.stem], after, len(files) - index - 1, args.out)
        except Exception as exc:  # noqa: BLE001 - one broken kernel must not lose the others
            record = {"name": path.stem, "error": f"{type(exc).__name__}: {exc}"[:800],
                      "traceback": traceback.format_exc()[-2000:], "variants": {}}
        results["kernels"].append(record)
        ms = {n: round(v["ms"], 3) for n, v in record.get("variants", {}).items() if v.get("ms")}
        print(f"bench: {path.stem}: {ms} ({record.get('wall_s', 0):.0f} s)"
              + (f" ERROR {record['error']}" if record.get("error") else ""), flush=True)
        results["summary"] = summarize(results["kernels"])
        results["total_wall_s"] = time.monotonic() - started
        write_results(args.out, results)
        import gc

        gc.collect()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    close_worker_pools()
    write_results(args.out, results)
    if not args.no_report:
        make_report(args.out / "results.json")
    print_table(results)
    print(f"bench: total {results['total_wall_s']:.0f} s; results in {args.out / 'results.json'}")
    return 0


def make_report(results_path: Path) -> None:
    """Markdown always; plots when matplotlib is importable (the GPU machine may lack it)."""
    try:
        import report

        written = report.generate(results_path)
        print("bench: report " + ", ".join(str(p) for p in written))
    except Exception as exc:  # noqa: BLE001 - the JSON is the result; the report can be regenerated anywhere
        print(f"bench: report not generated here ({type(exc).__name__}: {exc}); "
              f"run `python3 benchmarks/report.py {results_path}`", file=sys.stderr)


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    if args is None:
        parser = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
        add_arguments(parser)
        args = parser.parse_args(argv)
    files = discover(args.suite, args.kernels)
    if args.cpu_smoke or args.device == "cpu":
        # The interpreter must be chosen before triton is first imported; callers use a fresh process.
        os.environ["TRITON_INTERPRET"] = "1"
        if "triton" in sys.modules and os.environ.get("MTMC_BENCH_ALLOW_LATE_INTERPRET") != "1":
            print("bench --cpu-smoke: triton was imported before TRITON_INTERPRET=1; run it in a fresh process",
                  file=sys.stderr)
            return 2
    if args.device == "cpu" and not args.cpu_smoke:
        # Autotuned variants (the loop's autotune step) run one config in the interpreter, as the
        # verifier runs them: Autotuner.run would benchmark, which needs a driver.
        from mtmc_lsp.optimizer.verify.runtime import launches

        launches.install(interpreter=True)
        return run_gpu(args, files)
    if args.cpu_smoke:
        results = cpu_smoke(files)
        write_results(args.out, results)
        for k in results["kernels"]:
            status = "ok " if k["ok"] else "FAIL"
            detail = f"naive err {k['rel_err']['naive']:.2e}" if k["ok"] else k["error"]
            print(f"{status} {k['name']:<20} {k['wall_s']:5.1f} s  {detail}")
        print(f"cpu-smoke: {sum(k['ok'] for k in results['kernels'])}/{len(results['kernels'])} kernels match")
        return 0 if results["ok"] else 1
    return run_gpu(args, files)


if __name__ == "__main__":
    sys.exit(main())
