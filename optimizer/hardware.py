"""Hardware profiles of the GPUs a kernel can target, and how the target is chosen."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuProfile:
    """What an optimization or a check needs to know about one GPU (datasheet figures, dense)."""

    key: str  # stable lower-case id used in settings and on the command line: "h100"
    name: str  # display name: "H100 SXM"
    compute_capability: tuple[int, int]
    sm_count: int
    max_shared_per_block: int  # bytes, with the opt-in carve-out
    shared_per_sm: int  # bytes
    registers_per_sm: int  # 32-bit registers
    max_registers_per_thread: int
    max_threads_per_sm: int
    l2_bytes: int
    memory_bandwidth_gbs: float  # GB/s, datasheet
    peak_tflops: dict[str, float] = field(default_factory=dict)  # per dtype, dense
    features: frozenset[str] = frozenset()  # "cp.async", "tma", "wgmma", "fp8", "bf16"
    aliases: tuple[str, ...] = ()

    @property
    def arch(self) -> int:
        """The capability as Triton's ``GPUTarget`` takes it: 90 for sm_90."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]

    @property
    def sm_name(self) -> str:
        return f"sm_{self.arch}"

    def has(self, feature: str) -> bool:
        return feature in self.features

    def ridge_point(self, dtype: str = "bf16") -> float:
        """FLOP per byte above which a kernel is compute-bound on this GPU."""
        tflops = self.peak_tflops.get(dtype) or self.peak_tflops.get("fp32", 1.0)
        return tflops * 1e12 / (self.memory_bandwidth_gbs * 1e9)

    def summary(self) -> str:
        return (
            f"{self.name} ({self.sm_name}): {self.sm_count} SMs, "
            f"{self.max_shared_per_block // KIB} KiB shared/block, "
            f"{self.l2_bytes // MIB} MiB L2, {self.memory_bandwidth_gbs:.0f} GB/s"
        )


_REGS = dict(registers_per_sm=65536, max_registers_per_thread=255)

PROFILES: dict[str, GpuProfile] = {
    p.key: p
    for p in [
        GpuProfile(
            "v100", "V100 SXM2", (7, 0), 80, 96 * KIB, 96 * KIB, **_REGS, max_threads_per_sm=2048,
            l2_bytes=6 * MIB, memory_bandwidth_gbs=900,
            peak_tflops={"fp32": 15.7, "fp16": 125.0},
            features=frozenset({"fp16"}), aliases=("tesla v100", "v100-sxm2"),
        ),
        GpuProfile(
            "a100", "A100 SXM", (8, 0), 108, 163 * KIB, 164 * KIB, **_REGS, max_threads_per_sm=2048,
            l2_bytes=40 * MIB, memory_bandwidth_gbs=2039,
            peak_tflops={"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "int8": 624.0},
            features=frozenset({"fp16", "bf16", "tf32", "cp.async"}), aliases=("a100-sxm4", "a100 80gb"),
        ),
        GpuProfile(
            "l40s", "L40S", (8, 9), 142, 99 * KIB, 100 * KIB, **_REGS, max_threads_per_sm=1536,
            l2_bytes=96 * MIB, memory_bandwidth_gbs=864,
            peak_tflops={"fp32": 91.6, "tf32": 183.0, "fp16": 362.0, "bf16": 362.0, "fp8": 733.0},
            features=frozenset({"fp16", "bf16", "tf32", "cp.async", "fp8"}),
        ),
        GpuProfile(
            "rtx4090", "GeForce RTX 4090", (8, 9), 128, 99 * KIB, 100 * KIB, **_REGS, max_threads_per_sm=1536,
            l2_bytes=72 * MIB, memory_bandwidth_gbs=1008,
            peak_tflops={"fp32": 82.6, "tf32": 82.6, "fp16": 165.0, "bf16": 165.0, "fp8": 330.0},
            features=frozenset({"fp16", "bf16", "tf32", "cp.async", "fp8"}), aliases=("4090", "rtx 4090"),
        ),
        GpuProfile(
            "h100", "H100 SXM", (9, 0), 132, 227 * KIB, 228 * KIB, **_REGS, max_threads_per_sm=2048,
            l2_bytes=50 * MIB, memory_bandwidth_gbs=3350,
            peak_tflops={"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0, "fp8": 1979.0},
            features=frozenset({"fp16", "bf16", "tf32", "cp.async", "fp8", "tma", "wgmma"}),
            aliases=("h100 sxm", "h100 80gb hbm3"),
        ),
        GpuProfile(
            # Same GH100 die as the H100 with HBM3e; torch reports 60 MB of L2 on this project's H200.
            "h200", "H200", (9, 0), 132, 227 * KIB, 228 * KIB, **_REGS, max_threads_per_sm=2048,
            l2_bytes=60 * MIB, memory_bandwidth_gbs=4800,
            peak_tflops={"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0, "fp8": 1979.0},
            features=frozenset({"fp16", "bf16", "tf32", "cp.async", "fp8", "tma", "wgmma"}),
            aliases=("nvidia h200",),
        ),
        GpuProfile(
            "b200", "B200", (10, 0), 148, 227 * KIB, 228 * KIB, **_REGS, max_threads_per_sm=2048,
            l2_bytes=126 * MIB, memory_bandwidth_gbs=8000,
            peak_tflops={"fp32": 80.0, "tf32": 1100.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0},
            features=frozenset({"fp16", "bf16", "tf32", "cp.async", "fp8", "tma"}),
        ),
    ]
}

DEFAULT_TARGET = "h100"


def get_profile(name: str) -> GpuProfile:
    """Look a profile up by key, display name or alias ("H100", "nvidia h200", "a100-sxm4")."""
    wanted = name.strip().lower().removeprefix("nvidia ").strip()
    for profile in PROFILES.values():
        names = {profile.key, profile.name.lower(), *profile.aliases}
        if wanted in names or wanted.replace(" ", "") in {n.replace(" ", "") for n in names}:
            return profile
    for profile in PROFILES.values():  # "NVIDIA H100 80GB HBM3" -> h100
        if profile.key in wanted.replace(" ", "").replace("-", ""):
            return profile
    known = ", ".join(p.key for p in PROFILES.values())
    raise KeyError(f"unknown GPU {name!r}; known targets: {known}")


def local_gpu_name() -> str | None:
    """The first local NVIDIA GPU's name from nvidia-smi, without importing torch; None if none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return lines[0] if out.returncode == 0 and lines else None


def resolve_target(setting: str = "") -> GpuProfile:
    """The target GPU: the setting when given, else the local GPU when known, else H100."""
    if setting:
        return get_profile(setting)
    local = local_gpu_name()
    if local:
        try:
            return get_profile(local)
        except KeyError:
            pass
    return PROFILES[DEFAULT_TARGET]
