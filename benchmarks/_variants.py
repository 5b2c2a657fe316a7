"""What the single-action GPU scripts share: write the engine's edits here, time them on the GPU machine.

The GPU machine has no libcst, so a script's ``--generate`` applies the engine's steps on a development
machine and commits the texts with a ``manifest.json``; its ``--out DIR`` loads those texts on the GPU,
checks and times them. ``--dry-run`` does the same in the Triton interpreter at small sizes (a check of
the script, no timing). Used by ``tensor_descriptor_gpu.py``, ``persistent_gpu.py`` and ``channel_tile_gpu.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def apply_steps(text: str, kernel: str, steps: list[tuple[str, dict]], target_name: str) -> str:
    """``text`` after the engine's own candidates for ``steps`` (action, params), in order; LookupError if one is not offered."""
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    target = get_profile(target_name)
    for action, params in steps:
        chosen = next((c for c in applicable(analyze(text), kernel, target)
                       if c.action == action and (params is None or c.params == params)), None)
        if chosen is None:
            raise LookupError(f"{action} {params} not offered")
        text = apply_candidate(text, chosen, target).new_text
    return text


def generate_suite_variants(folder: Path, target: str, problems: dict[str, tuple[str, str]],
                            base: list[tuple[str, dict]], variants: dict[str, list[tuple[str, dict]]]) -> int:
    """Each problem's file (``problems``: name -> (path, kernel)) after ``base`` then each variant's steps, written
    to ``folder`` as ``<problem>_<index>.py`` with the manifest; a variant the engine does not offer is skipped."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for problem, (path, kernel) in problems.items():
        for index, (variant, steps) in enumerate(variants.items()):
            try:
                text = apply_steps((ROOT / path).read_text(), kernel, base + steps, target)
            except LookupError as exc:
                print(f"{problem}: {variant} skipped ({exc})")
                continue
            out = folder / f"{problem}_{index}.py"
            out.write_text(text)
            entries.append({"problem": problem, "variant": variant, "path": str(out.relative_to(ROOT)),
                            "entry": Path(path).stem, "steps": [a for a, _ in base + steps]})
    write_manifest(folder, target, entries)
    return 0


def check_and_time(folder: Path, tag: str, tol: tuple[float, float], rep: int, dry_run: bool) -> list[dict]:
    """Each generated variant of ``folder`` checked against its file's reference (rtol, atol), then its host function
    timed (median of do_bench); one row per variant, a failing one with its error."""
    do_bench = timer(dry_run)
    import torch

    device = "cpu" if dry_run else "cuda"
    results, inputs, refs = [], {}, {}
    for index, entry in enumerate(read_manifest(folder)):
        problem = entry["problem"]
        row = {**entry, "ok": False, "ms": None, "error": None}
        try:
            module = load(ROOT / entry["path"], f"{tag}_{index}")
            if problem not in inputs:
                torch.manual_seed(0)
                inputs[problem] = module.get_inputs(device=device)
                refs[problem] = module.reference(*inputs[problem])
            fn = getattr(module, entry["entry"])
            out = fn(*inputs[problem])  # compiles once, outside the timing
            row["max_abs_err"] = float((out.double() - refs[problem].double()).abs().max())
            if not torch.allclose(out.double(), refs[problem].double(), rtol=tol[0], atol=tol[1]):
                row["error"] = f"wrong result: max abs err {row['max_abs_err']:.3g}"
            else:
                row["ms"] = do_bench(lambda fn=fn, args=inputs[problem]: fn(*args), warmup=25, rep=rep, return_mode="median")
                row["ok"] = True
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result, not a crash
            row["error"] = error_text(exc)
        results.append(row)
        print(f"{problem:18s} {entry['variant']:22s} {row['ms'] or float('nan'):9.4f} ms  {row['error'] or ''}", flush=True)
    return results


def speedup_over(results: list[dict], variant: str, key: str) -> None:
    """``row[key]``: each row's speed-up over the same problem's ``variant`` (None when either failed)."""
    base = {r["problem"]: r["ms"] for r in results if r["variant"] == variant and r["ok"]}
    for r in results:
        r[key] = base[r["problem"]] / r["ms"] if r["ok"] and r["problem"] in base else None


def write_manifest(folder: Path, target: str, entries: list[dict]) -> None:
    (folder / "manifest.json").write_text(json.dumps({"target": target, "variants": entries}, indent=1) + "\n")
    print(f"wrote {len(entries)} variants to {folder.relative_to(ROOT)}")


def read_manifest(folder: Path) -> list[dict]:
    return json.loads((folder / "manifest.json").read_text())["variants"]


def load(path: Path, tag: str):
    """Import a generated file under its own module name."""
    spec = importlib.util.spec_from_file_location(f"variant_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timer(dry_run: bool) -> Callable:
    """triton.testing.do_bench on the GPU; one host-timed call in a dry run (the interpreter times nothing real)."""
    if dry_run:
        os.environ["TRITON_INTERPRET"] = "1"

        def do_bench(fn, warmup=0, rep=0, return_mode="median"):
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3

        return do_bench
    from triton.testing import do_bench

    return do_bench


def environment(dry_run: bool) -> dict:
    import torch
    import triton

    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
            "gpu": "CPU interpreter (dry run)" if dry_run else torch.cuda.get_device_name(0),
            "torch": torch.__version__, "triton": triton.__version__}


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def cell(value, spec: str) -> str:
    return format(value, spec) if value is not None else ""


def write_results(out_dir: Path, name: str, meta: dict, results: list[dict], lines: list[str]) -> None:
    """``name``.json (every row) and ``name``.md (the table in ``lines``), printed too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    (out_dir / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None, description: str, generate: Callable[[], int],
         bench: Callable[[Path, int, bool], int]) -> int:
    """``--generate`` or ``--out DIR [--rep MS] [--dry-run]``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--generate", action="store_true", help="write the variants (needs the project's libcst)")
    parser.add_argument("--out", type=Path, help="time the generated variants and write the table here")
    parser.add_argument("--rep", type=int, default=200, help="do_bench's rep (ms)")
    parser.add_argument("--dry-run", action="store_true", help="the interpreter at small sizes (checks the script)")
    args = parser.parse_args(argv)
    if args.generate:
        return generate()
    if args.out is None:
        parser.error("--generate or --out DIR")
    return bench(args.out, args.rep, args.dry_run)
