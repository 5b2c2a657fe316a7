"""Kernel launches seen from inside the worker: real argument types, replay for timing, autotune configs.

``install()`` wraps ``JITFunction.run`` (GPU), ``InterpretedFunction.run`` (interpreter) and
``Autotuner.run`` once per worker. While a ``Recorder`` is active, every outermost launch of a
kernel defined in one of the watched modules is recorded: its argument types (what the offline
compile for the target needs instead of assuming ``*fp32``), and, when ``keep_args`` is set, the
arguments themselves so the launches can be replayed and timed without the rest of a test.

In the interpreter the autotuner cannot benchmark (no driver); ``AUTOTUNE.index`` picks the config
every autotuned kernel runs with instead, so the verifier can run each config in turn. The first call per
key still makes one run the way a timed run would (the autotuner's reset/restore hooks around it), as the
GPU's timing runs do, before the real one.

On a GPU, the first launch of an autotuned kernel compiles its configs in parallel on the host's
cores (Triton's ``AsyncCompileMode`` around a ``warmup`` per config) before the autotuner benchmarks
them one by one; with ``PARALLEL_COMPILE.enabled`` off, or where that API is missing, it compiles
them in turn as Triton does.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

_DTYPES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "i1",
}
for _name, _short in (("float8_e4m3fn", "fp8e4nv"), ("float8_e5m2", "fp8e5")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _short


def triton_type(value: Any) -> str | None:
    """The Triton signature type of one launch argument (None: nothing the compile can use)."""
    if isinstance(value, torch.Tensor):
        short = _DTYPES.get(value.dtype)
        return f"*{short}" if short else None
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


@dataclass
class Launch:
    """One outermost launch: the kernel, where it was defined, its argument types and (maybe) its arguments."""

    kernel: str
    module: str
    types: dict[str, str]
    constants: dict[str, Any]
    options: dict[str, Any]
    replay: Any = field(default=None, repr=False)  # a callable re-issuing the launch, when args are kept

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "module": self.module, "types": self.types, "constants": self.constants,
                "options": self.options}


class _AutotuneChoice:
    """Which config every autotuned kernel runs with in the interpreter; the largest config count seen."""

    def __init__(self):
        self.index = 0
        self.counts: dict[str, int] = {}
        self.chosen: dict[str, str] = {}


AUTOTUNE = _AutotuneChoice()


class _ParallelCompile:
    """Whether (and with how many threads) autotune configs are compiled ahead in parallel; what it did."""

    def __init__(self):
        self.enabled = False
        self.threads = max(1, min(16, os.cpu_count() or 1))
        self.log: list[dict] = []


PARALLEL_COMPILE = _ParallelCompile()
_state = threading.local()
_recorders: list["Recorder"] = []


class Recorder:
    """Records launches of kernels defined in ``modules`` while it is active (``with recorder:``)."""

    def __init__(self, modules: set[str], keep_args: bool = False):
        self.modules = set(modules)
        self.keep_args = keep_args
        self.launches: list[Launch] = []

    def __enter__(self) -> "Recorder":
        _recorders.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _recorders.remove(self)

    def kernels(self) -> dict[str, dict]:
        """Per kernel: the argument types of its first launch (what a compile for the target needs)."""
        out: dict[str, dict] = {}
        for launch in self.launches:
            out.setdefault(launch.kernel, launch.to_json())
        return out

    def replay(self) -> None:
        """Issue every recorded launch again, in order, on the same arguments."""
        for launch in self.launches:
            launch.replay()


def _base_function(fn: Any) -> Any:
    """The user's Python function under Autotuner/Heuristics/JITFunction wrappers."""
    while not inspect.isfunction(fn) and hasattr(fn, "fn"):
        fn = fn.fn
    return fn


def _record(owner: Any, run: Any, args: tuple, kwargs: dict) -> None:
    if not _recorders:
        return
    base = _base_function(owner)
    module = getattr(base, "__module__", "") or ""
    watching = [r for r in _recorders if module in r.modules]
    if not watching:
        return
    names = list(getattr(owner, "arg_names", None) or [])
    types, constants = {}, {}
    for name, value in zip(names, args):
        found = triton_type(value)
        if found is not None:
            types[name] = found
        if isinstance(value, (bool, int, float)) and not isinstance(value, torch.Tensor):
            constants[name] = value
    options = {k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages", "num_ctas")}
    for name, value in kwargs.items():
        if name in options or name in ("grid", "warmup"):
            continue
        found = triton_type(value)
        if found is not None:
            types[name] = found
        if isinstance(value, (bool, int, float)):
            constants[name] = value
    for recorder in watching:
        replay = None
        if recorder.keep_args:
            replay = (lambda o=owner, r=run, a=args, k=dict(kwargs): r(o, *a, **k))
        recorder.launches.append(Launch(getattr(base, "__name__", "kernel"), module, types, constants, options, replay))


def _wrap(cls: Any, attribute: str = "run") -> None:
    original = getattr(cls, attribute)
    if getattr(original, "_mtmc_wrapped", False):
        return

    def run(self, *args, **kwargs):
        depth = getattr(_state, "depth", 0)
        if depth == 0 and not kwargs.get("warmup", False):
            _record(self, original, args, kwargs)
        _state.depth = depth + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _state.depth = depth

    run._mtmc_wrapped = True
    run.__wrapped__ = original
    setattr(cls, attribute, run)


def _key_part(value):
    """What the autotuner's cache key reads of an argument: a scalar's value, a tensor's dtype."""
    return value if isinstance(value, int | float | str | bool) or value is None else str(getattr(value, "dtype", type(value)))


def _interpreted_autotune_run(self, *args, **kwargs):
    """``Autotuner.run`` for the interpreter: no benchmark (no driver); run the config ``AUTOTUNE.index`` picks."""
    self.nargs = dict(zip(self.arg_names, args))
    configs = self.prune_configs(kwargs) if len(self.configs) > 1 else list(self.configs)
    name = getattr(_base_function(self), "__name__", "kernel")
    AUTOTUNE.counts[name] = max(AUTOTUNE.counts.get(name, 0), len(configs))
    config = configs[AUTOTUNE.index % len(configs)]
    AUTOTUNE.chosen[name] = str(config)
    self.best_config = config
    full_nargs = {**self.nargs, **kwargs, **config.all_kwargs()}
    key = tuple(_key_part(full_nargs.get(k)) for k in getattr(self, "keys", []))
    benched = self.__dict__.setdefault("_mtmc_benched", set())
    if len(self.configs) > 1 and key not in benched:
        # On a GPU the autotuner times the configs on the real arguments before the real run, once per key:
        # one timed run here, with the autotuner's hooks, so a kernel its timed runs change the inputs of
        # (atomics without reset_to_zero, in-place updates without restore_value) is as wrong here as there.
        benched.add(key)
        if config.pre_hook is not None:
            config.pre_hook(full_nargs)
        self.pre_hook(full_nargs)
        try:
            self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.post_hook(full_nargs, exception=None)
    self.pre_hook(full_nargs, reset_only=True)  # reset_to_zero / restore_value, as after a benchmark
    if config.pre_hook is not None:
        config.pre_hook(full_nargs)
    try:
        return self.fn.run(*args, **kwargs, **config.all_kwargs())
    finally:
        self.nargs = None


def _compile_configs_ahead(tuner: Any, args: tuple, kwargs: dict) -> None:
    """Compile every pruned config of an autotuned kernel in parallel before its first benchmark.

    Each config is a ``warmup`` (compile, no launch) with the launch's own arguments, so it lands in
    the kernel's cache under the key the benchmark's launch looks up. Best effort: any failure here
    leaves the config to the autotuner, which compiles it and reports its errors as usual.
    """
    if (not PARALLEL_COMPILE.enabled or getattr(tuner, "_mtmc_compiled_ahead", False) or len(tuner.configs) < 2
            or getattr(tuner, "_mtmc_adopted", False)):
        return
    tuner._mtmc_compiled_ahead = True
    try:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return
    started = time.perf_counter()
    launch = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    tuner.nargs = dict(zip(tuner.arg_names, args))
    try:
        configs = tuner.prune_configs(kwargs)
        with ThreadPoolExecutor(max_workers=min(len(configs), PARALLEL_COMPILE.threads)) as pool:
            with AsyncCompileMode(pool, ignore_errors=True):
                for config in configs:
                    try:
                        tuner.fn.run(*args, grid=kwargs.get("grid"), warmup=True, **launch, **config.all_kwargs())
                    except Exception:  # noqa: BLE001 - the autotuner meets it again and reports it
                        pass
        PARALLEL_COMPILE.log.append({"kernel": getattr(_base_function(tuner), "__name__", "kernel"),
                                     "configs": len(configs), "seconds": round(time.perf_counter() - started, 3)})
    except Exception as exc:  # noqa: BLE001 - e.g. an older AsyncCompileMode signature
        PARALLEL_COMPILE.log.append({"error": f"{type(exc).__name__}: {exc}"[:300]})
    finally:
        tuner.nargs = None


def _autotuner(value: Any) -> Any:
    """The ``Autotuner`` under a module attribute (through ``Heuristics`` and other wrappers), or None."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:  # pragma: no cover
        return None
    for _ in range(8):
        if isinstance(value, Autotuner):
            return value
        if value is None or inspect.isfunction(value):
            return None
        value = getattr(value, "fn", None)
    return None


def _config_fields(config: Any) -> Any:
    """A config as plain JSON values (what crosses between processes and is compared)."""
    return json.loads(json.dumps(config.all_kwargs(), sort_keys=True, default=str))


def autotune_choices(module: Any) -> dict[str, list]:
    """The configs the autotuned kernels of ``module`` chose so far: attribute name -> [[key, config], ...]."""
    found: dict[str, list] = {}
    for name, value in list(vars(module).items()) if module is not None else []:
        tuner = _autotuner(value)
        if tuner is None or not getattr(tuner, "cache", None):
            continue
        entries = [[list(key), _config_fields(config)] for key, config in tuner.cache.items()
                   if isinstance(key, tuple) and all(isinstance(k, (bool, int, float, str)) for k in key)]
        if entries:
            found[name] = entries
    return found


def adopt_autotune_choices(module: Any, choices: dict) -> int:
    """Give the autotuned kernels of ``module`` the configs another process chose for the same text on the same
    device (the checker's, for the previous version): a kernel then launches its choice instead of
    benchmarking every config again. Only one of the kernel's own configs is adopted, only for a key it has not
    tuned itself; returns how many were adopted."""
    adopted = 0
    for name, entries in (choices or {}).items():
        tuner = _autotuner(getattr(module, name, None))
        if tuner is None or not isinstance(entries, list):
            continue
        for entry in entries:
            try:
                key, fields = tuple(entry[0]), entry[1]
            except (TypeError, IndexError):
                continue
            match = next((c for c in tuner.configs if _config_fields(c) == fields), None)
            if match is not None and key not in tuner.cache:
                tuner.cache[key] = match
                tuner._mtmc_adopted = True  # nothing to compile ahead for its benchmark
                adopted += 1
    return adopted


def _gpu_autotune_run(original: Any) -> Any:
    def run(self, *args, **kwargs):
        _compile_configs_ahead(self, args, kwargs)
        return original(self, *args, **kwargs)

    run.__wrapped__ = original
    return run


_installed: set[bool] = set()


def install(interpreter: bool) -> None:
    """Wrap the launch entry points once per process."""
    if interpreter in _installed:
        return
    _installed.add(interpreter)
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    if interpreter:
        Autotuner.run = _interpreted_autotune_run
    else:
        Autotuner.run = _gpu_autotune_run(Autotuner.run)
    try:
        from triton.runtime.interpreter import InterpretedFunction

        _wrap(InterpretedFunction)
    except ImportError:  # pragma: no cover - an interpreter-less triton build
        pass
    _wrap(JITFunction)
    _wrap(Autotuner)
