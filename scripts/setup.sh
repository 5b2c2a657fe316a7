#!/usr/bin/env bash
# One-time set-up on a fresh CPU-only machine: a virtual environment in .venv with the CPU build
# of torch, triton, the llama.cpp bindings (built for a generic x86-64 CPU) and the project.
# Safe to run again: installed pieces are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
pip_q() { python -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
python -c "import torch" 2>/dev/null || pip_q torch==2.13.0          # the CPU build (a plain `torch` pulls CUDA)
python -c "import triton" 2>/dev/null || pip_q triton==3.9.0
# The interpreter computes with numpy, and the exact equivalence tests see its rounding: 2.4 summed and
# exponentiated differently from what earlier CI runs had (session 10). A new numpy is a deliberate change.
python -c "import numpy; assert numpy.__version__ == '2.4.6'" 2>/dev/null || pip_q numpy==2.4.6
if ! python -c "import llama_cpp" 2>/dev/null; then
  # A default build uses the build machine's newest instructions (AMX) and dies with SIGILL
  # elsewhere; pip's wheel cache ignores CMAKE_ARGS, hence --no-cache-dir.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
    pip_q --no-cache-dir llama-cpp-python==0.3.36
fi
pip_q -e ".[dev,policy,train]"   # train: transformers + peft for mtmc train and tests/test_training.py
python -c "import torch, triton, llama_cpp, pygls, mtmc_lsp; print('set-up ok: torch', torch.__version__, 'triton', triton.__version__)"
if [ -f client-vscode/package.json ] && command -v npm >/dev/null; then
  (cd client-vscode && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; })
fi
