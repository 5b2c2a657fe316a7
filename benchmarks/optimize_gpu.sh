#!/usr/bin/env bash
# `mtmc optimize` through the CLI on a GPU machine that has torch and triton but not this
# project installed: the naive matmul, softmax and elementwise suite kernels, heuristic policy,
# episodes recorded as trajectories. Usage: bash benchmarks/optimize_gpu.sh OUT_DIR
set -uo pipefail
out=${1:?usage: optimize_gpu.sh OUT_DIR}
mkdir -p "$out/traj"
if ! python3 -c "import libcst" 2>/dev/null; then   # carried as a wheel (.whl/), no index needed
  python3 -m pip install -q --no-index --no-deps --target /tmp/mtmc-site .whl/libcst-*.whl && export PYTHONPATH=/tmp/mtmc-site
fi
mtmc() { python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import _bootstrap; from mtmc_lsp.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
for kernel in matmul softmax silu_mul_add; do
  work=$(mktemp -d)
  cp "benchmarks/suite/$kernel.py" "$work/$kernel.py"
  mtmc optimize "$work/$kernel.py" --policy heuristic --target h200 --steps 4 --budget-s 150 \
    --record --workspace "$work" --json > "$out/optimize_$kernel.json" 2>> "$out/optimize.log"
  echo "$kernel: rc=$?"
  cat "$work"/.mtmc/trajectories/*.jsonl > "$out/traj/$kernel.jsonl" 2>/dev/null
done
