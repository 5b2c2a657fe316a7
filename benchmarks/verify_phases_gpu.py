"""Where a verification's time goes, per file: ``verify_file`` of a file against itself on the GPU, phases printed.

``python3 benchmarks/verify_phases_gpu.py --out DIR FILE...`` verifies each file against its own text (2 seeds,
timing on) twice (the second run reuses the warm worker, as the optimize loop does) and writes
``DIR/verify_phases.json`` with the report's phases (seconds): import/compile, correctness, timing, transfer.
Large KernelBench-style inputs (made on the CPU by ``get_inputs()``) took 49 s per verification on the H200
in session 8; this says which phase.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bootstrap  # noqa: E402,F401

from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in args.files:
        text = path.read_text()
        for run in (1, 2):
            started = time.monotonic()
            report = verify_file(text, text, str(path), options=VerifyOptions(seeds=args.seeds))
            row = {"file": path.name, "run": run, "status": report.status, "wall_s": round(time.monotonic() - started, 2),
                   "phases": report.phases, "summary": report.summary}
            rows.append(row)
            print(json.dumps(row), flush=True)
    (args.out / "verify_phases.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
