"""``mtmc apply FILE --kernel NAME --action ACTION [--param K=V ...] [--target GPU] [--diff | --write]``."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a Triton source file")
    parser.add_argument("--kernel", required=True, help="the kernel to optimize")
    parser.add_argument("--action", required=True, help="action name (see `mtmc actions FILE`)")
    parser.add_argument("--param", action="append", default=[], metavar="K=V",
                        help="an action parameter (repeatable); without any, the first candidate the action offers")
    parser.add_argument("--target", default="", help="target GPU (h100, a100, ...); default: the local GPU, else h100")
    parser.add_argument("--allow-precision", action="store_true", help="allow actions that change numerics")
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
    from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, Candidate, applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.edits import unified_diff

    from ._source import read_source

    source = read_source("apply", args.file, args.target)
    if source is None:
        return 2
    path, text, target = source
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
    analysis = analyze(text, str(path))
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
    try:
        edit = apply_candidate(text, candidate, target)
    except ActionError as exc:
        print(f"mtmc apply: {exc}", file=sys.stderr)
        return 1
    if args.write:
        from mtmc_lsp.optimizer.history import HistoryError, StepHistory

        path.write_text(edit.new_text, encoding="utf-8")
        try:
            step = StepHistory(args.workspace, path.resolve()).record(candidate, text, edit.new_text, edit.summary)
            print(f"{path}: {candidate.title} ({edit.changed_lines} lines changed; step {step.index}, id {step.id})")
        except HistoryError as exc:
            print(f"{path}: {candidate.title} written; history not recorded: {exc}", file=sys.stderr)
        return 0
    sys.stdout.write(unified_diff(text, edit.new_text, str(path)))
    print(f"# {candidate.title}: {edit.changed_lines} lines changed", file=sys.stderr)
    for note in edit.notes:
        print(f"# note: {note}", file=sys.stderr)
    return 0
