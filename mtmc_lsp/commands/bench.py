"""``mtmc bench [--suite DIR] [--kernels ...] [--steps N] [--out DIR] [--cpu-smoke]``: the benchmark runner.

The runner lives in ``benchmarks/bench.py`` of a source checkout (it also runs as a plain script on
GPU machines that have no editor dependencies); this command loads it from there.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

BENCH_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py"


def _runner():
    """The ``benchmarks/bench.py`` module, or None outside a source checkout."""
    if not BENCH_SCRIPT.is_file():
        return None
    spec = importlib.util.spec_from_file_location("mtmc_benchmarks_bench", BENCH_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def add_arguments(parser: argparse.ArgumentParser) -> None:
    runner = _runner()
    if runner is None:
        parser.set_defaults(_bench_missing=True)
        return
    runner.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "_bench_missing", False):
        print(f"mtmc bench: needs a source checkout ({BENCH_SCRIPT} is missing)", file=sys.stderr)
        return 2
    runner = _runner()
    args_dict = {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "command"}
    # --cpu-smoke / --device cpu set TRITON_INTERPRET=1 before triton's first import (refused after it).
    return runner.main(args=argparse.Namespace(**args_dict))
