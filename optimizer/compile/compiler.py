"""Compile kernels for a target GPU in a worker process, with an in-memory and an on-disk cache."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import FileAnalysis, Kernel, analyze
from ..hardware import GpuProfile
from .module_builder import CompileSetupError, build_module
from .static_safety import NEVER_RUN, UnsafeCode, check_source_expression
from .report import CompileReport
from .signature import infer_types

WORKER = Path(__file__).with_name("worker.py")
CACHE_VERSION = 4  # 4: types from the harness and from use; failures over assumed types are "skipped"
FLOAT_SCALAR_NAMES = frozenset(
    {"eps", "epsilon", "scale", "sm_scale", "alpha", "beta", "p", "dropout_p", "momentum", "temperature", "slope",
     "negative_slope", "softmax_scale", "qk_scale", "lr", "weight_decay", "gamma", "theta", "factor", "multiplier"}
)
_MEMORY: dict[str, dict] = {}
_MEMORY_LOCK = threading.Lock()


def default_cache_dir() -> Path:
    """``$MTMC_CACHE_DIR/compile``, else ``$XDG_CACHE_HOME/mtmc-lsp/compile``, else ``~/.cache/...``."""
    base = os.environ.get("MTMC_CACHE_DIR")
    if base:
        return Path(base) / "compile"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "mtmc-lsp" / "compile"


def triton_version() -> str:
    """The installed triton's version without importing it (the server must stay light)."""
    try:
        from importlib.metadata import version

        return version("triton")
    except Exception:  # noqa: BLE001 - not installed: the worker reports it
        return "none"


class Expression(str):
    """A constexpr's value as source the compile worker evaluates in the file's namespace (``tl.float16``)."""


@dataclass
class CompileJob:
    """One kernel config to compile."""

    kernel: str
    constexprs: dict
    num_warps: int = 4
    num_stages: int = 3
    signature_overrides: dict[str, str] | None = None
    label: str = ""
    extra_options: dict = field(default_factory=dict)


# Pointer parameters whose names say they hold integers (locks, counters, labels, indices).
INT_POINTER_NAME = re.compile(r"lock|count|label|idx|index|indices|offsets|seqlen|hist|bins|mask_ptr", re.IGNORECASE)


def _pointer_kind(kernel: Kernel, param: str, body: str) -> str | None:
    """'int' or 'float' for a parameter that is a pointer, None when it reads as a scalar."""
    name = re.escape(param)
    int_atomic = re.search(rf"tl\.atomic_(cas|xchg)\(\s*{name}\b[^,]*,\s*-?\d+\s*[,)]", body)
    named_int = INT_POINTER_NAME.search(param)
    analysed = kernel.param(param)
    is_pointer = analysed is not None and analysed.kind == "pointer"
    # ``K_ptrs = K + offs`` (the loads happen in a helper): the name it flows into says pointer
    flows_into_pointer = re.search(rf"\b\w*(ptr|Ptr|PTR|ptrs|block|desc)\w*\s*=\s*{name}\s*\+", body)
    if not (is_pointer or flows_into_pointer or (int_atomic and named_int)):
        return None
    return "int" if int_atomic or named_int else "float"


def uses_dot(analysis: FileAnalysis, kernel: Kernel) -> bool:
    """Whether the kernel or a jit helper it calls (transitively) uses tl.dot."""
    seen, pending = set(), [kernel.name]
    while pending:
        current = analysis.kernel(pending.pop())
        if current is None or current.name in seen:
            continue
        seen.add(current.name)
        if current.calls_of("dot"):
            return True
        pending.extend(current.called_functions)
    return False


def default_signature(kernel: Kernel, overrides: dict[str, str] | None = None,
                      launch_values: dict[str, object] | None = None, body: str = "",
                      dot: bool | None = None, inferred: dict[str, str] | None = None) -> dict[str, str]:
    """Triton types for the kernel's parameters.

    ``overrides`` (the real types: a recorded launch, the caller) win, then ``inferred`` (from the
    harness's inputs or from use, see ``signature.py``). The rest is assumed: pointers are ``*fp16``
    in kernels that use ``tl.dot`` (``dot``; tensor-core inputs) and ``*fp32`` otherwise, ``*i32``
    for locks/counters/labels/indices (by name, or used by an integer ``tl.atomic_cas``/
    ``atomic_xchg``); scalars are ``i32`` unless annotated or named as floats (eps, scale ...) or
    bound to a float at the launch. ``body`` is the kernel's source, for the usage-based rules.
    """
    overrides = overrides or {}
    inferred = inferred or {}
    launch_values = launch_values or {}
    dot = bool(kernel.calls_of("dot")) if dot is None else dot
    signature: dict[str, str] = {}
    for param in kernel.params:
        if param.kind == "constexpr":
            signature[param.name] = "constexpr"
            continue
        if param.name in overrides:
            signature[param.name] = overrides[param.name]
            continue
        if param.name in inferred:
            signature[param.name] = inferred[param.name]
            continue
        pointer = _pointer_kind(kernel, param.name, body) if body else ("float" if param.kind == "pointer" else None)
        if pointer == "int":
            signature[param.name] = "*i32"
        elif pointer == "float":
            signature[param.name] = "*fp16" if dot else "*fp32"
        else:
            annotation = (param.annotation or "").lower()
            value = launch_values.get(param.name)
            is_float = (
                "float" in annotation or "fp" in annotation
                or param.name.lower() in FLOAT_SCALAR_NAMES
                or isinstance(value, float)
                or isinstance(param.default_value, float)
            )
            signature[param.name] = "fp32" if is_float else ("i1" if "bool" in annotation else "i32")
    return signature


def _constexpr_values(kernel: Kernel, constexprs: dict) -> tuple[dict, dict, list[str]]:
    """Literal values, expressions to evaluate in the worker (non-literal defaults), and what is missing."""
    values: dict = {}
    expressions: dict[str, str] = {}
    missing: list[str] = []
    for param in kernel.params:
        if param.kind != "constexpr":
            continue
        if isinstance(constexprs.get(param.name), Expression):
            expressions[param.name] = str(constexprs[param.name])
        elif param.name in constexprs and constexprs[param.name] is not None:
            values[param.name] = constexprs[param.name]
        elif param.default_value is not None:
            values[param.name] = param.default_value
        elif param.default is not None:
            expressions[param.name] = param.default
        else:
            missing.append(param.name)
    return values, expressions, missing


def _cache_key(module_text: str, job: CompileJob, signature: dict, values: dict, expressions: dict, target: GpuProfile,
               options: dict, python: str | None = None) -> str:
    # The worker's interpreter is part of the key: another venv (``python=``) may hold another Triton, whose
    # results must not come back from this process's Triton's entries (or the reverse).
    blob = json.dumps(
        [CACHE_VERSION, triton_version(), module_text, job.kernel, signature, values, expressions, target.arch, options,
         python or ""],
        sort_keys=True, default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_disk(cache_dir: Path | None, key: str) -> dict | None:
    if cache_dir is None:
        return None
    try:
        return json.loads((cache_dir / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None


def _write_disk(cache_dir: Path | None, key: str, data: dict) -> None:
    if cache_dir is None:
        return
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache_dir / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(cache_dir / f"{key}.json")
    except OSError:
        pass  # a read-only home must not break compilation


def clear_memory_cache() -> None:
    with _MEMORY_LOCK:
        _MEMORY.clear()


def compile_jobs(text: str, jobs: list[CompileJob], target: GpuProfile, timeout_s: float = 120,
                 analysis: FileAnalysis | None = None, cache_dir: Path | None | str = "default",
                 python: str | None = None, cancel: threading.Event | None = None) -> list[CompileReport]:
    """Compile several configs of a file's kernels in one worker process (one triton import).

    ``timeout_s`` is per config; setting ``cancel`` stops the worker (unfinished configs come
    back with status "cancelled" and are not cached).
    """
    if cache_dir == "default":
        cache_dir = default_cache_dir()
    cache_dir = Path(cache_dir) if cache_dir else None
    analysis = analysis or analyze(text)
    inferred = infer_types(analysis)
    reports: list[CompileReport | None] = [None] * len(jobs)
    provenance: dict[int, dict[str, str]] = {}
    todo: dict[str, list] = {}  # module text -> [(index, key, payload)]
    for index, job in enumerate(jobs):
        options = {"num_warps": job.num_warps, "num_stages": job.num_stages, **job.extra_options}
        base = dict(kernel=job.kernel, target=target.key, arch=target.arch, constexprs=dict(job.constexprs),
                    num_warps=job.num_warps, num_stages=job.num_stages, signature={}, label=job.label)
        kernel = analysis.kernel(job.kernel)
        if kernel is None:
            reports[index] = CompileReport(**base, status="skipped", error=f"no kernel named {job.kernel} in the file")
            continue
        types, sources = inferred.for_kernel(job.kernel)
        signature = default_signature(kernel, job.signature_overrides, None, kernel.def_span.text(analysis.text),
                                      uses_dot(analysis, kernel), types)
        provenance[index] = signature_sources(signature, job.signature_overrides, sources)
        base["signature"] = signature
        values, expressions, missing = _constexpr_values(kernel, job.constexprs)
        # Scalars given a value (a stride of 1): the runtime specializes ints equal to 1 into constants.
        for param in kernel.params:
            value = job.constexprs.get(param.name)
            if param.kind != "constexpr" and isinstance(value, int) and not isinstance(value, bool) and value == 1:
                signature[param.name] = "constexpr"
                values[param.name] = value
        # @triton.heuristics values: the worker evaluates the lambdas over what is known
        heuristics = {name: kernel.heuristics[name] for name in missing if name in kernel.heuristics}
        missing = [name for name in missing if name not in heuristics]
        base["constexprs"] = {**values, **{k: f"<{v}>" for k, v in expressions.items()}}
        if missing:
            reports[index] = CompileReport(
                **base, status="skipped",
                error=f"no value for constexpr {', '.join(missing)}: pass it at a launch, in an autotune config or as a default",
            )
            continue
        descriptor_params = _descriptor_params(kernel, analysis.text)
        if descriptor_params and not all(p in (job.signature_overrides or {}) for p in descriptor_params):
            reports[index] = CompileReport(
                **base, status="skipped",
                error=f"parameter {', '.join(descriptor_params)} looks like a host-built tensor descriptor; "
                      "pass its type in signature_overrides to compile",
            )
            continue
        try:
            built = build_module(text, job.kernel)
            for name, source in {**expressions, **heuristics}.items():
                check_source_expression(source, f"the value of {name}", built.names)
        except UnsafeCode as exc:
            reports[index] = CompileReport(**base, status="skipped", error=f"{exc}; {NEVER_RUN}")
            continue
        except CompileSetupError as exc:
            reports[index] = CompileReport(**base, status="skipped", error=str(exc))
            continue
        key = _cache_key(built.text, job, signature, values, {**expressions, **heuristics}, target, options, python)
        with _MEMORY_LOCK:
            hit = _MEMORY.get(key)
        hit = hit or _read_disk(cache_dir, key)
        if hit is not None:
            with _MEMORY_LOCK:
                _MEMORY[key] = hit
            # A result cached before the closure rule knew its error text is read through it as well.
            hit = _closure_failure_as_skip(analysis, base["kernel"], hit)
            reports[index] = CompileReport(**base, **_result_fields(hit), cached=True)
            continue
        payload = {"kernel": job.kernel, "signature": signature, "constexprs": values, "constexpr_exprs": expressions,
                   "heuristics": heuristics, "arch": target.arch, "options": options,
                   "aligned": [name for name, kind in signature.items() if kind.startswith("*") or kind == "i32"]}
        todo.setdefault(built.text, []).append((index, key, payload, base))
    if todo:
        module_texts = list(todo)
        entries = [(module_texts.index(text), entry) for text, group in todo.items() for entry in group]
        payloads = [{**payload, "module": module} for module, (_i, _k, payload, _b) in entries]
        results, wall = _run_worker(module_texts, payloads, timeout_s * len(payloads), python, cancel)
        for (_module, (index, key, _payload, base)), result in zip(entries, results):
            result = _closure_failure_as_skip(analysis, base["kernel"], result)
            result = _assumed_types_failure_as_skip(base["signature"], provenance.get(index, {}), result)
            if result.get("status") in ("ok", "error", "skipped"):
                with _MEMORY_LOCK:
                    _MEMORY[key] = result
                _write_disk(cache_dir, key, result)
            reports[index] = CompileReport(**base, **_result_fields(result), wall_s=round(wall / len(payloads), 3))
    return [r for r in reports if r is not None]


def _closure_failure_as_skip(analysis: FileAnalysis, kernel_name: str, result: dict) -> dict:
    """A factory kernel whose closure values (``BLOCK: tl.constexpr = block``) exist only inside a call."""
    kernel = analysis.kernel(kernel_name)
    error = result.get("error") or ""
    if kernel is None or kernel.enclosing_function is None or result.get("status") != "error":
        return result
    # Python says "name 'X' is not defined"; Triton's code generator "NameError('X is not defined')".
    match = re.search(r"name '(\w+)' is not defined|NameError\(['\"](\w+) is not defined",
                      error + " " + (result.get("detail") or ""))
    if not match:
        return result
    return {"status": "skipped", "error": f"{kernel_name} is defined inside {kernel.enclosing_function}() and uses "
            f"{match.group(1) or match.group(2)} from it, which has no value outside a call: not compiled"}


def signature_sources(signature: dict[str, str], overrides: dict[str, str] | None,
                      inferred_sources: dict[str, str]) -> dict[str, str]:
    """Where each non-constexpr type came from: "given" (real), "harness", "use" or "assumed"."""
    overrides = overrides or {}
    return {name: ("given" if name in overrides else inferred_sources.get(name, "assumed"))
            for name, kind in signature.items() if kind != "constexpr"}


# Compiler messages that a wrong parameter type produces (an fp32 index, an int where a float goes).
TYPE_ERROR = re.compile(
    r"invalid operands|pointer<|incompatible|unsupported .*type|cannot .*(cast|convert)|dtype|type mismatch|"
    r"IncompatibleType|expected .*(int|float|type)|must be .*(int|float|bool|pointer)|TypeError", re.IGNORECASE)


def _assumed_types_failure_as_skip(signature: dict[str, str], sources: dict[str, str], result: dict) -> dict:
    """A type error in a compile over assumed parameter types says the types are unknown, not that the kernel is broken."""
    if result.get("status") != "error":
        return result
    assumed = [name for name, source in sources.items() if source in ("assumed", "use")]
    if not assumed or not TYPE_ERROR.search(result.get("error") or ""):  # the message, not the quoted source
        return result
    listed = ", ".join(f"{name}: {signature[name]}" for name in assumed)
    return {"status": "skipped", "line": result.get("line"), "col": result.get("col"), "detail": result.get("detail"),
            "error": f"the argument types are not known here (assumed {listed}) and the compile failed over them "
                     f"({result.get('error')}); add get_inputs() with the kernel's real inputs, or verify it, "
                     f"to compile with real types"}


def _result_fields(result: dict) -> dict:
    fields = {k: result.get(k) for k in (
        "status", "error", "registers", "spill_stores", "spill_loads", "stack_bytes", "local_bytes", "shared_bytes",
        "ptx_bytes", "cubin_bytes", "compile_s",
    )}
    fields["error_line"] = result.get("line")
    fields["error_col"] = result.get("col")
    fields["detail"] = result.get("detail") or result.get("ptxas_log") or ""
    fields["status"] = fields["status"] or "error"
    return fields


def _descriptor_params(kernel: Kernel, text: str) -> list[str]:
    """Parameters used as ``desc.load(...)``/``desc.store(...)``: host tensor descriptors."""
    body = kernel.body_span.text(text)
    return [p.name for p in kernel.params if p.kind != "constexpr" and (f"{p.name}.load(" in body or f"{p.name}.store(" in body)]


def _run_worker(module_texts: list[str], jobs: list[dict], timeout_s: float, python: str | None,
                cancel: threading.Event | None = None) -> tuple[list[dict], float]:
    """Run the worker on the modules' jobs; one result per job, timeouts, cancels and crashes included."""
    start = time.perf_counter()
    stdout = stderr = ""
    outcome = "done"
    with tempfile.TemporaryDirectory(prefix="mtmc-compile-") as tmp:
        paths = []
        for index, text in enumerate(module_texts):
            path = Path(tmp) / f"kernel_module_{index}.py"
            path.write_text(text)
            paths.append(str(path))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.update({
            "TRITON_CACHE_DIR": str(Path(tmp) / "triton-cache"),  # fresh: we want ptxas to run (and log)
            "TRITON_DUMP_PTXAS_LOG": "1",
            "TRITON_DEFAULT_FP_FUSION": env.get("TRITON_DEFAULT_FP_FUSION", "1"),
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        request = json.dumps({"modules": paths, "jobs": jobs})
        try:
            proc = subprocess.Popen(
                # -I: no PYTHONPATH, user site or script folder on sys.path: only the installed triton loads
                [python or sys.executable, "-I", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, cwd=tmp, env=env, start_new_session=True,
            )
        except OSError as exc:
            return [{"status": "error", "error": f"cannot start the compile worker: {exc}"}] * len(jobs), 0.0
        deadline = start + timeout_s
        pending_input: str | None = request
        while True:
            try:  # short waits, so a cancel or the deadline is noticed within a quarter second
                stdout, stderr = proc.communicate(pending_input, timeout=max(0.01, min(0.25, deadline - time.perf_counter())))
                break
            except subprocess.TimeoutExpired:
                pending_input = None  # already being sent; communicate() must not get it again
                if cancel is not None and cancel.is_set():
                    outcome = "cancelled"
                elif time.perf_counter() >= deadline:
                    outcome = "timeout"
                else:
                    continue
                proc.kill()
                stdout, stderr = proc.communicate()
                break
    results: list[dict] = []
    for line in (stdout or "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                results.append(json.loads(line))
            except ValueError:
                pass
    while len(results) < len(jobs):
        if outcome == "timeout":
            results.append({"status": "timeout", "error": f"compilation did not finish within {timeout_s:.0f} s"})
        elif outcome == "cancelled":
            results.append({"status": "cancelled", "error": "compilation cancelled"})
        else:
            tail = (stderr or "").strip().splitlines()[-3:]
            results.append({"status": "error", "error": f"the compile worker exited with code {proc.returncode}: "
                            + (" | ".join(tail) or "no output"), "detail": (stderr or "")[-3000:]})
    return results, time.perf_counter() - start


def compile_kernel(text: str, kernel_name: str, constexprs: dict, target: GpuProfile, num_warps: int = 4,
                   num_stages: int = 3, signature_overrides: dict[str, str] | None = None, timeout_s: float = 120,
                   cache_dir: Path | None | str = "default", label: str = "") -> CompileReport:
    """Compile one kernel of ``text`` for ``target`` in a subprocess and report its resource usage."""
    job = CompileJob(kernel_name, dict(constexprs), num_warps, num_stages, signature_overrides, label)
    return compile_jobs(text, [job], target, timeout_s=timeout_s, cache_dir=cache_dir)[0]
