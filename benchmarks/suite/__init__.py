"""The benchmark suite: naive Triton kernels, one file per kernel, written the way people first write them.

Every file follows the function-harness style of ``mtmc_lsp/examples``: a host function named after
the file that launches the kernels, ``get_inputs(device=..., <sizes>)`` (realistic sizes on a GPU,
tiny ones on the CPU for the interpreter), ``reference(*inputs)`` in higher precision, plus
``eager(*inputs)`` (what a PyTorch user writes; what torch.compile compiles) and
``roofline_cost(*inputs) -> {"bytes": ..., "flops": ...}`` (each input read once, each output
written once). Each kernel is kept once: the suite's matmul is the bundled example (``ELSEWHERE``),
and col_sum and silu_mul_add here are also kernels of the test corpus (tests/corpus/kernels reads
them from this folder). ``suite_files`` lists the suite wherever its files live.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ELSEWHERE = {"matmul": ROOT / "mtmc_lsp" / "examples" / "matmul.py"}


def suite_files(folder: Path = HERE) -> dict[str, Path]:
    """Kernel name -> file for every suite kernel in ``folder``, by name; the default suite also has
    the kernels kept elsewhere (a folder given with ``--suite`` has just its own files)."""
    files = {p.stem: p for p in folder.glob("*.py") if not p.name.startswith("_")}
    if folder.resolve() == HERE:
        files = {**ELSEWHERE, **files}
    return dict(sorted(files.items()))
