"""What keeps the suite's memory-bound kernels 2-3% behind torch.compile? Cache hints, and inductor's own kernels.

The session-16 suite run had rms_norm, row_sum and silu_mul_add at 0.97-0.98x of torch.compile, all at 96-100%
of the copy floor. Inductor marks a load that streams through the data once ``eviction_policy="evict_first"`` and a
load every program reads again (a norm's weight) ``"evict_last"``. This script times, per problem, the engine's
final version from that run (its kept path replayed) against:
- ``streaming``: evict_first on every load whose address depends on the program id, evict_last on the others;
- ``evict_first``: evict_first on every load;
and writes torch.compile's generated Triton code for each problem (``inductor_<problem>.py``) with its time, so the
launch configuration inductor chose can be read.

Modes as in ``_variants.py``: ``--generate`` (a development machine with libcst) writes the variants to
``benchmarks/generated/streaming/`` with ``manifest.json``; ``--out DIR`` (the GPU machine) checks and times
them, ``--dry-run`` runs them in the interpreter at the CPU sizes.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: F401
import _variants as v

ROOT = v.ROOT
GENERATED = ROOT / "benchmarks" / "generated" / "streaming"
TARGET = "h200"
TOL = (1e-3, 1e-3)
# Each problem: (suite file, kernel the steps edit, the kept path of the session-16 suite run).
PROBLEMS = {
    "rms_norm": ("benchmarks/suite/rms_norm.py", "rms_kernel",
                 [("row_fusion", {"consumer": "rms_scale_kernel"}), ("single_pass", {})]),
    "row_sum": ("benchmarks/suite/row_sum.py", "row_sum_kernel",
                [("rows_per_program", {"TILE": 8192}), ("tiling", {"BLOCK_SIZE": 256})]),
    "silu_mul_add": ("benchmarks/suite/silu_mul_add.py", "silu_kernel",
                     [("fusion", {"consumer": "mul_kernel"}), ("fusion", {"consumer": "add_kernel"}),
                      ("tiling", {"BLOCK_SIZE": 4096})]),
    "layer_norm": ("benchmarks/suite/layer_norm.py", "layer_norm_kernel", [("single_pass", {})]),
    "softmax": ("benchmarks/suite/softmax.py", "softmax_stats_kernel",
                [("online_softmax", {"max": "row_max", "sum": "denom"}),
                 ("row_fusion", {"consumer": "softmax_normalize_kernel"}), ("single_pass", {})]),
}


def _pid_names(fn: ast.FunctionDef) -> set[str]:
    """Names whose value depends on tl.program_id, through assignments, loops included (a fixed point)."""
    names: set[str] = set()

    def depends(node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in ("program_id", "num_programs"):
                return True
            if isinstance(sub, ast.Name) and sub.id in names:
                return True
        return False

    changed = True
    while changed:
        changed = False
        for node in ast.walk(fn):
            targets, value = [], None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets, value = [node.target], node.value
            elif isinstance(node, ast.For):
                targets, value = [node.target], node.iter
            if value is None or not depends(value):
                continue
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name) and sub.id not in names:
                        names.add(sub.id)
                        changed = True
    return names


def with_hints(text: str, streaming: bool) -> str:
    """``text`` with an eviction policy on every ``tl.load`` of its jitted kernels that has none."""
    tree = ast.parse(text)
    inserts: list[tuple[int, int, str]] = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or not any("jit" in ast.unparse(d) for d in fn.decorator_list):
            continue
        pid = _pid_names(fn)
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "tl.load"):
                continue
            if any(k.arg == "eviction_policy" for k in call.keywords):
                continue
            streamed = any(isinstance(n, ast.Name) and n.id in pid for n in ast.walk(call.args[0]))
            policy = "evict_first" if (streamed or not streaming) else "evict_last"
            inserts.append((call.end_lineno, call.end_col_offset - 1, f', eviction_policy="{policy}"'))
    lines = text.splitlines(keepends=True)
    for line, col, insert in sorted(inserts, reverse=True):
        row = lines[line - 1]
        lines[line - 1] = row[:col] + insert + row[col:]
    return "".join(lines)


def generate() -> int:
    GENERATED.mkdir(parents=True, exist_ok=True)
    entries = []
    for problem, (path, kernel, steps) in PROBLEMS.items():
        engine = v.apply_steps((ROOT / path).read_text(), kernel, steps, TARGET)
        texts = {"engine": engine, "streaming": with_hints(engine, True), "evict_first": with_hints(engine, False)}
        for index, (variant, text) in enumerate(texts.items()):
            out = GENERATED / f"{problem}_{index}.py"
            out.write_text(text)
            entries.append({"problem": problem, "variant": variant, "path": str(out.relative_to(ROOT)),
                            "entry": Path(path).stem, "steps": [a for a, _ in steps]})
    v.write_manifest(GENERATED, TARGET, entries)
    return 0


def inductor_rows(out_dir: Path, rep: int, dry_run: bool) -> list[dict]:
    """torch.compile of each problem's eager function: its time and its generated code, written to ``out_dir``."""
    import torch
    from torch._inductor.utils import run_and_get_code

    rows = []
    for problem, (path, _, _) in PROBLEMS.items():
        row = {"problem": problem, "variant": "torch.compile", "ok": False, "ms": None, "error": None}
        try:
            module = v.load(ROOT / path, f"streaming_compile_{problem}")
            torch.manual_seed(0)
            inputs = module.get_inputs(device="cpu" if dry_run else "cuda")
            compiled = torch.compile(module.eager)
            _, codes = run_and_get_code(compiled, *inputs)
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"inductor_{problem}.py").write_text("\n\n# ----\n\n".join(codes))
            row["ms"] = v.timer(dry_run)(lambda: compiled(*inputs), warmup=25, rep=rep, return_mode="median")
            row["ok"] = True
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result, not a crash
            row["error"] = v.error_text(exc)
        rows.append(row)
        print(f"{problem:18s} torch.compile          {row['ms'] or float('nan'):9.4f} ms  {row['error'] or ''}", flush=True)
    return rows


def bench(out_dir: Path, rep: int, dry_run: bool) -> int:
    results = v.check_and_time(GENERATED, "streaming", TOL, rep, dry_run)
    if not dry_run:  # inductor's CPU backend compiles C++: not what this script reads
        results += inductor_rows(out_dir, rep, dry_run)
    v.speedup_over(results, "engine", "x_engine")
    meta = v.environment(dry_run)
    lines = [f"# Cache hints on the suite's memory-bound kernels, {meta['gpu']} (torch {meta['torch']}, "
             f"triton {meta['triton']}, {meta['date']})", "",
             ("The engine's final version of each kernel (session 16's kept path), with eviction hints, and "
              "torch.compile. Median of `triton.testing.do_bench` of the host function; each variant checked "
              "against the file's reference first."), "",
             "| problem | variant | ms | x engine | error |", "|---|---|---:|---:|---|"]
    lines += [f"| {r['problem']} | {r['variant']} | {v.cell(r['ms'], '.4f')} | {v.cell(r['x_engine'], '.3f')} | "
              f"{r['error'] or ''} |" for r in results]
    v.write_results(out_dir, "streaming", meta, results, lines)
    return 0 if all(r["ok"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    return v.main(argv, __doc__.splitlines()[0], generate, bench)


if __name__ == "__main__":
    sys.exit(main())
