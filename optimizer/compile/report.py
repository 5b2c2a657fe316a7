"""``CompileReport``: what one real compilation of one kernel config produced."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class CompileReport:
    """The outcome of compiling one kernel with one set of constexprs and options for one target."""

    kernel: str
    target: str  # profile key: "h100"
    arch: int  # 90 for sm_90
    constexprs: dict
    num_warps: int
    num_stages: int
    signature: dict[str, str]
    status: str  # "ok" | "error" | "skipped" (cannot compile: reason) | "timeout" | "cancelled"
    label: str = ""  # which config: "the launch at line 40 (matmul())", "autotune config 2"
    error: str | None = None
    error_line: int | None = None  # 1-based line of the user's file where the failing construct is
    error_col: int | None = None
    registers: int | None = None  # per thread
    spill_stores: int | None = None  # bytes
    spill_loads: int | None = None  # bytes
    stack_bytes: int | None = None
    local_bytes: int | None = None
    shared_bytes: int | None = None  # triton's metadata.shared: dynamic shared memory per block
    ptx_bytes: int | None = None
    cubin_bytes: int | None = None
    compile_s: float | None = None  # time inside triton.compile
    wall_s: float | None = None  # including the worker process, when not cached
    cached: bool = False
    detail: str = ""  # the full compiler message or ptxas log tail
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def spills(self) -> int:
        return (self.spill_stores or 0) + (self.spill_loads or 0)

    def to_json(self) -> dict:
        data = asdict(self)
        data["spills"] = self.spills
        return data

    @classmethod
    def from_json(cls, data: dict) -> "CompileReport":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})
