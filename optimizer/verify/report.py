"""The verification report: every check with its outcome, the raw figures, the reward, one summary line.

Everything here is plain data (JSON-able through ``to_json``/``from_json``): the language server
turns it into diagnostics, hovers and code lenses; the search loop and the trajectory recorder
store it as is.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .runtime.stats import REFERENCE_SYNCHRONIZED

# Report statuses, from best to worst. "verified": compiled and correct (speed may be unavailable).
STATUSES = ("verified", "incorrect", "compile_error", "no_harness", "timeout", "crash", "cancelled", "superseded",
            "error")

# Reward terms (the project's brief): compile +0.1, correct +0.3, + log(speedup) when measured.
COMPILE_REWARD = 0.1
CORRECT_REWARD = 0.3


@dataclass
class Check:
    """One check, in the order run: harness, compile, correctness, speed."""

    name: str  # "harness" | "compile" | "correctness" | "speed"
    status: str  # "passed" | "failed" | "skipped" | "unavailable"
    message: str
    line: int | None = None  # 0-based line in the new text the message is about (compile errors)
    details: dict = field(default_factory=dict)


@dataclass
class Mismatch:
    """The first disagreement found: where, by how much, against what, on which trial."""

    against: str  # "reference" | "previous" | "self" (NaN in the output, mutated input)
    kind: str  # "values" | "nonfinite" | "mutated_input" | "structure"
    seed: int | None
    trial: str  # "fresh" | "same_storage" | "shape" | "test"
    output: str = ""  # "output", "output[1]", "output['y']", "input[0]"
    index: list[int] | None = None
    actual: Any = None
    expected: Any = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    count: int | None = None  # mismatching elements
    elements: int | None = None
    atol: float | None = None
    rtol: float | None = None
    reason: str = ""
    test: str | None = None
    config: str | None = None  # the autotune config(s) the trial ran with (interpreter, trial "config")

    def describe(self) -> str:
        where = f"{self.output}" + (f" at index {self.index}" if self.index is not None else "")
        trial = {"same_storage": "same input storage, new values", "shape": "other shape",
                 "config": f"autotune config {self.config}"}.get(self.trial, "")
        ctx = f"seed {self.seed}" + (f", {trial}" if trial else "") + (f", {self.test}()" if self.test else "")
        if self.kind == "nonfinite":
            return (f"{where} is {self.actual} where the expected output is finite ({self.count} such elements; "
                    f"an output left unwritten stays NaN-poisoned) [{ctx}]")
        if self.kind == "mutated_input":
            return f"the kernel changed its input {where}: {_fmt(self.expected)} became {_fmt(self.actual)} [{ctx}]"
        if self.kind == "structure":
            return f"{where}: {self.reason} vs {self.against} [{ctx}]"
        errors = ""
        if self.max_abs_error is not None:
            errors = f"; max abs err {self.max_abs_error:.3g}, max rel err {self.max_rel_error:.3g}"
        share = f"; {self.count} of {self.elements} elements off" if self.count is not None else ""
        tol = f" (atol=rtol={self.atol:g})" if self.atol is not None else ""
        return (f"{where}: {_fmt(self.actual)} vs {_fmt(self.expected)} from the {self.against}{tol}{errors}{share} "
                f"[{ctx}]")


@dataclass
class Speed:
    """Interleaved do_bench medians (ms) and what they mean; all raw figures kept."""

    baseline: str  # "previous" | "reference"
    baseline_ms: float
    candidate_ms: float
    speedup: float  # median over rounds of baseline/candidate
    band: float  # +/- around speedup: the largest deviation of any round's ratio
    rounds: int
    ratios: list[float]
    believed: bool  # False when a >10x speedup was not confirmed by the recheck
    recheck: str = ""  # what the recheck did, when one ran
    reference_ms: float | None = None  # the baseline's time: the file's eager() when it has one, else the reference
    speedup_vs_reference: float | None = None
    reference_timed: str = "reference"  # "eager" when reference_ms timed the file's native-precision eager()
    reference_upcast: str | None = None  # "float16 -> float32": the reference was timed and computes wider than its inputs
    bytes_moved: int | None = None  # inputs + outputs, for the memory roofline
    achieved_gbs: float | None = None
    roofline_pct: float | None = None  # the memory roofline: achieved_gbs / target's datasheet bandwidth
    raw_rounds: list[dict] = field(default_factory=list)
    flops: int | None = None  # the reference's aten FLOPs (matmul/conv/attention; elementwise counts 0)
    flop_dtype: str | None = None  # the peak it is held against: "fp16", "bf16", "tf32", "fp32"
    achieved_tflops: float | None = None
    compute_pct: float | None = None  # achieved_tflops / the target's dense peak for flop_dtype
    bound: str = "memory"  # "compute" when flops / bytes_moved is above the target's ridge point
    method: str = ""  # test style: "3 -> 1 launches of k replayed" or "whole test", per test
    sizing: dict = field(default_factory=dict)  # warmup_ms, rep_ms and rounds the timing used

    @property
    def roofline_line(self) -> str | None:
        """How close the kernel is to the ceiling that binds it: "91% of the compute roofline (640 TFLOP/s)"."""
        if self.bound == "compute" and self.compute_pct is not None and self.achieved_tflops is not None:
            return f"{self.compute_pct:.0f}% of the compute roofline ({_rate(self.achieved_tflops)} TFLOP/s)"
        if self.roofline_pct is None:
            return None
        rate = f" ({_rate(self.achieved_gbs)} GB/s)" if self.achieved_gbs is not None else ""
        return f"{self.roofline_pct:.0f}% of the memory roofline{rate}"

    @property
    def reference_label(self) -> str:
        """The reference baseline as messages name it: the file's eager(), else the reference (and its upcast)."""
        if self.reference_timed == "eager":
            return "eager()"
        return f"the reference (computing {self.reference_upcast})" if self.reference_upcast else "the reference"

    @property
    def within_noise(self) -> bool:
        """Whether 1.0x lies inside the speedup's own noise band."""
        return abs(self.speedup - 1.0) <= self.band

    def describe(self, baseline_name: str) -> str:
        pct = f"{100 * self.band_rel:.0f}%" if self.band_rel >= 0.01 else f"{100 * self.band_rel:.1f}%"
        word = "faster" if self.speedup >= 1 else "slower"
        factor = self.speedup if self.speedup >= 1 else 1 / self.speedup
        text = (f"{factor:.2f}x {word} than {baseline_name} ({self.baseline_ms:.4g} -> {self.candidate_ms:.4g} ms "
                f"+/-{pct})")
        if self.within_noise:
            text += ", within noise"
        if self.sizing.get("method") in ("cuda_graph", REFERENCE_SYNCHRONIZED):
            text += ", GPU time of a CUDA graph"
        if self.roofline_line is not None:
            text += f", {self.roofline_line}"
        if not self.believed:
            text += f" - NOT believed: {self.recheck}"
        return text

    @property
    def band_rel(self) -> float:
        return self.band / self.speedup if self.speedup else 0.0


@dataclass
class Reward:
    """compile 0.1 + correct 0.3 + log(speedup) (the last only when speed was measured and believed)."""

    total: float
    compile: float
    correct: float
    speed: float | None  # log(speedup), None when not measured
    speedup: float | None

    @classmethod
    def of(cls, compiled: bool, correct: bool, speed: "Speed | None") -> "Reward":
        c = COMPILE_REWARD if compiled else 0.0
        k = CORRECT_REWARD if compiled and correct else 0.0
        s = math.log(speed.speedup) if (speed is not None and correct and speed.believed and speed.speedup > 0) else None
        return cls(total=c + k + (s or 0.0), compile=c, correct=k, speed=s,
                   speedup=speed.speedup if speed is not None else None)


@dataclass
class Scaffold:
    """Text to insert so a file gets a verification harness (a quick fix for a "no harness" report)."""

    edits: list[dict]  # [{"line": 0-based, "character": 0, "text": "..."}], in increasing line order
    function: str  # the host function the inputs are for
    title: str


@dataclass
class VerificationReport:
    """Everything one verification found; ``summary`` is the one-line message for an editor."""

    status: str  # one of STATUSES
    mode: str | None  # "gpu" | "interpreter" | None when nothing ran
    device: str  # "NVIDIA H200", "CPU (Triton interpreter)"
    target: str  # the target GPU profile key the figures refer to
    summary: str
    compiled: bool
    correct: bool | None  # None: not checked (no harness, compile failure, crash)
    seeds: int  # seeds run for correctness
    compared_against: list[str]  # "reference", "previous"
    checks: list[Check]
    reward: Reward
    harness: dict | None = None  # style, entry, reference, inputs, tests
    mismatch: Mismatch | None = None
    speed: Speed | None = None
    speed_unavailable_reason: str | None = None
    error: str | None = None  # compile error / crash / timeout text
    error_line: int | None = None  # 0-based line for ``error`` when known
    scaffold: Scaffold | None = None
    kernel: str | None = None
    path: str | None = None
    duration_s: float = 0.0
    # Where the time went, seconds: import, compile (first launch), correctness, flops, speed, recheck
    # (in the worker), worker_other, queue_and_start, target_compile, total.
    phases: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)  # the worker's own result, for the record

    def to_json(self) -> dict:
        return _jsonable(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, data: dict) -> "VerificationReport":
        data = dict(data)
        data["checks"] = [Check(**c) for c in data.get("checks", [])]
        data["reward"] = Reward(**data["reward"])
        for key, typ in (("mismatch", Mismatch), ("speed", Speed), ("scaffold", Scaffold)):
            if data.get(key) is not None:
                data[key] = typ(**data[key])
        return cls(**data)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)


def roofline_figures(flops: int | None, flop_dtype: str | None, bytes_moved: int | None, seconds: float,
                     peak_tflops: dict[str, float], bandwidth_gbs: float) -> dict:
    """Achieved rates, percentages of both ceilings, and which one binds (the higher FLOP/byte side).

    Memory-bound unless the FLOPs were counted, the target has a peak for their dtype, and the
    arithmetic intensity (flops / bytes_moved) is above the ridge point peak / bandwidth.
    """
    out: dict[str, Any] = {"achieved_gbs": None, "roofline_pct": None, "achieved_tflops": None, "compute_pct": None,
                           "bound": "memory"}
    if seconds <= 0:
        return out
    if bytes_moved:
        out["achieved_gbs"] = bytes_moved / seconds / 1e9
        out["roofline_pct"] = 100 * out["achieved_gbs"] / bandwidth_gbs
    peak = peak_tflops.get(flop_dtype) if flop_dtype else None
    if not flops or not peak:
        return out
    out["achieved_tflops"] = flops / seconds / 1e12
    out["compute_pct"] = 100 * out["achieved_tflops"] / peak
    ridge = peak * 1e12 / (bandwidth_gbs * 1e9)  # FLOP per byte where the two ceilings meet
    if not bytes_moved or flops / bytes_moved > ridge:
        out["bound"] = "compute"
    return out


def peak_key(torch_dtype: str | None, peak_tflops: dict[str, float]) -> str | None:
    """The peak a kernel on ``torch_dtype`` operands is held against ("float16" -> "fp16").

    fp32 uses the "tf32" peak when the target has one: Triton's ``tl.dot`` on fp32 defaults to
    TF32 tensor cores, so the fp32 CUDA-core peak would overstate how close a matmul is.
    """
    if torch_dtype is None:
        return None
    if torch_dtype == "float32":
        return "tf32" if "tf32" in peak_tflops else "fp32"
    names = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float64": "fp64"}
    if torch_dtype in names:
        return names[torch_dtype]
    if torch_dtype.startswith("float8"):
        return "fp8"
    return torch_dtype


def _rate(value: float) -> str:
    """4,080 for large rates, 3 significant digits for small ones (0.512)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
