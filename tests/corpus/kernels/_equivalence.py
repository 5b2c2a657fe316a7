"""Runs before/after versions of corpus files under TRITON_INTERPRET=1 and compares their outputs.

Usage: ``TRITON_INTERPRET=1 python _equivalence.py JOBS.json RESULTS.json``. Each job is
``{"name", "before", "after", "atol", "rtol"}`` with file paths (``"reference": true`` compares
``before`` with its own ``reference(...)`` instead); every file defines ``ENTRY`` (its
host function) and ``get_inputs(device=...)``. All jobs run in this one process, so the
interpreter starts once. A job's result is ``{"name", "ok", "max_abs_diff", "error"}``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"

import torch  # noqa: E402
import triton  # noqa: E402
from triton.runtime import autotuner  # noqa: E402

# The interpreter has no GPU timer: every autotune config "takes" the same time, so each one runs
# once (an invalid config still fails the job) and the first is used; ``each_config`` then forces
# every config in turn, so each one's output is compared.
autotuner.Autotuner.do_bench = property(lambda self: (lambda fn, quantiles: (fn(), [1.0] * len(quantiles))[1]))


def load(path: str, tag: str):
    spec = importlib.util.spec_from_file_location(f"equiv_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(module, seed: int):
    torch.manual_seed(seed)
    inputs = module.get_inputs(device="cpu")
    return getattr(module, module.ENTRY)(*[x.clone() for x in inputs])


def each_config(*modules):
    """Run once per autotune config of the modules' autotuned kernels, all pinned to their i-th config together
    (once when there are none)."""
    tuners = [t for module in modules for t in _tuners(module)]
    if not tuners:
        yield None
        return
    originals = [list(t.configs) for t in tuners]
    try:
        for index in range(max(len(o) for o in originals)):
            for tuner, configs in zip(tuners, originals):
                tuner.configs = [configs[min(index, len(configs) - 1)]]
                tuner.cache = {}
            yield index
    finally:
        for tuner, configs in zip(tuners, originals):
            tuner.configs = configs
            tuner.cache = {}


def _tuners(module) -> list:
    return [v for v in vars(module).values() if isinstance(v, autotuner.Autotuner)]


def _same_configs(before, after) -> bool:
    """Both modules autotune kernels over the same number of configs each (the step did not change the configs)."""
    old, new = _tuners(before), _tuners(after)
    return bool(old) and [len(t.configs) for t in old] == [len(t.configs) for t in new]


def tensors(out) -> list:
    """A function's outputs as a list of tensors (a backward returns several: dx, dw, db)."""
    return [t for item in out for t in tensors(item)] if isinstance(out, tuple | list) else [out]


def close(expected, got, job: dict) -> bool:
    want, have = tensors(expected), tensors(got)
    return len(want) == len(have) and all(
        e.shape == g.shape and e.dtype == g.dtype and torch.allclose(
            e.double(), g.double(), atol=job["atol"], rtol=job["rtol"], equal_nan=True) for e, g in zip(want, have))


def compare(job: dict, index: int) -> dict:
    result = {"name": job["name"], "ok": False, "max_abs_diff": None, "error": None}
    try:
        before = load(job["before"], f"{index}_before")
        after = load(job["after"], f"{index}_after")
        worst = 0.0
        for seed in job.get("seeds", [0, 1]):
            if job.get("reference"):  # the corpus file itself against its PyTorch reference
                torch.manual_seed(seed)
                expected, got = before.reference(*before.get_inputs(device="cpu")), run(before, seed)
            elif _same_configs(before, after):
                # Config by config: numpy's dot sums a 32x32 tile in another order than a 16x16 one, so two configs
                # of one kernel may differ by an ulp; the step must keep what each config computes.
                expected = got = None
                for _config in each_config(before, after):
                    expected, got = run(before, seed), run(after, seed)
                    if not close(expected, got, job):
                        break
            else:
                expected = run(before, seed)
                got = None
                for _config in each_config(after):  # every autotune config must agree, not just the chosen one
                    got = run(after, seed)
                    if not close(expected, got, job):
                        break
            if len(tensors(expected)) != len(tensors(got)):
                result["error"] = f"{len(tensors(got))} outputs != {len(tensors(expected))}"
                return result
            for want, have in zip(tensors(expected), tensors(got)):
                if want.shape != have.shape or want.dtype != have.dtype:
                    result["error"] = f"shape/dtype {tuple(have.shape)}/{have.dtype} != {tuple(want.shape)}/{want.dtype}"
                    return result
                diff = (want.double() - have.double()).abs()
                worst = max(worst, float(diff.nan_to_num(float("inf")).max()) if diff.numel() else 0.0)
            if not close(expected, got, job):
                result["max_abs_diff"] = worst
                return result
        result.update(ok=True, max_abs_diff=worst)
    except Exception as exc:  # noqa: BLE001 - any failure of the new version is a finding
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] + "\n" + traceback.format_exc()[-600:]
    return result


def main() -> int:
    jobs = json.load(open(sys.argv[1]))
    results = []
    for i, job in enumerate(jobs):
        start = time.perf_counter()
        results.append({**compare(job, i), "seconds": round(time.perf_counter() - start, 2)})
    json.dump(results, open(sys.argv[2], "w"), indent=1)
    return 0


if __name__ == "__main__":
    del triton
    sys.exit(main())
