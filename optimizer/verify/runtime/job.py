"""One verification job inside the worker: load the versions, compile, check correctness, time."""

from __future__ import annotations

import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

from . import compare as cmp
from .flops import count_flops
from .poison import poisoned_allocations
from .stats import speedup_stats
from .timing import interleaved
from .versions import (
    UserCodeError,
    Version,
    accepts,
    clone,
    copy_into,
    describe_exception,
    int_defaults,
    seed_everything,
    shapes,
    to_device,
)

Emit = Callable[[dict], None]

# Messages of errors after which the CUDA context (or the process) cannot be trusted any more.
FATAL_MARKERS = ("CUDA error", "illegal memory access", "out of memory", "CUBLAS_STATUS", "device-side assert",
                 "misaligned address", "unspecified launch failure", "an illegal instruction")
# Interpreter runs shrink every integer size knob of get_inputs above this, by halving.
INTERPRETER_MAX_KNOB = 96


class FatalDeviceError(Exception):
    """The device is in an unknown state after a user kernel failed: stop and restart the worker."""


def environment(mode: str) -> dict:
    import triton

    env = {"mode": mode, "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}
    if mode == "gpu":
        env["device_name"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    else:
        env["device_name"] = "CPU (Triton interpreter)"
    return env


class Impl:
    """Something to call on a list of inputs: a version's host function, a model, the reference."""

    def __init__(self, role: str, fn: Callable[[Any], Any], version: Version | None):
        self.role = role
        self.fn = fn
        self.version = version


class Job:
    """Runs one job dictionary (see ``pool.py`` for its fields) and builds the result dictionary."""

    def __init__(self, job: dict, emit: Emit):
        self.job = job
        self.emit = emit
        self.mode = job["mode"]
        self.device = "cuda" if self.mode == "gpu" else "cpu"
        self.harness = job["harness"]
        self.folder = Path(tempfile.mkdtemp(prefix="mtmc-verify-"))
        self.result: dict[str, Any] = {
            "environment": environment(self.mode),
            "compile": {},
            "runtime": {},
            "trials": [],
            "speed": None,
            "recheck": None,
            "worker_healthy": True,
        }
        self.versions: dict[str, Version] = {}

    # -- messages -------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        self.emit({"event": "phase", "phase": name})

    def progress(self, message: str) -> None:
        self.emit({"event": "progress", "message": message})

    # -- entry point ------------------------------------------------------------------------
    def run(self) -> dict:
        try:
            self.phase("compile")
            self._run()
        except FatalDeviceError:
            self.result["worker_healthy"] = False
        finally:
            for version in self.versions.values():
                version.unload()
            shutil.rmtree(self.folder, ignore_errors=True)
        return self.result

    def _run(self) -> None:
        job_id = self.job["id"]
        new = Version("new", self.job["new_text"], self.folder, job_id)
        self.versions["new"] = new
        started = time.perf_counter()
        try:
            new.load()
        except UserCodeError as err:
            self.result["compile"]["new"] = {"ok": False, "stage": "import", **err.info}
            return
        old = None
        if self.job.get("old_text") is not None:
            old = Version("old", self.job["old_text"], self.folder, job_id)
            self.versions["old"] = old
            try:
                old.load()
            except UserCodeError as err:
                self.result["compile"]["old"] = {"ok": False, "stage": "import", **err.info}
                old = None
        if self.job.get("problem_text") is not None:
            problem = Version("problem", self.job["problem_text"], self.folder, job_id)
            self.versions["problem"] = problem
            try:
                problem.load()
            except UserCodeError as err:
                self.result["compile"]["new"] = {"ok": False, "stage": "problem file import", **err.info, "line": None}
                return
        if self.harness["style"] == "test":
            self._run_tests(new, old, started)
        else:
            self._run_inputs_style(new, old, started)

    # -- kernelbench and function styles -------------------------------------------------------
    def _pick(self, name: str | None, new: Version, old: Version | None) -> tuple[Any, str | None]:
        """Inputs and the reference come from the problem file, else the accepted version, when they
        have them, so a candidate cannot make its own check easier by editing get_inputs or reference."""
        if not name:
            return None, None
        problem = self.versions.get("problem")
        if problem is not None and callable(problem.attr(name)):  # the KernelBench problem file rules
            return problem.attr(name), "problem"
        if old is not None and callable(old.attr(name)):
            return old.attr(name), "old"
        if callable(new.attr(name)):
            return new.attr(name), "new"
        return None, None

    def _run_inputs_style(self, new: Version, old: Version | None, started: float) -> None:
        h = self.harness
        gen, inputs_from = self._pick(h.get("inputs", "get_inputs"), new, old)
        if gen is None:
            self.result["compile"]["new"] = {"ok": False, "stage": "harness", "type": "HarnessError",
                                             "message": f"{h.get('inputs', 'get_inputs')}() not found after import",
                                             "line": None}
            return
        kwargs = self._input_kwargs(gen)
        self.result["runtime"].update(inputs_from=inputs_from, input_kwargs=kwargs)
        try:
            impls = self._build_impls(new, old)
        except UserCodeError as err:
            self.result["compile"]["new"] = {"ok": False, "stage": err.stage, **err.info}
            return
        if impls.get("new") is None:
            return
        make_inputs = self._input_maker(gen)

        # Trial 0 doubles as the compile check: the first launch JIT-compiles every kernel.
        held = None
        seeds = list(self.job["seeds"])
        trial, held = self._trial(impls, make_inputs, seeds[0], "fresh", kwargs, None, first=True)
        compile_s = time.perf_counter() - started
        if trial.get("compile_error"):
            self.result["compile"]["new"] = {"ok": False, "seconds": compile_s, **trial["compile_error"]}
            return
        self.result["compile"]["new"] = {"ok": True, "seconds": compile_s}
        if old is not None and "old" not in self.result["compile"]:
            self.result["compile"]["old"] = {"ok": impls.get("old") is not None}
        if self.mode == "interpreter" and any("bfloat16" in d for d in trial.get("inputs", []) + trial.get("outputs", [])):
            # The interpreter has no bf16 arithmetic: its numbers would blame a correct kernel.
            self.result["runtime"]["interpreter_unsupported"] = "bfloat16 tensors (the Triton interpreter has no bf16 arithmetic)"
            return
        self.result["trials"].append(trial)
        self.phase("correctness")
        for i, seed in enumerate(seeds[1:], start=1):
            self.progress(f"correctness: seed {seed} ({i + 1}/{len(seeds)})")
            trial, fresh_held = self._trial(impls, make_inputs, seed, "fresh", kwargs, None)
            self.result["trials"].append(trial)
            # The same tensors (same storage, same id()) with the values of this seed: a result
            # cached by input pointer or object identity comes back stale here.
            trial, _ = self._trial(impls, make_inputs, seed, "same_storage", kwargs, held)
            self.result["trials"].append(trial)
            held = fresh_held if fresh_held is not None else held
        if not all(t["ok"] for t in self.result["trials"]) or self.mode != "gpu" or not self.job.get("timing"):
            return
        self._time(impls, make_inputs, kwargs, gen)

    def _build_impls(self, new: Version, old: Version | None) -> dict[str, Impl | None]:
        h = self.harness
        impls: dict[str, Impl | None] = {"reference": None, "old": None, "new": None}
        if h["style"] == "kernelbench":
            init_gen, _ = self._pick(h.get("init_inputs"), new, old)
            init = []
            if init_gen is not None:
                try:
                    seed_everything(0)
                    init = list(init_gen())
                except BaseException as exc:  # noqa: BLE001
                    raise UserCodeError("get_init_inputs", exc, new) from None
            ref_cls, ref_from = self._pick(h.get("reference"), new, old)
            if ref_cls is not None:
                impls["reference"] = Impl("reference", self._model(ref_cls, init, self.versions[ref_from]),
                                          self.versions[ref_from])
            new_cls = new.attr(h["entry"])
            if not callable(new_cls):
                raise UserCodeError("harness", LookupError(f"class {h['entry']} not found after import"), new)
            impls["new"] = Impl("new", self._model(new_cls, init, new), new)
            if old is not None:
                old_cls = old.attr(h.get("old_entry") or h["entry"])
                if callable(old_cls):
                    try:
                        impls["old"] = Impl("old", self._model(old_cls, init, old), old)
                    except UserCodeError as err:
                        self.result["compile"]["old"] = {"ok": False, "stage": err.stage, **err.info}
            return impls
        entry = new.attr(h["entry"])
        if not callable(entry):
            raise UserCodeError("harness", LookupError(f"function {h['entry']}() not found after import"), new)
        impls["new"] = Impl("new", lambda args, f=entry: f(*args), new)
        ref, ref_from = self._pick(h.get("reference"), new, old)
        if ref is not None:
            impls["reference"] = Impl("reference", lambda args, f=ref: f(*args), self.versions[ref_from])
        if old is not None:
            old_entry = old.attr(h.get("old_entry") or h["entry"])
            if callable(old_entry):
                impls["old"] = Impl("old", lambda args, f=old_entry: f(*args), old)
        return impls

    def _model(self, cls, init: list, version: Version) -> Callable[[Any], Any]:
        """Construct a KernelBench model with the same seed for every version (same weights)."""
        try:
            seed_everything(0)
            model = cls(*init)
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
        except BaseException as exc:  # noqa: BLE001
            raise UserCodeError(f"{cls.__name__}(*get_init_inputs())", exc, version) from None
        return lambda args: model(*args)

    def _input_kwargs(self, gen: Callable) -> dict:
        given = self.job.get("input_kwargs")
        kwargs = dict(given or {})
        if accepts(gen, "device") and "device" not in kwargs:
            kwargs["device"] = self.device
        if given is None and self.mode == "interpreter":
            for name, value in int_defaults(gen).items():
                while value > INTERPRETER_MAX_KNOB:
                    value //= 2
                kwargs[name] = value
        return kwargs

    def _input_maker(self, gen: Callable) -> Callable[[int, dict], Any]:
        inputs_version = self.versions[self.result["runtime"]["inputs_from"]]

        def make(seed: int, kwargs: dict) -> list:
            seed_everything(seed)
            try:
                with torch.no_grad():
                    out = gen(**kwargs)
            except BaseException as exc:  # noqa: BLE001
                raise UserCodeError("get_inputs", exc, inputs_version) from None
            out = list(out) if isinstance(out, (list, tuple)) else [out]
            return to_device(out, self.device)

        return make

    def _call(self, impl: Impl, args: Any, poison: bool) -> tuple[Any, int]:
        """Call user code; NaN-poison its fresh buffers; surface asynchronous device errors here."""
        try:
            with torch.no_grad():
                if poison:
                    with poisoned_allocations() as counter:
                        out = impl.fn(args)
                        self._sync()
                else:
                    counter = {"buffers": 0}
                    out = impl.fn(args)
                    self._sync()
        except BaseException as exc:  # noqa: BLE001
            err = UserCodeError(impl.role, exc, impl.version)
            if any(marker in err.info["message"] for marker in FATAL_MARKERS):
                err.info["fatal"] = True
            raise err from None
        return out, counter["buffers"]

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _trial(self, impls: dict, make_inputs, seed: int, kind: str, kwargs: dict, held: Any,
               first: bool = False) -> tuple[dict, Any]:
        trial: dict[str, Any] = {"seed": seed, "kind": kind, "input_kwargs": {k: v for k, v in kwargs.items() if k != "device"},
                                 "ok": True, "checks": {}}
        try:
            fresh = make_inputs(seed, kwargs)
        except UserCodeError as err:
            trial.update(ok=False, error={"stage": "get_inputs", **err.info})
            if first:
                trial["compile_error"] = {"stage": "get_inputs", **err.info}
            return trial, None
        trial["inputs"] = shapes(fresh)
        expected: dict[str, Any] = {}
        for role in ("reference", "old"):
            impl = impls.get(role)
            if impl is None:
                continue
            try:
                expected[role], _ = self._call(impl, clone(fresh), poison=True)
                expected[role] = clone(expected[role])  # hold a private copy the candidate cannot reach
            except UserCodeError as err:
                self._check_fatal(err, trial)
                if role == "old" and first:
                    self.result["compile"]["old"] = {"ok": False, "stage": "launch", **err.info}
                    impls["old"] = None
                elif role == "reference" and first:
                    self.result["runtime"]["reference_error"] = err.info
                    impls["reference"] = None
                else:
                    trial.setdefault("expected_errors", {})[role] = err.info
        if kind == "same_storage":
            if held is None or not copy_into(held, fresh):
                trial.update(skipped="inputs of this seed do not fit the previous trial's tensors")
                return trial, held
            args = held
        else:
            args = clone(fresh)
        try:
            got, poisoned = self._call(impls["new"], args, poison=True)
        except UserCodeError as err:
            self._check_fatal(err, trial)
            trial.update(ok=False, error={"stage": "launch" if first else "run", **err.info})
            if first:
                trial["compile_error"] = {"stage": "launch", **err.info}
            return trial, args
        trial["poisoned_buffers"] = poisoned
        trial["outputs"] = shapes(got)
        mutated = cmp.tensors_equal(args, fresh)
        if mutated is not None:
            trial.update(ok=False, mutated=mutated)
        bad = cmp.nonfinite(got)
        if bad is not None and not any(cmp.nonfinite(e) is not None for e in expected.values()):
            trial.update(ok=False, nonfinite=bad)
        for role, want in expected.items():
            # With a reference the judge, the previous version is a second rounded result: the two may
            # differ by both errors (|new - old| <= |new - ref| + |old - ref|), e.g. a long fp32 sum
            # accumulated in another order. Twice the tolerance keeps that from failing a correct step.
            scale = 2.0 if role == "old" and "reference" in expected else 1.0
            try:
                result = cmp.compare(got, want, self.job.get("atol"), self.job.get("rtol"), scale)
            except TypeError as exc:
                result = {"ok": False, "mismatch": {"reason": str(exc)}}
            trial["checks"][role] = result
            if not result["ok"]:
                trial["ok"] = False
        if first:
            self.result["runtime"]["output_bytes"] = cmp.nbytes(got)
            self.result["runtime"]["input_bytes"] = cmp.nbytes(fresh)
        return trial, args

    def _check_fatal(self, err: UserCodeError, trial: dict) -> None:
        if err.info.get("fatal"):
            trial.update(ok=False, error={"stage": err.stage, **err.info})
            self.result["trials"].append(trial)
            if trial.get("compile_error") is None and not self.result["compile"].get("new"):
                self.result["compile"]["new"] = {"ok": True, "note": "compiled; the failure came at run time"}
            raise FatalDeviceError(err.info["message"])

    # -- speed (GPU only) -----------------------------------------------------------------------
    def _time(self, impls: dict, make_inputs, kwargs: dict, gen: Callable) -> None:
        self.phase("speed")
        self._count_reference_flops(impls.get("reference"), make_inputs, kwargs)
        timing = self.job["timing"]
        timed = {role: impl.fn for role, impl in impls.items()
                 if impl is not None and (role != "reference" or timing.get("time_reference", True))}
        rounds = interleaved(
            timed, lambda r: make_inputs(10_000 + r, kwargs), timing["rounds"], timing["warmup_ms"],
            timing["rep_ms"], timing.get("sync_all_streams", True), clone, self.progress,
        )
        self.result["speed"] = {"rounds": rounds, "input_kwargs": {k: v for k, v in kwargs.items() if k != "device"}}
        baseline = "old" if "old" in timed else "reference"
        stats = speedup_stats(rounds, baseline, "new") if baseline in timed else None
        limit = self.job.get("recheck_speedup_above")
        if stats is None or limit is None or stats["speedup"] <= limit:
            return
        self._recheck(impls, make_inputs, kwargs, gen, timed, timing)

    def _count_reference_flops(self, reference: Impl | None, make_inputs, kwargs: dict) -> None:
        """The reference's FLOPs on the first timing round's inputs, for the compute roofline (best effort)."""
        if reference is None:
            return
        try:
            args = make_inputs(10_000, kwargs)
        except UserCodeError as err:
            self.result["runtime"]["flops_error"] = err.info.get("message", "get_inputs failed")
            return
        self.result["runtime"].update(count_flops(reference.fn, args))

    def _recheck(self, impls, make_inputs, kwargs, gen, timed, timing) -> None:
        """A speedup this large is more often a bug than a breakthrough: more seeds, other shapes, again."""
        self.phase("recheck")
        trials = []
        extra_seeds = [1000 + i for i in range(2 * len(self.job["seeds"]))]
        held = None
        for seed in extra_seeds:
            trial, fresh_held = self._trial(impls, make_inputs, seed, "fresh", kwargs, None)
            trials.append(trial)
            if held is not None:
                trial, _ = self._trial(impls, make_inputs, seed, "same_storage", kwargs, held)
                trials.append(trial)
            held = fresh_held
        for shape_kwargs in alternate_shapes(kwargs, gen):
            trial, _ = self._trial(impls, make_inputs, 2000, "shape", shape_kwargs, None)
            trials.append(trial)
        rounds = None
        if all(t["ok"] for t in trials):
            rounds = interleaved(
                timed, lambda r: make_inputs(20_000 + r, kwargs), timing["rounds"], timing["warmup_ms"],
                timing["rep_ms"], timing.get("sync_all_streams", True), clone, self.progress,
            )
        self.result["recheck"] = {"trials": trials, "rounds": rounds,
                                  "shapes_varied": bool(alternate_shapes(kwargs, gen))}

    # -- test style -------------------------------------------------------------------------------
    def _run_tests(self, new: Version, old: Version | None, started: float) -> None:
        tests = self.harness["tests"]
        first = True
        for i, seed in enumerate(self.job["seeds"]):
            if i == 1:
                self.phase("correctness")
            for name in tests:
                trial = self._test_trial(name, new, old, seed)
                if first and trial.get("compile_error"):
                    self.result["compile"]["new"] = {"ok": False, "seconds": time.perf_counter() - started,
                                                     **trial["compile_error"]}
                    return
                self.result["trials"].append(trial)
            if first:
                self.result["compile"]["new"] = {"ok": True, "seconds": time.perf_counter() - started}
                first = False

    def _test_trial(self, name: str, new: Version, old: Version | None, seed: int) -> dict:
        trial: dict[str, Any] = {"seed": seed, "kind": "test", "test": name, "ok": True, "checks": {}}
        expected = None
        old_fn = old.attr(name) if old is not None else None
        if callable(old_fn):
            try:
                seed_everything(seed)
                expected, _ = self._call(Impl("old", self._test_call(old_fn), old), None, poison=True)
                expected = clone(expected)
            except UserCodeError as err:
                self._check_fatal(err, trial)
                trial.setdefault("expected_errors", {})["old"] = err.info
        new_fn = new.attr(name)
        if not callable(new_fn):
            trial.update(ok=False, error={"stage": "harness", "type": "LookupError", "line": None,
                                          "message": f"{name}() is missing from the new version"})
            return trial
        try:
            seed_everything(seed)
            got, poisoned = self._call(Impl("new", self._test_call(new_fn), new), None, poison=True)
        except UserCodeError as err:
            self._check_fatal(err, trial)
            trial.update(ok=False, error={"stage": "run", **err.info})
            if seed == self.job["seeds"][0]:
                trial["compile_error"] = {"stage": "launch", **err.info}
            return trial
        trial["poisoned_buffers"] = poisoned
        bad = cmp.nonfinite(got)
        if bad is not None and (expected is None or cmp.nonfinite(expected) is None):
            trial.update(ok=False, nonfinite=bad)
        if expected is not None:
            try:
                result = cmp.compare(got, expected, self.job.get("atol"), self.job.get("rtol"))
            except TypeError as exc:
                result = {"ok": False, "mismatch": {"reason": str(exc)}}
            trial["checks"]["old"] = result
            trial["ok"] = trial["ok"] and result["ok"]
        return trial

    def _test_call(self, fn: Callable) -> Callable[[Any], Any]:
        kwargs = {"device": self.device} if accepts(fn, "device") else {}
        return lambda _args: fn(**kwargs)


def alternate_shapes(kwargs: dict, gen: Callable) -> list[dict]:
    """Other sizes for the recheck: each integer knob at about 3/4 and 1/2 (+odd) of its value."""
    knobs = {k: v for k, v in {**int_defaults(gen), **kwargs}.items()
             if isinstance(v, int) and not isinstance(v, bool) and k not in ("device", "seed")}
    if not knobs:
        return []
    return [
        {**kwargs, **{k: max(1, v * 3 // 4 + 1) for k, v in knobs.items()}},
        {**kwargs, **{k: max(1, v // 2 + 3) for k, v in knobs.items()}},
    ]


def run_job(job: dict, emit: Emit) -> dict:
    """Run one job; exceptions of our own become ``{"internal_error": ...}`` in the result."""
    try:
        return Job(job, emit).run()
    except BaseException as exc:  # noqa: BLE001 - the worker must answer, whatever happened
        return {"internal_error": describe_exception(exc, None), "worker_healthy": False}
