"""``mtmc kernelbench --problems DIR --level N``: KernelBench problems -> generated Triton -> the field's protocol.

For each problem: trace ``Model`` and write ``ModelNew`` with Triton kernels (tiled by shape)
(``optimizer.kernelbench``), optionally let the MTMC loop optimize each kernel (``--optimize-steps``),
check it statically, then run KernelBench's protocol in a worker: 5 correctness trials, and on a GPU
eager / torch.compile / ModelNew timed in the same run. Rows go to ``OUT/results.jsonl`` as they land
(``--resume`` skips the problems already there); ``OUT/report.md``, ``summary.json`` and the plots
are rewritten at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problems", required=True,
                        help="a KernelBench checkout (uses KernelBench/levelN) or a folder of problem files")
    parser.add_argument("--level", type=int, action="append", required=True, help="level to run (repeatable)")
    parser.add_argument("--target", default="", help="target GPU for the optimize loop (default: local GPU, else H100)")
    parser.add_argument("--out", default="kernelbench-results", help="output folder (default: kernelbench-results)")
    parser.add_argument("--resume", action="store_true", help="keep OUT/results.jsonl and skip the problems in it")
    parser.add_argument("--optimize-steps", type=int, default=0,
                        help="kept MTMC steps per kernel before evaluation (default 0: the generated kernels as is)")
    parser.add_argument("--optimize-processes", type=int, default=1,
                        help="problems optimized side by side on the GPU, each with its own verifier pool; timing "
                             "rounds run alone (default 1)")
    parser.add_argument("--optimize-budget-s", type=float, default=120.0,
                        help="seconds of MTMC loop per problem (default 120)")
    parser.add_argument("--policy", default="heuristic", help="policy of the optimize loop (default heuristic)")
    parser.add_argument("--cpu", action="store_true",
                        help="no GPU: correctness only, in the Triton interpreter, at sizes halved to <= 64 and to "
                             "inputs of <= --cpu-max-elements")
    parser.add_argument("--cpu-max-elements", type=int, default=1 << 17,
                        help="with --cpu: shrink sizes until get_inputs() makes at most this many elements")
    parser.add_argument("--split", choices=("all", "train", "eval"), default="all",
                        help="the policy's training half (odd problem numbers) or the evaluation half (even), "
                             "docs/kernelbench.md (default all)")
    parser.add_argument("--write-only", action="store_true",
                        help="write the lowered ModelNew files under OUT/solutions and score nothing (a training corpus)")
    parser.add_argument("--max-elements", type=int, default=0,
                        help="GPU: shrink the problem's sizes until its inputs hold at most this many elements "
                             "(the training corpus; 0: KernelBench's sizes)")
    parser.add_argument("--only", action="append", default=[], help="run problems whose file name contains this")
    parser.add_argument("--limit", type=int, default=0, help="at most this many problems per level")
    parser.add_argument("--sample", type=int, default=0,
                        help="a random sample of this many problems per level, stratified by op class (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0; the same seed, the same problems)")
    parser.add_argument("--fp32-dot", choices=("tf32x3", "ieee"), default="tf32x3",
                        help="fp32 tl.dot of the generated matmuls and convolutions: tf32x3 (tensor cores, about "
                             "fp32's error) or ieee (FMA; slower)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per problem in the worker (default 600)")
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="stop starting new problems after this many seconds (0: no limit); --resume goes on")
    parser.add_argument("--no-compile-baseline", action="store_true", help="skip the torch.compile baseline")
    parser.add_argument("--workers", type=int, default=1,
                        help="workers side by side, worker i on GPU i (default 1; on an 8-GPU host use 8)")
    parser.add_argument("--prewarm-workers", type=int, default=0,
                        help="GPU: first call every problem's ModelNew and torch.compile(Model) once in this many "
                             "processes side by side (filling Triton's and inductor's disk caches), then score serially "
                             "(default 0: off; 8 on a 16-core host)")


def run(args: argparse.Namespace) -> int:
    from mtmc_lsp.optimizer.kernelbench.evaluate import (
        ProblemResult, apply_result, discover_problems, load_results, run_jobs, sample_problems, static_check)
    from mtmc_lsp.optimizer.kernelbench.report import write_report
    from mtmc_lsp.optimizer.kernelbench.split import in_split
    from mtmc_lsp.optimizer.kernelbench.trace import load_problem, shrink_for_interpreter, shrink_inputs
    from mtmc_lsp.optimizer.kernelbench.write import generate

    started = time.monotonic()
    root = Path(args.problems)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    if not args.resume and results_path.exists():
        results_path.unlink()
    done = load_results(results_path)

    def budget_left() -> float:
        return float("inf") if not args.budget_s else args.budget_s - (time.monotonic() - started)

    rows: dict[str, ProblemResult] = {}
    jobs: list[dict] = []
    generated: list[tuple] = []  # (row, solution path, problem text, solution text)
    for level in args.level:
        files = in_split(discover_problems(root, level), args.split)
        if args.only:
            files = [f for f in files if any(o in f.name for o in args.only)]
        if args.sample:
            files = sample_problems(files, level, args.sample, args.seed)
        if args.limit:
            files = files[: args.limit]
        if not files:
            print(f"mtmc kernelbench: no problems for level {level} under {root}", file=sys.stderr)
            return 2
        for path in files:
            row = ProblemResult(level, path.stem, "pending")
            if row.key in done:
                continue
            text = path.read_text(encoding="utf-8")
            solution = None
            try:
                if args.cpu:
                    text = shrink_for_interpreter(text, args.cpu_max_elements)
                elif args.max_elements:
                    text = shrink_inputs(text, args.max_elements)
                solution = _generate(row, text, path.stem, lambda problem: generate(problem, args.fp32_dot), load_problem)
            except Exception as exc:  # get_inputs itself failed: a row, not the end of the run
                row.status, row.error = "generation_error", f"sizes: {type(exc).__name__}: {exc}"[:500]
            if solution is None:
                _record(results_path, row)
                print(f"  {row.key}: generation failed: {row.error}")
                continue
            generated.append((row, out / "solutions" / f"level{level}" / f"{path.stem}_triton.py", text, solution))
    if args.optimize_steps > 0 and not args.write_only:
        generated = _optimize_all(generated, args, budget_left)
    for row, target, text, solution in generated:
        report = static_check(solution)
        row.static_errors, row.torch_ops = report.errors, report.torch_ops
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(solution, encoding="utf-8")
        rows[row.key] = row
        if args.write_only:
            continue
        jobs.append({"key": row.key, "problem_text": text, "solution_text": solution, "cpu": args.cpu,
                     "timing": not args.cpu, "compile_baseline": not args.no_compile_baseline})
    if args.write_only:
        print(f"mtmc kernelbench: wrote {len(rows)} ModelNew files under {out / 'solutions'} (split {args.split})")
        return 0
    total = len(jobs)
    print(f"mtmc kernelbench: {total} problems to run ({len(done)} already in {results_path}); "
          f"{'CPU interpreter, correctness only' if args.cpu else 'GPU protocol'}")
    finished = [0]

    def on_result(result: dict) -> None:
        row = apply_result(rows[result["key"]], result)
        _record(results_path, row)
        finished[0] += 1
        print(f"[{finished[0]}/{total}] {_line(row)}", flush=True)

    if args.prewarm_workers > 0 and not args.cpu and jobs:
        _prewarm(jobs, args, budget_left, run_jobs)
    left = run_jobs(jobs, args.cpu, args.timeout_s, on_result, budget_left=budget_left if args.budget_s else None,
                    workers=args.workers)
    all_rows = list(load_results(results_path).values())
    meta = _meta(args, root)
    summary = write_report(all_rows, out, meta)
    for level, entry in summary.items():
        eager, comp = entry["all"]["eager"], entry["all"]["compile"]
        print(f"{level}: {entry['correct']}/{entry['problems']} correct, fast_1 {_pct(eager['fast_1'])} eager / "
              f"{_pct(comp['fast_1'])} compile, fast_2 {_pct(eager['fast_2'])} / {_pct(comp['fast_2'])}, "
              f"mean speedup {_x(eager['mean_speedup'])} / {_x(comp['mean_speedup'])}")
        if "all_fp32_reference" in entry:
            strict = entry["all_fp32_reference"]["eager"]
            print(f"{level} against the TF32-off reference: {entry['correct_fp32_reference']}/{entry['problems']} "
                  f"correct, fast_1 {_pct(strict['fast_1'])} eager, geomean {_x(strict['geomean_speedup'])}")
    print(f"report: {out / 'report.md'}")
    if left:
        print(f"budget spent: {len(left)} problems not run; run again with --resume to go on")
    return 0


def _prewarm(jobs: list[dict], args, budget_left, run_jobs) -> None:
    """Compile every problem's kernels and inductor baseline in parallel processes before the serial, timed run."""
    started = time.monotonic()
    outcomes: dict[str, int] = {}

    def count(result: dict) -> None:
        outcomes[result.get("status", "?")] = outcomes.get(result.get("status", "?"), 0) + 1

    # at most half the budget: what is not prewarmed compiles in the scored run as before
    half = (lambda: budget_left() - args.budget_s / 2) if args.budget_s else None
    run_jobs([{**job, "prewarm": True} for job in jobs], False, args.timeout_s, count, budget_left=half,
             workers=args.prewarm_workers, share_gpu=True)
    print(f"mtmc kernelbench: prewarmed {len(jobs)} problems in {time.monotonic() - started:.0f} s "
          f"with {args.prewarm_workers} processes: {outcomes}", flush=True)


def _generate(row, text: str, name: str, generate, load_problem) -> str | None:
    try:
        generated = generate(load_problem(text=text, name=name))
    except Exception as exc:  # a problem we cannot trace is a row, not a crash of the whole run
        row.status, row.error = "generation_error", f"{type(exc).__name__}: {exc}"[:500]
        return None
    row.kernels, row.fallbacks, row.op_classes = generated.kernels, [list(f) for f in generated.fallbacks], generated.op_classes
    return generated.text


def _optimize_all(generated: list[tuple], args, budget_left) -> list[tuple]:
    """The MTMC loop over every generated file, ``--optimize-processes`` at a time on the GPU; new solution texts.

    The loop may spend half of ``--budget-s``; the rest scores. A problem the loop did not reach is left out
    of this run (not scored as lowered), so that ``--resume`` optimizes and scores it in the next window.
    """
    from mtmc_lsp.optimizer.verify.shared_gpu import map_on_one_gpu

    def may_start() -> bool:
        return budget_left() > (args.budget_s / 2 if args.budget_s else 0)

    def optimize_one(index: int) -> tuple[str, int]:
        row, path, _, solution = generated[index]
        final = _optimize(row, solution, path, args)
        return final, row.optimize_steps

    finals: dict[int, str] = {}
    for index, result in map_on_one_gpu(optimize_one, range(len(generated)), args.optimize_processes, may_start):
        row, _, _, solution = generated[index]
        if isinstance(result, BaseException):  # the generated file is scored as it was
            print(f"  {row.key}: the MTMC loop failed: {type(result).__name__}: {result}", flush=True)
            finals[index] = solution
            continue
        finals[index], row.optimize_steps = result
    if len(finals) < len(generated):
        print(f"mtmc kernelbench: the loop's half of the budget is spent: {len(generated) - len(finals)} problems "
              "left for --resume", flush=True)
    return [(row, path, text, finals[i]) for i, (row, path, text, _) in enumerate(generated) if i in finals]


def _optimize(row, text: str, path: Path, args) -> str:
    """The MTMC loop over every kernel of the generated file; the final text (unchanged if nothing helped).

    Every attempt is recorded (``OUT/.mtmc/trajectories``): the training half's episodes are training data,
    the evaluation half's are marked and never trained on. The generated file is kept beside the final one
    (``*_lowered.py``), so each kept step reads as a diff.
    """
    from mtmc_lsp.optimizer.hardware import resolve_target
    from mtmc_lsp.optimizer.kernelbench.split import EVAL, split_of
    from mtmc_lsp.optimizer.policy import make_policy
    from mtmc_lsp.optimizer.search import make_verifier, optimize
    from mtmc_lsp.optimizer.trajectories import TrajectoryRecorder
    from mtmc_lsp.optimizer.verify import VerifyOptions
    from mtmc_lsp.settings import Settings

    settings = Settings(target_gpu=args.target)
    settings.policy = args.policy
    target = resolve_target(args.target)
    policy = make_policy(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.with_name(path.name.replace("_triton.py", "_lowered.py")).write_text(text, encoding="utf-8")
    verify = make_verifier(str(path), target, VerifyOptions(seeds=3))
    recorder = TrajectoryRecorder(Path(args.out))
    recorder.evaluation = split_of(row.name) == EVAL
    try:
        result = optimize(text, str(path), None, target, policy, verify, steps=args.optimize_steps,
                          budget_s=args.optimize_budget_s, record=recorder)
    finally:
        policy.close()
    row.optimize_steps = len(result.steps)
    print(f"  {row.key}: MTMC kept {len(result.steps)} steps ({result.stopped}, {result.elapsed_s:.0f} s)", flush=True)
    return result.final_text


def _record(path: Path, row) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row.to_json()) + "\n")


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _line(row) -> str:
    if row.status != "ok":
        return f"{row.key}: {row.status}: {(row.error or '').splitlines()[0][:160] if row.error else ''}"
    verdict = "correct" if row.correct else "INCORRECT"
    if row.static_errors:
        verdict += f" (static: {'; '.join(row.static_errors)})"
    reference, strict = "kernelbench", ""
    if not row.correct and row.correct_fp32_reference:  # right against Model run with TF32 off (runner.py)
        reference, strict = "fp32", f" (against the TF32-off reference {row.trials_passed_fp32_reference}/{row.trials})"
    timing = ""
    if row.triton_ms is not None:
        timing = (f", {row.triton_ms:.3f} ms: {_x(row.speedup('eager', reference))} eager, "
                  f"{_x(row.speedup('compile', reference))} compile")
    left = f", PyTorch ops left: {', '.join(sorted(set(row.torch_ops)))}" if row.torch_ops else ""
    return f"{row.key}: {verdict} {row.trials_passed}/{row.trials}{strict}{timing}{left}"


def _meta(args, root: Path) -> dict:
    import platform

    meta = {"levels": ", ".join(str(level) for level in args.level), "problems": root.name,
            "mode": "CPU (Triton interpreter), correctness only, sizes reduced" if args.cpu else "GPU",
            "optimize steps per kernel": args.optimize_steps, "fp32 tl.dot": args.fp32_dot,
            "sample": f"{args.sample} per level, seed {args.seed}, stratified by op class" if args.sample else "all",
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import torch
        import triton

        meta["torch"], meta["triton"] = torch.__version__, triton.__version__
        if torch.cuda.is_available() and not args.cpu:
            meta["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    return meta
