"""Runs wild-corpus files under TRITON_INTERPRET=1: against their own reference, or before/after an action.

Usage: ``TRITON_INTERPRET=1 python benchmarks/wild/_runner.py JOBS.json RESULTS.json``. A job is
``{"name", "before", "after" (or null: check ``before`` against its reference), "harness" (the
verifier's ``Harness.to_json()``), "atol", "rtol", "seeds", "cap"}``. Every harness style the
verifier knows is run the way its worker runs it: ``get_inputs(**knobs)`` into the host function or
a KernelBench model built from ``get_init_inputs()`` under seed 0, or each ``test_*`` function.
Integer knobs of ``get_inputs`` are halved until they are at most ``cap`` (the verifier uses 96).
Autotuned kernels of the edited version run once per config (tests/corpus/kernels/_equivalence.py).
All jobs share one process, so the interpreter starts once; a file's "before" outputs are cached.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("corpus_equivalence", ROOT / "tests" / "corpus" / "kernels" / "_equivalence.py")
equivalence = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(equivalence)  # also makes autotuning run each config once, not time it


def knobs(gen, cap: int) -> dict:
    """The verifier's interpreter shrink: every integer keyword default halved until <= cap."""
    out = {}
    for name, p in inspect.signature(gen).parameters.items():
        if name == "device":
            out[name] = "cpu"
        elif isinstance(p.default, int) and not isinstance(p.default, bool) and name != "seed":
            value = p.default
            while value > cap:
                value //= 2
            out[name] = value
    return out


def flatten(value) -> list:
    if isinstance(value, (list, tuple)):
        return [y for x in value for y in flatten(x)]
    if isinstance(value, dict):
        return [y for k in sorted(value, key=str) for y in flatten(value[k])]
    return [value]


def run_harness(module, harness: dict, seed: int, cap: int, entry_override: str | None = None) -> list:
    """The file's outputs for one seed, flattened to a list (tensors and scalars)."""
    style = harness["style"]
    if style == "test":
        outs = []
        for name in harness["tests"]:
            fn = getattr(module, name)
            torch.manual_seed(seed)
            kwargs = {"device": "cpu"} if "device" in inspect.signature(fn).parameters else {}
            outs.extend(flatten(fn(**kwargs)))
        return outs
    gen = getattr(module, harness["inputs"] or "get_inputs")
    torch.manual_seed(seed)
    made = gen(**knobs(gen, cap))
    made = list(made) if isinstance(made, (list, tuple)) else [made]  # as the verifier: no deeper flattening
    inputs = [x.to("cpu") if isinstance(x, torch.Tensor) else x for x in made]
    inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    entry = entry_override or harness["entry"]
    with torch.no_grad():
        if style == "kernelbench":
            init = getattr(module, harness["init_inputs"])() if harness.get("init_inputs") else []
            torch.manual_seed(0)
            model = getattr(module, entry)(*init)
            return flatten(model(*inputs))
        return flatten(getattr(module, entry)(*inputs))


def reference_outputs(module, harness: dict, seed: int, cap: int) -> list | None:
    if harness["style"] == "kernelbench" and harness.get("reference"):
        return run_harness(module, harness, seed, cap, entry_override=harness["reference"])
    if harness["style"] == "function" and harness.get("reference"):
        return run_harness(module, harness, seed, cap, entry_override=harness["reference"])
    return None


def mismatch(expected: list, got: list, atol: float, rtol: float) -> str | None:
    """Why two flattened results differ, or None when they agree within tolerance."""
    if len(expected) != len(got):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        if isinstance(e, torch.Tensor) != isinstance(g, torch.Tensor):
            return f"output {i}: tensor vs scalar"
        if not isinstance(e, torch.Tensor):
            if e != g and not (isinstance(e, float) and abs(e - g) <= atol + rtol * abs(e)):
                return f"output {i}: {g!r} != {e!r}"
            continue
        if e.shape != g.shape or e.dtype != g.dtype:
            return f"output {i}: {tuple(g.shape)}/{g.dtype} != {tuple(e.shape)}/{e.dtype}"
        if not torch.allclose(e.double(), g.double(), atol=atol, rtol=rtol, equal_nan=True):
            diff = (e.double() - g.double()).abs().nan_to_num(float("inf")).max().item()
            return f"output {i}: max abs diff {diff:.3g} (atol {atol}, rtol {rtol})"
    return None


_loaded: dict[str, object] = {}
_before_cache: dict[tuple, list] = {}


def load(path: str):
    if path not in _loaded:
        _loaded[path] = equivalence.load(path, f"wild_{len(_loaded)}")
    return _loaded[path]


def compare(job: dict) -> dict:
    result = {"name": job["name"], "ok": False, "error": None}
    cap = job.get("cap", 96)
    try:
        before = load(job["before"])
        for seed in job.get("seeds", [0]):
            key = (job["before"], seed, cap)
            if key not in _before_cache:
                _before_cache[key] = run_harness(before, job["harness"], seed, cap)
            expected = _before_cache[key]
            if job.get("after") is None:
                want = reference_outputs(before, job["harness"], seed, cap)
                problem = None if want is None else mismatch(want, expected, job["atol"], job["rtol"])
                if problem:
                    result["error"] = f"seed {seed}: against the reference: {problem}"
                    return result
                continue
            after = load(job["after"])
            for _config in equivalence.each_config(after):  # every autotune config must agree
                problem = mismatch(expected, run_harness(after, job["harness"], seed, cap), job["atol"], job["rtol"])
                if problem:
                    result["error"] = f"seed {seed}, config {_config}: {problem}"
                    return result
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - any failure is a finding
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] + "\n" + traceback.format_exc()[-800:]
    return result


def main() -> int:
    jobs = json.load(open(sys.argv[1]))
    results = []
    for job in jobs:
        start = time.perf_counter()
        results.append({**compare(job), "seconds": round(time.perf_counter() - start, 2)})
        print(f"{results[-1]['seconds']:7.2f}s {'ok ' if results[-1]['ok'] else 'BAD'} {job['name']}", file=sys.stderr)
    json.dump(results, open(sys.argv[2], "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
