"""``verify_file``: discover the harness, run the job in a worker, turn its result into a report."""

from __future__ import annotations

import math
import os
import re
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from ..analysis import analyze
from ..hardware import GpuProfile, resolve_target
from .harness import Harness, HarnessMissing, discover_harness, test_names
from .pool import Cancel, JobOutcome, WorkerPool
from .report import Check, Mismatch, Reward, Speed, VerificationReport, peak_key, roofline_figures
from .runtime.stats import SYNCHRONIZED_NEW, speedup_stats

# progress(message, percentage or None): what the server forwards as work-done progress.
ProgressFn = Callable[[str, "int | None"], None]

_PHASE_PERCENT = {"start": 5, "compile": 10, "correctness": 40, "speed": 70, "recheck": 85}
_ROLE_NAMES = {"reference": "reference", "old": "previous"}


@dataclass
class VerifyOptions:
    """Knobs of one verification; ``from_settings`` maps the editor's ``mtmc.verification`` section."""

    seeds: int = 3
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    mode: str = "auto"  # "auto" | "gpu" | "interpreter"
    # Keyword arguments for get_inputs (besides device). None: the defaults on a GPU, and every
    # integer size knob halved down to <= 96 in the interpreter.
    input_kwargs: dict | None = None
    atol: float | None = None  # None: by dtype (fp32 1e-4, fp16/bf16 1e-2, fp64 1e-7, ints exact)
    rtol: float | None = None
    timing: bool = True
    timing_rounds: int = 5
    warmup_ms: int = 25  # the most; adaptive timing uses less for fast kernels
    rep_ms: int = 100
    # Size each do_bench by the kernel's measured time (about 100 runs, at least 20 ms) and add
    # rounds while the ratios are noisy; False: always warmup_ms/rep_ms and timing_rounds rounds.
    adaptive_timing: bool = True
    # Keep the previous version loaded and the expected outputs (reference, previous) per seed in
    # the worker between jobs: the optimize loop checks many candidates against one previous version.
    reuse_results: bool = True
    # Test-style files: "launches" times the file's kernel launches recorded inside each test,
    # replayed with their arguments; "test" times the whole test function.
    test_timing: str = "launches"
    # GPU: compile an autotuned kernel's configs in parallel on the host's cores before its first
    # benchmark (Triton's AsyncCompileMode; best effort, off: one after another as Triton does).
    parallel_compile: bool = True
    time_reference: bool = True
    # Time replays of a CUDA graph of each call (no host launch overhead, no synchronize in the timed
    # region) when every implementation captures and reproduces itself on new inputs; else, and always
    # when False, the call followed by a device-wide synchronize (runtime/graphs.py).
    cuda_graphs: bool = True
    sync_all_streams: bool = True
    recheck_speedup_above: float = 10.0
    # Without a GPU the interpreter does not compile anything: also compile every launched kernel
    # config for the target (optimizer.compile, cached) so "compiles" means it compiles there.
    compile_for_target: bool = True
    entry: str | None = None  # force the host function / model class to call
    # A KernelBench problem file (Model, get_inputs, get_init_inputs) for a solution with only ModelNew.
    problem_text: str | None = None
    kernel: str | None = None  # the kernel the user asked about (for the summary only)
    key: str | None = None  # jobs with the same key supersede each other (e.g. the document URI)
    step_label: str | None = None  # "step 3" in the summary, when the caller numbers steps
    previous_label: str = "previous"  # "step 2" in the summary
    pool: WorkerPool | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> "VerifyOptions":
        """From ``mtmc_lsp.settings.VerificationSettings`` (compile/run timeouts, seeds)."""
        base = {
            "seeds": getattr(settings, "seeds", 3),
            "compile_timeout_s": getattr(settings, "compile_timeout_s", 120.0),
            "run_timeout_s": getattr(settings, "run_timeout_s", 60.0),
        }
        base.update(overrides)
        return cls(**{k: v for k, v in base.items() if k in {f.name for f in fields(cls)}})


_pools: dict[str, WorkerPool] = {}


def pool_for(mode: str) -> WorkerPool:
    """The process-wide pool for ``mode`` ("auto" picks the GPUs when there are any)."""
    if mode not in _pools:
        _pools[mode] = WorkerPool(mode)
    return _pools[mode]


def close_pools() -> None:
    """Stop this process's pools and their workers (a process that exits without atexit calls this)."""
    while _pools:
        _pools.popitem()[1].close()


if hasattr(os, "register_at_fork"):  # a forked child has its parent's pools' pipes, not workers of its own
    os.register_at_fork(after_in_child=_pools.clear)


def build_job(harness: Harness, new_text: str, old_text: str | None, mode: str, options: VerifyOptions,
              old_harness: Harness | None = None) -> dict:
    """The dictionary a worker runs (see ``runtime/job.py``)."""
    h = harness.to_json()
    if old_harness is not None and old_harness.style == harness.style and old_harness.entry:
        h["old_entry"] = old_harness.entry
    seeds = max(1, int(options.seeds))
    return {
        "id": uuid.uuid4().hex[:12],
        "mode": mode,
        "new_text": new_text,
        "old_text": old_text,
        "problem_text": options.problem_text,
        "harness": h,
        "seeds": list(range(seeds)),
        "input_kwargs": options.input_kwargs,
        "atol": options.atol,
        "rtol": options.rtol,
        "reuse": options.reuse_results,
        "parallel_compile": options.parallel_compile,
        "timing": {
            "rounds": options.timing_rounds, "warmup_ms": options.warmup_ms, "rep_ms": options.rep_ms,
            "time_reference": options.time_reference, "sync_all_streams": options.sync_all_streams,
            "graphs": options.cuda_graphs,
            "adaptive": options.adaptive_timing, "test_timing": options.test_timing,
        } if options.timing else None,
        "recheck_speedup_above": options.recheck_speedup_above,
    }


def verify_file(new_text: str, old_text: str | None, path: str | None = None,
                target: GpuProfile | str | None = None, options: VerifyOptions | None = None,
                progress: ProgressFn | None = None, cancel: Cancel = None) -> VerificationReport:
    """Verify ``new_text`` (against ``old_text``, the last accepted version, when given).

    Blocking; call it from a worker thread. ``cancel`` is a callable or ``threading.Event``;
    cancelling kills the worker running the job. Never raises for problems in the user's code:
    they become the report's status, checks and summary.
    """
    options = options or VerifyOptions()
    started = time.monotonic()
    profile = target if isinstance(target, GpuProfile) else resolve_target(target or "")
    base = dict(target=profile.key, path=path, kernel=options.kernel)

    analysis = analyze(new_text, path)
    harness = discover_harness(new_text, path, analysis, options.entry, options.problem_text)
    if isinstance(harness, HarnessMissing):
        check = Check("harness", "failed", harness.reason, harness.line,
                      {"host_function": harness.host_function})
        return VerificationReport(
            status="no_harness", mode=None, device="", summary=f"not verified: {harness.reason}", compiled=False,
            correct=None, seeds=0, compared_against=[], checks=[check], reward=Reward.of(False, False, None),
            error=harness.reason, error_line=harness.line, scaffold=harness.scaffold,
            duration_s=time.monotonic() - started, **base)
    old_harness = None
    if old_text is not None:
        found = discover_harness(old_text, path, problem_text=options.problem_text)
        old_harness = found if isinstance(found, Harness) else None

    pool = options.pool or pool_for(options.mode)
    target_compile = None
    if _cancelled(cancel):
        return _stopped_report("cancelled", harness, pool.mode, base, started)
    job = build_job(harness, new_text, old_text, pool.mode, options, old_harness)

    def on_progress(message: str, info: dict) -> None:
        if progress is not None:
            progress(message, _PHASE_PERCENT.get(info.get("phase", ""), None))

    job_started = time.monotonic()
    outcome = pool.run(job, options.compile_timeout_s, options.run_timeout_s, on_progress, cancel, options.key)
    job_s = time.monotonic() - job_started
    report = build_report(outcome, harness, profile, options, pool.mode, old_text is not None, base)
    compile_check = report.check("compile")
    # The launches the job saw carry the real argument types: the compile for the target uses them
    # instead of assuming (an int64 index tensor compiled as *fp32 does not compile).
    launched = (outcome.result or {}).get("launches") or {}
    target_started = time.monotonic()
    if (pool.mode == "interpreter" and options.compile_for_target and not _cancelled(cancel)
            and report.status in ("verified", "incorrect", "no_harness", "compile_error")):
        if progress is not None:
            progress(f"compiling for {profile.name}", 90)
        target_compile = compile_for_target(analysis, profile, options.compile_timeout_s, launched)
        interpreter_error = report.status == "compile_error" and "InterpreterError" not in (report.error or "")
        if target_compile["failed"] and not interpreter_error:  # a plain compile error names its own line
            failure = _target_compile_failure(target_compile, harness, profile, base, started)
            failure.raw = report.raw
            report = failure
            compile_check = report.check("compile")
    if (target_compile is None and pool.mode == "gpu" and options.compile_for_target and report.compiled
            and _other_arch(report.device, profile) and not _cancelled(cancel)):
        # Verified on this GPU, but the user optimizes for another one: it must compile there too.
        target_compile = compile_for_target(analysis, profile, options.compile_timeout_s, launched)
        if target_compile["failed"]:
            failed = target_compile["failed"]
            compile_check.status, compile_check.line = "failed", failed["line"]
            compile_check.message += f"; but {failed['message']}"
            report.status, report.compiled, report.error, report.error_line = (
                "compile_error", False, failed["message"], failed["line"])
            report.reward = Reward.of(False, False, None)
            report.summary = f"not verified for {profile.name}: {failed['message']} (ran on {report.device})"
    if (target_compile is not None and report.status == "compile_error"
            and "InterpreterError" in (report.error or "") + str(compile_check.details.get("type", ""))):
        # It compiled for the target, so the interpreter (no bf16 math, no indirect loads, ...) may be
        # what failed, not the kernel: say so rather than blame the code.
        hint = (f" (the kernels compile for {profile.name}; the Triton interpreter may not support this kernel: "
                "verify on a GPU to be sure)")
        report.summary += hint
        compile_check.message += hint
    if target_compile is not None and compile_check is not None and compile_check.status == "passed":
        compile_check.message += f"; {target_compile['message']}"
        compile_check.details["target"] = target_compile
    report.duration_s = time.monotonic() - started
    phases = dict((outcome.result or {}).get("phases") or {})
    worker_s = sum(phases.values())
    phases["worker_other"] = round(max(0.0, outcome.seconds - worker_s), 4)  # start, transfer, unload
    phases["queue_and_start"] = round(max(0.0, job_s - outcome.seconds), 4)
    if target_compile is not None:
        phases["target_compile"] = round(time.monotonic() - target_started, 4)
    phases["total"] = round(report.duration_s, 4)
    report.phases = phases
    return report


def _other_arch(device_name: str, target: GpuProfile) -> bool:
    """Whether the GPU the job ran on has another architecture than the target (unknown GPU: no)."""
    from ..hardware import get_profile

    try:
        return get_profile(device_name).arch != target.arch
    except KeyError:
        return False


def compile_for_target(analysis, profile: GpuProfile, timeout_s: float, launched: dict | None = None) -> dict:
    """Compile each launched kernel config for ``profile`` (no GPU needed) and judge the resources.

    ``launched``: per kernel, the argument types of a launch the worker recorded (real types, from
    the harness's inputs); kernels not launched there get types inferred from the file.
    """
    try:
        return _compile_for_target(analysis, profile, timeout_s, launched)
    except Exception as exc:  # noqa: BLE001 - a bug in planning must not lose the verification
        return {"failed": None, "message": f"not compiled for {profile.name}: internal error {type(exc).__name__}: {exc}",
                "reports": []}


def _compile_for_target(analysis, profile: GpuProfile, timeout_s: float, launched: dict | None) -> dict:
    from ..compile import compile_jobs, plan_jobs

    planned = plan_jobs(analysis, profile)
    for plan in planned:
        real = (launched or {}).get(plan.job.kernel)
        kernel = analysis.kernel(plan.job.kernel)
        if real and kernel is not None:
            plan.job.signature_overrides = {
                name: kind for name, kind in real["types"].items()
                if (param := kernel.param(name)) is not None and param.kind != "constexpr"
                and not (kind in ("i32", "i64") and real["constants"].get(name) == 1)}  # 1 is specialized
            for param in kernel.params:  # a constexpr only the launch knows (BLOCK=next_power_of_2(n))
                value = real["constants"].get(param.name)
                if param.kind != "constexpr" and value == 1 and not isinstance(value, (bool, float)):
                    plan.job.constexprs[param.name] = 1  # the runtime specializes an int equal to 1
                    continue
                if param.kind == "constexpr" and plan.job.constexprs.get(param.name) is None and value is not None:
                    plan.job.constexprs[param.name] = value
                    plan.job.label = (plan.job.label + " " if plan.job.label else "") + f"({param.name} as launched)"
    reports = compile_jobs(analysis.text, [p.job for p in planned], profile, timeout_s=timeout_s, analysis=analysis)
    failed, parts, skipped = None, [], []
    for plan, rep in zip(planned, reports):
        if rep.status == "ok":
            shared = rep.shared_bytes or 0
            if shared > profile.max_shared_per_block and failed is None:
                failed = {"message": f"{rep.kernel} ({rep.label}) needs {shared // 1024} KiB of shared memory; "
                                     f"{profile.name} allows {profile.max_shared_per_block // 1024} KiB per block",
                          "line": plan.span.start.line}
            parts.append(f"{rep.kernel} {rep.registers} registers, {rep.spills} B spilled, {shared // 1024} KiB shared")
        elif rep.status == "error" and failed is None:
            line = rep.error_line - 1 if rep.error_line else plan.span.start.line
            failed = {"message": f"{rep.kernel} does not compile for {profile.name}: "
                                 f"{_error_headline(rep.error or rep.detail or '')}", "line": line}
        elif rep.status in ("skipped", "timeout"):
            skipped.append(f"{rep.kernel}: {rep.status} ({_error_headline(rep.error or '')})")
    message = f"compiled for {profile.name} ({profile.sm_name})" + (f": {'; '.join(dict.fromkeys(parts))}" if parts else "")
    if skipped:
        message += f"; not compiled: {'; '.join(skipped)}"
    if not planned:
        message = f"no launch to compile for {profile.name}"
    return {"failed": failed, "message": message, "reports": [r.to_json() for r in reports]}


def _target_compile_failure(target_compile: dict, harness: Harness, profile: GpuProfile, base: dict,
                            started: float) -> VerificationReport:
    failed = target_compile["failed"]
    checks = [Check("harness", "passed", harness.describe(), harness.line, {"style": harness.style}),
              Check("compile", "failed", failed["message"], failed["line"], {"target": target_compile})]
    return VerificationReport(
        status="compile_error", mode="interpreter", device=f"compiler for {profile.name} (no GPU)",
        summary=f"not verified: {failed['message']}", compiled=False, correct=None, seeds=0, compared_against=[],
        checks=checks, reward=Reward.of(False, False, None), harness=harness.to_json(), error=failed["message"],
        error_line=failed["line"], duration_s=time.monotonic() - started, **base)


def _cancelled(cancel: Cancel) -> bool:
    if cancel is None:
        return False
    return cancel.is_set() if hasattr(cancel, "is_set") else bool(cancel())


def _stopped_report(status: str, harness: Harness, mode: str, base: dict, started: float) -> VerificationReport:
    return VerificationReport(
        status=status, mode=mode, device="", summary=f"not verified: {status}", compiled=False, correct=None, seeds=0,
        compared_against=[], checks=[], reward=Reward.of(False, False, None), harness=harness.to_json(),
        duration_s=time.monotonic() - started, **base)


# -- result -> report ------------------------------------------------------------------------------

def build_report(outcome: JobOutcome, harness: Harness, profile: GpuProfile, options: VerifyOptions,
                 mode: str, has_old: bool, base: dict) -> VerificationReport:
    """Turn a worker's outcome into the report (statuses, checks in order, mismatch, speed, reward)."""
    harness_check = Check("harness", "passed", harness.describe(), harness.line,
                          {"style": harness.style, "notes": harness.notes})
    device_default = "CPU (Triton interpreter)" if mode == "interpreter" else outcome.worker
    common = dict(mode=mode, harness=harness.to_json(), **base)
    if outcome.result is None:
        status = outcome.failure if outcome.failure in ("timeout", "cancelled", "superseded") else "crash"
        what = {
            "timeout": f"timed out: {outcome.detail}",
            "cancelled": "cancelled",
            "superseded": "cancelled: a newer version of the document was submitted",
            "crash": f"the worker crashed in the {outcome.phase or 'start'} phase: {outcome.detail}",
            "start_failed": f"no worker: {outcome.detail}",
        }.get(outcome.failure or "crash", outcome.detail)
        hint = _log_hint(outcome.log_tail)
        line = _user_line_in_log(outcome.log_tail)
        if line is not None and outcome.failure in ("timeout", "crash"):
            what += f" (at line {line + 1})"
        name = outcome.phase if outcome.phase in ("compile", "correctness", "speed") else "compile"
        checks = [harness_check, Check(name, "failed", what + (f" ({hint})" if hint else ""), line,
                                       {"log_tail": outcome.log_tail})]
        compiled = outcome.phase in ("correctness", "speed", "recheck")
        return VerificationReport(
            status=status, device=device_default, summary=f"not verified: {what}", compiled=compiled,
            correct=None, seeds=0, compared_against=[], checks=checks, reward=Reward.of(compiled, False, None),
            error=what + (f"\n{hint}" if hint else ""), error_line=line, raw={"failure": outcome.failure, "detail": outcome.detail,
                                                            "log_tail": outcome.log_tail}, **common)

    result = outcome.result
    env = result.get("environment", {})
    device = env.get("device_name") or device_default
    if "internal_error" in result:
        err = result["internal_error"]
        return VerificationReport(
            status="error", device=device, summary=f"not verified: internal error in the verifier: {err['message']}",
            compiled=False, correct=None, seeds=0, compared_against=[], checks=[harness_check],
            reward=Reward.of(False, False, None), error=err["traceback"], environment=env, raw=result, **common)

    checks = [harness_check]
    new_compile = result.get("compile", {}).get("new") or {}
    compiled = bool(new_compile.get("ok"))
    old_compile = result.get("compile", {}).get("old")
    if not compiled:
        where = f"line {new_compile['line'] + 1}: " if new_compile.get("line") is not None else ""
        msg = f"{new_compile.get('stage', 'compile')} failed: {where}{_error_headline(new_compile.get('message', ''))}"
        checks.append(Check("compile", "failed", msg, new_compile.get("line"), new_compile))
        return VerificationReport(
            status="compile_error", device=device, summary=f"not verified: {msg}", compiled=False, correct=None,
            seeds=0, compared_against=[], checks=checks, reward=Reward.of(False, False, None),
            error=new_compile.get("message"), error_line=new_compile.get("line"), environment=env, raw=result,
            **common)
    if mode == "interpreter":
        compile_msg = f"imported and launched in the Triton interpreter in {new_compile.get('seconds', 0):.1f} s"
    else:
        compile_msg = f"compiled and launched on {device} in {new_compile.get('seconds', 0):.1f} s"
    if old_compile is not None and not old_compile.get("ok"):
        compile_msg += f"; the previous version does not run ({_error_headline(old_compile.get('message', ''))})"
    if new_compile.get("note"):
        compile_msg = new_compile["note"]
    checks.append(Check("compile", "passed", compile_msg, None, {"seconds": new_compile.get("seconds")}))

    unsupported = result.get("runtime", {}).get("interpreter_unsupported")
    if unsupported:
        text = f"correctness cannot be checked in the Triton interpreter: {unsupported}; verify on a GPU"
        checks.append(Check("correctness", "skipped", text, None, {}))
        checks.append(Check("speed", "unavailable", "speed: unavailable (no GPU)", None, {}))
        return VerificationReport(
            status="no_harness", device=device, summary=f"not verified: {text}", compiled=True, correct=None,
            seeds=0, compared_against=[], checks=checks, reward=Reward.of(True, False, None), error=text,
            speed_unavailable_reason="unavailable (no GPU)", environment=env, raw=result, **common)
    trials = result.get("trials", [])
    recheck = result.get("recheck") or {}
    all_trials = trials + recheck.get("trials", [])
    ran = [t for t in all_trials if not t.get("skipped")]
    failed = [t for t in ran if not t.get("ok")]
    against = sorted({_ROLE_NAMES[r] for t in ran for r in t.get("checks", {})}, key=["reference", "previous"].index)
    seeds = len({t["seed"] for t in trials if not t.get("skipped")})
    mismatch = _first_mismatch(failed[0], options) if failed else None
    correct = not failed and bool(ran)
    # A worker replaced because the code tampered with the checker is a wrong result, not a crash.
    fatal = not result.get("worker_healthy", True) and not result.get("tampered")
    max_abs = max((c.get("max_abs", 0.0) for t in ran for c in t.get("checks", {}).values()), default=0.0)
    max_rel = max((c.get("max_rel", 0.0) for t in ran for c in t.get("checks", {}).values()), default=0.0)
    details = {"trials": len(ran), "seeds": seeds, "max_abs_error": max_abs, "max_rel_error": max_rel,
               "against": against, "input_kwargs": result.get("runtime", {}).get("input_kwargs"),
               "inputs_from": result.get("runtime", {}).get("inputs_from")}
    error = None
    error_line = None
    if failed:
        first = failed[0]
        if first.get("error"):
            err = first["error"]
            error, error_line = err.get("message"), err.get("line")
            where = f" (line {error_line + 1})" if error_line is not None else ""
            text = f"{'device fault' if fatal else 'run failed'}{where}: {_error_headline(err.get('message', ''))}"
            hint = _log_hint(outcome.log_tail) if fatal else ""
            if hint and hint not in text:
                text += f" ({hint})"
        else:
            text = mismatch.describe() if mismatch else "incorrect"
            error = text
        checks.append(Check("correctness", "failed", f"incorrect: {text}", error_line, details))
    elif not against and harness.style == "test" and harness.tests and harness.self_checking == harness.tests:
        # Every test asserts its own result against PyTorch (the common public style): their passing
        # on fresh seeds is the check, as when the user runs them.
        against = ["the file's own tests"]
        checks.append(Check("correctness", "passed",
                            f"the file's own tests pass over {seeds} seeds ({test_names(harness.tests)} "
                            f"{'checks its result itself' if len(harness.tests) == 1 else 'check their results themselves'})",
                            None, details))
    elif not against:
        note = (f"ran {len(ran)} trials without errors or NaN/Inf, but correctness is unknown: nothing to compare "
                "with (add reference(*inputs) or verify against a previous version)")
        checks.append(Check("correctness", "skipped", note, None, details))
    else:
        checks.append(Check("correctness", "passed",
                            f"correct over {seeds} seeds vs {' and '.join(against)} "
                            f"(max abs err {max_abs:.2g}, max rel err {max_rel:.2g})", None, details))

    speed, speed_reason = _speed(result, recheck, has_old, profile, mode, correct, options)
    if speed is not None:
        label = options.previous_label if speed.baseline == "previous" else speed.reference_label
        timed_how = f"; timed: {speed.method}" if speed.method else ""
        checks.append(Check("speed", "passed" if speed.believed else "failed", speed.describe(label) + timed_how,
                            None, {"raw_rounds": speed.raw_rounds, "method": speed.method, "sizing": speed.sizing}))
    else:
        checks.append(Check("speed", "unavailable", f"speed: {speed_reason}", None, {}))
    if correct and not against:
        # Nothing says the numbers are right: not "verified", and no reward for correctness.
        check = next(c for c in checks if c.name == "correctness")
        where = "CPU interpreter" if mode == "interpreter" else device
        return VerificationReport(
            status="no_harness", device=device, summary=f"not verified on {where}: {check.message}", compiled=True,
            correct=None, seeds=seeds, compared_against=[], checks=checks, reward=Reward.of(True, False, None),
            speed_unavailable_reason=speed_reason, error=check.message, environment=env, raw=result, **common)
    reward = Reward.of(True, correct, speed)
    status = "verified" if correct else ("crash" if fatal else "incorrect")
    summary = _summary(status, device, mode, seeds, against, speed, speed_reason, checks, options)
    return VerificationReport(
        status=status, device=device, summary=summary, compiled=True, correct=correct, seeds=seeds,
        compared_against=against, checks=checks, reward=reward, mismatch=mismatch, speed=speed,
        speed_unavailable_reason=speed_reason, error=error, error_line=error_line, environment=env, raw=result,
        **common)


def _speed(result: dict, recheck: dict, has_old: bool, profile: GpuProfile, mode: str, correct: bool,
           options: VerifyOptions) -> tuple[Speed | None, str | None]:
    if mode != "gpu":
        return None, "unavailable (no GPU: checked in the Triton interpreter, which says nothing about speed)"
    if not options.timing:
        return None, "not measured (timing turned off)"
    if not correct:
        return None, "not measured (the kernel is not correct)"
    timed = result.get("speed")
    if not timed:
        return None, "not measured"
    rounds = timed["rounds"]
    baseline = "old" if has_old and rounds and "old" in rounds[0] else "reference"
    stats = speedup_stats(rounds, baseline, "new")
    if stats is None:
        return None, "not measured (no previous version and no reference to compare with)"
    # A reference timed synchronized (it could not be a CUDA graph) is compared with "new" timed the same way.
    against_reference = SYNCHRONIZED_NEW if rounds and SYNCHRONIZED_NEW in rounds[0] else "new"
    ref_stats = speedup_stats(rounds, "reference", against_reference) if baseline != "reference" else stats
    believed, note = True, ""
    if stats["speedup"] > options.recheck_speedup_above:
        re_trials = recheck.get("trials") or []
        re_rounds = recheck.get("rounds")
        re_stats = speedup_stats(re_rounds, baseline, "new") if re_rounds else None
        if not re_trials or any(not t.get("ok") for t in re_trials):
            believed, note = False, "the recheck with more seeds and shapes found wrong results"
        elif re_stats is None:
            believed, note = False, "the recheck could not time it again"
        else:
            shape_trials = [t for t in re_trials if t.get("kind") == "shape"]
            outside = sum(1 for t in shape_trials if t.get("skipped"))
            shapes = "and other shapes " if len(shape_trials) > outside else ""
            if outside:
                shapes += (f"({outside} other shape{'s' if outside > 1 else ''} skipped: the previous version misses "
                           "the reference there too) ")
            note = (f"over {options.recheck_speedup_above:g}x: rechecked with {len(re_trials) - outside} more trials "
                    f"{shapes}and timed again at {re_stats['speedup']:.2f}x")
            believed = re_stats["speedup"] > options.recheck_speedup_above / 2
            if not believed:
                note += " - the second timing disagrees"
    runtime = result.get("runtime", {})
    moved = (runtime.get("input_bytes") or 0) + (runtime.get("output_bytes") or 0)
    flop_dtype = peak_key(runtime.get("flop_dtype"), profile.peak_tflops)
    roofline = roofline_figures(runtime.get("flops"), flop_dtype, moved, stats["candidate_ms"] * 1e-3,
                                profile.peak_tflops, profile.memory_bandwidth_gbs)
    speed = Speed(
        method=timed.get("method") or "", sizing=timed.get("sizing") or {},
        baseline=_ROLE_NAMES[baseline], baseline_ms=stats["baseline_ms"], candidate_ms=stats["candidate_ms"],
        speedup=stats["speedup"], band=stats["band"], rounds=stats["rounds"], ratios=stats["ratios"],
        believed=believed, recheck=note,
        reference_ms=ref_stats["baseline_ms"] if ref_stats else None,
        speedup_vs_reference=ref_stats["speedup"] if ref_stats else None,
        reference_timed=runtime.get("reference_timed", "reference"), reference_upcast=runtime.get("reference_upcast"),
        bytes_moved=moved or None, raw_rounds=rounds, flops=runtime.get("flops"), flop_dtype=flop_dtype,
        **roofline,
    )
    return speed, None


def _first_mismatch(trial: dict, options: VerifyOptions) -> Mismatch | None:
    configs = trial.get("autotune_config") or {}
    common = dict(seed=trial.get("seed"), trial=trial.get("kind", "fresh"), test=trial.get("test"),
                  config="; ".join(f"{kernel} {text.split(', num_ctas')[0]}" for kernel, text in configs.items()) or None)
    if trial.get("mutated"):
        m = trial["mutated"]
        return Mismatch(against="self", kind="mutated_input", output=m.get("output", "input"), index=m.get("index"),
                        actual=m.get("actual"), expected=m.get("expected"), count=m.get("count"),
                        reason=m.get("reason", ""), **common)
    if trial.get("nonfinite"):
        m = trial["nonfinite"]
        return Mismatch(against="self", kind="nonfinite", output=m["output"], index=m["index"], actual=m["value"],
                        count=m["count"], **common)
    for role, result in trial.get("checks", {}).items():
        if result.get("ok"):
            continue
        m = result.get("mismatch") or {}
        if "index" not in m:
            return Mismatch(against=_ROLE_NAMES[role], kind="structure", output=m.get("output", "output"),
                            reason=m.get("reason", "differs"), **common)
        return Mismatch(against=_ROLE_NAMES[role], kind="values", output=m["output"], index=m["index"],
                        actual=m["actual"], expected=m["expected"], max_abs_error=result.get("max_abs"),
                        max_rel_error=result.get("max_rel"), count=m.get("count"), elements=m.get("elements"),
                        atol=m.get("atol"), rtol=m.get("rtol"), **common)
    return None


def _summary(status: str, device: str, mode: str, seeds: int, against: list[str], speed: Speed | None,
             speed_reason: str | None, checks: list[Check], options: VerifyOptions) -> str:
    who = f"{options.step_label} " if options.step_label else ""
    where = "CPU interpreter" if mode == "interpreter" else device
    against_text = " and ".join(options.previous_label if a == "previous" else a for a in against)
    if status == "verified":
        head = f"{who}verified on {where}: correct over {seeds} seeds" + (f" vs {against_text}" if against else
                                                                             " (nothing to compare with)")
    else:
        correctness = next((c for c in checks if c.name == "correctness"), None)
        head = f"{who}failed on {where}: {correctness.message if correctness else status}"
    if speed is not None:
        label = options.previous_label if speed.baseline == "previous" else speed.reference_label
        return f"{head}; {speed.describe(label)}"
    if status == "verified":
        return f"{head}; speed: {speed_reason}" if mode == "gpu" else f"{head}; speed: unavailable (no GPU)"
    return head


def _error_headline(text: str) -> str:
    """The line of an error text that names it: the last ``SomeError: ...`` line, else the last line.

    A traceback ends with its exception, but CUDA errors put theirs first and then add advice
    lines ("Compile with TORCH_USE_CUDA_DSA ..."), which say nothing about what went wrong.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"[\w.]+(Error|Exception)\b", line)]
    return (named[-1] if named else lines[-1])[:300] if lines else ""


def _user_line_in_log(log: str) -> int | None:
    """0-based line of the new version's innermost frame in a dead worker's faulthandler dump."""
    frames = re.findall(r'File "[^"]*mtmc_verify_new_[0-9a-f]+\.py", line (\d+)', log)
    # faulthandler prints the innermost frame first.
    return int(frames[0]) - 1 if frames else None


def _log_hint(log: str) -> str:
    """The most telling line of a dead worker's output (CUDA error, segfault, OOM)."""
    keys = ("illegal memory access", "CUDA error", "out of memory", "Segmentation fault", "Fatal Python error",
            "Aborted", "core dumped")
    for line in reversed(log.splitlines()):
        if any(k in line for k in keys):
            return line.strip()[:300]
    return ""


def speed_within_noise(report: VerificationReport) -> bool | None:
    """Whether the report's speedup is 1.0x within its noise band (None without a measurement)."""
    if report.speed is None:
        return None
    return abs(report.speed.speedup - 1.0) <= report.speed.band or math.isclose(report.speed.speedup, 1.0)
