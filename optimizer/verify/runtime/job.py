"""One verification job inside the worker: load the versions, compile, check correctness, time."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import torch

from . import compare as cmp
from . import gpu_lock, launches, tamper
from .flops import count_flops
from .launches import AUTOTUNE, Recorder
from .lru import ByteBoundedLRU
from .names import remove_dead_owners_folders
from .poison import poisoned_allocations
from .stats import speedup_stats
from .timing import interleaved
from .versions import (
    UserCodeError,
    Version,
    accepts,
    clone,
    clone_inputs,
    copy_into,
    describe_exception,
    int_defaults,
    map_tensors,
    seed_everything,
    shapes,
    to_device,
)

try:  # torch >= 2.6: the serialization switches (the archive's CRC32)
    from torch.utils.serialization import config as _serialization_config
except ImportError:  # pragma: no cover - an older torch computes the CRC, as before
    _serialization_config = None

Emit = Callable[[dict], None]
# Sends one trial's request (the file holding the candidate's outputs) to the checker process and
# returns its verdict (see ``checker.py``); only in the candidate's process of an isolated job.
Judge = Callable[[dict], dict]

# Messages of errors after which the CUDA context (or the process) cannot be trusted any more.
FATAL_MARKERS = ("CUDA error", "illegal memory access", "out of memory", "CUBLAS_STATUS", "device-side assert",
                 "misaligned address", "unspecified launch failure", "an illegal instruction")
# Interpreter runs shrink every integer size knob of get_inputs above this, by halving.
INTERPRETER_MAX_KNOB = 96
# Kept between jobs of one worker (the optimize loop verifies many candidates against one previous
# version): loaded previous/problem versions (their kernels stay compiled) and the expected outputs
# of the reference and the previous version per seed. Bounded; a fresh worker starts empty.
KEPT_VERSIONS = 3
KEPT_EXPECTED_BYTES = {"cuda": 1 << 30, "cpu": 128 << 20}
_kept_versions: "OrderedDict[str, Version]" = OrderedDict()
_kept_expected = ByteBoundedLRU()  # sealed expected outputs
_kept_folder: Path | None = None
# A tmpfs on Linux: the outputs an isolated job's candidate sends to the checker never touch a disk.
SHARED_MEMORY = Path("/dev/shm")
TRANSFER_PREFIX = "mtmc-verify-out-"  # + the candidate worker's pid
# In a sandbox (``containment.py``) the pool names the two folders the checker can read, "memory:disk":
# the candidate's outputs go there, never to its own temporary folder.
TRANSFER_ENV = "MTMC_VERIFY_TRANSFER"
_stale_transfers_removed = False


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


# The harness fields that decide what the reference and the previous version compute (not, e.g., the
# line of the entry in the new file, which most edits move).
EXPECTATION_FIELDS = ("style", "entry", "old_entry", "reference", "inputs", "init_inputs", "tests")


def expectation_key(job: dict, new_text: str) -> str:
    """What the expected outputs of a job depend on: the previous version, the problem file, the harness's
    choice of functions, and the new text only where the inputs or the reference come from it."""
    harness = {name: job["harness"].get(name) for name in EXPECTATION_FIELDS}
    return _digest(job.get("old_text"), job.get("problem_text"), harness, job.get("mode"), new_text)


def _tensors(value: Any) -> list[tuple[str, torch.Tensor]]:
    try:
        return [(name, t) for name, t in cmp.flatten(value) if isinstance(t, torch.Tensor)]
    except TypeError:
        return []


def _remove_stale_transfers(folder: Path) -> None:
    """Once per process: the transfer folders of workers that were killed mid-job (a crash, a timeout), named
    by their pid, removed, so a file they left does not hold shared memory until the machine restarts."""
    global _stale_transfers_removed
    if _stale_transfers_removed:
        return
    _stale_transfers_removed = True
    remove_dead_owners_folders(folder, TRANSFER_PREFIX)


def _outputs_folder(parent: Path, group_reads: bool) -> Path:
    """A new folder for outputs under ``parent``; ``group_reads``: a sandbox's checker (another user, in the
    candidate's group) may read it, nothing more."""
    folder = Path(tempfile.mkdtemp(prefix=f"{TRANSFER_PREFIX}{os.getpid()}-", dir=parent))
    if group_reads:
        folder.chmod(0o750)
    return folder


def save_outputs(value: Any, path: Path) -> None:
    """``torch.save`` without the archive's CRC32 (a third of the time for large outputs): the file goes
    from one process to the other through memory and is deleted once judged; nothing checks the CRC."""
    config = getattr(_serialization_config, "save", None)
    crc = getattr(config, "compute_crc32", None)
    if crc is not None:
        config.compute_crc32 = False
    try:
        torch.save(value, path)
    finally:
        if crc is not None:
            config.compute_crc32 = crc


def _keep_expected(key: tuple, value: Any, device: str) -> None:
    """Keep an expected output for later trials and jobs, within a byte budget (oldest dropped first).

    Kept sealed: serialized to bytes on the host, so no live tensor of an expected output exists while
    a candidate runs (a candidate that searches ``gc`` or frames for the answer finds none)."""
    size = cmp.nbytes(value)
    budget = KEPT_EXPECTED_BYTES.get(device, 0)
    if _kept_expected.admits(size, budget):  # sealing costs time: only what will be kept
        _kept_expected.keep(key, _seal(value), size, budget)


def _seal(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(map_tensors(value, lambda t: t.detach().to("cpu", copy=True)), buffer)
    return buffer.getvalue()


def _unseal(sealed: bytes, device: str) -> Any:
    value = torch.load(io.BytesIO(sealed), weights_only=False)
    return map_tensors(value, lambda t: t.to(device))


def portable(value: Any, host_copy: bool = True) -> Any:
    """A result as plain containers of host tensors and scalars: what ``torch.load(weights_only=True)``
    reads back in the checker without running any code of the candidate's (no pickled classes).
    ``host_copy=False``: the same containers around the tensors where they are (no copy), for the checker's
    own inputs, to compare with what the candidate's file carried."""
    if isinstance(value, torch.Tensor):
        if not host_copy:
            return value.detach().as_subclass(torch.Tensor)
        return value.detach().to("cpu", copy=True).as_subclass(torch.Tensor)
    if isinstance(value, (list, tuple)):
        items = [portable(v, host_copy) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int)) else str(k): portable(v, host_copy) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return value
    return repr(value)


def _mutation(args: Any, pristine: Any) -> dict | None:
    """The first difference between the inputs after a call and before it; objects among them that the
    comparison cannot walk (a dtype, a device, a str) are compared by their repr."""
    try:
        return cmp.tensors_equal(args, pristine)
    except TypeError:
        return cmp.tensors_equal(_by_repr(args), _by_repr(pristine))


def _by_repr(value: Any) -> Any:
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_by_repr(v) for v in value]
    if isinstance(value, dict):
        return {k: _by_repr(v) for k, v in value.items()}
    return hash(repr(value))


def inputs_made_on(device: str, kwargs: dict):
    """Where get_inputs() makes its tensors: on ``device`` when it takes no device argument.

    KernelBench's get_inputs() has no device parameter and makes its tensors on the CPU; on the GPU they
    are made there instead, under torch's default-device context (H200: a 4096 x 22016 fp16 randn took
    about 4 s on the host, and a verification calls get_inputs a dozen times: 49-64 s per verification).
    """
    return torch.device(device) if device != "cpu" and "device" not in kwargs else contextlib.nullcontext()


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

    def __init__(self, job: dict, emit: Emit, judge: Judge | None = None):
        self.job = job
        self.emit = emit
        # "whole": the candidate and its judging in this process (nothing to judge it by but its own file);
        # "candidate": the new version runs here and ``judge`` sends its outputs to the checker process;
        # "checker": only the accepted version and the problem file run here (``checker.py``).
        self.side = job.get("side", "whole")
        self.judge = judge if self.side == "candidate" else None
        self.impls: dict[str, Impl | None] = {}
        self.eager: Impl | None = None  # the file's eager(): timed in the reference's place, never a judge
        self.recordings: dict[str, tuple[Recorder | None, Recorder | None]] = {}  # test style: launches per test
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
            "phases": {},
        }
        self.versions: dict[str, Version] = {}
        self.kept: set[str] = set()  # roles whose Version outlives the job
        self.reuse = bool(job.get("reuse", True))
        # KernelBench runs under no_grad as KernelBench does; other harnesses run as written (a test may
        # call .backward()). The verifier's own copies and comparisons never track gradients.
        self.grad = self.harness.get("style") != "kernelbench"
        self.floor: torch.dtype | None = None  # the job's lowest precision, for the tolerances
        self.long_sum_atol: float | None = None  # set when the accepted version sums long TF32 products
        self.expected_key: str | None = None
        self.transfer: Path | None = None  # the folder of the outputs sent to the checker (``_transfer_folder``)
        self.transfer_disk: Path | None = None  # where they go when shared memory is full
        self.pending: list[tuple[dict, Path, float]] = []  # trials at the checker: (trial, outputs file, save s)
        launches.install(self.mode == "interpreter" or os.environ.get("TRITON_INTERPRET") == "1")
        launches.PARALLEL_COMPILE.enabled = self.mode == "gpu" and bool(job.get("parallel_compile", True))
        launches.PARALLEL_COMPILE.log.clear()
        AUTOTUNE.index = 0
        AUTOTUNE.counts.clear()
        AUTOTUNE.chosen.clear()

    @contextlib.contextmanager
    def timed(self, name: str):
        """Adds the wall time of the block to ``result["phases"][name]`` (where a verification's time goes)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            phases = self.result["phases"]
            phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - started, 4)

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
            self.settle()  # every verdict read before the job ends: the next job's line must be a job
            if launches.PARALLEL_COMPILE.log:
                self.result["runtime"]["compiled_ahead"] = list(launches.PARALLEL_COMPILE.log)
            for role, version in self.versions.items():
                if role not in self.kept:
                    version.unload()
            shutil.rmtree(self.folder, ignore_errors=True)
            for folder in {self.transfer, self.transfer_disk} - {None, self.folder}:
                shutil.rmtree(folder, ignore_errors=True)
        return self.result

    def _load_kept(self, role: str, text: str) -> Version:
        """The previous version or the problem file: reused from an earlier job of this worker when
        its text is the same (module already imported, kernels already compiled)."""
        global _kept_folder
        if not self.reuse:
            version = Version(role, text, self.folder, self.job["id"])
            version.load()
            return version
        key = _digest(role, text)
        version = _kept_versions.get(key)
        if version is not None and version.module is not None:
            _kept_versions.move_to_end(key)
            self.result["runtime"].setdefault("reused", []).append(role)
        else:
            if _kept_folder is None:
                _kept_folder = Path(tempfile.mkdtemp(prefix="mtmc-verify-kept-"))
            version = Version(role, text, _kept_folder, key)
            version.load()  # raises UserCodeError: nothing kept
            _kept_versions[key] = version
            while len(_kept_versions) > KEPT_VERSIONS:
                _, dropped = _kept_versions.popitem(last=False)
                dropped.unload()
        self.kept.add(role)
        return version

    def _run(self) -> None:
        job_id = self.job["id"]
        new = Version("new", self.job["new_text"], self.folder, job_id)
        self.versions["new"] = new
        started = time.perf_counter()
        with self.timed("import"):
            try:
                new.load()
            except UserCodeError as err:
                self.result["compile"]["new"] = {"ok": False, "stage": "import", **err.info}
                return
            old = None
            if self.job.get("old_text") is not None:
                try:
                    old = self._load_kept("old", self.job["old_text"])
                    self.versions["old"] = old
                except UserCodeError as err:
                    self.result["compile"]["old"] = {"ok": False, "stage": "import", **err.info}
                    old = None
            if self.job.get("problem_text") is not None:
                try:
                    self.versions["problem"] = self._load_kept("problem", self.job["problem_text"])
                except UserCodeError as err:
                    self.result["compile"]["new"] = {"ok": False, "stage": "problem file import", **err.info,
                                                     "line": None}
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
        if new is not None and callable(new.attr(name)):
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
        self.impls = impls
        make_inputs = self._input_maker(gen)
        self.expected_key = expectation_key(self.job, self.job["new_text"] if "new" in (
            inputs_from, self._source_of("reference")) else "")

        # Trial 0 doubles as the compile check: the first launch JIT-compiles every kernel. It also
        # records the candidate's launches: their real argument types go to the compile for the target.
        held = None
        seeds = list(self.job["seeds"])
        with self.timed("compile"):
            trial, held = self._trial(impls, make_inputs, seeds[0], "fresh", kwargs, None, first=True)
        compile_s = time.perf_counter() - started
        if trial.get("compile_error"):
            self.result["compile"]["new"] = {"ok": False, "seconds": compile_s, **trial["compile_error"]}
            return
        self.result["compile"]["new"] = {"ok": True, "seconds": compile_s}
        if old is not None and "old" not in self.result["compile"]:
            self.result["compile"]["old"] = {"ok": impls.get("old") is not None}
        bf16 = self.mode == "interpreter" and any(
            "bfloat16" in d for d in trial.get("inputs", []) + trial.get("outputs", []))
        self.result["trials"].append(trial)
        self.phase("correctness")
        with self.timed("correctness"):
            for index in self._other_autotune_configs():
                # Interpreter: every config of every autotuned kernel runs once (seed 0), not only the first.
                AUTOTUNE.index = index
                trial, _ = self._trial(impls, make_inputs, seeds[0], "config", kwargs, None)
                trial["autotune_config"] = dict(AUTOTUNE.chosen)
                self.result["trials"].append(trial)
            AUTOTUNE.index = 0
            for i, seed in enumerate(seeds[1:], start=1):
                self.progress(f"correctness: seed {seed} ({i + 1}/{len(seeds)})")
                trial, fresh_held = self._trial(impls, make_inputs, seed, "fresh", kwargs, None)
                self.result["trials"].append(trial)
                # The same tensors (same storage, same id()) with the values of this seed: a result
                # cached by input pointer or object identity comes back stale here.
                trial, _ = self._trial(impls, make_inputs, seed, "same_storage", kwargs, held)
                self.result["trials"].append(trial)
                held = fresh_held if fresh_held is not None else held
            self.settle()
        if bf16 and not all(t["ok"] for t in self.result["trials"]):
            # The interpreter's bf16 arithmetic is incomplete (bf16 math, not loads and stores converted to
            # fp32, can come back NaN): a failure here may be the interpreter's, so no verdict, only a note.
            self.result["runtime"]["interpreter_unsupported"] = (
                "bfloat16 tensors (the Triton interpreter has no bf16 arithmetic, and these results disagree)")
            return
        if not all(t["ok"] for t in self.result["trials"]) or self.mode != "gpu" or not self.job.get("timing"):
            return
        self._time(impls, make_inputs, kwargs, gen)

    def _source_of(self, role: str) -> str | None:
        """Which version ("problem", "old", "new") supplies the harness's ``role`` function."""
        _, found = self._pick(self.harness.get(role), self.versions["new"], self.versions.get("old"))
        return found

    def _other_autotune_configs(self) -> list[int]:
        """Config indices 1..n-1 when autotuned kernels ran in the interpreter (n: the most configs of any)."""
        if self.mode != "interpreter" or not AUTOTUNE.counts:
            return []
        self.result["runtime"]["autotune_configs"] = dict(AUTOTUNE.counts)
        return list(range(1, max(AUTOTUNE.counts.values())))

    def _build_impls(self, new: Version | None, old: Version | None) -> dict[str, Impl | None]:
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
            eager, eager_from = self._pick(h.get("eager"), new, old)
            if eager is not None:
                fn = self._model(eager, init, self.versions[eager_from]) if isinstance(eager, type) else (
                    lambda args, f=eager: f(*args))
                self.eager = Impl("eager", fn, self.versions[eager_from])
            if new is not None:
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
        if new is not None:
            entry = new.attr(h["entry"])
            if not callable(entry):
                raise UserCodeError("harness", LookupError(f"function {h['entry']}() not found after import"), new)
            impls["new"] = Impl("new", lambda args, f=entry: f(*args), new)
        ref, ref_from = self._pick(h.get("reference"), new, old)
        if ref is not None:
            impls["reference"] = Impl("reference", lambda args, f=ref: f(*args), self.versions[ref_from])
        eager, eager_from = self._pick(h.get("eager"), new, old)
        if eager is not None:
            self.eager = Impl("eager", lambda args, f=eager: f(*args), self.versions[eager_from])
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
                with torch.set_grad_enabled(self.grad), inputs_made_on(self.device, kwargs):
                    out = gen(**kwargs)
            except BaseException as exc:  # noqa: BLE001
                raise UserCodeError("get_inputs", exc, inputs_version) from None
            out = list(out) if isinstance(out, (list, tuple)) else [out]
            return to_device(out, self.device)

        return make

    def _call(self, impl: Impl, args: Any, poison: bool) -> tuple[Any, int]:
        """Call user code; NaN-poison its fresh buffers; surface asynchronous device errors here."""
        try:
            with torch.set_grad_enabled(self.grad):
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
        # The candidate runs first: while it runs no expected output of this seed exists anywhere in
        # this process (kept ones are sealed bytes), so it cannot find the answer through gc or frames.
        if kind == "same_storage":
            if held is None or not copy_into(held, fresh):
                trial.update(skipped="inputs of this seed do not fit the previous trial's tensors")
                return trial, held
            args = held
        else:
            args = clone_inputs(fresh)
        try:
            recorder = Recorder({impls["new"].version.module_name}) if first and impls["new"].version else None
            with recorder or contextlib.nullcontext():
                got, poisoned = self._call(impls["new"], args, poison=True)
            if recorder is not None:
                self.result["launches"] = recorder.kernels()
        except UserCodeError as err:
            self._check_fatal(err, trial)
            trial.update(ok=False, error={"stage": "launch" if first else "run", **err.info})
            if first:
                trial["compile_error"] = {"stage": "launch", **err.info}
            return trial, args
        self._check_tampering(trial)
        trial["poisoned_buffers"] = poisoned
        trial["outputs"] = shapes(got)
        if first:
            self.result["runtime"]["output_bytes"] = cmp.nbytes(got)
            self.result["runtime"]["input_bytes"] = cmp.nbytes(fresh)
        request = {"seed": seed, "kind": kind, "kwargs": kwargs, "first": first}
        if self.judge is not None and self._judged_elsewhere(trial, request, got, args):
            return trial, args
        self._judge_trial(trial, impls, fresh, args, got, seed, kind, kwargs, first)
        return trial, args

    def _judged_elsewhere(self, trial: dict, request: dict, got: Any, args: Any) -> bool:
        """Isolated job: the candidate's outputs (and its inputs after the call) go to the checker process as
        a file, and its verdict fills the trial. False when the checker cannot judge (the harness exists only
        in the candidate's own file): the trial, and the rest of the job, is judged here as before."""
        try:
            cmp.flatten(got)
        except TypeError as exc:  # a result nothing can compare: wrong here as in the checker
            trial.update(ok=False, checks={"output": {"ok": False, "mismatch": {"reason": str(exc)}}})
            return True
        started = time.perf_counter()
        payload = {"got": portable(got), "args": portable(args)}
        name = f"outputs-{len(self.result['trials'])}-{time.monotonic_ns()}.pt"
        path = self._transfer_folder(cmp.nbytes(payload)) / name
        try:
            save_outputs(payload, path)
        except (OSError, RuntimeError):  # shared memory full (a container's is often 64 MB): the disk
            path.unlink(missing_ok=True)
            if path.parent == self.transfer_disk:
                raise
            path = self.transfer_disk / name
            save_outputs(payload, path)
        del payload
        saved = time.perf_counter()
        self.settle()  # at most one trial at the checker at a time, verdicts in order
        request = {**request, "outputs": str(path)}
        send = getattr(self.judge, "send", None)
        if send is None or request.get("first"):
            # The first trial's verdict decides how the job goes on (whether the checker can judge it at all,
            # a previous version or reference that does not run): wait for it.
            try:
                reply = self.judge(request)
            finally:
                path.unlink(missing_ok=True)
            self._note_judge_time(saved - started, time.perf_counter() - saved, reply)
            if "self_judged" in reply:
                self.judge = None
                self.result["runtime"]["isolation"] = f"none: {reply['self_judged']}"
                return False
            self._apply_verdict(trial, reply)
            return True
        # Later trials: the checker judges this one while this process runs the next (separate processes, so
        # nothing of the checker's is in reach); ``settle`` fills the trial in before anything reads it.
        send(request)
        self.pending.append((trial, path, saved - started))
        return True

    def settle(self) -> None:
        """Wait for the verdicts of the trials still at the checker and fill them in (the trial dictionaries are
        already in the result: a trial whose verdict never comes stays unjudged, and fails)."""
        while self.pending:
            trial, path, save_s = self.pending.pop(0)
            waited = time.perf_counter()
            try:
                reply = self.judge.receive()
            finally:
                path.unlink(missing_ok=True)
            self._note_judge_time(save_s, time.perf_counter() - waited, reply)
            if "self_judged" in reply:  # not after a first trial the checker judged: leave it unjudged
                continue
            self._apply_verdict(trial, reply)

    def _apply_verdict(self, trial: dict, reply: dict) -> None:
        trial.update(reply.get("trial") or {"ok": False})
        trial["judge_id"] = reply.get("judge_id")
        findings = reply.get("findings") or {}
        if findings.get("old_error") and self.result["compile"].get("old", {}).get("ok", True):
            self.result["compile"]["old"] = {"ok": False, "stage": "launch", **findings["old_error"]}
            self.impls["old"] = None  # nothing to time against either
        if findings.get("reference_error") and "reference_error" not in self.result["runtime"]:
            self.result["runtime"]["reference_error"] = findings["reference_error"]
            self.impls["reference"] = None
        if "precision" in findings:
            self.result["runtime"]["precision"] = findings["precision"]
        old = self.versions.get("old")
        if findings.get("autotuned") and old is not None and old.module is not None:
            adopted = launches.adopt_autotune_choices(old.module, findings["autotuned"])
            if adopted:
                self.result["runtime"]["autotune_adopted"] = self.result["runtime"].get("autotune_adopted", 0) + adopted
        self.result["runtime"]["isolation"] = "checker process"

    def _transfer_folder(self, size: int) -> Path:
        """Where this job's outputs (``size`` bytes of tensors) go to the checker: a private folder in shared
        memory when there is one with room to spare (a file there never touches a disk), else the job's
        own temporary folder (in a sandbox: the pool's folder on disk, which the checker can read)."""
        if self.transfer is None:
            given = os.environ.get(TRANSFER_ENV)
            memory, disk = (Path(p) for p in given.split(os.pathsep)) if given else (SHARED_MEMORY, None)
            self.transfer = self.transfer_disk = self.folder if disk is None else _outputs_folder(disk, True)
            if memory.is_dir() and os.access(memory, os.W_OK):
                if not given:
                    _remove_stale_transfers(memory)
                try:
                    self.transfer = _outputs_folder(memory, bool(given))
                except OSError:
                    pass
        if self.transfer != self.transfer_disk:
            try:
                if shutil.disk_usage(self.transfer).free >= 2 * size + (16 << 20):
                    return self.transfer
            except OSError:
                pass
        return self.transfer_disk

    def _note_judge_time(self, save_s: float, wait_s: float, reply: dict) -> None:
        """Where an isolated trial's time goes (``runtime["judge_s"]``): the candidate's save, its wait
        for the verdict, and within that wait the checker's own steps (its ``findings["timings"]``)."""
        spent = self.result["runtime"].setdefault("judge_s", {"trials": 0})
        spent["trials"] += 1
        timings = {"save": save_s, "wait": wait_s,
                   **{f"checker_{k}": v for k, v in ((reply.get("findings") or {}).get("timings") or {}).items()
                      if isinstance(v, (int, float))}}
        for name, seconds in timings.items():
            spent[name] = round(spent.get(name, 0.0) + seconds, 4)

    def _judge_trial(self, trial: dict, impls: dict, fresh: Any, args: Any, got: Any, seed: int, kind: str,
                     kwargs: dict, first: bool) -> None:
        """The expected outputs of this seed (reference, previous version), compared with the candidate's."""
        expected = self._expected_outputs(trial, impls, fresh, seed, kind, kwargs, first)
        self._compare_trial(trial, fresh, args, got, expected, first, kind=kind)

    def _expected_outputs(self, trial: dict, impls: dict, fresh: Any, seed: int, kind: str, kwargs: dict,
                          first: bool, sealed_kept: bool = True) -> dict[str, Any]:
        """The reference's and the previous version's outputs on ``fresh`` (kept sealed between jobs when
        ``sealed_kept``); a role that fails on the first trial is dropped from ``impls`` and reported."""
        expected: dict[str, Any] = {}
        for role in ("reference", "old"):
            impl = impls.get(role)
            if impl is None:
                continue
            key = (self.expected_key, role, seed, json.dumps(kwargs, sort_keys=True, default=str))
            keep = sealed_kept and self.reuse and kind in ("fresh", "same_storage")
            kept = _kept_expected.get(key) if keep else None
            if kept is not None:
                _kept_expected.touch(key)
                expected[role] = _unseal(kept, self.device)
                trial.setdefault("expected_reused", []).append(role)
                continue
            try:
                expected[role], _ = self._call(impl, clone_inputs(fresh), poison=True)
                expected[role] = clone(expected[role])  # hold a private copy the candidate cannot reach
                if keep:
                    _keep_expected(key, expected[role], self.device)
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
        return expected

    def _compare_trial(self, trial: dict, fresh: Any, args: Any, got: Any, expected: dict[str, Any], first: bool,
                       pristine: Any = None, kind: str | None = None) -> None:
        """The candidate's outputs against each expected one; also whether it changed its inputs (``args``
        after the call against ``pristine``, by default ``fresh``; the checker passes ``fresh`` as the
        candidate's file carried it). A recheck's other shape where the previous version itself misses the
        reference is outside what the file supports, and judges nothing but the inputs."""
        if self.floor is None or first:
            self.floor = self._precision_floor(fresh, expected)
            self.result["runtime"]["precision"] = str(self.floor).replace("torch.", "") if self.floor else None
            self.long_sum_atol = None
            if cmp.dots_in_tf32(expected, self.floor, self.job.get("atol"), self.job.get("rtol")):
                # The accepted version itself is only TF32-accurate (fp32 tl.dot on the GPU): hold the step to that.
                self.floor = torch.float16
                self.result["runtime"]["precision"] = "tf32 (the previous version's own error vs the reference)"
            else:
                # Over a long K even fp16's tolerance fails TF32 where outputs are near zero: the step may then
                # miss the reference by what the accepted version itself misses it by (with a margin), no more.
                self.long_sum_atol = cmp.tf32_long_sum_atol(expected, self.floor, self.job.get("atol"), self.job.get("rtol"))
                if self.long_sum_atol is not None:
                    self.result["runtime"]["precision"] = (
                        f"tf32 over long sums (the previous version's own error vs the reference: atol {self.long_sum_atol:.3g})")
        mutated = _mutation(args, fresh if pristine is None else pristine)
        if mutated is not None:
            trial.update(ok=False, mutated=mutated)
        atol = self.job.get("atol") if self.job.get("atol") is not None else self.long_sum_atol
        if kind == "shape" and self._outside_previous_domain(trial, expected, atol):
            return
        bad = cmp.nonfinite(got)
        if bad is not None and not any(cmp.nonfinite(e) is not None for e in expected.values()):
            trial.update(ok=False, nonfinite=bad)
        for role, want in expected.items():
            # With a reference the judge, the previous version is a second rounded result: the two may
            # differ by both errors (|new - old| <= |new - ref| + |old - ref|), e.g. a long fp32 sum
            # accumulated in another order. Twice the tolerance keeps that from failing a correct step.
            scale = 2.0 if role == "old" and "reference" in expected else 1.0
            try:
                result = cmp.compare(got, want, atol, self.job.get("rtol"), scale, self.floor)
            except TypeError as exc:
                result = {"ok": False, "mismatch": {"reason": str(exc)}}
            trial["checks"][role] = result
            if not result["ok"]:
                trial["ok"] = False

    def _outside_previous_domain(self, trial: dict, expected: dict[str, Any], atol: float | None) -> bool:
        """The previous version misses the reference at this trial's inputs: the held-out tutorial matmul's own
        TMA descriptors need 16-byte-aligned rows, and the recheck's K = 3073 broke the accepted file as much
        as the step under test (H200, session 13). Such a shape says nothing about the step: the trial is
        skipped, with the previous version's mismatch as the reason."""
        if "reference" not in expected or "old" not in expected:
            return False
        try:
            previous = cmp.compare(expected["old"], expected["reference"], atol, self.job.get("rtol"), 1.0, self.floor)
        except TypeError:
            return False
        if previous["ok"]:
            return False
        trial["checks"]["previous_vs_reference"] = previous
        trial["skipped"] = "the previous version misses the reference at this shape too: outside what the file supports"
        return True

    def _precision_floor(self, inputs: Any, expected: dict[str, Any]) -> torch.dtype | None:
        """The lowest precision among the inputs and the reference (its dtype, or what its values show it
        was computed in: bf16 math returned with ``.float()``). Never the candidate's: a candidate must
        not loosen its own check by computing in lower precision."""
        dtypes = [t.dtype for _, t in _tensors(inputs)]
        for role, value in expected.items():
            dtypes += [t.dtype for _, t in _tensors(value)]
            if role == "reference":
                dtypes.append(cmp.effective_precision(value))
        return cmp.lowest_precision(d for d in dtypes if d is not None)

    def _check_tampering(self, trial: dict) -> None:
        """User code replaced a tool the checker compares with: the trial fails, the worker is replaced."""
        names = tamper.replaced()
        if names:
            message = (f"the code under test replaced {', '.join(names[:5])} (what the checker compares with): "
                       "its results cannot be trusted")
            trial.update(ok=False, tampered=names, error={"stage": "run", "type": "Tampering", "line": None,
                                                          "message": message})
            self.result["trials"].append(trial)
            if not self.result["compile"].get("new"):
                self.result["compile"]["new"] = {"ok": True, "note": "compiled; the code tampered with the checker"}
            self.result["tampered"] = names
            raise FatalDeviceError(message)

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
        with self.timed("flops"):
            self._count_reference_flops(impls.get("reference"), make_inputs, kwargs)
        timing = self.job["timing"]
        timed = {role: self._timed_call(impl) for role, impl in impls.items()
                 if impl is not None and (role != "reference" or timing.get("time_reference", True))}
        with self.timed("warm"):
            # Each version's first call here on its own: in an isolated job the previous version has not run in
            # this process yet (its kernels compile, or autotune, now), which is not the timing's own cost.
            warm_args = make_inputs(10_000, kwargs)
            self._time_eager_as_reference(timed, warm_args)
            for call in timed.values():
                call(clone_inputs(warm_args))
            self._sync()
            del warm_args
        sizing: dict = {}
        with self.timed("speed"):
            rounds = interleaved(
                timed, lambda r: make_inputs(10_000 + r, kwargs), timing["rounds"], timing["warmup_ms"],
                timing["rep_ms"], timing.get("sync_all_streams", True), clone_inputs, self.progress,
                adaptive=timing.get("adaptive", False), graphs=timing.get("graphs", False), sizing=sizing,
            )
        self.result["speed"] = {"rounds": rounds, "input_kwargs": {k: v for k, v in kwargs.items() if k != "device"},
                                "sizing": sizing}
        baseline = "old" if "old" in timed else "reference"
        stats = speedup_stats(rounds, baseline, "new") if baseline in timed else None
        limit = self.job.get("recheck_speedup_above")
        if stats is None or limit is None or stats["speedup"] <= limit:
            return
        self._recheck(impls, make_inputs, kwargs, gen, timed, timing)

    def _time_eager_as_reference(self, timed: dict, args: Any) -> None:
        """The file's ``eager()`` (the call a user writes, in the inputs' precision) is timed as the reference; without
        one, a reference computing wider than its inputs is timed but marked (``reference_upcast``): no user's baseline."""
        if "reference" not in timed:
            return
        runtime = self.result["runtime"]
        if self.eager is not None:
            call = self._timed_call(self.eager)
            try:
                call(clone_inputs(args))
                timed["reference"] = call
                runtime["reference_timed"] = "eager"
                return
            except Exception as exc:  # noqa: BLE001 - a broken baseline loses its figure, not the verification
                runtime["eager_error"] = f"{type(exc).__name__}: {exc}"[:300]
        upcast = cmp.upcast(self.harness.get("reference_casts_to"), args)
        if upcast:
            runtime["reference_upcast"] = upcast

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

    def _timed_call(self, impl: Impl) -> Callable[[Any], Any]:
        """What timing calls: the user's function with gradients as its harness runs it."""
        grad = self.grad

        def call(args):
            with torch.set_grad_enabled(grad):
                return impl.fn(args)

        return call

    def _recheck(self, impls, make_inputs, kwargs, gen, timed, timing) -> None:
        """A speedup this large is more often a bug than a breakthrough: more seeds, other shapes, again."""
        with self.timed("recheck"):
            self._recheck_body(impls, make_inputs, kwargs, gen, timed, timing)

    def _recheck_body(self, impls, make_inputs, kwargs, gen, timed, timing) -> None:
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
        self.settle()
        rounds = None
        if all(t["ok"] for t in trials):
            rounds = interleaved(
                timed, lambda r: make_inputs(20_000 + r, kwargs), timing["rounds"], timing["warmup_ms"],
                timing["rep_ms"], timing.get("sync_all_streams", True), clone_inputs, self.progress,
                adaptive=timing.get("adaptive", False), graphs=timing.get("graphs", False),
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
            with self.timed("compile" if first else "correctness"):
                for name in tests:
                    trial = self._test_trial(name, new, old, seed, record=first)
                    if first and trial.get("compile_error"):
                        self.result["compile"]["new"] = {"ok": False, "seconds": time.perf_counter() - started,
                                                         **trial["compile_error"]}
                        return
                    self.result["trials"].append(trial)
            if first:
                self.result["compile"]["new"] = {"ok": True, "seconds": time.perf_counter() - started}
                first = False
                with self.timed("correctness"):
                    for index in self._other_autotune_configs():
                        AUTOTUNE.index = index
                        for name in tests:
                            trial = self._test_trial(name, new, old, seed)
                            trial["kind"], trial["autotune_config"] = "config", dict(AUTOTUNE.chosen)
                            self.result["trials"].append(trial)
                    AUTOTUNE.index = 0
        self.settle()
        if all(t["ok"] for t in self.result["trials"]) and self.mode == "gpu" and self.job.get("timing") and old:
            self._time_tests(tests, new, old)

    def _test_trial(self, name: str, new: Version, old: Version | None, seed: int, record: bool = False) -> dict:
        trial: dict[str, Any] = {"seed": seed, "kind": "test", "test": name, "ok": True, "checks": {}}
        # The new version runs first: no expected output exists while it runs (see _trial).
        new_fn = new.attr(name)
        if not callable(new_fn):
            trial.update(ok=False, error={"stage": "harness", "type": "LookupError", "line": None,
                                          "message": f"{name}() is missing from the new version"})
            return trial
        new_recorder = Recorder({new.module_name}, keep_args=True) if record else None
        try:
            seed_everything(seed)
            with new_recorder or contextlib.nullcontext():
                got, poisoned = self._call(Impl("new", self._test_call(new_fn), new), None, poison=True)
        except UserCodeError as err:
            self._check_fatal(err, trial)
            trial.update(ok=False, error={"stage": "run", **err.info})
            # A test's own assert failing is a wrong result, not a kernel that cannot run.
            if seed == self.job["seeds"][0] and err.info.get("type") != "AssertionError":
                trial["compile_error"] = {"stage": "launch", **err.info}
            return trial
        self._check_tampering(trial)
        trial["poisoned_buffers"] = poisoned
        if record:
            self.recordings[name] = (None, new_recorder)
            for kernel, launch in new_recorder.kernels().items():
                self.result.setdefault("launches", {}).setdefault(kernel, launch)
        request = {"test": name, "seed": seed, "kind": "test", "first": record}
        if self.judge is not None and self._judged_elsewhere(trial, request, got, None):
            return trial
        self._judge_test(trial, name, old, seed, got, record)
        return trial

    def _judge_test(self, trial: dict, name: str, old: Version | None, seed: int, got: Any, record: bool) -> None:
        """The previous version's result of test ``name`` for this seed, compared with the candidate's."""
        expected = self._expected_test(trial, name, old, seed, record)
        self._compare_test(trial, got, expected)

    def _expected_test(self, trial: dict, name: str, old: Version | None, seed: int, record: bool) -> Any:
        """The previous version's result of test ``name`` for this seed (None when it has none or it failed);
        with ``record``, the job's precision floor from its launches and result."""
        expected = None
        old_fn = old.attr(name) if old is not None else None
        old_recorder = Recorder({old.module_name}, keep_args=True) if record and callable(old_fn) else None
        if callable(old_fn):
            try:
                seed_everything(seed)
                with old_recorder or contextlib.nullcontext():
                    expected, _ = self._call(Impl("old", self._test_call(old_fn), old), None, poison=True)
                expected = clone(expected)
            except UserCodeError as err:
                self._check_fatal(err, trial)
                trial.setdefault("expected_errors", {})["old"] = err.info
                old_recorder = None
        if record:
            self.recordings[name] = (old_recorder, self.recordings.get(name, (None, None))[1])
            # The tolerance follows the lowest precision the accepted version computes in: its kernels'
            # tensors and its result (the candidate's own choice of precision loosens nothing).
            dtypes = [_DTYPE_OF.get(t) for launch in (old_recorder.launches if old_recorder else [])
                      for t in launch.types.values()]
            dtypes += [t.dtype for _, t in _tensors(expected)]
            self.floor = cmp.lowest_precision(d for d in dtypes if d is not None)
            self.result["runtime"]["precision"] = str(self.floor).replace("torch.", "") if self.floor else None
        return expected

    def _compare_test(self, trial: dict, got: Any, expected: Any) -> None:
        bad = cmp.nonfinite(got)
        if bad is not None and (expected is None or cmp.nonfinite(expected) is None):
            trial.update(ok=False, nonfinite=bad)
        if expected is not None:
            try:
                result = cmp.compare(got, expected, self.job.get("atol"), self.job.get("rtol"), floor=self.floor)
            except TypeError as exc:
                result = {"ok": False, "mismatch": {"reason": str(exc)}}
            trial["checks"]["old"] = result
            trial["ok"] = trial["ok"] and result["ok"]

    def _record_old_test(self, name: str, old: Version) -> Recorder | None:
        """The previous version's launches inside test ``name``, for replay timing (an isolated job judged the
        test in the checker process, so they were not recorded during correctness)."""
        recorder = Recorder({old.module_name}, keep_args=True)
        try:
            seed_everything(self.job["seeds"][0])
            with recorder:
                self._call(Impl("old", self._test_call(old.attr(name)), old), None, poison=False)
        except UserCodeError:
            return None
        return recorder

    def _test_call(self, fn: Callable) -> Callable[[Any], Any]:
        kwargs = {"device": self.device} if accepts(fn, "device") else {}
        return lambda _args: fn(**kwargs)

    def _time_tests(self, tests: list[str], new: Version, old: Version) -> None:
        """Time each test's kernels, old against new: the launches of this file's kernels recorded inside
        the test, replayed with their own arguments (no test setup or checks in the time); a test
        whose versions launch none of the file's kernels, or ``test_timing="test"``, is timed whole."""
        self.phase("speed")
        timing = self.job["timing"]
        whole = timing.get("test_timing") == "test"
        per_test: list[list[dict]] = []
        methods: dict[str, str] = {}
        sizing: dict[str, dict] = {}
        with self.timed("speed"):
            for name in tests:
                old_rec, new_rec = self.recordings.get(name, (None, None))
                if old_rec is None and not whole and new_rec and new_rec.launches and callable(old.attr(name)):
                    old_rec = self._record_old_test(name, old)
                if not whole and old_rec and new_rec and old_rec.launches and new_rec.launches:
                    impls = {"old": lambda _a, r=old_rec: r.replay(), "new": lambda _a, r=new_rec: r.replay()}
                    kernels = sorted({launch.kernel for launch in new_rec.launches})
                    methods[name] = (f"{len(old_rec.launches)} -> {len(new_rec.launches)} launches of "
                                     f"{', '.join(kernels)} replayed")
                else:
                    impls = {"old": self._timed_call(Impl("old", self._test_call(old.attr(name)), old)),
                             "new": self._timed_call(Impl("new", self._test_call(new.attr(name)), new))}
                    methods[name] = "whole test"
                self.progress(f"timing {name}: {methods[name]}")
                # Graphs only for replayed launches: a whole test returns nothing a replay could be checked by.
                graphs = timing.get("graphs", False) and methods[name] != "whole test"
                sizing[name] = {}
                per_test.append(interleaved(
                    impls, lambda r: None, timing["rounds"], timing["warmup_ms"], timing["rep_ms"],
                    timing.get("sync_all_streams", True), clone, self.progress, adaptive=timing.get("adaptive", False),
                    sizing=sizing[name], graphs=graphs,
                ))
        rounds = []
        for r in range(min(len(rows) for rows in per_test)):  # a round: every test once, summed per version
            rounds.append({role: {"median_ms": sum(rows[r][role]["median_ms"] for rows in per_test)}
                           for role in ("old", "new")})
        timed_as = sorted({s.get("method") for s in sizing.values()} - {None})
        refused = [f"{t}: {s['graph_refused']}" for t, s in sizing.items() if s.get("graph_refused")]
        self.result["speed"] = {"rounds": rounds, "method": "; ".join(f"{t}: {m}" for t, m in methods.items()),
                                "per_test": {t: rows for t, rows in zip(tests, per_test)},
                                "sizing": {"method": " and ".join(timed_as), "per_test": sizing,
                                           **({"graph_refused": refused[0]} if refused else {})}}


_DTYPE_OF = {
    "*fp32": torch.float32, "*fp16": torch.float16, "*bf16": torch.bfloat16, "*fp64": torch.float64,
}


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


def run_job(job: dict, emit: Emit, judge: Judge | None = None) -> dict:
    """Run one job; exceptions of our own become ``{"internal_error": ...}`` in the result."""
    try:
        with gpu_lock.shared():  # beside other verifying processes on this GPU; timing takes it alone
            return Job(job, emit, judge).run()
    except BaseException as exc:  # noqa: BLE001 - the worker must answer, whatever happened
        return {"internal_error": describe_exception(exc, None), "worker_healthy": False}
