#!/usr/bin/env bash
# One GPU window of policy-data collection (issue 34) on the whole training distribution: the dev part of
# the wild corpus, its variants, and the kernels `mtmc kernelbench` lowers from KernelBench's training half
# (odd problem numbers; never the evaluation half, never the held-out wild files). Runs from an uninstalled
# checkout (torch + triton only; libcst carried as a wheel in .whl/), resumable, N verifier pools on the GPU.
#   bash benchmarks/gpu_collect_window.sh OUT_DIR [PREVIOUS_RUN_DIR]
# Knobs: BUDGET (s of collection, default 420), PROCESSES (verifier pools side by side, 10), STEPS (3), BEAM (2),
# TRIES (4), KERNEL_BUDGET (90), VERIFY_SEEDS (2), TARGET (h200), KB_MAX_ELEMENTS (16777216), KB (1: with the
# KernelBench training half from .kernelbench/), ORDER (shuffle seed of the units, 0: file order).
set -uo pipefail
out=${1:?usage: gpu_collect_window.sh OUT_DIR [PREVIOUS_RUN_DIR]}
previous=${2:-}
python=${PYTHON:-python3}
mkdir -p "$out"
if [ -n "$previous" ] && [ -d "$previous" ]; then
  cp -n "$previous"/episodes.jsonl "$previous"/verify_cache.jsonl "$previous"/run.json "$out"/ 2>/dev/null || true
fi
if ! "$python" -c "import libcst" 2>/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --target /tmp/mtmc-site .whl/libcst-*.whl && export PYTHONPATH=/tmp/mtmc-site
fi
mtmc() { "$python" -c "import sys; sys.path.insert(0, 'benchmarks'); import _bootstrap; from mtmc_lsp.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
files=(benchmarks/wild/dev/*.py)
mtmc train variants --out runs/variants >/dev/null && files+=(runs/variants/*.py)
if [ "${KB:-1}" != 0 ] && [ -d .kernelbench ]; then
  mtmc kernelbench --problems .kernelbench --level 1 --level 2 --level 3 --split train --write-only \
    --max-elements "${KB_MAX_ELEMENTS:-16777216}" --out runs/kb_train > "$out/kb_lowering.log" 2>&1
  files+=(runs/kb_train/solutions/level*/*.py)
fi
echo "collecting over ${#files[@]} files" >&2
mtmc train collect "${files[@]}" --out "$out" --target "${TARGET:-h200}" --budget-s "${BUDGET:-420}" \
  --steps "${STEPS:-3}" --beam "${BEAM:-2}" --tries "${TRIES:-4}" --backend process --processes "${PROCESSES:-10}" \
  --mode gpu --kernel-budget-s "${KERNEL_BUDGET:-90}" --verify-seeds "${VERIFY_SEEDS:-2}" --order "${ORDER:-0}" \
  2> "$out/collect.log" | tee "$out/summary.json"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>/dev/null || true
