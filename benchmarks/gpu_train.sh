#!/usr/bin/env bash
# Policy training (BC, then RL) on a GPU machine (issue 34). The embedded GGUF (98 MB) is larger than what one
# device call may carry (64 MiB with the working tree), and nothing can be downloaded there, so it travels in
# chunks over back-to-back calls of one warm machine (ignored files a call left stay for the next):
#   here:       bash benchmarks/gpu_train.sh split            # .policy_model/part_aa.. (30 MB each) + SHA256
#               python3 -m pip download --no-deps -d .whl gguf==0.19.0   # transformers reads GGUF through it
#   device, one call per chunk, carry [".policy_model/part_aa"], then part_ab, ...:   true
#   device, last call, carry [".policy_model/part_ad", ".policy_model/SHA256", ".whl"]:
#               bash benchmarks/gpu_train.sh train data/policy/decisions.jsonl.gz $OUT/train
#   here:       mtmc train export OUT/train/rl --out policy-lora.gguf --data data/policy/decisions.jsonl.gz
# Knobs: BC_STEPS (400), RL_STEPS (200), BATCH (16), DEVICE (cuda). The adapters come back (a rank-8 LoRA is ~10 MB).
set -euo pipefail
stage=${1:?usage: gpu_train.sh split | train DECISIONS OUT}
folder=.policy_model
if [ "$stage" = split ]; then
  model=$(.venv/bin/python -c "from mtmc_lsp.optimizer.policy.factory import default_model_path; print(default_model_path())")
  rm -rf "$folder" && mkdir -p "$folder"
  split -b 30M "$model" "$folder/part_"
  sha256sum "$model" | cut -d' ' -f1 > "$folder/SHA256"
  ls -la "$folder"
  exit 0
fi
data=${2:?decisions file}
out=${3:?output folder}
python=${PYTHON:-python3}
mkdir -p "$out"
cat "$folder"/part_* > /tmp/policy.gguf
[ "$(sha256sum /tmp/policy.gguf | cut -d' ' -f1)" = "$(cat "$folder/SHA256")" ] || { echo "model chunks incomplete" >&2; exit 2; }
if ! "$python" -c "import gguf, libcst" 2>/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --target /tmp/mtmc-site .whl/*.whl && export PYTHONPATH=/tmp/mtmc-site
fi
mtmc() { "$python" -c "import sys; sys.path.insert(0, 'benchmarks'); import _bootstrap; from mtmc_lsp.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
mtmc train bc "$data" --base /tmp/policy.gguf --out "$out/bc" --steps "${BC_STEPS:-400}" --batch-size "${BATCH:-16}" --device "${DEVICE:-cuda}"
mtmc train rl "$data" --base /tmp/policy.gguf --adapter "$out/bc" --out "$out/rl" --steps "${RL_STEPS:-200}" --device "${DEVICE:-cuda}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>/dev/null || true
