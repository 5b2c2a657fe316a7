"""``mtmc verify FILE [--against OLD_FILE]``: compile, check and time a file's kernels in a worker process."""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the Triton file to verify")
    parser.add_argument("--against", metavar="OLD_FILE", help="the previous version to compare with and time against")
    parser.add_argument("--target", default="", help="target GPU profile (default: the local GPU, else H100)")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument("--seeds", type=int, default=3, help="random seeds for the correctness check (default 3)")
    parser.add_argument("--mode", choices=("auto", "gpu", "interpreter"), default="auto",
                        help="auto: the GPU when there is one, else the Triton CPU interpreter")
    parser.add_argument("--problem", metavar="PROBLEM_FILE",
                        help="KernelBench problem file (Model, get_inputs) for a solution that defines only ModelNew")
    parser.add_argument("--entry", help="the host function or model class to call (default: discovered)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE",
                        help="keyword argument for get_inputs(), e.g. --input size=4096 (repeatable)")
    parser.add_argument("--compile-timeout", type=float, default=120.0, help="seconds for import + first launch")
    parser.add_argument("--run-timeout", type=float, default=60.0, help="seconds per later phase")
    parser.add_argument("--no-timing", action="store_true", help="skip the speed measurement on a GPU")
    parser.add_argument("--no-cuda-graphs", action="store_true",
                        help="time each call followed by a device synchronize, not as a replayed CUDA graph")


def run(args: argparse.Namespace) -> int:
    from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file

    path = Path(args.file)
    try:
        new_text = path.read_text(encoding="utf-8")
        old_text = Path(args.against).read_text(encoding="utf-8") if args.against else None
        problem_text = Path(args.problem).read_text(encoding="utf-8") if args.problem else None
    except OSError as exc:
        print(f"mtmc verify: {exc}", file=sys.stderr)
        return 2
    try:
        input_kwargs = _parse_inputs(args.input)
    except ValueError as exc:
        print(f"mtmc verify: {exc}", file=sys.stderr)
        return 2
    options = VerifyOptions(
        seeds=args.seeds, mode=args.mode, entry=args.entry, input_kwargs=input_kwargs, problem_text=problem_text,
        compile_timeout_s=args.compile_timeout, run_timeout_s=args.run_timeout, timing=not args.no_timing,
        cuda_graphs=not args.no_cuda_graphs,
    )

    def progress(message: str, percent: int | None) -> None:
        if not args.json:
            print(f"  [{percent if percent is not None else '..':>2}%] {message}", file=sys.stderr)

    try:
        report = verify_file(new_text, old_text, str(path), args.target or None, options, progress=progress)
    except KeyError as exc:  # unknown --target
        print(f"mtmc verify: {exc.args[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print_human(report, path)
    return 0 if report.status == "verified" else 1


def _parse_inputs(items: list[str]) -> dict | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--input wants NAME=VALUE, got {item!r}")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[name] = value
    return out


def _print_human(report, path: Path) -> None:
    print(f"{path}: {report.summary}")
    for check in report.checks:
        where = f" (line {check.line + 1})" if check.line is not None else ""
        print(f"  {check.name:12s} {check.status:11s} {check.message}{where}")
    if report.speed is not None:
        s = report.speed
        ratios = ", ".join(f"{r:.3f}" for r in s.ratios)
        print(f"  timing: {s.rounds} interleaved rounds, per-round speedups [{ratios}]")
    r = report.reward
    speed_term = f"{r.speed:+.3f}" if r.speed is not None else "n/a"
    print(f"  reward {r.total:.3f} = compile {r.compile:.1f} + correct {r.correct:.1f} + log(speedup) {speed_term}")
    if report.scaffold is not None:
        print(f"  suggested fix: {report.scaffold.title}:")
        for edit in report.scaffold.edits:
            print(f"    insert at line {edit['line'] + 1}:")
            for line in edit["text"].rstrip("\n").splitlines():
                print(f"      {line}")
