"""``mtmc demo``: the bundled examples through the whole pipeline with the embedded defaults.

Copies the naive examples into an output folder, analyses them and shows the diagnostics for the
target, asks the policy for ranked proposals, then runs the MTMC loop: each step is applied,
verified (the Triton interpreter on a CPU, timed on a GPU when there is one) and printed as a diff
with its result. The optimized files are left in the output folder next to copies of the originals.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = ("matmul", "softmax", "gelu_bias")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--example", choices=EXAMPLES + ("all",), default="all",
                        help="which bundled example to run (default: all three)")
    parser.add_argument("--out", default="", help="output folder (default: a new temporary folder)")
    parser.add_argument("--target", default="", help="target GPU profile (default: the local GPU, else H100)")
    parser.add_argument("--steps", type=int, default=2, help="kept steps per kernel at most (default 2)")
    parser.add_argument("--policy", default="", help="embedded (default), heuristic or endpoint")
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget for all examples (default 600)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per correctness check (default 2)")


def run(args: argparse.Namespace) -> int:
    from mtmc_lsp import examples
    from mtmc_lsp.optimizer.actions import applicable
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.checks import run_checks
    from mtmc_lsp.optimizer.hardware import local_gpu_name, resolve_target
    from mtmc_lsp.optimizer.policy import PolicyState, candidate_text, make_policy
    from mtmc_lsp.optimizer.search import make_verifier, optimize
    from mtmc_lsp.optimizer.verify import VerifyOptions
    from mtmc_lsp.settings import Settings

    from .optimize import ProgressPrinter, print_result

    started = time.monotonic()
    try:
        target = resolve_target(args.target)
    except KeyError as exc:
        print(f"mtmc demo: {exc.args[0]}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="mtmc-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    names = EXAMPLES if args.example == "all" else (args.example,)
    source_dir = Path(examples.__file__).parent
    gpu = local_gpu_name()
    print("MTMC demo: macro thinking (a policy picks the next optimization), micro coding (one small edit),")
    print("verification (every step checked) on the bundled naive kernels.")
    print(f"output folder: {out_dir}")
    print(f"target: {target.summary()}")
    print(f"verification: {'GPU ' + gpu if gpu else 'CPU, Triton interpreter (correctness only; speed is not measured without a GPU)'}")

    settings = Settings(target_gpu=args.target)
    settings.policy = args.policy or settings.policy
    policy = make_policy(settings)
    t0 = time.monotonic()
    policy_load = getattr(policy, "load", None)
    if policy_load is not None:
        try:
            policy_load()
            print(f"policy: {policy.describe()} (loaded in {time.monotonic() - t0:.1f} s)")
        except Exception as exc:  # the policy falls back to the heuristic by itself; say why here
            print(f"policy: {policy.describe()} ({type(exc).__name__})")
    else:
        print(f"policy: {policy.describe()}")

    summary_rows = []
    printer = ProgressPrinter(sys.stdout)
    for index, name in enumerate(names):
        original = source_dir / f"{name}.py"
        work = out_dir / f"{name}.py"
        shutil.copyfile(original, work)
        shutil.copyfile(original, out_dir / f"{name}.original.py")
        text = work.read_text(encoding="utf-8")
        analysis = analyze(text, str(work))
        print(f"\n{'=' * 100}\n{work.name}: {', '.join(k.name for k in analysis.kernels)}\n{'=' * 100}")
        findings = run_checks(analysis, target)
        print(f"diagnostics for {target.key.upper()} ({len(findings)}):")
        for f in findings:
            print(f"  {work.name}:{f.span.start.line + 1}:{f.span.start.character + 1}: {f.severity} {f.code}: {f.message}")
        if not findings:
            print("  none")
        for kernel in analysis.kernels:
            candidates = applicable(analysis, kernel, target)
            ranked = policy.rank(PolicyState(analysis, kernel, target), candidates)
            print(f"proposals for {kernel.name} ({len(ranked)} applicable, best first):")
            for i, r in enumerate(ranked[:5], start=1):
                lp = f"  log p {r.logprob:.2f}" if r.logprob is not None else ""
                print(f"  {i}. {r.candidate.title:<70} score {r.score:.3f}{lp}")
            if ranked and ranked[0].metadata.get("note"):
                print(f"  ({ranked[0].metadata['note']})")
        left = args.budget_s - (time.monotonic() - started)
        per_file = max(0.0, left / (len(names) - index))
        verify = make_verifier(str(work), target, VerifyOptions(seeds=args.seeds))
        result = optimize(text, str(work), None, target, policy, verify, steps=args.steps, beam=1, budget_s=per_file,
                          on_step=printer.attempt, on_rank=printer.ranked)
        print_result(result, sys.stdout)
        work.write_text(result.final_text, encoding="utf-8")
        summary_rows.append((name, result))

    policy.close()
    print(f"\n{'=' * 100}\ndemo summary ({time.monotonic() - started:.0f} s)\n{'=' * 100}")
    print(f"{'example':<11} {'kernels':<32} {'kept':>4} {'tried':>5}  {'verification':<26} steps")
    for name, result in summary_rows:
        kept = [s for s in result.steps]
        modes = {(s.report or {}).get("mode") for s in result.attempts if s.report}
        verified = "interpreter (speed n/a)" if modes == {"interpreter"} else ("GPU timed" if "gpu" in modes else "-")
        steps = "; ".join(candidate_text(s.candidate) + (f" {s.speedup:.2f}x" if s.speedup else "") for s in kept) or "none kept"
        print(f"{name:<11} {result.kernel:<32} {len(kept):>4} {len(result.attempts):>5}  {verified:<26} {steps}")
    print(f"\noptimized files: {out_dir}/<example>.py (originals: <example>.original.py)")
    print("next: open one in VS Code with the MTMC extension, or run `mtmc optimize FILE`.")
    return 0
