#!/usr/bin/env bash
# One GPU window of policy-data collection (issue 34) over the whole training distribution: the dev wild
# corpus, its variants and KernelBench's training half (odd problem numbers), ten verifier pools on the GPU,
# units shuffled so that a short window samples every kind of kernel. Every knob of train_collect.sh applies.
#   bash benchmarks/gpu_collect_window.sh OUT_DIR [PREVIOUS_RUN_DIR]
export BUDGET=${BUDGET:-420} BACKEND=${BACKEND:-process} PROCESSES=${PROCESSES:-10} KB=${KB:-1} ORDER=${ORDER:-1} \
  STEPS=${STEPS:-3} BEAM=${BEAM:-2} TRIES=${TRIES:-4} KERNEL_BUDGET=${KERNEL_BUDGET:-90} VERIFY_SEEDS=${VERIFY_SEEDS:-2}
exec bash "$(dirname "$0")/train_collect.sh" "$@"
