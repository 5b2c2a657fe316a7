#!/usr/bin/env bash
# Training data on the GPU: `mtmc train collect` over the dev part of the wild corpus (never the
# held-out part), every step verified and timed on the GPU, resumable. Works from a checkout that is
# not installed (a GPU machine with torch and triton only), like optimize_suite.sh.
#   bash benchmarks/train_collect.sh OUT_DIR [PREVIOUS_RUN_DIR]
# PREVIOUS_RUN_DIR (episodes.jsonl, verify_cache.jsonl, run.json of an earlier window) is copied into
# OUT_DIR first, so finished episodes are skipped and cached verifications are not repeated.
# Knobs: BUDGET (s, default 540), SEEDS (1), STEPS (4), BEAM (3), TRIES (6), WORKERS (1), TARGET (h200),
# KERNEL_BUDGET (s per episode, 600), VERIFY_SEEDS (3), VARIANTS (1: also the synthetic variants of the
# dev files, `mtmc train variants`, written to runs/variants and explored after the dev files),
# BACKEND (local; process: PROCESSES verifier pools side by side on the GPU, timing alone), PROCESSES (10),
# KB (0; 1: also KernelBench's training half from .kernelbench/, lowered at <= KB_MAX_ELEMENTS input
# elements, default 16777216), ORDER (0: units in file order; else shuffled under this seed).
set -uo pipefail
out=${1:?usage: train_collect.sh OUT_DIR [PREVIOUS_RUN_DIR]}
previous=${2:-}
python=${PYTHON:-python3}
mkdir -p "$out"
if [ -n "$previous" ] && [ -d "$previous" ]; then
  cp -n "$previous"/episodes.jsonl "$previous"/verify_cache.jsonl "$previous"/run.json "$out"/ 2>/dev/null || true
fi
if ! "$python" -c "import libcst" 2>/dev/null; then   # carried as a wheel (.whl/), no index needed
  "$python" -m pip install -q --no-index --no-deps --target /tmp/mtmc-site .whl/libcst-*.whl && export PYTHONPATH=/tmp/mtmc-site
fi
mtmc() { "$python" -c "import sys; sys.path.insert(0, 'benchmarks'); import _bootstrap; from mtmc_lsp.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
files=(benchmarks/wild/dev/*.py)
if [ "${VARIANTS:-1}" != 0 ]; then
  mtmc train variants --out runs/variants >/dev/null && files+=(runs/variants/*.py)
fi
if [ "${KB:-0}" != 0 ] && [ -d .kernelbench ]; then
  mtmc kernelbench --problems .kernelbench --level 1 --level 2 --level 3 --split train --write-only \
    --max-elements "${KB_MAX_ELEMENTS:-16777216}" --out runs/kb_train > "$out/kb_lowering.log" 2>&1
  files+=(runs/kb_train/solutions/level*/*_triton.py)
fi
echo "collecting over ${#files[@]} files" >&2
mtmc train collect "${files[@]}" --out "$out" --target "${TARGET:-h200}" --budget-s "${BUDGET:-540}" --seeds "${SEEDS:-1}" \
  --steps "${STEPS:-4}" --beam "${BEAM:-3}" --tries "${TRIES:-6}" --workers "${WORKERS:-1}" --mode gpu \
  --backend "${BACKEND:-local}" --processes "${PROCESSES:-10}" --order "${ORDER:-0}" \
  --kernel-budget-s "${KERNEL_BUDGET:-600}" --verify-seeds "${VERIFY_SEEDS:-3}" \
  2> "$out/collect.log" | tee "$out/summary.json"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>/dev/null || true
