"""KernelBench's protocol for one problem at a time, in a worker process (stdlib + torch + triton only).

Run by path: ``python runner.py JOBS.json RESULTS.jsonl``. Each job names a problem's text and a
solution's text; one JSON line per job is appended to RESULTS as soon as it finishes, so the parent
can kill a hung worker and restart it on the jobs that remain.

Per job, as KernelBench's ``eval_kernel_against_ref``: both models are built after ``set_seed(42)``;
5 trial seeds are drawn from ``torch.manual_seed(42)``; each trial makes fresh inputs under its seed
(on the device directly, where KernelBench draws them on the host and copies them)
and checks ``ModelNew`` against ``Model`` with ``torch.allclose`` at the inputs' precision (fp32 1e-4,
fp16/bf16 1e-2, atol = rtol). On a GPU, each trial also runs ``Model`` once more with TF32 off: PyTorch's
cuDNN convolutions allow TF32 by default (``torch.backends.cudnn.conv.fp32_precision == "tf32"``) and
KernelBench's eval leaves that default, so its fp32 reference of a convolution can sit 1e-4 to 1e-3 off
the exact result; ``passed_fp32_reference`` counts the trials within tolerance of the TF32-off reference
and ``reference_tf32_max_diff`` says how far the two references are apart. ``correct`` stays KernelBench's.
Only when every trial passes (against either reference), and on a GPU: eager ``Model``,
``torch.compile(Model)`` (inductor, default mode) and ``ModelNew`` are timed with
``triton.testing.do_bench`` (warm-up, then repeated runs each preceded by an L2 flush: do_bench
zeroes a 256 MB buffer before every run), mean time in milliseconds, all in this one process.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
import time
import traceback
from contextlib import contextmanager
from types import ModuleType

TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-7}
TRIALS = 5
SEED = 42


def set_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def load_module(text: str, label: str) -> ModuleType:
    """Import ``text`` from a real file: Triton's @jit reads a kernel's source from its file on a GPU."""
    import importlib.util
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="mtmc-kb-module-"))
    path = folder / f"{label.replace('.', '_').replace('/', '_')}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(label, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[label] = module
    spec.loader.exec_module(module)
    return module


def precision_of(inputs) -> str:
    """The lowest floating precision among the inputs (fp32 when none is floating)."""
    import torch

    order = ["float64", "float32", "bfloat16", "float16"]
    found = [str(x.dtype).replace("torch.", "") for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    ranked = [d for d in order if d in found]
    return ranked[-1] if ranked else "float32"


def trial_seeds(count: int = TRIALS, seed: int = SEED) -> list[int]:
    """KernelBench's per-trial seeds: drawn from ``torch.manual_seed(seed)``."""
    import torch

    torch.manual_seed(seed)
    return [int(torch.randint(0, 2 ** 32 - 1, (1,)).item()) for _ in range(count)]


def _to(value, device):
    import torch

    return value.to(device) if isinstance(value, torch.Tensor) else value


def make_inputs(problem, device: str) -> list:
    """``get_inputs()`` created on ``device`` directly: a 6 GB ``torch.rand`` on the host takes seconds, on the
    GPU milliseconds (the values differ from a host-made draw; each trial still has its own seed)."""
    import torch

    with torch.device(device):
        return [_to(x, device) for x in problem.get_inputs()]


def _outputs(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _outputs(v)]
    return []


def build_models(problem, solution, device: str) -> tuple:
    """``Model`` and ``ModelNew`` from ``get_init_inputs()``, each built after ``set_seed(42)`` (same weights)."""
    init = [_to(v, device) for v in (problem.get_init_inputs() if hasattr(problem, "get_init_inputs") else [])]
    set_seed(SEED)
    reference = problem.Model(*init).to(device)
    set_seed(SEED)
    return reference, solution.ModelNew(*init).to(device)


def max_abs_diff(expected, actual) -> float:
    """The largest finite |expected - actual| (0.0 when none is finite), in place on one temporary: a boolean-mask
    index (``diff[torch.isfinite(diff)]``) runs nonzero(), numel x ndim int64 indices, 64 GiB for a 2**31-element
    4-D output (level 1's 87_conv_pointwise_2D)."""
    if expected.numel() == 0:
        return 0.0
    diff = expected.float() - actual.float()
    diff.abs_().nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return float(diff.max())


@contextmanager
def tf32_off():
    """fp32 convolutions and matmuls of PyTorch in IEEE fp32 inside the block, the previous settings restored after.

    torch >= 2.9 has per-backend ``fp32_precision`` strings (mixing them with the legacy ``allow_tf32`` flags makes
    reading the flags raise), older versions only the flags."""
    import torch

    backends = [torch.backends.cudnn.conv, torch.backends.cuda.matmul]
    if all(hasattr(b, "fp32_precision") for b in backends):
        saved = [b.fp32_precision for b in backends]
        try:
            for b in backends:
                b.fp32_precision = "ieee"
            yield
        finally:
            for b, value in zip(backends, saved):
                b.fp32_precision = value
        return
    saved_flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved_flags


def check_correctness(problem, solution, device: str, trials: int = TRIALS, fp32_reference: bool | None = None) -> dict:
    """KernelBench's correctness: ``trials`` fresh-input trials, all within tolerance; with ``fp32_reference`` (on a
    GPU by default) also against the reference computed with TF32 off (``passed_fp32_reference``)."""
    import torch

    reference, candidate = build_models(problem, solution, device)
    strict = device == "cuda" if fp32_reference is None else fp32_reference
    result = {"trials": trials, "passed": 0, "max_abs_diff": 0.0, "precision": None, "issue": None,
              "passed_fp32_reference": 0, "max_abs_diff_fp32_reference": 0.0 if strict else None,
              "reference_tf32_max_diff": 0.0 if strict else None}
    with torch.no_grad():
        for trial, seed in enumerate(trial_seeds(trials)):
            set_seed(seed)
            inputs = make_inputs(problem, device)
            tol = TOLERANCES[precision_of(inputs)]
            result["precision"] = precision_of(inputs)
            expected = _outputs(reference(*inputs))
            if strict:
                with tf32_off():
                    expected_fp32 = _outputs(reference(*inputs))
            else:  # the CPU has no TF32: one reference
                expected_fp32 = expected
            actual = _outputs(candidate(*inputs))
            if device == "cuda":
                torch.cuda.synchronize()
            if len(expected) != len(actual):
                result["issue"] = f"trial {trial}: {len(actual)} outputs, expected {len(expected)}"
                return result
            ok = ok_fp32 = True
            for e, e32, a in zip(expected, expected_fp32, actual):
                if e.shape != a.shape:
                    result["issue"] = f"trial {trial}: output shape {tuple(a.shape)}, expected {tuple(e.shape)}"
                    return result
                if e.dtype != a.dtype:
                    result["issue"] = f"trial {trial}: output dtype {a.dtype}, expected {e.dtype}"
                    return result
                result["max_abs_diff"] = max(result["max_abs_diff"], max_abs_diff(e, a))
                if not torch.allclose(e, a, atol=tol, rtol=tol):
                    ok = False
                    result["issue"] = result["issue"] or f"trial {trial}: values differ beyond {tol:g}"
                if e32 is not e:
                    result["max_abs_diff_fp32_reference"] = max(result["max_abs_diff_fp32_reference"],
                                                                max_abs_diff(e32, a))
                    result["reference_tf32_max_diff"] = max(result["reference_tf32_max_diff"], max_abs_diff(e, e32))
                    ok_fp32 = ok_fp32 and bool(torch.allclose(e32, a, atol=tol, rtol=tol))
                else:
                    ok_fp32 = ok
            result["passed"] += int(ok)
            result["passed_fp32_reference"] += int(ok_fp32)
            del expected, expected_fp32, actual  # three full outputs at once is the most a trial holds
    return result


def time_models(problem, solution, device: str, compile_baseline: bool = True) -> dict:
    """Mean ms of eager Model, torch.compile(Model) and ModelNew on one set of inputs (L2 flushed per run)."""
    import torch
    import triton.testing

    reference, candidate = build_models(problem, solution, device)
    set_seed(SEED)
    inputs = make_inputs(problem, device)
    timings: dict = {}

    def bench(fn) -> float:
        fn()  # first call compiles (Triton, inductor) outside the timed window
        torch.cuda.synchronize()
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="mean"))

    with torch.no_grad():
        timings["eager_ms"] = bench(lambda: reference(*inputs))
        timings["triton_ms"] = bench(lambda: candidate(*inputs))
        if compile_baseline:
            start = time.perf_counter()
            try:
                compiled = torch.compile(reference)
                timings["compile_ms"] = bench(lambda: compiled(*inputs))
            except Exception as exc:  # the baseline failing is recorded, never the candidate's fault
                timings["compile_error"] = f"{type(exc).__name__}: {exc}"[:500]
            timings["compile_s"] = time.perf_counter() - start
    return timings


def prewarm(problem, solution, device: str, compile_baseline: bool) -> None:
    """One call of ModelNew (and of torch.compile(Model)) on the problem's inputs: what it compiles lands in Triton's
    and inductor's on-disk caches, so the timing worker that runs the problem later finds it compiled."""
    import torch

    reference, candidate = build_models(problem, solution, device)
    set_seed(SEED)
    inputs = make_inputs(problem, device)
    with torch.no_grad():
        candidate(*inputs)
        if compile_baseline:
            torch.compile(reference)(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()


def _interpreted_autotune() -> None:
    """Autotuned kernels in the interpreter (no driver to benchmark configs): the verifier's own patch, loaded
    by path like its workers load it, runs the first config (an MTMC step may have added ``@triton.autotune``)."""
    import importlib.util

    folder = Path(__file__).resolve().parents[1] / "verify" / "runtime"
    if "mtmc_verify_runtime" not in sys.modules:
        spec = importlib.util.spec_from_file_location("mtmc_verify_runtime", folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules["mtmc_verify_runtime"] = package
        spec.loader.exec_module(package)
    importlib.import_module("mtmc_verify_runtime.launches").install(interpreter=True)


def run_job(job: dict) -> dict:
    import torch

    device = "cuda" if torch.cuda.is_available() and not job.get("cpu") else "cpu"
    start = time.perf_counter()
    out: dict = {"key": job["key"], "device": device,
                 "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"}
    if device == "cpu":
        _interpreted_autotune()
    try:
        problem = load_module(job["problem_text"], f"_kb_problem_{os.getpid()}")
        solution = load_module(job["solution_text"], f"_kb_solution_{os.getpid()}")
    except Exception as exc:
        out.update(status="error", error=f"import: {type(exc).__name__}: {exc}"[:1000])
        return out
    if job.get("prewarm"):
        try:
            prewarm(problem, solution, device, job.get("compile_baseline", True))
            out["status"] = "prewarmed"
        except Exception as exc:  # the scored run meets the same failure and records it
            out.update(status="prewarm_error", error=f"{type(exc).__name__}: {exc}"[:500])
        out["seconds"] = time.perf_counter() - start
        return out
    try:
        out["correctness"] = check_correctness(problem, solution, device, job.get("trials", TRIALS))
    except Exception as exc:
        out.update(status="error", error=f"{type(exc).__name__}: {exc}"[:1000],
                   traceback=traceback.format_exc()[-3000:])
        return out
    correctness = out["correctness"]
    out["correct"] = correctness["passed"] == correctness["trials"]
    out["correct_fp32_reference"] = correctness["passed_fp32_reference"] == correctness["trials"]
    # timed when right against either reference: a convolution's speed is worth knowing while TF32 decides it
    if (out["correct"] or out["correct_fp32_reference"]) and device == "cuda" and job.get("timing", True):
        try:
            out["timing"] = time_models(problem, solution, device, job.get("compile_baseline", True))
        except Exception as exc:
            out["timing_error"] = f"{type(exc).__name__}: {exc}"[:1000]
    out["status"] = "ok"
    out["seconds"] = time.perf_counter() - start
    return out


def _exit_with_parent() -> None:
    """Exit when the process that started this worker is gone (a killed run leaves no worker behind)."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str]) -> int:
    _exit_with_parent()
    jobs = json.loads(open(argv[0], encoding="utf-8").read())
    for job in jobs:
        if job.get("deadline") and time.time() > job["deadline"]:
            break  # the run's budget is spent: the parent keeps the rest for --resume
        result = run_job(job)
        with open(argv[1], "a", encoding="utf-8") as results:
            results.write(json.dumps(result, default=_json_default) + "\n")
        _release()
    return 0


def _release() -> None:
    """Drop what one problem left behind (compiled graphs, cached blocks) before the next one."""
    import gc

    import torch

    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _json_default(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
