"""``mtmc apply FILE --kernel NAME (--action ACTION [--param K=V ...] | --llm GOAL) [--target GPU] [--diff | --write]``."""

from __future__ import annotations

import argparse
import sys

from ._coder import add_coder_arguments, coder_combination_problem, coder_options_given, make_coder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a Triton source file")
    parser.add_argument("--kernel", required=True, help="the kernel to optimize")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--action", help="action name (see `mtmc actions FILE`)")
    what.add_argument("--llm", metavar="GOAL",
                      help="ask a language model for one small diff towards GOAL (free text, e.g. 'tile the column "
                           "reduction in 2-D'); checked like a rule step, see docs/coder.md")
    parser.add_argument("--param", action="append", default=[], metavar="K=V",
                        help="an action parameter (repeatable); without any, the first candidate the action offers")
    parser.add_argument("--target", default="", help="target GPU (h100, a100, ...); default: the local GPU, else h100")
    parser.add_argument("--allow-precision", action="store_true", help="allow actions that change numerics")
    add_coder_arguments(parser.add_argument_group("LLM coder (with --llm)"))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print the edit as a unified diff (the default)")
    mode.add_argument("--write", action="store_true", help="write the file and record the step in .mtmc/history")
    parser.add_argument("--workspace", default=".", help="workspace root for .mtmc/ (default: the current folder)")


def parse_value(raw: str):
    """``128`` -> 128, ``0.5`` -> 0.5, ``true`` -> True, ``none`` -> None, anything else stays a string."""
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def run(args: argparse.Namespace) -> int:
    from mtmc_lsp.optimizer.edits import unified_diff

    from ._source import read_source

    problem = _check_combination(args)
    if problem:
        print(f"mtmc apply: {problem}", file=sys.stderr)
        return 2
    source = read_source("apply", args.file, args.target)
    if source is None:
        return 2
    path, text, target = source
    step = _llm_step(args, path, text, target) if args.llm is not None else _rule_step(args, path, text, target)
    if isinstance(step, int):
        return step
    candidate, edit = step
    if args.write:
        from mtmc_lsp.optimizer.history import HistoryError, StepHistory

        path.write_text(edit.new_text, encoding="utf-8")
        try:
            record = StepHistory(args.workspace, path.resolve()).record(candidate, text, edit.new_text, edit.summary)
            print(f"{path}: {candidate.title} ({edit.changed_lines} lines changed; step {record.index}, id {record.id})")
        except HistoryError as exc:
            print(f"{path}: {candidate.title} written; history not recorded: {exc}", file=sys.stderr)
        return 0
    sys.stdout.write(unified_diff(text, edit.new_text, str(path)))
    print(f"# {candidate.title}: {edit.changed_lines} lines changed", file=sys.stderr)
    for note in edit.notes:
        print(f"# note: {note}", file=sys.stderr)
    return 0


def _check_combination(args: argparse.Namespace) -> str:
    """Why the options do not fit together ("" when they do)."""
    coder_options = coder_options_given(args)
    if args.llm is None:
        return f"{', '.join(coder_options)} only work with --llm GOAL, not with --action" if coder_options else ""
    if args.param:
        return "--param sets a rule action's parameters; with --llm, say what you want in GOAL"
    return coder_combination_problem(args)


def _rule_step(args: argparse.Namespace, path, text: str, target):
    """``(candidate, edit)`` of a rule action, or the exit code once the reason is printed."""
    from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, Candidate, applicable, apply_candidate, interface_conflict
    from mtmc_lsp.optimizer.analysis.workspace import with_foreign_launches
    from mtmc_lsp.optimizer.analysis import analyze

    action = ACTIONS.get(args.action)
    if action is None:
        print(f"mtmc apply: unknown action {args.action!r}; known: {', '.join(ACTIONS)}", file=sys.stderr)
        return 2
    if action.changes_numerics and not args.allow_precision:
        print(f"mtmc apply: {args.action} changes numerics; pass --allow-precision to apply it", file=sys.stderr)
        return 2
    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"mtmc apply: --param takes K=V, got {item!r}", file=sys.stderr)
            return 2
        params[key.strip()] = parse_value(value)
    analysis = with_foreign_launches(analyze(text, str(path)))  # what other modules launch: see interface_conflict
    offered = [c for c in applicable(analysis, args.kernel, target, allow_precision=True) if c.action == args.action]
    if args.param:
        candidate = next((c for c in offered if c.params == params), None) or Candidate(
            args.action, action.kind, args.kernel, params,
            f"{args.action} ({', '.join(f'{k}={v}' for k, v in params.items())})", 0, action.changes_numerics)
    elif offered:
        candidate = offered[0]
    else:
        print(f"mtmc apply: {args.action} does not apply to {args.kernel} on {target.name}", file=sys.stderr)
        return 1
    conflict = interface_conflict(analysis, candidate)
    if conflict is not None:
        print(f"mtmc apply: {conflict}", file=sys.stderr)
        return 1
    try:
        return candidate, apply_candidate(text, candidate, target)
    except ActionError as exc:
        print(f"mtmc apply: {exc}", file=sys.stderr)
        return 1


def _llm_step(args: argparse.Namespace, path, text: str, target):
    """``(candidate, edit)`` written by the LLM coder and passed by its gate, or the exit code."""
    from mtmc_lsp.optimizer.coder import CoderError

    coder = make_coder(args, "apply")
    if isinstance(coder, int):
        return coder
    try:
        step = coder.rewrite(text, args.kernel, args.llm, target, path.name)
    except CoderError as exc:
        print(f"mtmc apply: no LLM step: {exc}", file=sys.stderr)
        return 1
    return step.candidate, step.edit
