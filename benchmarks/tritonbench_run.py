"""Run TritonBench-G files and their edited variants, and say which variants keep the results (torch only).

``python benchmarks/tritonbench_run.py MANIFEST.json RESULTS.json [--jobs N] [--timeout S]``: the manifest
(written by tritonbench_survey.py --plan) lists each original file and its variants. Every file ends in its own
test, ``result_gold = test_...()``; each original runs twice (a file whose two runs differ is not judged) and each
variant once, each in a fresh process with the same seeds, and ``result_gold`` is compared (allclose, fp32
1e-3, half precision 2e-2). Set ``TRITON_INTERPRET=1`` to run in the interpreter. Needs only torch and triton,
so it runs on a GPU machine that does not have the engine installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

# Runs one file in a fresh interpreter and saves its result_gold (torch.save keeps nested dicts, lists, tensors).
_CHILD = r"""
import os, random, runpy, sys, torch
random.seed(0); torch.manual_seed(0)
try:
    import numpy; numpy.random.seed(0)
except ImportError:
    pass
sys.argv = [sys.argv[1]]
if os.environ.get("TRITON_INTERPRET") == "1":
    # The interpreter has no GPU timer: each autotune config runs once and the first is kept (as the corpus runner does).
    from triton.runtime import autotuner
    autotuner.Autotuner.do_bench = property(lambda self: (lambda fn, quantiles=None, **kw: (fn(), [1.0] * len(quantiles or [0]))[1]))
if CPU:
    import re, tempfile
    text = open(sys.argv[0]).read()
    for pattern, new in ((r"(['\"])cuda(:\d+)?\1", r"\1cpu\1"), (r"\.cuda\(\)", ".cpu()"), (r"\.is_cuda\b", ".is_cpu"),
                         (r"torch\.cuda\.synchronize\(\)", "None"), (r"\.to\(\s*['\"]?cuda['\"]?\s*\)", ".cpu()")):
        text = re.sub(pattern, new, text)
    fd, path = tempfile.mkstemp(suffix=".py", dir=os.path.dirname(os.path.abspath(sys.argv[0])))
    os.write(fd, text.encode()); os.close(fd)
    try:
        g = runpy.run_path(path, run_name="__tritonbench__")
    finally:
        os.unlink(path)
else:
    g = runpy.run_path(sys.argv[0], run_name="__tritonbench__")
def cpu(v):
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    if isinstance(v, dict):
        return {k: cpu(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(cpu(x) for x in v)
    return v
torch.save(cpu(g.get("result_gold")), OUT)
"""


def run_file(path: str, out: str, timeout: float, cpu: bool = False) -> str | None:
    """Run ``path`` and save its result_gold to ``out``; the error text, or None when it ran."""
    code = _CHILD.replace("OUT", repr(out)).replace("CPU", repr(cpu))
    try:
        proc = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=timeout,
                              cwd=str(Path(path).parent))
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout:.0f} s"
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:300]
    return None


def same(a, b) -> bool:
    """Two results agree: tensors allclose by their dtype's tolerance, containers element by element."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not (a.is_floating_point() or a.is_complex()):
            return bool(torch.equal(a, b))
        tol = 2e-2 if a.dtype in (torch.float16, torch.bfloat16) or a.element_size() < 2 else 1e-3
        return bool(torch.allclose(a.double(), b.double(), atol=tol, rtol=tol, equal_nan=True))
    if type(a).__module__ == "numpy" or type(b).__module__ == "numpy":  # arrays and numpy scalars
        return same(torch.as_tensor(a), torch.as_tensor(b)) if type(a) is type(b) else False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def judge(entry: dict, timeout: float, scratch: str, cpu: bool = False) -> dict:
    """One original and its variants: {"file", "original": verdict, "variants": {name: verdict}}."""
    try:
        return _judge(entry, timeout, scratch, cpu)
    except Exception as exc:  # noqa: BLE001 - a result that cannot be loaded or compared is a finding, not the end
        return {"file": entry["file"], "original": f"error: judging: {type(exc).__name__}: {exc}"[:300], "variants": {}}


def _judge(entry: dict, timeout: float, scratch: str, cpu: bool) -> dict:
    import torch

    stem = Path(entry["file"]).stem
    first, second = (os.path.join(scratch, f"{stem}.{i}.pt") for i in (0, 1))
    error = run_file(entry["file"], first, timeout, cpu) or run_file(entry["file"], second, timeout, cpu)
    out = {"file": entry["file"], "variants": {}}
    if error:
        out["original"] = f"error: {error}"
        return out
    gold = torch.load(first, weights_only=False)
    if not same(gold, torch.load(second, weights_only=False)):
        out["original"] = "nondeterministic"
        return out
    out["original"] = "ran"
    for name, path in entry["variants"].items():
        got = os.path.join(scratch, f"{stem}.{name}.pt")
        error = run_file(path, got, timeout, cpu)
        out["variants"][name] = f"error: {error}" if error else (
            "kept" if same(gold, torch.load(got, weights_only=False)) else "changed")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest")
    parser.add_argument("results")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--cpu", action="store_true", help="run CUDA-written files on the CPU (with TRITON_INTERPRET=1)")
    args = parser.parse_args()
    entries = json.loads(Path(args.manifest).read_text())
    base = Path(args.manifest).resolve().parent
    for entry in entries:  # paths in the manifest are relative to it, so it travels with its files
        entry["file"] = str(base / entry["file"])
        entry["variants"] = {k: str(base / v) for k, v in entry["variants"].items()}
    results = []
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(args.jobs) as pool:
        for done in as_completed([pool.submit(judge, e, args.timeout, scratch, args.cpu) for e in entries]):
            result = done.result()
            result["file"] = os.path.relpath(result["file"], base)
            results.append(result)
            # Written after every file, so a run stopped at its time limit still reports what it judged.
            Path(args.results).write_text(json.dumps(sorted(results, key=lambda r: r["file"]), indent=1) + "\n")
    kept = sum(v == "kept" for r in results for v in r["variants"].values())
    print(f"{len(results)} files, {sum(r['original'] == 'ran' for r in results)} ran; {kept} variants kept results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
