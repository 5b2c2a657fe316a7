"""Where an isolated verification job's time goes, on the CPU (Triton interpreter), phase by phase.

Run from the repo root: ``python benchmarks/verify_overhead.py [--out FILE.json]``. For each bundled
example it verifies the heuristic policy's top steps against the example (the optimize loop's pattern:
several candidates judged against one previous version), through a ``WorkerPool`` as the language
server uses it. Printed per job: the wall time, the pool's own share (sending, relaying), the
candidate worker's phases, and for the trials judged in the checker process the candidate's save of its
outputs, its wait for the verdict, and within that wait the checker's steps (opening the job, loading
the outputs, regenerating the inputs, the reference and previous version's outputs, comparing). The
first trial's verdict is awaited; later ones are judged while the candidate runs its next trial, so the
wait can be shorter than the checker's own time. Process start-up (both workers) is timed once.
Sizes are the interpreter's (small); the point is the per-job overhead, not kernel time.

``--gpu`` runs the same jobs on the GPU at the examples' own sizes with timing on (one Triton cache
for the run), adding the speed phase's sizing (rounds, rep ms) to each row:
``python3 benchmarks/verify_overhead.py --gpu --out $OUT/verify_overhead_gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if "--gpu" not in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import _bootstrap  # noqa: F401
from mtmc_lsp.optimizer.verify import (
    VerifyOptions,
    WorkerPool,
    build_job,
    discover_harness,
)
from mtmc_lsp.optimizer.verify.pool import Worker

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "mtmc_lsp" / "examples"
CHECKER_STEPS = ("open", "load", "inputs", "expected", "compare", "test")


def candidates(path: Path, count: int) -> list[tuple[str, str]]:
    """(label, new text): the heuristic policy's top ``count`` steps on ``path`` (unchanged text if none)."""
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile
    from mtmc_lsp.optimizer.policy.base import PolicyState
    from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy

    text = path.read_text()
    profile = get_profile("h200")
    analysis = analyze(text, str(path))
    found: list[tuple[str, str]] = []
    for kernel in analysis.kernels:
        offered = applicable(analysis, kernel, profile)
        for choice in HeuristicPolicy().rank(PolicyState(analysis, kernel, profile), offered) if offered else []:
            if len(found) >= count:
                return found
            try:
                edit = apply_candidate(text, choice.candidate, profile)
            except Exception:  # noqa: BLE001 - an action that refuses this file is not a step
                continue
            found.append((f"{choice.candidate.action} {kernel.name}", edit.new_text))
    while len(found) < count:
        found.append(("unchanged", text))
    return found


def start_time(role: str, gpu: str | None) -> float:
    """Seconds from spawning a worker process of ``role`` to its "ready" (imports included)."""
    worker = Worker(gpu, role=role)
    started = time.perf_counter()
    error = worker.start(lambda: False)
    seconds = time.perf_counter() - started
    worker.close()
    if error:
        raise RuntimeError(error)
    return seconds


def run_job(pool: WorkerPool, new: str, old: str, seeds: int) -> dict:
    """One isolated job; its wall time and where it went."""
    options = VerifyOptions(seeds=seeds, compile_for_target=False, compile_timeout_s=300, run_timeout_s=300,
                            timing=pool.mode == "gpu")
    job = build_job(discover_harness(new), new, old, pool.mode, options)
    started = time.perf_counter()
    outcome = pool.run(job, options.compile_timeout_s, options.run_timeout_s)
    wall = time.perf_counter() - started
    result = outcome.result or {}
    runtime = result.get("runtime") or {}
    judge = dict(runtime.get("judge_s") or {})
    checker_total = sum(judge.get(f"checker_{s}", 0.0) for s in CHECKER_STEPS)
    if judge:
        judge["checker_total"] = round(checker_total, 4)
    trials = result.get("trials") or []
    return {"wall_s": round(wall, 4), "pool_s": round(max(0.0, wall - sum((result.get("phases") or {}).values())), 4),
            "ok": bool(trials) and all(t.get("ok") or t.get("skipped") for t in trials),
            "failure": outcome.failure, "phases": result.get("phases") or {}, "judge": judge,
            "isolation": runtime.get("isolation"), "sizing": (result.get("speed") or {}).get("sizing"),
            "expected_reused": sorted({r for t in trials for r in t.get("expected_reused") or []})}


def describe(label: str, row: dict) -> str:
    phases = " ".join(f"{k} {v:.3f}" for k, v in row["phases"].items())
    j = row["judge"]
    judged = (f"| judged {j.get('trials', 0)}: save {j.get('save', 0):.3f} wait {j.get('wait', 0):.3f} | checker "
              + " ".join(f"{s} {j[f'checker_{s}']:.3f}" for s in CHECKER_STEPS if f"checker_{s}" in j)
              ) if j else "| not isolated"
    verdict = "ok" if row["ok"] else f"NOT OK ({row['failure']})"
    reused = f" reused {','.join(row['expected_reused'])}" if row["expected_reused"] else ""
    sizing = row.get("sizing") or {}
    timed = f" | timing {sizing.get('rounds')} rounds of {sizing.get('rep_ms')} ms" if sizing else ""
    return (f"{label:44s} {row['wall_s']:6.3f} s {verdict}{reused} | pool {row['pool_s']:.3f} | {phases} {judged}"
            f"{timed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="*", default=["gelu_bias", "softmax", "matmul"])
    parser.add_argument("--jobs", type=int, default=3, help="candidates judged against each example")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", help="also write the rows as JSON here")
    parser.add_argument("--gpu", action="store_true", help="on the first GPU, at the examples' sizes, timing on")
    parser.add_argument("--runtime", help="run the workers from this copy of optimizer/verify/runtime (e.g. an "
                                          "older commit's, from git archive) to compare the same jobs")
    args = parser.parse_args()
    if args.runtime:
        from mtmc_lsp.optimizer.verify import pool as pool_module

        pool_module.RUNTIME_DIR = Path(args.runtime).resolve()

    gpu = "0" if args.gpu else None
    starts = {role: round(start_time(role, gpu), 3) for role in ("candidate", "checker")}
    print(f"process start to ready: candidate {starts['candidate']:.3f} s, checker {starts['checker']:.3f} s")
    pool = WorkerPool("gpu", gpus=["0"]) if args.gpu else WorkerPool("interpreter")
    rows = []
    try:
        for name in args.examples:
            old = (EXAMPLES / f"{name}.py").read_text()
            for index, (label, new) in enumerate(candidates(EXAMPLES / f"{name}.py", args.jobs)):
                row = run_job(pool, new, old, args.seeds)
                row.update(example=name, step=label, index=index, first_of_pool=not rows)
                rows.append(row)
                print(describe(f"{name}: {label}"[:44], row), flush=True)
    finally:
        pool.close()
    later = [r for r in rows if r["index"] > 0]
    firsts = [r for r in rows if r["index"] == 0 and not r["first_of_pool"]]
    summary = {"process_start_s": starts}
    for name, group in (("first candidate of a file (warm pool)", firsts), ("later candidates of the same file", later)):
        if group:
            judged = [r["judge"] for r in group if r["judge"]]
            summary[name] = {
                "jobs": len(group), "median_wall_s": round(statistics.median(r["wall_s"] for r in group), 4),
                "median_wait_per_trial_s": round(statistics.median(j["wait"] / j["trials"] for j in judged), 4)
                if judged else None}
            print(f"{name}: {summary[name]}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
