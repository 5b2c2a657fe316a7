#!/usr/bin/env bash
# `mtmc optimize` through the CLI on the naive matmul, softmax and elementwise suite kernels, with
# episodes recorded as trajectories. Works from a checkout that is not installed (a GPU machine with
# torch and triton only) as well as from the project's venv.
#   GPU (timed):                bash benchmarks/optimize_suite.sh OUT_DIR
#   CPU (interpreter, no speed): POLICY=embedded TARGET=h100 STEPS=3 bash benchmarks/optimize_suite.sh OUT_DIR
set -uo pipefail
out=${1:?usage: optimize_suite.sh OUT_DIR}
policy=${POLICY:-heuristic}
target=${TARGET:-h200}
steps=${STEPS:-4}
budget=${BUDGET:-300}
python=${PYTHON:-python3}
mkdir -p "$out/traj"
if ! "$python" -c "import libcst" 2>/dev/null; then   # carried as a wheel (.whl/), no index needed
  "$python" -m pip install -q --no-index --no-deps --target /tmp/mtmc-site .whl/libcst-*.whl && export PYTHONPATH=/tmp/mtmc-site
fi
mtmc() { "$python" -c "import sys; sys.path.insert(0, 'benchmarks'); import _bootstrap; from mtmc_lsp.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
for kernel in matmul softmax silu_mul_add; do
  work=$(mktemp -d)
  # benchmarks/suite lists where each suite kernel lives (the matmul is the bundled example)
  src=$("$python" -c "import sys; sys.path.insert(0, 'benchmarks'); from suite import suite_files; print(suite_files()[sys.argv[1]])" "$kernel")
  cp "$src" "$work/$kernel.py"
  mtmc optimize "$work/$kernel.py" --policy "$policy" --target "$target" --steps "$steps" --budget-s "$budget" \
    --record --workspace "$work" --json > "$out/optimize_$kernel.json" 2>> "$out/optimize.log"
  echo "$kernel: rc=$?"
  cat "$work"/.mtmc/trajectories/*.jsonl > "$out/traj/$kernel.jsonl" 2>/dev/null
done
