"""The kernel corpus of the action and verification tests, wherever each kernel lives.

Every corpus kernel defines ``ENTRY`` (its host function), ``get_inputs(device=...)`` (tiny sizes on
the CPU, for the interpreter) and ``reference(...)``. A kernel that also ships as a bundled example
(``mtmc_lsp/examples``) or runs in the GPU benchmark suite (``benchmarks/suite``) is kept once, in
that home; ``ELSEWHERE`` names those homes and ``kernel_path`` / ``kernel_files`` find every kernel.
Tests import this as ``corpus.kernels``; scripts outside tests/ put tests/ on ``sys.path`` first.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
EXAMPLES = ROOT / "mtmc_lsp" / "examples"
SUITE = ROOT / "benchmarks" / "suite"
ELSEWHERE = {
    "matmul": EXAMPLES / "matmul.py",
    "softmax": EXAMPLES / "softmax.py",
    "gelu_bias": EXAMPLES / "gelu_bias.py",
    "suite_attention": SUITE / "attention.py",  # the corpus attention.py is a one-kernel flash attention
    "col_sum": SUITE / "col_sum.py",
    "silu_mul_add": SUITE / "silu_mul_add.py",
}


def kernel_path(name: str) -> Path:
    """The file of corpus kernel ``name`` (a file stem, e.g. ``"matmul"``)."""
    return ELSEWHERE.get(name) or HERE / f"{name}.py"


def kernel_files() -> list[Path]:
    """Every corpus kernel file, ordered by name."""
    own = {p.stem: p for p in HERE.glob("*.py") if not p.name.startswith("_")}
    return [path for _, path in sorted({**own, **ELSEWHERE}.items())]

