"""Compile every offered step of some actions on given files for a target arch with a chosen Triton (no GPU).

The GPU machine may run an older Triton than the project's venv (session 5: triton 3.6.0 on the H200,
whose OptimizeThreadLocality pass asserted on a rows_per_program step that 3.9 compiles). Triton
compiles for an arch without a GPU, so this finds such steps on any machine:

    python benchmarks/compile_triton_version.py [FILES ...] [--actions rows_per_program,single_pass,split_kv]
        [--target h200] [--python /path/to/other/venv/bin/python ...] [--depth 2] [--fill 16] [--set NAME=V]

For each file (default: every ``benchmarks/wild/dev`` file) it applies every candidate of the listed
actions (``--actions all``: every action) to every kernel, ``--depth 2`` also each listed action's
candidates on each result, and compiles the original and every result with the project's compile
path (``optimizer/compile``: the configs of each launch or autotune config, ``plan_jobs``) in a worker
run by each ``--python`` interpreter (default: this one), i.e. with whatever Triton that interpreter
has installed; that interpreter needs nothing but triton (``python3 -m venv VENV && VENV/bin/pip
install triton==3.6.0`` for the GPU machine's version; that machine has no libcst, so run this here).
Constexprs the host picks at run time (``BLOCK_M = max(1, min(...))``) get ``--set`` values, else each
``--fill`` value in turn. Prints a markdown table (``--json``: JSON) of every config that does not compile
where the original kernel does (``--all-rows``: every config), then a count per interpreter; exit
status 1 when there is one. No kernel runs, nothing is cached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate  # noqa: E402
from mtmc_lsp.optimizer.analysis import analyze  # noqa: E402
from mtmc_lsp.optimizer.compile.compiler import CompileJob, clear_memory_cache, compile_jobs  # noqa: E402
from mtmc_lsp.optimizer.compile.plan import plan_jobs  # noqa: E402
from mtmc_lsp.optimizer.hardware import get_profile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "benchmarks" / "wild" / "dev"
DEFAULT_ACTIONS = ("rows_per_program", "single_pass", "split_kv")


@dataclass
class Row:
    """One compiled config of one version of a file: the original (step "") or a chain of steps."""

    file: str
    step: str
    kernel: str
    config: str
    status: dict[str, str] = field(default_factory=dict)  # interpreter -> ok | error: ... | skipped: ...


def versions(text: str, actions: set[str] | None, target, depth: int) -> list[tuple[str, str]]:
    """(step chain, source) for the original and every candidate chain of ``actions`` up to ``depth`` steps."""
    out = [("", text)]
    frontier = [("", text)]
    for _ in range(depth):
        following = []
        for chain, source in frontier:
            analysis = analyze(source)
            for kernel in analysis.kernels:
                for candidate in applicable(analysis, kernel, target):
                    if actions is not None and candidate.action not in actions:
                        continue
                    try:
                        new = apply_candidate(source, candidate, target).new_text
                    except ActionError as exc:
                        out.append((_join(chain, candidate.key()), f"# apply failed: {exc}\n"))
                        continue
                    following.append((_join(chain, candidate.key()), new))
        out.extend(following)
        frontier = following
    return out


def _join(chain: str, step: str) -> str:
    return f"{chain} + {step}" if chain else step


def jobs_for(source: str, target, fills: list[int], fixed: dict[str, int]) -> list[CompileJob]:
    """The project's configs of every kernel; constexprs only the host knows at run time get a value each."""
    analysis = analyze(source)
    jobs = []
    for planned in plan_jobs(analysis, target):
        job = planned.job
        kernel = analysis.kernel(job.kernel)
        missing = [p.name for p in kernel.params if p.kind == "constexpr" and job.constexprs.get(p.name) is None
                   and p.default is None and p.name not in kernel.heuristics]
        if not missing:
            jobs.append(job)
            continue
        for fill in (fills if any(name not in fixed for name in missing) else fills[:1]):
            values = {name: fixed.get(name, fill) for name in missing}
            jobs.append(CompileJob(job.kernel, {**job.constexprs, **values}, job.num_warps, job.num_stages,
                                   job.signature_overrides, f"{job.label} with {values}".strip()))
    return jobs


def describe(job_constexprs: dict, warps: int) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(job_constexprs.items())) + f", warps={warps}"


def status_of(report) -> str:
    if report.status == "ok":
        return "ok"
    return f"{report.status}: {(report.error or '').splitlines()[0][:160] if report.error else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--actions", default=",".join(DEFAULT_ACTIONS), help="comma-separated action names, or 'all'")
    parser.add_argument("--target", default="h200")
    parser.add_argument("--python", action="append", help="interpreter whose triton compiles (repeatable); default: this one")
    parser.add_argument("--depth", type=int, default=1, help="steps in a chain (2: each listed action after each)")
    parser.add_argument("--fill", default="16", help="comma-separated values for constexprs the host sets at run time")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=V", help="a fixed value for such a constexpr")
    parser.add_argument("--all-rows", action="store_true", help="print every config, not only the new failures")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    target = get_profile(args.target)
    actions = None if args.actions == "all" else set(args.actions.split(","))
    unknown = (actions or set()) - set(ACTIONS)
    if unknown:
        parser.error(f"unknown action(s) {', '.join(sorted(unknown))}; known: {', '.join(ACTIONS)}")
    pythons = [os.path.abspath(p) for p in args.python] if args.python else [sys.executable]  # abspath: a venv's python is a symlink
    fills = [int(v) for v in args.fill.split(",")]
    fixed = {k: int(v) for k, v in (item.split("=", 1) for item in args.set)}
    files = args.files or sorted(DEV.glob("*.py"))
    rows: list[Row] = []
    for path in files:
        text = path.read_text()
        name = path.name
        for chain, source in versions(text, actions, target, args.depth):
            if source.startswith("# apply failed"):
                rows.append(Row(name, chain, "-", "-", {p: source.strip("# \n") for p in pythons}))
                continue
            jobs = jobs_for(source, target, fills, fixed)
            per_job = [Row(name, chain, job.kernel, describe(job.constexprs, job.num_warps)) for job in jobs]
            for python in pythons:
                clear_memory_cache()  # the in-memory cache does not tell interpreters apart
                for row, report in zip(per_job, compile_jobs(source, jobs, target, python=python, cache_dir=None)):
                    row.status[python] = status_of(report)
            rows.extend(per_job)
        print(f"{name}: {sum(1 for r in rows if r.file == name)} configs", file=sys.stderr, flush=True)  # progress
    # A step's config fails "new" when it does not compile although every config of that kernel in the original does.
    def failed(status: str) -> bool:
        return status != "ok" and not status.startswith("skipped")

    broken_originals = {(r.file, r.kernel, p) for r in rows if r.step == "" for p, s in r.status.items() if failed(s)}
    new_failures = [r for r in rows if r.step and any(failed(s) and (r.file, r.kernel, p) not in broken_originals
                                                      for p, s in r.status.items())]
    shown = rows if args.all_rows else new_failures
    if args.json:
        print(json.dumps({"target": args.target, "pythons": pythons, "rows": [r.__dict__ for r in shown],
                          "new_failures": len(new_failures)}, indent=1))
    else:
        labels = [Path(p).parts[-3] if len(Path(p).parts) >= 3 else p for p in pythons]  # the venv's folder name
        print(f"target {args.target} (sm_{target.arch}); {len(rows)} configs of {len(files)} files; "
              f"actions {args.actions}; depth {args.depth}\n")
        print("| file | step | kernel | config | " + " | ".join(labels) + " |")
        print("|---|---|---|---|" + "---|" * len(pythons))
        for r in shown:
            print(f"| {r.file} | {r.step or '(original)'} | {r.kernel} | {r.config} | "
                  + " | ".join(r.status.get(p, "-") for p in pythons) + " |")
        for python, label in zip(pythons, labels):
            failing = sum(1 for r in new_failures if failed(r.status.get(python, "ok")))
            originals = sum(1 for key in broken_originals if key[2] == python)
            print(f"\n{label} ({python}): {failing} step config(s) fail to compile where the original kernel compiles; "
                  f"{originals} original kernel(s) already fail")
    return 1 if new_failures else 0


if __name__ == "__main__":
    sys.exit(main())
