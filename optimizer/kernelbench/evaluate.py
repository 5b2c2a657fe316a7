"""KernelBench evaluation: static checks, the protocol run in worker processes, and the scores.

- ``static_check(text)``: KernelBench's bypass checks on the generated part of a solution (no
  try/except fallback, no ``pass``, ``ModelNew`` not inheriting the reference, at least one
  ``@triton.jit`` kernel) plus a count of PyTorch compute ops it still calls (``torch.cumsum``,
  ``F.*``, ``self.conv(x)`` on an ``nn`` layer): a problem is *fully Triton* when that count is 0.
- ``run_jobs``: the problems through ``runner.py`` in a worker (``TRITON_INTERPRET=1`` for the CPU),
  one result line per problem; a worker that crashes or hangs on one is killed and restarted on the rest.
- ``fast_p`` / ``summarize``: KernelBench's fast_p is the fraction of *all* problems that are correct
  and more than p times faster than the baseline (an incorrect problem is never fast); fast_0 is the
  correct fraction. Mean speedups are over the correct, timed problems: arithmetic and geometric.
  ``all_fp32_reference`` scores the same rows against ``Model`` run with TF32 off (see runner.py).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..safe_exec import safe_python_argv
from .write import solution_part

RUNNER = Path(__file__).with_name("runner.py")

# KernelBench's kernel_static_checker lists, as names: high-level PyTorch compute ops.
TORCH_COMPUTE_FUNCTIONS = {
    "mm", "bmm", "matmul", "einsum", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool3d", "relu", "hardtanh", "elu", "selu", "leaky_relu", "gelu",
    "softsign", "softplus", "softmax", "log_softmax", "tanh", "sigmoid", "hardsigmoid", "silu", "mish",
    "batch_norm", "group_norm", "layer_norm", "instance_norm", "rms_norm", "normalize", "linear",
    "cross_entropy", "kl_div", "mse_loss", "huber_loss", "triplet_margin_loss", "cosine_similarity",
    "logsumexp", "clamp", "dropout",
    # reductions and scans the list leaves out but that are the compute of many level-1 problems
    "sum", "mean", "amax", "amin", "max", "min", "prod", "cumsum", "cumprod", "argmax", "argmin", "norm",
    "std", "var", "exp", "log", "sqrt", "addmm", "baddbmm", "where", "triu", "tril", "sort", "topk", "cummax",
    "cummin", "logcumsumexp", "gather", "scatter", "index_select", "cdist", "pdist", "dist", "outer", "kron",
}
NN_CONTAINERS = {"Module", "Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict", "init",
                 "Identity", "Flatten", "Unflatten"}


@dataclass
class StaticReport:
    """What the static check found: ``errors`` fail the problem, ``torch_ops`` are counted."""

    errors: list[str] = field(default_factory=list)
    torch_ops: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        return asdict(self)


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def static_check(text: str) -> StaticReport:
    """KernelBench-style static checks on a solution (its generated part when it carries the problem)."""
    report = StaticReport()
    code = solution_part(text)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        report.errors.append(f"does not parse: {exc.msg} (line {exc.lineno})")
        return report
    if any(isinstance(n, ast.Try) for n in ast.walk(tree)):
        report.errors.append("try/except block (a fallback to PyTorch when the kernel fails)")
    if any(isinstance(n, ast.Pass) for n in ast.walk(tree)):
        report.errors.append("'pass' statement (KernelBench refuses it: an inherited forward doing nothing)")
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    model_new = classes.get("ModelNew")
    if model_new is None:
        report.errors.append("no ModelNew class")
    else:
        bases = [_dotted(b) for b in model_new.bases]
        if any(b.split(".")[-1] == "Model" for b in bases):
            report.errors.append("ModelNew inherits from the reference Model")
    jit = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
           and any(_dotted(d.func if isinstance(d, ast.Call) else d) in ("triton.jit", "triton.autotune")
                   for d in n.decorator_list)]
    if not jit:
        report.errors.append("no @triton.jit kernel")
    if not re.search(r"\btl\.\w+", code):
        report.errors.append("no tl.* operation")
    report.torch_ops = _torch_compute_calls(tree, model_new, jit)
    return report


def _torch_compute_calls(tree: ast.Module, model_new, kernels: list) -> list[str]:
    """PyTorch compute calls outside the kernels and outside ``ModelNew.__init__`` (which only builds parameters)."""
    skip: set[int] = set()
    for kernel in kernels:
        skip.update(id(n) for n in ast.walk(kernel))
    layers: dict[str, str] = {}
    if model_new is not None:
        for fn in model_new.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                skip.update(id(n) for n in ast.walk(fn))
                for node in ast.walk(fn):
                    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                        ctor = _dotted(node.value.func)
                        layer = ctor.split(".")[-1]
                        if ctor.startswith(("nn.", "torch.nn.")) and layer not in NN_CONTAINERS:
                            for target in node.targets:
                                name = _dotted(target)
                                if name.startswith("self."):
                                    layers[name] = layer
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        short = name.split(".")[-1]
        if name in layers:
            found.append(f"nn.{layers[name]}")
        elif name.startswith(("torch.nn.functional.", "nn.functional.", "F.", "torch._C._nn.")) and short not in ("pad",):
            found.append(name)
        elif name.startswith("torch.") and short in TORCH_COMPUTE_FUNCTIONS and name.count(".") <= 2:
            found.append(name)
        elif isinstance(node.func, ast.Attribute) and not name.startswith(("torch.", "tl.", "triton.", "math.")) \
                and short in TORCH_COMPUTE_FUNCTIONS and not name.startswith("self."):
            found.append(f"Tensor.{short}")
    return found


# -- scores ----------------------------------------------------------------------------------------

@dataclass
class ProblemResult:
    """One problem's row: generation, static check, correctness and timing."""

    level: int
    name: str
    status: str  # "ok" | "generation_error" | "error" | "timeout" | "crash"
    correct: bool = False
    trials_passed: int = 0
    trials: int = 0
    max_abs_diff: float | None = None
    precision: str | None = None
    # against Model run with TF32 off (a GPU's cuDNN convolutions use TF32 by default, KernelBench keeps the default)
    correct_fp32_reference: bool | None = None  # None: not checked (rows of an earlier runner)
    trials_passed_fp32_reference: int = 0
    max_abs_diff_fp32_reference: float | None = None
    reference_tf32_max_diff: float | None = None  # max |default reference - TF32-off reference|
    eager_ms: float | None = None
    compile_ms: float | None = None
    triton_ms: float | None = None
    kernels: list[str] = field(default_factory=list)
    op_classes: list[str] = field(default_factory=list)
    fallbacks: list = field(default_factory=list)
    torch_ops: list[str] = field(default_factory=list)
    static_errors: list[str] = field(default_factory=list)
    optimize_steps: int = 0
    error: str | None = None
    device: str | None = None
    seconds: float | None = None

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.name}"

    @property
    def fully_triton(self) -> bool:
        return not self.fallbacks and not self.torch_ops

    def is_correct(self, reference: str = "kernelbench") -> bool:
        """Correct against KernelBench's reference (torch's defaults) or the ``fp32`` one (TF32 off)."""
        return self.correct if reference == "kernelbench" else bool(self.correct_fp32_reference)

    def speedup(self, baseline: str, reference: str = "kernelbench") -> float | None:
        """Baseline time over ours (``eager`` or ``compile``); None when either was not measured."""
        base = self.eager_ms if baseline == "eager" else self.compile_ms
        if not self.is_correct(reference) or base is None or not self.triton_ms:
            return None
        return base / self.triton_ms

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ProblemResult":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def fast_p(results: list[ProblemResult], p: float, baseline: str = "eager",
           reference: str = "kernelbench") -> float | None:
    """Fraction of all problems that are correct and faster than ``p`` x the baseline (p=0: correct)."""
    if not results:
        return None
    if p == 0:
        return sum(r.is_correct(reference) for r in results) / len(results)
    if all(r.triton_ms is None for r in results):
        return None  # nothing was timed (a CPU run): speed is unknown, not zero
    fast = 0
    for r in results:
        s = r.speedup(baseline, reference)
        fast += int(s is not None and s > p)
    return fast / len(results)


def mean_speedups(results: list[ProblemResult], baseline: str = "eager",
                  reference: str = "kernelbench") -> tuple[float | None, float | None, int]:
    """(arithmetic mean, geometric mean, count) of the speedups of correct, timed problems."""
    values = [s for s in (r.speedup(baseline, reference) for r in results) if s is not None and s > 0]
    if not values:
        return None, None, 0
    return sum(values) / len(values), math.exp(sum(math.log(v) for v in values) / len(values)), len(values)


def summarize(results: list[ProblemResult]) -> dict:
    """Per level: counts, correctness, fast_0/1/2 and mean speedups over eager and over torch.compile."""
    levels: dict[int, list[ProblemResult]] = {}
    for r in results:
        levels.setdefault(r.level, []).append(r)
    out = {}
    for level, rows in sorted(levels.items()):
        # a row that failed before correctness (crash, timeout, generation) is wrong against either reference
        checked = all(r.correct_fp32_reference is not None or r.status != "ok" for r in rows)
        entry = {"problems": len(rows), "correct": sum(r.correct for r in rows),
                 "correct_fp32_reference": sum(bool(r.correct_fp32_reference) for r in rows) if checked else None,
                 "fully_triton": sum(r.fully_triton for r in rows),
                 "with_pytorch_ops": sum(not r.fully_triton for r in rows),
                 "errors": sum(r.status != "ok" for r in rows)}
        subsets = [("all", rows, "kernelbench"), ("fully_triton_only", [r for r in rows if r.fully_triton], "kernelbench")]
        subsets += [("all_fp32_reference", rows, "fp32")] if checked else []
        for subset_name, subset, reference in subsets:
            scores = {}
            for baseline in ("eager", "compile"):
                mean, geo, n = mean_speedups(subset, baseline, reference)
                scores[baseline] = {"fast_0": fast_p(subset, 0, baseline, reference),
                                    "fast_1": fast_p(subset, 1.0, baseline, reference),
                                    "fast_2": fast_p(subset, 2.0, baseline, reference), "mean_speedup": mean,
                                    "geomean_speedup": geo, "timed": n}
            entry[subset_name] = scores
        out[f"level{level}"] = entry
    return out


# -- running ---------------------------------------------------------------------------------------

def run_jobs(jobs: list[dict], cpu: bool, timeout_s: float, on_result: Callable[[dict], None],
             python: str | None = None, budget_left: Callable[[], float] | None = None, workers: int = 1,
             share_gpu: bool = False) -> list[str]:
    """Run every job through ``runner.py``; ``on_result`` gets each result dict as it lands.

    A worker that exits early or goes ``timeout_s`` without finishing a job is killed; that job gets a
    ``crash`` / ``timeout`` result and a fresh worker takes the rest. ``workers`` > 1 runs that many
    workers side by side, worker i on GPU i (``CUDA_VISIBLE_DEVICES``), the jobs dealt round-robin; with
    ``share_gpu`` all of them on the visible GPUs (the compile prewarm: compiling is host work).
    Returns the keys not run (budget).
    """
    if workers <= 1:
        return _run_queue(jobs, cpu, timeout_s, on_result, python, budget_left, None)
    import threading

    lock = threading.Lock()
    left: list[str] = []

    def locked(result: dict) -> None:
        with lock:
            on_result(result)

    def one(index: int) -> None:
        rest = _run_queue(jobs[index::workers], cpu, timeout_s, locked, python, budget_left,
                          None if share_gpu else index)
        with lock:
            left.extend(rest)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return left


def _run_queue(jobs: list[dict], cpu: bool, timeout_s: float, on_result: Callable[[dict], None],
               python: str | None, budget_left: Callable[[], float] | None, gpu: int | None) -> list[str]:
    pending = list(jobs)
    env = dict(os.environ)
    if cpu:
        env["TRITON_INTERPRET"] = "1"
    if gpu is not None and not cpu:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    with tempfile.TemporaryDirectory(prefix="mtmc-kb-") as tmp:
        while pending:
            seconds_left = budget_left() if budget_left is not None else None
            if seconds_left is not None and seconds_left <= 0:
                return [j["key"] for j in pending]
            jobs_file = Path(tmp) / "jobs.json"
            results_file = Path(tmp) / "results.jsonl"
            deadline = time.time() + seconds_left if seconds_left is not None else None
            jobs_file.write_text(json.dumps([{**job, "deadline": deadline} for job in pending]), encoding="utf-8")
            results_file.write_text("", encoding="utf-8")
            log = open(Path(tmp) / "worker.log", "ab")
            proc = subprocess.Popen([*safe_python_argv(python), str(RUNNER), str(jobs_file), str(results_file)],
                                    env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            seen = 0
            last = time.monotonic()
            killed = False
            while True:
                lines = results_file.read_text(encoding="utf-8").splitlines()
                for line in lines[seen:]:
                    result = json.loads(line)
                    pending = [j for j in pending if j["key"] != result["key"]]
                    on_result(result)
                    last = time.monotonic()
                seen = len(lines)
                if proc.poll() is not None:
                    break
                if time.monotonic() - last > timeout_s:
                    _kill(proc)
                    killed = True
                    break
                time.sleep(0.2)
            log.close()
            lines = results_file.read_text(encoding="utf-8").splitlines()
            for line in lines[seen:]:
                result = json.loads(line)
                pending = [j for j in pending if j["key"] != result["key"]]
                on_result(result)
            if pending and not killed and proc.returncode == 0 and budget_left is not None and budget_left() <= 0:
                return [j["key"] for j in pending]  # stopped at the budget, not a crash
            if pending:
                # the worker died or hung on the first pending job: record it and go on without it
                job = pending.pop(0)
                status = "timeout" if killed else "crash"
                tail = (Path(tmp) / "worker.log").read_text(encoding="utf-8", errors="replace")[-1500:]
                on_result({"key": job["key"], "status": status,
                           "error": f"worker {status} (exit {proc.returncode}); log tail: {tail}"})
    return []


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def scrub_paths(text: str | None) -> str | None:
    """Error text without directories (``/home/u/.venv/lib/torch/x.py`` -> ``x.py``): rows get committed."""
    return None if text is None else re.sub(r"(?:/[\w.+-]+)+/", "", text)


def apply_result(row: ProblemResult, result: dict) -> ProblemResult:
    """Fold a runner result into a row."""
    row.status = result.get("status", "error")
    row.error = scrub_paths(result.get("error") or result.get("timing_error"))
    row.device = result.get("device_name")
    row.seconds = result.get("seconds")
    correctness = result.get("correctness") or {}
    row.trials = correctness.get("trials", 0)
    row.trials_passed = correctness.get("passed", 0)
    row.max_abs_diff = correctness.get("max_abs_diff")
    row.precision = correctness.get("precision")
    if correctness.get("issue") and not row.error:
        row.error = correctness["issue"]
    row.correct = bool(result.get("correct")) and row.status == "ok" and not row.static_errors
    row.trials_passed_fp32_reference = correctness.get("passed_fp32_reference", 0)
    row.max_abs_diff_fp32_reference = correctness.get("max_abs_diff_fp32_reference")
    row.reference_tf32_max_diff = correctness.get("reference_tf32_max_diff")
    row.correct_fp32_reference = (None if "correct_fp32_reference" not in result else
                                  bool(result["correct_fp32_reference"]) and row.status == "ok" and not row.static_errors)
    timing = result.get("timing") or {}
    row.eager_ms, row.compile_ms, row.triton_ms = (timing.get("eager_ms"), timing.get("compile_ms"),
                                                   timing.get("triton_ms"))
    return row


def load_results(path: Path) -> dict[str, ProblemResult]:
    """Rows already in ``results.jsonl`` (the last line per problem wins)."""
    rows: dict[str, ProblemResult] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = ProblemResult.from_json(json.loads(line))
                rows[row.key] = row
    return rows


def discover_problems(root: Path, level: int) -> list[Path]:
    """The problem files of a level: ``ROOT/KernelBench/levelN``, ``ROOT/levelN`` or ROOT itself."""
    for folder in (root / "KernelBench" / f"level{level}", root / f"level{level}", root):
        if folder.is_dir():
            files = [p for p in folder.glob("*.py") if not p.name.startswith("_") and not p.stem.endswith("_triton")]
            if files:
                return sorted(files, key=_problem_order)
    return []


# Level-1 op classes by the words of a problem's file name, first match wins (KernelBench names say what they do).
_NAME_CLASSES = (("conv_transpose", "conv_transpose"), ("conv", "conv"), ("matmul", "matmul"), ("matrix", "matmul"),
                 ("norm", "norm"), ("softmax", "softmax"), ("pool", "pool"), ("loss", "loss"), ("attention", "loss"),
                 ("reduction", "reduce"), ("argm", "reduce"), ("cum", "scan"))


def problem_class(level: int, name: str) -> str:
    """The op class a problem's file name states: level 1 by its op, level 2+ by the op that leads the chain
    (gemm, conv, conv_transpose), which dominates its time."""
    words = re.sub(r"^\d+_", "", name.lower())
    if level >= 2:
        first = words.split("_")[0]
        if first.startswith("convtranspose"):
            return "conv_transpose"
        if first.startswith("conv"):
            return "conv"
        return "gemm" if first in ("gemm", "matmul", "bmm") else "other"
    words = words.replace("conv_transposed", "conv_transpose")
    return next((cls for key, cls in _NAME_CLASSES if key in words), "elementwise")


def sample_problems(files: list[Path], level: int, count: int, seed: int) -> list[Path]:
    """``count`` problems of one level, stratified by ``problem_class``: each class gets its share of the count
    (largest remainders first, at least one while the count allows), drawn at random under ``seed``."""
    import random

    if count <= 0 or count >= len(files):
        return list(files)
    classes: dict[str, list[Path]] = {}
    for path in files:
        classes.setdefault(problem_class(level, path.stem), []).append(path)
    exact = {c: count * len(members) / len(files) for c, members in classes.items()}
    share = {c: min(len(classes[c]), max(1, int(v))) for c, v in exact.items()}
    for c in sorted(exact, key=lambda c: exact[c] - int(exact[c]), reverse=True):  # largest remainders
        if sum(share.values()) >= count:
            break
        if share[c] < len(classes[c]):
            share[c] += 1
    while sum(share.values()) > count:  # the at-least-one rule overshot: trim the largest classes
        share[max(share, key=lambda c: share[c])] -= 1
    rng = random.Random(f"{seed}:{level}")
    chosen = [p for c in sorted(classes) for p in rng.sample(classes[c], share[c])]
    return sorted(chosen, key=_problem_order)


def _problem_order(path: Path) -> tuple:
    match = re.match(r"(\d+)", path.name)
    return (int(match.group(1)) if match else 10 ** 9, path.name)


def iter_rows(rows: Iterable[ProblemResult]) -> list[ProblemResult]:
    return sorted(rows, key=lambda r: (r.level, _problem_order(Path(r.name + ".py"))))
