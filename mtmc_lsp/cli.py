"""The ``mtmc`` command line: one subcommand per module in ``mtmc_lsp.commands``."""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand -> (module under mtmc_lsp.commands, one-line help). Modules are imported only
# when their subcommand runs, so `mtmc analyze` never pays for torch or the policy model.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("analyze", "print the kernels of Triton files and their diagnostics for a target GPU"),
    "serve": ("serve", "run the language server (stdio by default, --tcp for a socket)"),
    "actions": ("actions", "list the optimization actions that apply to a file's kernels"),
    "apply": ("apply", "apply one optimization action to a kernel and show or write the edit"),
    "verify": ("verify", "compile, check and time a file's kernels against a previous version"),
    "optimize": ("optimize", "run the MTMC loop: propose, apply, verify, keep, repeat"),
    "bench": ("bench", "benchmark naive vs optimized kernels against PyTorch eager and torch.compile"),
    "demo": ("demo", "run the bundled example through the whole pipeline with the embedded defaults"),
    "kernelbench": ("kernelbench", "write Triton for KernelBench problems and score them with KernelBench's protocol"),
    "train": ("train", "train the policy on measured episodes: collect, dataset, bc, rl, export, eval"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mtmc", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module_name)
        module = _load(module_name)
        if module is not None:
            module.add_arguments(sub_parser)
    return parser


def _load(module_name: str):
    try:
        return importlib.import_module(f"mtmc_lsp.commands.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"mtmc_lsp.commands.{module_name}":
            return None
        raise


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from mtmc_lsp import __version__

        print(f"mtmc {__version__}")
        return 0
    if not args.command:
        parser.print_help()
        return 2
    module = _load(args._module)
    if module is None:
        print(f"mtmc {args.command}: not available in this build", file=sys.stderr)
        return 2
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
