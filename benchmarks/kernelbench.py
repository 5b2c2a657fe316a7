"""``mtmc kernelbench`` from a source checkout that is not installed (the GPU machine): same arguments.

    python3 benchmarks/kernelbench.py --problems .kernelbench --level 1 --level 2 --out $OUT/kernelbench

See benchmarks/kernelbench_gpu.md for the H200 runs.
"""

from __future__ import annotations

import argparse
import sys

import _bootstrap  # noqa: F401  (maps optimizer/ onto mtmc_lsp.optimizer)

from mtmc_lsp.commands import kernelbench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernelbench", description=kernelbench.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    kernelbench.add_arguments(parser)
    return int(kernelbench.run(parser.parse_args(argv)) or 0)


if __name__ == "__main__":
    sys.exit(main())
