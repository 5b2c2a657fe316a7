"""``mtmc actions FILE [--kernel K] [--target GPU] [--json] [--why]``: the actions that apply, with parameters (and why others do not)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a Triton source file")
    parser.add_argument("--kernel", default=None, help="only this kernel (default: every kernel in the file)")
    parser.add_argument("--target", default="", help="target GPU (h100, a100, ...); default: the local GPU, else h100")
    parser.add_argument("--allow-precision", action="store_true", help="also list actions that change numerics")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--why", action="store_true",
                        help="also say why each action that offers nothing does not apply to the kernel")
    parser.add_argument("--history", action="store_true",
                        help="show the file's step history (.mtmc/history in --workspace) instead")
    parser.add_argument("--workspace", default=".", help="workspace root holding .mtmc/ (default: the current folder)")


def run(args: argparse.Namespace) -> int:
    from mtmc_lsp.optimizer.actions import applicable
    from mtmc_lsp.optimizer.actions.refusals import refusals
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.analysis.workspace import with_foreign_launches

    from ._source import read_source

    path = Path(args.file)
    if args.history:
        from mtmc_lsp.optimizer.history import HistoryError, StepHistory

        try:
            history = StepHistory(args.workspace, path.resolve())
        except HistoryError as exc:
            print(f"mtmc actions: {exc}", file=sys.stderr)
            return 1
        print(json.dumps(history.to_json(), indent=1) if args.json else history.show())
        return 0
    source = read_source("actions", args.file, args.target)
    if source is None:
        return 2
    path, text, target = source
    analysis = with_foreign_launches(analyze(text, str(path)))
    if analysis.syntax_error is not None:
        print(f"mtmc actions: {path}: {analysis.syntax_error.message}", file=sys.stderr)
        return 1
    kernels = [k for k in analysis.kernels if args.kernel in (None, k.name)]
    if args.kernel and not kernels:
        known = ", ".join(k.name for k in analysis.kernels) or "none"
        print(f"mtmc actions: no kernel {args.kernel!r} in {path} (kernels: {known})", file=sys.stderr)
        return 1
    listing = {k.name: applicable(analysis, k, target, allow_precision=args.allow_precision) for k in kernels}
    refused = {k.name: refusals(analysis, k, target, allow_precision=args.allow_precision) for k in kernels} \
        if args.why else {}
    if args.json:
        out = {"file": str(path), "target": target.key,
               "kernels": {name: [c.to_json() for c in cands] for name, cands in listing.items()}}
        if args.why:
            out["refused"] = {name: [r.to_json() for r in found] for name, found in refused.items()}
        print(json.dumps(out, indent=1))
        return 0
    print(f"{path} for {target.name}:")
    for name, candidates in listing.items():
        elsewhere = sorted({Path(f.file).name for f in analysis.foreign_launches if f.kernel == name and f.file})
        shared = f" (also launched in {', '.join(elsewhere)}: only steps that keep its interface)" if elsewhere else ""
        print(f"  {name}: {len(candidates)} action(s){shared}")
        for cand in candidates:
            params = " ".join(f"--param {k}={v}" for k, v in cand.params.items())
            numerics = "  [changes numerics]" if cand.changes_numerics else ""
            print(f"    line {cand.line + 1:>4}  {cand.action:<12} {cand.title}{numerics}")
            print(f"               mtmc apply {path} --kernel {cand.kernel} --action {cand.action} {params}".rstrip())
        if args.why:
            callers = sorted(k.name for k in analysis.kernels if name in k.called_functions and k.name != name)
            if callers and not analysis.launches_of(name):
                print(f"    a device function ({', '.join(callers)} call it): actions apply to the kernels that call it")
            else:
                _print_refusals(refused[name])
    return 0


def _print_refusals(found: list) -> None:
    """One line per action that says why it does not apply; the silent ones on one line."""
    said = [r for r in found if r.reason]
    if said:
        print("    not offered:")
    for r in said:
        print(f"      {r.action:<16} {r.reason}")
    silent = [r.action for r in found if not r.reason]
    if silent:
        print(f"    not offered (the pattern it rewrites is absent): {', '.join(silent)}")
