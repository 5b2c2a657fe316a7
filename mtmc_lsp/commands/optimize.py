"""``mtmc optimize FILE``: the MTMC loop from the command line: propose, apply, verify, keep, repeat."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from ._coder import add_coder_arguments, coder_combination_problem, coder_options_given, make_coder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the Triton file to optimize")
    parser.add_argument("--kernel", help="the kernel to optimize (default: every kernel in the file, in order)")
    parser.add_argument("--target", default="", help="target GPU profile (default: the local GPU, else H100)")
    parser.add_argument("--steps", type=int, default=4, help="kept steps per kernel at most (default 4)")
    parser.add_argument("--beam", type=int, default=1, help="candidates tried per state; 1 is greedy (default 1)")
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget in seconds (default 600)")
    parser.add_argument("--policy", default="", help="embedded (default), heuristic or endpoint")
    parser.add_argument("--model", default="", help="a GGUF model for the embedded policy (default: bundled SmolLM2)")
    parser.add_argument("--adapter", default="", help="a LoRA adapter (GGUF) applied on top of the model")
    parser.add_argument("--endpoint", default="", help="OpenAI-compatible base URL for --policy endpoint")
    parser.add_argument("--endpoint-model", default="", help="model name sent to the endpoint")
    parser.add_argument("--allow-precision", action="store_true", help="also propose numerics-changing actions")
    parser.add_argument("--seeds", type=int, default=3, help="random seeds for each correctness check (default 3)")
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=None,
                        help="record the episode as JSONL under .mtmc/trajectories/ (training data; default: when "
                             "a local GPU verifies, since nothing measured on one should be thrown away)")
    parser.add_argument("--workspace", default=".", help="where .mtmc/ lives for --record (default: .)")
    parser.add_argument("--write", action="store_true", help="write the final text back to FILE")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (progress goes to stderr)")
    coder = parser.add_argument_group("LLM coder: goals outside the rule library (docs/coder.md)")
    coder.add_argument("--llm-goal", action="append", default=[], metavar="GOAL",
                       help="a step the rule actions cannot make, in words (repeatable); the policy ranks it with "
                            "the rule actions and the LLM coder writes it when it is tried")
    add_coder_arguments(coder)


def settings_from_args(args: argparse.Namespace):
    """Settings with the command line's policy choices on top of the defaults."""
    from mtmc_lsp.settings import Settings

    settings = Settings(target_gpu=args.target)
    settings.policy = args.policy or settings.policy
    settings.policy_model_path = args.model
    settings.policy_adapter_path = args.adapter
    settings.policy_endpoint = args.endpoint
    settings.policy_endpoint_model = args.endpoint_model
    settings.allow_precision_changes = args.allow_precision
    settings.record_trajectories = _records(args)
    return settings


def _records(args: argparse.Namespace) -> bool:
    """--record / --no-record as given; unset: record when a local GPU measures the steps."""
    if args.record is not None:
        return args.record
    from mtmc_lsp.optimizer.hardware import local_gpu_name

    return local_gpu_name() is not None


def run(args: argparse.Namespace) -> int:
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.policy import make_policy
    from mtmc_lsp.optimizer.search import make_verifier, optimize
    from mtmc_lsp.optimizer.trajectories import TrajectoryRecorder
    from mtmc_lsp.optimizer.verify import VerifyOptions

    from ._source import read_source

    source = read_source("optimize", args.file, args.target)
    if source is None:
        return 2
    path, text, target = source
    analysis = analyze(text, str(path))
    if analysis.syntax_error is not None:
        print(f"mtmc optimize: {path}: {analysis.syntax_error.message}", file=sys.stderr)
        return 1
    if args.kernel and analysis.kernel(args.kernel) is None:
        names = ", ".join(k.name for k in analysis.kernels) or "none"
        print(f"mtmc optimize: no kernel {args.kernel!r} in {path} (kernels: {names})", file=sys.stderr)
        return 1
    if not analysis.kernels:
        print(f"mtmc optimize: no @triton.jit kernels in {path}", file=sys.stderr)
        return 1

    problem = coder_combination_problem(args)
    if not args.llm_goal and coder_options_given(args):
        problem = f"{', '.join(coder_options_given(args))} only work with --llm-goal GOAL"
    if problem:
        print(f"mtmc optimize: {problem}", file=sys.stderr)
        return 2
    hooks = {}
    if args.llm_goal:
        from mtmc_lsp.optimizer.coder.loop import loop_hooks

        coder = make_coder(args, "optimize")
        if isinstance(coder, int):
            return coder
        hooks = loop_hooks(coder, args.llm_goal, args.allow_precision, path.name)

    settings = settings_from_args(args)
    out = sys.stderr if args.json else sys.stdout
    policy = make_policy(settings)
    print(f"target: {target.summary()}", file=out)
    print(f"policy: {policy.describe()}", file=out)
    verify = make_verifier(str(path), target, VerifyOptions(seeds=args.seeds, kernel=args.kernel))
    recorder = TrajectoryRecorder(args.workspace) if settings.record_trajectories else None
    reporter = ProgressPrinter(out)
    result = optimize(
        text, str(path), args.kernel, target, policy, verify, steps=args.steps, beam=args.beam,
        budget_s=args.budget_s, on_step=reporter.attempt, record=recorder,
        allow_precision=args.allow_precision, on_rank=reporter.ranked, **hooks,
    )
    policy.close()
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        print_result(result, out)
    if recorder is not None and recorder.path is not None:
        print(f"trajectory: {recorder.path}", file=out)
    if args.write and result.final_text != text:
        path.write_text(result.final_text, encoding="utf-8")
        print(f"wrote {path} ({len(result.steps)} steps)", file=out)
    return 0


class ProgressPrinter:
    """Prints the policy's ranking at each depth and each attempt's outcome as the loop runs."""

    def __init__(self, out: TextIO, top: int = 5):
        self.out = out
        self.top = top

    def ranked(self, depth: int, ranked) -> None:
        from mtmc_lsp.optimizer.policy import candidate_text

        if not ranked:
            return
        kernel = ranked[0].candidate.kernel
        took = ranked[0].metadata.get("seconds")
        timing = f", ranked in {took:.2f} s" if took is not None else ""
        print(f"\n[{kernel}] depth {depth}: policy ranking ({len(ranked)} applicable{timing})", file=self.out)
        for i, r in enumerate(ranked[: self.top], start=1):
            lp = f", log p {r.logprob:.2f}" if r.logprob is not None else ""
            print(f"  {i}. {candidate_text(r.candidate):<52} score {r.score:.3f}{lp}", file=self.out)
        if len(ranked) > self.top:
            print(f"  ... {len(ranked) - self.top} more", file=self.out)
        first = ranked[0].metadata
        if first.get("note"):
            print(f"  note: {first['note']}", file=self.out)
        if first.get("fallback"):
            print(f"  note: {first['fallback']}", file=self.out)

    def attempt(self, attempt) -> None:
        from mtmc_lsp.optimizer.policy import candidate_text

        took = attempt.timings.get("verify_s")
        secs = f" ({took:.1f} s)" if took is not None else ""
        print(f"  try {candidate_text(attempt.candidate)}: {attempt.status.upper()} - {attempt.reason}{secs}", file=self.out)
        if attempt.summary:
            print(f"      {attempt.summary}", file=self.out)


def print_result(result, out: TextIO) -> None:
    """Every kept step as its own diff, then a summary."""
    from mtmc_lsp.optimizer.policy import candidate_text

    for i, step in enumerate(result.steps, start=1):
        print(f"\n=== step {i}: {step.candidate.title} ===", file=out)
        print(step.diff.rstrip("\n"), file=out)
        print(f"--- result: {step.summary or step.reason}", file=out)
    print("\n=== summary ===", file=out)
    print(f"kernel(s): {result.kernel}; target: {result.target}; stopped: {result.stopped}; "
          f"{len(result.attempts)} attempts, {len(result.steps)} kept, {result.elapsed_s:.1f} s", file=out)
    for i, step in enumerate(result.steps, start=1):
        speed = f"{step.speedup:.2f}x" if step.speedup is not None else "speed n/a"
        reward = f"{step.reward:.2f}" if step.reward is not None else "-"
        print(f"  {i}. {candidate_text(step.candidate):<52} {speed:>9}  reward {reward}  score {step.score:.3f}", file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)
